"""Lesson 21's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away.
The expected answers are the course's own: quantize's scales, a QuantizedKVCache's nbytes, keep_indices, and an
EvictingKVCache's bytes."""

import numpy as np
import pytest
import torch

from attn.compressed_cache import EvictingKVCache, QuantizedKVCache
from attn.course.exercises.lesson21 import (
    BITS,
    GROUP,
    HEAD_DIM,
    KV_HEADS,
    LENGTH,
    SHARE,
    _budget,
    _cache_bytes,
    _kept,
    _key_scales,
)
from attn.course.exercises.registry import verdict
from attn.kvcache import KVCache
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"21.1": ("0.2", "0.5"), "21.2": ("9216", "9,216"), "21.3": ("[0, 1, 5, 8, 9]", "1, 5"), "21.4": ("64",)}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("21.1", [0.2, 0.5, 0.2]), ("21.1", np.array([0.2, 0.5, 0.2])), ("21.1", torch.tensor([0.2, 0.5, 0.2])),
    ("21.2", 9216), ("21.2", 9216.0), ("21.3", [0, 1, 5, 8, 9]), ("21.3", [9, 8, 5, 1, 0]), ("21.4", 64),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_own():
    """A QuantizedKVCache holding GROUP positions as codes holds the bytes of 21.2; an EvictingKVCache with the budget
    of 21.4 holds 1/SHARE of the full cache's bytes; 21.1's scales are each channel's range over 3 steps."""
    keys = torch.tensor([[0.1, 6.0, -0.2], [0.4, 7.5, 0.1], [-0.2, 6.6, 0.3], [0.3, 7.2, -0.3]], dtype=torch.float64)
    np.testing.assert_allclose(_key_scales(), ((keys.amax(0) - keys.amin(0)) / 3).numpy())
    cache = QuantizedKVCache(BITS, GROUP, GROUP)  # float32 keys: float32 scales and zero points
    cache.append(torch.randn(1, KV_HEADS, GROUP, HEAD_DIM), torch.randn(1, KV_HEADS, GROUP, HEAD_DIM))
    assert cache.quantized_positions == GROUP and cache.residual_positions == 0 and cache.nbytes == _cache_bytes()
    full, evicting = KVCache(), EvictingKVCache(_budget(), "knorm", 0, 0)
    keys, values = torch.randn(1, 2, LENGTH, 8), torch.randn(1, 2, LENGTH, 8)
    full.append(keys, values)
    evicting.append(keys, values)
    assert evicting.nbytes * SHARE == full.nbytes
    assert _kept().tolist() == [0, 1, 5, 8, 9]


@pytest.mark.parametrize(("answer", "words"), [
    (_key_scales(per_token=True), "per token"), ([0.15, 0.375, 0.15], "2**bits = 4"), ([0.4, 7.5, 0.3], "symmetric"),
    ([0.6, 1.5, 0.6], "ranges themselves"), ([0.2, 0.5, 0.3], "index 2"), ([0.2, 0.5], "three numbers"),
    ([0.2, 0.5, 0.7], "entries in your list of scales is wrong"),  # never "your scales differs"
    (torch.tensor([[0.2, 0.5, 0.2]]), "shape (1, 3)"), (np.array([[0.2, 0.5, 0.2]]), "one flat list"),
    (_key_scales(half=True), "float16 scales"), (torch.tensor([0.2, 0.5, 0.2], dtype=torch.float16), "float16 scales"),
    ([2.07, 2.47, 2.27, 2.5], "per token"),  # the per-token scales as printed, rounded
    ([-0.2, 6.0, -0.3], "its zero point"),  # each channel's minimum
])
def test_exercise_21_1_names_the_mistake(answer, words):
    not_yet("21.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (6144, "forget the scales"), (7680, "float32 scales without their zero points"), (7680, "float16 scales and zero"),
    (6912, "float16 scales and no zero points"), (15360, "a byte of its own"),
    (49152, "float32 cache"), (4608, "not both"), (99, "too small"), (100000, "too large"), ([9216, 1], "one whole number"),
    (73728, "counts bits, not bytes"), (9200, "looks rounded"), (9220, "looks rounded"),
    (9200, "whole number, not an estimate"),
])
def test_exercise_21_2_names_the_mistake(answer, words):
    not_yet("21.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    ([1, 3, 5, 8, 9], "evicts the sink"), ([0, 1, 3, 5, 7], "most recent"), ([1, 3, 5, 7, 9], "score alone"),
    ([0, 2, 4, 8, 9], "lowest scores"), ([0, 1, 8, 9], "not 4"), ([0, 1, 5, 8, 12], "from 0 to 9"),
    ([0, 1, 2, 8, 9], "highest scores"), ([[0, 1], [5, 8]], "one list"),
])
def test_exercise_21_3_names_the_mistake(answer, words):
    not_yet("21.3", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (4, "in pages instead of entries"), (448, "evicted"), (8, "denominator"), (100, "too large"), (10, "too small"),
    ("sixty-four", "one whole number"),
])
def test_exercise_21_4_names_the_mistake(answer, words):
    not_yet("21.4", answer, words)


def test_exercise_21_1_s_fallback_gives_no_recipe():
    """An unmatched wrong answer is told which entry is off, never the formula that computes the scales."""
    reply = verdict("21.1", [0.3, 0.6, 0.7])
    assert reply.startswith("Not yet: ") and "one step" in reply
    assert "max - min" not in reply and "2**bits - 1" not in reply


def test_a_set_of_positions_is_asked_for_as_a_list():
    reply = verdict("21.3", {0, 1, 5, 8, 9})
    assert "is a set, but it should be a list of whole numbers" in reply and "array" not in reply
