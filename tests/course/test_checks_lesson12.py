"""Lesson 12's self-checks: right answers pass, each common mistake is named, and no reply gives the answer away."""

import math

import numpy as np
import pytest

from attn.course.exercises.lesson12 import ROW, running_statistics, update_statistics
from attn.course.exercises.registry import verdict
from tests.verdicts import names_the_mistake

# The expected values, written as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"12.1": ("1.770", "1.77"), "12.2": ("496",), "12.4": ("256",)}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(
    ("exercise_id", "answer"),
    [("12.1", [3.0, 1.7704221]), ("12.2", 496), ("12.3", update_statistics), ("12.4", 256.0)],
)
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ([1.7704221, 3.0], "the other way round"),
        (list(running_statistics(ROW, 3, 1)), "after the first block"),
        (list(running_statistics(ROW, 3, 3)), "after the third block"),
        ([3.0, 1.5910096 + np.exp(ROW[3:6] - 3).sum()], "multiply it by exp(m_old - m_new)"),
        ([3.0, 1.5910096 * math.e + np.exp(ROW[3:6] - 3).sum()], "runs the wrong way"),
        ([3.0, np.exp(ROW[:6]).sum()], "adds exp(score) itself"),
        ([5.0, 1.7704221], "running maximum is off"),
        ([3.0, 1.77], "looks rounded (to 2 decimals)"),
        ([3.0, 2.5], "your sum is too large; work it through again"),  # issue 52: not how far
        ([3.0], "give two numbers"),
    ],
)
def test_exercise_11_1_names_the_mistake(answer, words):
    not_yet("12.1", answer, words)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (528, "the number of tiles the kernel reads"),
        (512, "the diagonal tiles"),
        (1024, "every tile in the grid"),
        (32, "wholly above the diagonal"),
        (2000, "between 0 and that"),
        (400, "too small; work it through again"),  # 96 below 496: issue 52, the direction only
    ],
)
def test_exercise_11_2_names_the_mistake(answer, words):
    not_yet("12.2", answer, words)


def no_rescale(row_max, row_sum, block):
    new_max = max(row_max, block.max())
    return new_max, row_sum + np.exp(block - new_max).sum()


def inverted_rescale(row_max, row_sum, block):
    new_max = max(row_max, block.max())
    factor = 1.0 if row_max == -math.inf else math.exp(new_max - row_max)
    return new_max, row_sum * factor + np.exp(block - new_max).sum()


def unshifted(row_max, row_sum, block):
    new_max = max(row_max, block.max())
    return new_max, row_sum * np.exp(row_max - new_max) + np.exp(block).sum()


def old_maximum_subtracted(row_max, row_sum, block):
    new_max = max(row_max, block.max())
    return new_max, row_sum * np.exp(row_max - row_max) + np.exp(block - new_max).sum()


def mutates_and_raises(row_max, row_sum, block):
    block[:] = 0
    raise ZeroDivisionError("oops")


@pytest.mark.parametrize(
    ("function", "words"),
    [
        (no_rescale, "the old sum was not rescaled"),
        (inverted_rescale, "the rescaling runs the wrong way"),
        (unshifted, "not exp(score)"),
        (old_maximum_subtracted, "exp(m_old - m_new) with that new maximum"),
        (lambda row_max, row_sum, block: (row_max, row_sum), "the new maximum, the larger of it and the block's"),
        (lambda row_max, row_sum, block: row_sum, "should return two numbers"),
        (mutates_and_raises, "raised ZeroDivisionError: oops"),
        (lambda row_max, row_sum: (0, 0), "raised TypeError"),
        (update_statistics(-math.inf, 0.0, np.array([1.0])), "pass your update function itself"),
    ],
)
def test_exercise_11_3_names_the_mistake(function, words):
    not_yet("12.3", function, words)


def test_exercise_11_3_checks_on_fresh_blocks_every_time():
    """A learner's function that changes its block in place cannot change what the next check compares."""
    not_yet("12.3", mutates_and_raises, "raised")
    assert verdict("12.3", update_statistics).startswith("Correct: ")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (4.0, "one head of one sequence"),
        (64.0, "one sequence"),
        (16.0, "one head per sequence"),
        (128.0, "2 bytes per score"),
        (512.0, "the scores and the weights"),
        (256 * 2**30 / 1e9, "in GB"),
        (256 * 2**30, "size in bytes"),
        (300.0, "too large; work it through again"),
        (-256.0, "wrong sign"),
        ([256.0, 1.0], "give one number"),
    ],
)
def test_exercise_11_4_names_the_mistake(answer, words):
    not_yet("12.4", answer, words)
