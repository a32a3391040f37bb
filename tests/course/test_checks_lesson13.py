"""Lesson 13's self-checks accept the right answers and name each planted mistake, without showing the answer."""

import math

import numpy as np

from attn.course.exercises import lesson13
from tests.verdicts import correct, not_yet


def test_the_token_count_after_ten_merges():
    words, merges, count = lesson13._paragraph_facts()
    assert count == len(lesson13.PARAGRAPH.encode()) - sum(seen for _, seen in lesson13._merge_counts())
    assert "minus every count" in correct("13.1", count)
    assert "the paragraph's bytes, before any merge" in not_yet("13.1", len(lesson13.PARAGRAPH.encode()))
    assert "the number of words" in not_yet("13.1", len(words))
    assert "not by one" in not_yet("13.1", len(lesson13.PARAGRAPH.encode()) - 10)
    assert "only the first merge" in not_yet("13.1", lesson13._tokens_after(words, merges[:1]))
    far = not_yet("13.1", count + 7)
    assert "too large" in far and str(count) not in far


def test_the_loss_of_a_model_that_narrows_to_fifty():
    assert "ln 50" in correct("13.2", math.log(50))
    assert "perplexity" in not_yet("13.2", 50)
    assert "knows nothing" in not_yet("13.2", math.log(4096))  # the uniform model's loss, printed in the lesson
    assert "bits" in not_yet("13.2", math.log2(50))
    assert "base-10" in not_yet("13.2", math.log10(50))
    assert "minus its logarithm" in not_yet("13.2", 1 / 50)
    assert "positive" in not_yet("13.2", -math.log(50))
    rounded = not_yet("13.2", 3.91)  # ln 50 as a lesson would print it: the course's rounding rule applies
    assert "3.912" not in rounded and "looks rounded" in rounded
    off = not_yet("13.2", 3.0)
    assert "3.91" not in off and "too small" in off


def test_no_check_gives_a_factor_that_is_the_answer():
    for exercise, answer in (("13.1", 1), ("13.1", 2), ("13.2", 1), ("13.2", -1)):
        verdict = not_yet(exercise, answer)
        assert "factor" not in verdict and "%" not in verdict, verdict


def test_the_weight_on_the_first_token():
    assert "one number per layer and head" in correct("13.3", lesson13.first_token_weight)
    mistakes = {
        "query 0 is included": lambda weights: weights[..., 0].mean(axis=(1, 3)),
        "averages row 0": lambda weights: weights[..., 0, :].mean(axis=(1, 3)),
        "the last key's column": lambda weights: weights[..., 1:, -1].mean(axis=(1, 3)),
        "that is a sum": lambda weights: weights[..., 1:, 0].sum(axis=(1, 3)),
        "one number per layer and head": lambda weights: weights[..., 1:, 0].mean(),
        "transposed: one row per layer": lambda weights: weights[..., 1:, 0].mean(axis=(1, 3)).T,
        "last two axes are swapped": lambda weights: weights[..., 0, 1:].mean(axis=(1, 3)),
        "axis=, not dim=": lambda weights: weights[..., 1:, 0].mean(dim=(1, 3)),
    }
    for sentence, function in mistakes.items():
        assert sentence in not_yet("13.3", function), sentence
    off = not_yet("13.3", lambda weights: weights[..., 1:, 0].mean(axis=(1, 3)) + 0.5)
    assert "are wrong" in off or "expected" in off


def test_the_cases_tell_the_mistakes_apart():
    for weights in lesson13._first_token_cases():
        right = lesson13.first_token_weight(weights)
        assert not np.allclose(right, weights[..., 0].mean(axis=(1, 3)))
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0)
