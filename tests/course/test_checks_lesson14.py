"""Lesson 14's self-checks: right answers pass, each common mistake is named, and no reply gives the answer away."""

import numpy as np
import pytest

from attn.course.exercises.lesson14 import SCORES, SINK, _cache_gib, _cache_with_window, _sink_weights, _window_mask
from attn.course.exercises.registry import verdict
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"14.2": ("4.156", "4.16"), "14.3": ("0.452", "0.45", "0.166"), "14.4": ("189",)}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(
    ("exercise_id", "answer"),
    [("14.1", _window_mask()), ("14.2", 4.15625),
     ("14.3", list(_sink_weights())), ("14.4", 189)],
)
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_lesson_s_formulas():
    import torch

    from attn.window import sink_attention, sliding_window_mask

    assert np.array_equal(_window_mask(), sliding_window_mask(10, 10, 4, sink_tokens=3).numpy())
    scores = torch.tensor(SCORES, dtype=torch.float64)
    query = torch.zeros(1, 1, 1, 1, dtype=torch.float64)
    key = torch.ones(1, 1, 5, 1, dtype=torch.float64)
    keys = key * scores[None, None, :, None]  # with q = 1 and d = 1, the scores are the keys themselves
    _, weights = sink_attention(query + 1, keys, torch.zeros_like(keys), torch.tensor([SINK], dtype=torch.float64))
    np.testing.assert_allclose(weights.flatten().numpy(), _sink_weights(), rtol=1e-12)
    assert _cache_gib() == pytest.approx(4.15625)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_window_mask(5), "the off-by-one window"),
        (_window_mask(3), "one too few"),
        (_window_mask(sinks=0), "sink tokens are missing"),
        (_window_mask(causal_sinks=False), "visible before they exist"),
        (_window_mask(causal=False, causal_sinks=False), "runs both ways"),
        (~_window_mask(), "True and False are swapped"),
        (_window_mask()[:4], "one row per query"),
        (_window_mask().astype(int).tolist(), "the pattern is right, but your mask holds int64"),
    ],
)
def test_exercise_14_1_names_the_mistake(answer, words):
    reply = verdict("14.1", answer)
    assert reply.startswith("Not yet: ") and words in reply, reply


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_cache_gib(all_global=True), "every layer global"),
        (_cache_gib(window_on_global=True), "gives the global layers a window"),
        (_cache_gib(global_layers=9), "one global layer in 5"),
        (_cache_gib(tensors=1), "keys alone"),
        (_cache_gib(bytes_per_number=1), "1 byte per number"),
        (_cache_with_window(1023), "keeps 1,023 positions"),
        (_cache_with_window(1025), "keeps 1,025 positions"),
        (_cache_with_window(1018), "too small"),
        (_cache_with_window(1030), "too large"),
        (4.16, "looks rounded"),
        (4.156, "looks rounded"),
        (_cache_gib(bytes_per_number=4), "float32"),
        (_cache_gib() * 2**30, "in bytes"),
        (_cache_gib() * 2**30 / 1e9, "in GB"),
        (5.0, "too large"),
    ],
)
def test_exercise_14_2_names_the_mistake(answer, words):
    not_yet("14.2", answer, words)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (list(_sink_weights(keep_sink=True)), "sixth entry"),
        (list(_sink_weights(renormalise=True)), "sum to 1"),
        (list(np.exp(SCORES + SINK) / np.exp(SCORES + SINK).sum()), "sum to 1"),
        (list(_sink_weights() * 1.1), "too large"),
    ],
)
def test_exercise_14_3_names_the_mistake(answer, words):
    not_yet("14.3", answer, words)


@pytest.mark.parametrize(
    ("answer", "words"),
    [(192, "the off-by-one window"), (63, "one layer's reach"), (64, "one layer's window"), (150, "too small")],
)
def test_exercise_14_4_names_the_mistake(answer, words):
    not_yet("14.4", answer, words)


def test_the_exercises_are_not_the_worked_examples():
    """14.1 and 14.3 ask for numbers the lesson does not print above them (its examples: T = 8, W = 3, S = 2; the
    scores [2, 1, 0, -1] with a sink of 1.5)."""
    from attn.course.exercises import lesson14

    assert (lesson14.LENGTH, lesson14.WINDOW, lesson14.SINKS) != (8, 3, 2)
    assert list(SCORES) != [2.0, 1.0, 0.0, -1.0] and SINK != 1.5


@pytest.mark.parametrize(("exercise_id", "answer"), [("14.2", 1.0), ("14.2", -1.0), ("14.4", 1), ("14.4", 2)])
def test_no_reply_gives_a_factor(exercise_id, answer):
    reply = verdict(exercise_id, answer)
    assert reply.startswith("Not yet: ") and "factor" not in reply and "%" not in reply, reply
