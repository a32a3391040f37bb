"""Lesson 17's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away."""

import math

import numpy as np
import pytest

from attn.course.exercises.lesson17 import _diluted_weight, _ntk_base, _score_factor, _yarn_pairs
from attn.course.exercises.registry import verdict
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"17.1": ("[9, 11]", "9 and 11"), "17.2": ("1.63",), "17.3": ("31,0", "31,1", "3108"), "17.4": ("0.040", "0.04")}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("17.1", [9, 11]), ("17.1", np.array([9, 11])), ("17.2", (0.1 * math.log(16) + 1) ** 2),
    ("17.3", 10000 * 3 ** (64 / 62)), ("17.4", math.exp(3.75) / (math.exp(3.75) + 1023)),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_formulas():
    from attn.positions import ntk_aware_base, rotary_frequencies, yarn_attention_factor, yarn_ramp
    from attn.softmax import log_n_scale

    yarn = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048}
    ramp = yarn_ramp(64, 10000.0, yarn)
    assert _yarn_pairs().tolist() == [int((ramp == 0).sum()), int((ramp == 1).sum())]
    plain, scaled = rotary_frequencies(64), rotary_frequencies(64, scaling=yarn)
    assert (scaled == plain).sum() == _yarn_pairs()[0]
    assert _score_factor() == pytest.approx(yarn_attention_factor({**yarn, "factor": 16.0}) ** 2, rel=1e-12)
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4096}
    np.testing.assert_allclose(rotary_frequencies(64, scaling=dynamic, length=6144),
                               rotary_frequencies(64, _ntk_base()), rtol=1e-12)
    assert _ntk_base() == pytest.approx(ntk_aware_base(64, 10000.0, 3.0), rel=1e-12)
    scale = log_n_scale(1024, 256)
    assert _diluted_weight() == pytest.approx(np.exp(3 * scale) / (np.exp(3 * scale) + 1023), rel=1e-12)


@pytest.mark.parametrize(("answer", "words"), [
    ([0, 32], "the high frequencies too"), ([32, 0], "nothing would change"), ([11, 9], "swapped"),
    (_yarn_pairs(trained=2048 * 8).tolist(), "within the trained length"), ([21, 23], "the bounds are swapped"),
    ([21, 11], "no pair on the ramp"), ([8, 11], "the pairs kept are too few"),
    ([9, 12], "the pairs interpolated are too many"), ([9], "give two whole numbers"),
])
def test_exercise_17_1_names_the_mistake(answer, words):
    not_yet("17.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (1.0, "forgets the temperature"), (_score_factor(power=1), "the query alone"),
    (_score_factor(inverted=True), "that divides"), (_score_factor(power=1, inverted=True), "counts the factor once"),
    (_score_factor(log=math.log10), "log10"), (_score_factor(log=math.log2), "log2"), (16.0, "the factor s itself"),
    (1.63, "rounded"), (3.0, "too large"), ([1.0, 2.0], "one number"),
])
def test_exercise_17_2_names_the_mistake(answer, words):
    not_yet("17.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (10000.0, "the plain base"), (_ntk_base(4.0), "static NTK-aware"), (_ntk_base(1.5), "n / L alone"),
    (_ntk_base(6.0), "leaves out the - (s - 1)"), (30000.0, "multiplies the base by the factor"),
    (10000 * 3 ** (62 / 64), "upside down"), (10000 / 3, "divides the base"), (1e6, "too large"),
])
def test_exercise_17_3_names_the_mistake(answer, words):
    not_yet("17.3", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_diluted_weight(scale=1.0), "leaves the scores as they are"), (_diluted_weight(scale=math.log(1024)), "log T alone"),
    (_diluted_weight(scale=math.log(256) / math.log(1024)), "upside down"), (_diluted_weight(scale=4.0), "T / L"),
    (_diluted_weight(scale=math.log(4.0)), "log(T / L)"), (_diluted_weight(others=1024), "1,023 others"),
    (_diluted_weight(scale=1.0, others=255), "the trained length"), (0.5, "too large"),
])
def test_exercise_17_4_names_the_mistake(answer, words):
    not_yet("17.4", answer, words)


@pytest.mark.parametrize("exercise_id", ["17.1", "17.2", "17.3", "17.4"])
@pytest.mark.parametrize("answer", [..., None, "a string", float("nan"), [[1, 2], [3]], {"a": 1}, -1, print])
def test_any_answer_gets_a_sentence(exercise_id, answer):
    reply = verdict(exercise_id, answer)
    assert reply.startswith("Not yet: ") and "Traceback" not in reply, reply
