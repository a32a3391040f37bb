"""Lesson 22's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away.
The expected answers are the course's own: attn.softmax_variants' softmax_with_sink and softpick, and a
GatedAttention head's arithmetic."""

import math

import numpy as np
import pytest
import torch

from attn.course.exercises.lesson22 import (
    GATE_LOGIT,
    GATE_SCORES,
    GATE_VALUES,
    OFF_SCORES,
    OFF_VALUES,
    PICK_SCORES,
    SINK_LOGIT,
    SINK_SCORES,
    _gated_output,
    _off_by_one_output,
    _sink_weights,
    _softpick_weights,
)
from attn.course.exercises.registry import verdict
from attn.softmax_variants import softmax_with_sink, softpick
from tests.verdicts import names_the_mistake

SINK = [0.1892461, 0.03820813, 0.07694172, 0.42117494, 0.0189736]
PICK = [0.17420236, 0.0, 0.67928554, 0.0, 0.0]
GATED, OFF_BY_ONE = 0.20987959348002105, 0.7897982745139489
# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"22.1": ("0.189", "0.421", "0.19"), "22.2": ("0.21", "0.2099"), "22.3": ("0.79", "0.7898"),
           "22.4": ("0.174", "0.679", "0.17")}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("22.1", SINK), ("22.1", np.array(SINK)), ("22.1", torch.tensor(SINK, dtype=torch.float64)),
    ("22.2", GATED), ("22.2", torch.tensor(GATED, dtype=torch.float64)), ("22.3", OFF_BY_ONE),
    ("22.4", PICK), ("22.4", torch.tensor(PICK)),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_own():
    """22.1 and 22.4 are the library's softmaxes; 22.3 an off-by-one row read against the values; 22.2 a one-head
    GatedAttention's arithmetic: the head's softmax output times sigmoid of its gate."""
    scores = torch.tensor(SINK_SCORES, dtype=torch.float64)
    np.testing.assert_allclose(_sink_weights(), softmax_with_sink(scores, SINK_LOGIT).numpy(), rtol=1e-12)
    np.testing.assert_allclose(_sink_weights(), SINK, rtol=1e-6)
    np.testing.assert_allclose(_softpick_weights(), softpick(torch.tensor(PICK_SCORES, dtype=torch.float64)).numpy(),
                               rtol=1e-12, atol=1e-15)
    off = softmax_with_sink(torch.tensor(OFF_SCORES, dtype=torch.float64), 0.0) @ torch.tensor(OFF_VALUES,
                                                                                                 dtype=torch.float64)
    assert _off_by_one_output() == pytest.approx(float(off), rel=1e-12)
    read = torch.softmax(torch.tensor(GATE_SCORES, dtype=torch.float64), 0) @ torch.tensor(GATE_VALUES,
                                                                                          dtype=torch.float64)
    assert _gated_output() == pytest.approx(float(read) / (1 + math.exp(-GATE_LOGIT)), rel=1e-12)


@pytest.mark.parametrize(("answer", "words"), [
    (_sink_weights(sixth=True), "sixth output"), (_sink_weights(without_sink=True), "plain softmax"),
    (SINK[:4], "five numbers"),
    ([0.2, 0.038, 0.077, 0.421, 0.019], "index 0"), ([0.189, 0.038, 0.077, 0.421, 0.019], "looks rounded"),
    ("weights", "an array of numbers"), ([float("nan")] * 5, "NaN"),
    (_sink_weights(sink_logit=0.0), "off-by-one softmax"), (100 * np.array(SINK), "percentages"),
    (SINK[::-1], "reverse order"), ([SINK], "has shape (1, 5): give a flat list"),
    (np.round(_sink_weights(without_sink=True), 3), "plain softmax"),  # a mistake copied from rounded digits
    (np.round(100 * _sink_weights(), 1), "percentages"),
])
def test_exercise_22_1_names_the_mistake(answer, words):
    not_yet("22.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_gated_output(before=True), "before the softmax"), (_gated_output(no_sigmoid=True), "gate logit itself"),
    (_gated_output(no_gate=True), "without its gate"), (5.0, "too large"), (0.01, "too small"), ([0.2, 0.3], "one number"),
    (0.21, "looks rounded"), (_gated_output(flipped=True), "sigmoid(-g)"),
    (round(_gated_output(flipped=True), 3), "sigmoid(-g)"), (round(_gated_output(before=True), 3), "before the softmax"),
])
def test_exercise_22_2_names_the_mistake(answer, words):
    not_yet("22.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_off_by_one_output(without_one=True), "without its 1"), (_off_by_one_output(one_per_key=True), "for every key"),
    (-1.0, "wrong sign"), (0.0, "is 0"), ("about one", "number"), (0.79, "looks rounded"),
    (_off_by_one_output(shifted_one=True), "adds 1 unshifted"), (round(_off_by_one_output(shifted_one=True), 3), "e^(0 - m)"),
    (round(_off_by_one_output(without_one=True), 3), "without its 1"),
])
def test_exercise_22_3_names_the_mistake(answer, words):
    not_yet("22.3", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_softpick_weights(rectified=False), "rectifier"), (_softpick_weights(absolute=False), "with its signs"),
    (_softpick_weights(rectified=False, absolute=False), "rectifier and the absolute values"),
    (_softpick_weights(rectified_total=True), "rectifies the denominator"), ([0.2] * 5, "index 0"),
    (np.exp(PICK_SCORES) / np.exp(PICK_SCORES).sum(), "plain softmax"), ([0.1, 0.2], "five numbers"),
    (_softpick_weights(absolute_top=True), "keys scoring below 0 got weight"), ([PICK], "has shape (1, 5): give a flat list"),
    (np.round(_softpick_weights(rectified=False), 3), "rectifier"),  # copied from rounded digits: named, not "rounded"
    (np.round(_softpick_weights(absolute_top=True), 3), "not |e^s - 1|"),
])
def test_exercise_22_4_names_the_mistake(answer, words):
    not_yet("22.4", answer, words)


@pytest.mark.parametrize("exercise_id", ["22.1", "22.2", "22.3", "22.4"])
@pytest.mark.parametrize("answer", [None, ..., "x", {"a": 1}, float("inf"), [[1.0, 2.0], [3.0]], object(), True])
def test_any_input_gets_a_sentence(exercise_id, answer):
    line = verdict(exercise_id, answer)
    assert line.startswith("Not yet: ") and "Traceback" not in line
