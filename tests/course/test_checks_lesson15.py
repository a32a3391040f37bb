"""Lesson 15's self-checks: the right answer passes, each named mistake is named, and no verdict shows the answer."""

import numpy as np
import pytest

from attn.course.exercises import verdict
from attn.course.exercises.lesson15 import WRITE_MISTAKES, delta_write


def test_right_answers_pass():
    assert verdict("15.1", 2 * 32 * 128 / (512 + 64)).startswith("Correct")
    assert verdict("15.2", delta_write).startswith("Correct")
    assert verdict("15.3", 13).startswith("Correct")


@pytest.mark.parametrize(
    "answer, words",
    [
        (32 * 128 / 576, "only the keys"),
        (8192 / (512 + 32 * 64), "shared by all heads"),
        (8192 / 512, "leaves out the rotary key"),
        (576 / 8192, "other way round"),
        (3.0, "too small"),
        ("14", "not the number 14"),
        (14.2, "looks rounded"),
        (14.22, "looks rounded"),
        (14, "looks rounded"),
    ],
)
def test_cache_ratio_mistakes(answer, words):
    line = verdict("15.1", answer)
    assert line.startswith("Not yet") and words in line, line
    assert "14.2" not in line and "576" not in line and "8,192" not in line


@pytest.mark.parametrize("mistake", list(WRITE_MISTAKES))
def test_each_write_mistake_is_named(mistake):
    line = verdict("15.2", WRITE_MISTAKES[mistake])
    assert line.startswith("Not yet") and mistake[:40] in line, line


def test_an_unnamed_wrong_write_is_told_where():
    line = verdict("15.2", lambda state, key, value, beta: state + 1.0)
    assert line.startswith("Not yet") and "first at entry" in line, line
    assert verdict("15.2", lambda state, key, value, beta: np.zeros(3)).startswith("Not yet")
    assert "raised ZeroDivisionError" in verdict("15.2", lambda state, key, value, beta: 1 / 0)


@pytest.mark.parametrize(
    "answer, words",
    [(4, "delta rule"), (9, "first price"), (6.5, "average"), (0, "not empty"), (26, "too large"), (1, "too small"),
     (-1, "wrong sign"), (12.9, "too small")],
)
def test_written_twice_mistakes(answer, words):
    line = verdict("15.3", answer)
    assert line.startswith("Not yet") and words in line, line
    assert "13" not in line


@pytest.mark.parametrize(("exercise_id", "answer"), [("15.1", 1.0), ("15.1", 2.0), ("15.3", 1), ("15.3", -1), ("15.3", 2)])
def test_no_verdict_gives_a_factor(exercise_id, answer):
    line = verdict(exercise_id, answer)
    assert line.startswith("Not yet") and "factor" not in line and "%" not in line, line


def test_the_calls_tell_the_normalised_write_and_a_clamped_beta_apart():
    from attn.course.exercises.lesson15 import _write_calls

    lengths = {round(float(np.linalg.norm(key)), 6) for _, (_, key, _, _) in _write_calls()}
    betas = {beta for _, (_, _, _, beta) in _write_calls()}
    assert lengths - {1.0} and max(betas) > 1
