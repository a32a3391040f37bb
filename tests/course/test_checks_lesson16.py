"""Lesson 16's self-checks: right answers pass, each common mistake is named, and no reply gives the answer away."""

import numpy as np
import pytest

from attn.course.exercises.lesson16 import BLOCK, _bits_per_character, _cache_mib, _q4_1, _sink_distances
from attn.course.exercises.registry import verdict
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"16.2": ("160",), "16.3": ("259", "258", "257"), "16.4": ("1.004", "1.00")}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("16.1", _q4_1()), ("16.1", list(_q4_1())), ("16.2", 160), ("16.3", [259, 258, 257, 256]),
    ("16.4", 3.48 / 5 / np.log(2)),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_formulas():
    import torch

    from attn.streaming import cache_places

    kept, places = cache_places(1000, 256, 4)
    assert [places[-1] - places[kept.index(sink)] for sink in range(4)] == _sink_distances().tolist()
    assert _cache_mib() == 160
    assert _bits_per_character() == pytest.approx(1.004, abs=1e-3)
    scale, minimum = np.frombuffer(BLOCK[:4], dtype="<f2").astype(np.float32)
    codes = np.frombuffer(BLOCK[4:], dtype=np.uint8)
    by_loop = [scale * (codes[j % 16] >> (4 * (j // 16)) & 0x0F) + minimum for j in range(32)]
    np.testing.assert_allclose(_q4_1(), by_loop, rtol=1e-6)
    assert torch.is_tensor(torch.tensor(_q4_1()))


@pytest.mark.parametrize(("answer", "words"), [
    (_q4_1(minimum=False), "the minimum m is missing"),
    (_q4_1(order="high first"), "the halves are swapped"),
    (_q4_1(order="neighbours"), "not two neighbours"),
    (_q4_1(signed=True), "as Q4_0 stores them"),
    (_q4_1(swap_scale=True), "the scale and the minimum are swapped"),
    (_q4_1()[:16], "holds 32 weights"),
    (_q4_1() + 0.5, "entries in your weights are wrong"),
])
def test_exercise_16_1_names_the_mistake(answer, words):
    not_yet("16.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_cache_mib(heads=15), "multi-head"), (_cache_mib(tensors=1), "the keys alone"),
    (_cache_mib(bytes_per_number=4), "float32"), (_cache_mib(layers=1), "one layer's cache"),
    (160 * 2**20, "in bytes"), (160 * 2**20 / 1e6, "in MB"), (100.0, "too"),
    # Two mistakes give the same number: the reply names both readings.
    (_cache_mib(bytes_per_number=1), "1 byte per number"), (_cache_mib(bytes_per_number=1), "the keys alone"),
    (_cache_mib(head_dim=128), "heads of d = 128"), (_cache_mib(head_dim=128), "4 bytes per number"),
    (160 * 2**10, "size in KiB"), (160 / 2**10, "size in GiB"), (0.156, "size in GiB"),
])
def test_exercise_16_2_names_the_mistake(answer, words):
    not_yet("16.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    ([1000, 999, 998, 997], "absolute positions"), ([260, 259, 258, 257], "off by one"),
    ([255, 254, 253, 252], "the 4 sinks come first"), ([256, 257, 258, 259], "reversed"),
    ([259, 258], "one distance per sink"), ([1, 2, 3, 4], "entries in your distances are wrong"),
])
def test_exercise_16_3_names_the_mistake(answer, words):
    not_yet("16.3", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (3.48 / 5, "nats per character"), (2.9 / np.log(2), "bits per token"),
    (_bits_per_character(per="inverted"), "upside down"), (3.48 / 5 * np.log(2), "DIVIDING by ln 2"),
    (1.0, "rounded"), (2.0, "too"),
])
def test_exercise_16_4_names_the_mistake(answer, words):
    not_yet("16.4", answer, words)


@pytest.mark.parametrize("exercise_id", ["16.1", "16.2", "16.3", "16.4"])
@pytest.mark.parametrize("answer", [..., None, "a string", float("nan"), [[1, 2], [3]], {"a": 1}, -1])
def test_any_answer_gets_a_sentence(exercise_id, answer):
    reply = verdict(exercise_id, answer)
    assert reply.startswith("Not yet: ") and "Traceback" not in reply, reply


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_a_float32_answer_rounded_is_told_it_looks_rounded(decimals):
    """The lesson computes in float32: its weights rounded there are the float32 numbers nearest the rounded ones,
    off by up to half of float32's epsilon, and the check still calls them rounded."""
    import torch

    weights = torch.tensor(_q4_1(), dtype=torch.float32)
    for answer in (weights.round(decimals=decimals), np.round(weights.numpy(), decimals)):
        not_yet("16.1", answer, "looks rounded")
    assert verdict("16.1", weights).startswith("Correct: ")  # float32 itself is within the course's tolerance
