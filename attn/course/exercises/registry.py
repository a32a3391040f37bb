"""The register of exercises, and the self-check learners call: ``check("1.2", answer)``."""

import re
from collections.abc import Callable
from dataclasses import dataclass

from attn.course.exercises.answers import AnswerError, normalise
from attn.course.exercises.wording import show

EXERCISES = {}  # exercise id, such as "1.2" -> Exercise

# Chapters without a lesson number, placed by where they are read: the PyTorch primer ("P.1" to "P.4")
# comes between lessons 5 and 6.
INTERLUDES = {"P": 5.5}
ID_PATTERN = re.compile(rf"(\d+|{'|'.join(INTERLUDES)})\.\d+")


@dataclass(frozen=True)
class Exercise:
    exercise_id: str
    expects: object  # answers.Number, Array, Shape or Function
    solution: Callable  # () -> a right answer, as a learner would give it
    success: str  # what "Correct:" goes on to say
    judge: Callable  # (clean answer, clean solution) -> a sentence saying what is wrong, or None


def exercise(exercise_id, expects, solution, success):
    """Register the decorated ``judge(answer, expected)`` as the self-check of ``exercise_id``.

    expects: the kind of answer (see ``attn.course.exercises.answers``); solution: a function that
    returns a right answer, computed from the course's own data and functions; success: the
    sentence after "Correct:". The judge receives the answer and the solution, both cleaned
    by ``normalise``, and returns what is wrong (naming a common mistake where it can) or None.
    """
    if not ID_PATTERN.fullmatch(exercise_id) or exercise_id in EXERCISES:
        raise ValueError(f"exercise id {exercise_id!r} is not of the form 'L.N' (or 'P.N') or is registered twice")

    def register(judge):
        EXERCISES[exercise_id] = Exercise(exercise_id, expects, solution, success, judge)
        return judge

    return register


def exercise_ids():
    """The registered ids in reading order: 1.1, 1.2, ..., 5.3, P.1, ..., P.4, 6.1, ..., 12.4."""
    return sorted(EXERCISES, key=_reading_order)


def _reading_order(exercise_id):
    chapter, number = exercise_id.split(".")
    return (INTERLUDES[chapter] if chapter in INTERLUDES else int(chapter), int(number))


def _unknown_id(exercise_id):
    """The sentence for an id that names no exercise."""
    known = ", ".join(exercise_ids())
    if isinstance(exercise_id, float | int) and not isinstance(exercise_id, bool) and str(exercise_id) in EXERCISES:
        return f'the exercise id is text: write check("{exercise_id}", your_answer), with quotes, not check({exercise_id}, ...).'
    if not isinstance(exercise_id, str):
        return (
            f'the first argument of check is the exercise id, as text such as "1.1", not {show(exercise_id)}; '
            f"the exercises are {known}."
        )
    return f"there is no exercise {show(exercise_id)}; the exercises are {known}."


def verdict(exercise_id, answer=...):
    """The one-line verdict of exercise ``exercise_id``'s self-check: "Correct: ..." or "Not yet: ..."."""
    found = EXERCISES.get(exercise_id.strip() if isinstance(exercise_id, str) else None)
    if found is None:
        return _line("Not yet", _unknown_id(exercise_id))
    try:
        answer = normalise(answer, found.expects)
        # The course's own answer: an AnswerError here means it cannot be computed on this machine (lesson 11's
        # checks need the trained models) and says why; any other error is a bug.
        expected = normalise(found.solution(), found.expects)
        problem = found.judge(answer, expected)
    except AnswerError as error:
        problem = str(error)
    return _line("Correct", found.success) if problem is None else _line("Not yet", problem)


def check(exercise_id, answer=...):
    """Print the verdict of exercise ``exercise_id`` (for example "1.2") on ``answer``: one line, never an error."""
    print(verdict(exercise_id, answer))


LONGEST_LINE = 600  # characters: a verdict quotes parts of an answer, never a whole large one


def _line(start, sentence):
    line = f"{start}: " + " ".join(sentence.split())  # always one line, whatever a message quoted
    return line if len(line) <= LONGEST_LINE else line[: LONGEST_LINE - 4] + " ..."
