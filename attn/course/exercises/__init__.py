"""The exercises' self-checks: ``check("1.2", answer)`` prints "Correct: ..." or "Not yet: ...".

``answers`` turns any answer into a clean form (a number, an array, a shape, a function's
outputs) or a sentence saying what is wrong with it; ``judging`` compares a clean answer with
the expected one without revealing it; ``wording`` names things in sentences; ``registry``
holds the exercises and ``check``; each lesson's module registers that lesson's exercises when
it is imported, with only the exercise's own logic and its hints for common mistakes. To add a lesson's
exercises, write ``lessonNN.py`` and add it to the import below (the PyTorch primer's are in
``primer.py``, with ids "P.1" to "P.4").
"""

from attn.course.exercises import (  # noqa: F401
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
    lesson13,
    lesson14,
    lesson15,
    lesson16,
    lesson17,
    lesson18,
    lesson19,
    lesson20,
    lesson21,
    lesson22,
    lesson23,
    primer,
)
from attn.course.exercises.registry import EXERCISES, check, exercise, exercise_ids, verdict

__all__ = ["EXERCISES", "check", "exercise", "exercise_ids", "verdict"]
