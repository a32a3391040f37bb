"""Helpers for the self-check tests: a verdict that must be "Not yet" or "Correct"."""

from attn.course.exercises import verdict


def not_yet(exercise_id, answer):
    """The verdict's line, asserting it starts with "Not yet: "."""
    line = verdict(exercise_id, answer)
    assert line.startswith("Not yet: "), line
    return line


def correct(exercise_id, answer):
    """The verdict's line, asserting it starts with "Correct: "."""
    line = verdict(exercise_id, answer)
    assert line.startswith("Correct: "), line
    return line


def names_the_mistake(exercise_id, answer, words, hidden=()):
    """A "Not yet" verdict that contains ``words`` (the named mistake) and none of ``hidden`` (the answer as a
    learner would see it printed)."""
    line = not_yet(exercise_id, answer)
    assert words in line, line
    for value in hidden:
        assert value not in line, f"the reply gives the answer away: {line}"
    return line
