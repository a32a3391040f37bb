"""Lesson 18's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away."""

import numpy as np
import pytest
import torch

from attn.course.exercises.lesson18 import (
    KEEP_POSITION,
    KEEP_SCORES,
    KEEP_TOP_K,
    NSA_BLOCK,
    NSA_LENGTH,
    NSA_SELECTED,
    NSA_WINDOW,
    WEIGHT_SCORES,
    WEIGHT_TOP_K,
    _kept,
    _keys_read,
    _weights,
)
from attn.course.exercises.registry import verdict
from attn.sparse import topk_attention, topk_keep_mask
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"18.1": ("[1, 3, 5]", "1, 3 and 5"), "18.2": ("0.506", "0.186", "0.307"), "18.3": ("1,792", "1792")}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("18.1", [1, 3, 5]), ("18.1", [5, 3, 1]), ("18.1", np.array([1, 3, 5])), ("18.2", _weights()),
    ("18.2", _weights().tolist()), ("18.3", 1792), ("18.3", 1792.0),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_functions():
    """The keys and weights the checks expect are attn.sparse's, on the exercises' own scores."""
    single = torch.zeros(1, len(KEEP_SCORES), len(KEEP_SCORES), dtype=torch.float64)  # 8 queries over 8 keys
    single[0, KEEP_POSITION] = torch.tensor(KEEP_SCORES, dtype=torch.float64)  # the query at position 5
    kept = topk_keep_mask(single, KEEP_TOP_K)[0, KEEP_POSITION]
    assert torch.nonzero(kept).flatten().tolist() == _kept().tolist()
    count = len(WEIGHT_SCORES)
    index = torch.zeros(1, count, count, dtype=torch.float64)
    index[0, -1] = torch.tensor(WEIGHT_SCORES, dtype=torch.float64)
    query = torch.zeros(1, 1, count, 1, dtype=torch.float64)
    key = torch.zeros(1, 1, count, 1, dtype=torch.float64)
    query[0, 0, -1, 0] = 1.0
    key[0, 0, :, 0] = torch.tensor(WEIGHT_SCORES, dtype=torch.float64)  # scores q . k = the exercise's, x 1
    _, weights = topk_attention(query, key, key, index, WEIGHT_TOP_K)
    np.testing.assert_allclose(weights[0, 0, -1].numpy(), _weights(), rtol=0, atol=1e-12)
    assert _keys_read() == NSA_LENGTH // NSA_BLOCK + NSA_SELECTED * NSA_BLOCK + NSA_WINDOW


@pytest.mark.parametrize(("answer", "words"), [
    ([1, 6, 7], "forgetting causality"), ([1, 3, 4], "own key out"), ([0, 2, 4], "lowest scores"),
    ([3, 4, 5], "sliding window"), ([1, 3], "off-by-one"), ([1, 3, 4, 5], "off-by-one"), ([1, 3, 6], "future key"),
    ([1, 2, 3], "not among the three best"), ([1, 1, 3], "appears twice"), ([1, 3, 9], "outside them"),
    ([[1, 3, 5]], "one list"), ([1], "holds 1"),
    ([0, 1, 0, 1, 0, 1], "looks like a mask"), ([0, 1, 0, 1, 0, 1, 0, 0], "looks like a mask"),
])
def test_exercise_18_1_names_the_mistake(answer, words):
    not_yet("18.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_weights(renormalised=False), "over the kept keys alone"), (_weights(top_k=6), "nothing was dropped"),
    (_weights(top_k=4), "off-by-one"), (_weights(top_k=2), "off-by-one"), (_weights(exponent=False), "exponentiates"),
    ([0, 0.5, 0, 0.2, 0.3, 0], "rounded"), ([0.1, 0.5, 0, 0.2, 0.3, 0], "do not sum to 1"),
    ([0, 0.6, 0, 0.1, 0.3, 0], "index 1"), ([0.2, 0.2, 0.2, 0.2, 0.2], "six weights"),
])
def test_exercise_18_2_names_the_mistake(answer, words):
    not_yet("18.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (32768, "dense attention"), (_keys_read(compressed=False), "compressed branch"),
    (_keys_read(window=False), "sliding window"), (_keys_read(selected_as_keys=False), "as one key"),
    (_keys_read(raw_compressed=True), "one mean per block"), (1024, "selected blocks alone"),
    (1791, "leaves out a key"),
    (1800, "too large"), (1500.5, "whole number"), ([1792, 1], "one whole number"),
])
def test_exercise_18_3_names_the_mistake(answer, words):
    not_yet("18.3", answer, words)


@pytest.mark.parametrize("exercise_id", ["18.1", "18.2", "18.3"])
@pytest.mark.parametrize("answer", [..., None, "a string", float("nan"), [[1, 2], [3]], {"a": 1}, -1, print])
def test_any_answer_gets_a_sentence(exercise_id, answer):
    reply = verdict(exercise_id, answer)
    assert reply.startswith("Not yet: ") and "Traceback" not in reply, reply
