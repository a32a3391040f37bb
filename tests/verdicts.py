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
