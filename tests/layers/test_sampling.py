"""attn.sampling: lesson 10's top-k and top-p loops equal the package; what each setting keeps; bad inputs refused."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn.models.decoder import Decoder, generate
from attn.sampling import kept_probabilities, sample_next
from tests.notebooks import ROOT, teaching_namespace

finite_logits = st.lists(st.floats(-20, 20, allow_nan=False), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def lesson10():
    return teaching_namespace(ROOT / "lessons" / "10_generating.ipynb")


@settings(max_examples=60, deadline=None)
@given(values=finite_logits, k=st.integers(1, 14))
def test_top_k_teaching_versions_equal_the_package(lesson10, values, k):
    logits = torch.tensor(values, dtype=torch.float64)
    expected = kept_probabilities(logits, top_k=k)
    torch.testing.assert_close(lesson10["top_k_loop"](logits, k), expected)
    torch.testing.assert_close(lesson10["top_k_probabilities"](logits, k), expected)


@settings(max_examples=60, deadline=None)
@given(values=finite_logits, p=st.floats(0.01, 1.0))
def test_top_p_teaching_versions_equal_the_package(lesson10, values, p):
    logits = torch.tensor(values, dtype=torch.float64)
    probabilities = torch.softmax(logits, dim=-1)
    expected = kept_probabilities(logits, top_p=p)
    torch.testing.assert_close(lesson10["top_p_loop"](probabilities, p), expected)
    torch.testing.assert_close(lesson10["top_p_probabilities"](probabilities, p), expected)


@given(values=finite_logits, k=st.integers(1, 14))
def test_top_k_keeps_exactly_k_tokens_ties_included(values, k):
    logits = torch.tensor(values, dtype=torch.float64).round()  # rounding makes ties common
    kept = kept_probabilities(logits, top_k=k)
    assert (kept > 0).sum().item() == min(k, len(values))
    smallest_kept = logits[kept > 0].min()
    assert (logits[kept == 0] <= smallest_kept).all(), "no dropped token scores above a kept one"


@given(values=finite_logits, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_that_reaches_p(values, p):
    logits = torch.tensor(values, dtype=torch.float64)
    probabilities = torch.softmax(logits, dim=-1)
    kept = kept_probabilities(logits, top_p=p) > 0
    ranked = probabilities.sort(descending=True, stable=True).values
    needed = int((ranked.cumsum(0) - ranked < p).sum())  # the shortest prefix with mass >= p
    assert kept.sum().item() == needed
    assert probabilities[kept].sum() >= min(p, probabilities.sum()) - 1e-12
    if needed > 1:  # one token fewer would not reach p
        assert ranked[: needed - 1].sum() < p
    assert (probabilities[~kept] <= probabilities[kept].min()).all()


def test_top_p_example_by_hand():
    probabilities = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    logits = probabilities.log()
    torch.testing.assert_close(kept_probabilities(logits, top_p=0.5), torch.tensor([1.0, 0, 0, 0], dtype=torch.float64))
    torch.testing.assert_close(kept_probabilities(logits, top_p=0.79), torch.tensor([0.625, 0.375, 0, 0], dtype=torch.float64))
    assert (kept_probabilities(logits, top_p=0.81) > 0).sum() == 3
    torch.testing.assert_close(kept_probabilities(logits, top_p=1.0), probabilities)


def test_temperature_towards_zero_is_greedy():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 30, generator=generator)
    greedy = logits.argmax(dim=-1)
    assert torch.equal(sample_next(logits, temperature=0), greedy)
    low = sample_next(logits, temperature=1e-3, generator=generator)
    assert torch.equal(low, greedy), "gaps of 1e-3 or more become 1 or more after dividing: the top token wins"
    high = sample_next(logits, temperature=1.0, generator=generator)
    assert not torch.equal(high, greedy)
    assert torch.equal(sample_next(logits, temperature=1e-300, generator=generator), greedy), "no overflow to NaN"
    assert torch.equal(sample_next(logits, top_k=1, generator=generator), greedy)


def test_sample_frequencies_follow_the_kept_probabilities():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    rows = logits.expand(40_000, 4)
    draws = sample_next(rows, temperature=1.5, top_k=3, generator=torch.Generator().manual_seed(1))
    assert draws.shape == (40_000,) and draws.dtype == torch.int64
    frequencies = torch.bincount(draws, minlength=4).double() / 40_000
    expected = kept_probabilities(logits.double() / 1.5, top_k=3)
    assert frequencies[3] == 0
    np.testing.assert_allclose(frequencies.numpy(), expected.numpy(), atol=0.01)


def test_the_same_seed_draws_the_same_tokens_and_shapes_are_kept():
    logits = torch.randn(2, 3, 9, generator=torch.Generator().manual_seed(2))
    first = sample_next(logits, top_p=0.9, generator=torch.Generator().manual_seed(5))
    again = sample_next(logits, top_p=0.9, generator=torch.Generator().manual_seed(5))
    assert first.shape == (2, 3) and torch.equal(first, again)
    assert sample_next(torch.tensor([0.0, 5.0]), temperature=0).shape == ()


def test_forbidden_tokens_and_gradients():
    logits = torch.tensor([[0.0, -math.inf, 1.0]], requires_grad=True)
    draws = sample_next(logits.expand(500, 3), generator=torch.Generator().manual_seed(0))
    assert not (draws == 1).any(), "a -inf logit is never drawn"
    assert sample_next(torch.tensor([-math.inf, -math.inf, 2.0]), top_k=3).item() == 2


def test_generate_samples_with_a_seed_and_stays_greedy_by_default():
    torch.manual_seed(0)
    model = Decoder(vocab_size=7, max_length=12, embed_dim=16, num_heads=2, num_layers=1).eval()
    prompt = torch.randint(7, (4, 2), generator=torch.Generator().manual_seed(1))
    greedy = generate(model, prompt, 8)
    assert torch.equal(greedy, generate(model, prompt, 8, temperature=0, top_k=3))
    first = generate(model, prompt, 8, temperature=5.0, generator=torch.Generator().manual_seed(3))
    again = generate(model, prompt, 8, use_cache=False, temperature=5.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, again), "with and without the cache: the same logits, so the same draws"
    assert not torch.equal(first, greedy)
    assert torch.equal(generate(model, prompt, 8, temperature=5.0, top_k=1), greedy)
    with pytest.raises(ValueError, match="top_p must be a probability in"):
        generate(model, prompt, 8, temperature=1.0, top_p=2)


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"logits": None}, TypeError, "logits must be a torch.Tensor, got NoneType"),
        ({"logits": [1.0, 2.0]}, TypeError, r"convert it with torch.tensor\(logits\)"),
        ({"logits": "scores"}, TypeError, "logits must be a torch.Tensor, got str"),
        ({"logits": torch.tensor([1, 2])}, TypeError, "floating-point scores, got torch.int64"),
        ({"logits": torch.tensor([True, False])}, TypeError, "floating-point scores, got torch.bool"),
        ({"logits": torch.tensor(1.0)}, ValueError, r"shape \(..., V\) with V >= 1"),
        ({"logits": torch.zeros(2, 0)}, ValueError, r"shape \(..., V\) with V >= 1"),
        ({"logits": torch.tensor([1.0, math.nan])}, ValueError, "logits contain NaN"),
        ({"logits": torch.tensor([1.0, math.inf])}, ValueError, r"logits contain \+inf"),
        ({"logits": torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])}, ValueError, "-inf everywhere"),
        ({"temperature": -1.0}, ValueError, "temperature must be a finite number >= 0"),
        ({"temperature": math.nan}, ValueError, "temperature must be a finite number >= 0"),
        ({"temperature": math.inf}, ValueError, "temperature must be a finite number >= 0"),
        ({"temperature": "hot"}, TypeError, "temperature must be a number >= 0"),
        ({"temperature": None}, TypeError, "temperature must be a number >= 0"),
        ({"temperature": True}, TypeError, "temperature must be a number >= 0"),
        ({"top_k": 0}, ValueError, "top_k must be at least 1"),
        ({"top_k": 2.5}, TypeError, "top_k must be None or a whole number"),
        ({"top_k": "3"}, TypeError, "top_k must be None or a whole number"),
        ({"top_k": True}, TypeError, "top_k must be None or a whole number"),
        ({"top_p": 0}, ValueError, r"top_p must be a probability in \(0, 1\]"),
        ({"top_p": 1.5}, ValueError, r"top_p must be a probability in \(0, 1\]"),
        ({"top_p": math.nan}, ValueError, r"top_p must be a probability in \(0, 1\]"),
        ({"top_p": "0.9"}, TypeError, "top_p must be None or a probability"),
        ({"generator": 0}, TypeError, "generator must be None or a torch.Generator, got int"),
    ],
)
def test_bad_arguments_are_refused_with_a_sentence(arguments, error, words):
    call = {"logits": torch.tensor([1.0, 2.0, 0.5])} | arguments
    logits = call.pop("logits")
    with pytest.raises(error, match=words):
        sample_next(logits, **call)


def test_logits_that_require_grad_are_fine():
    logits = torch.tensor([1.0, 3.0, 2.0], requires_grad=True)
    assert sample_next(logits, temperature=0).item() == 1
    assert sample_next(logits, generator=torch.Generator().manual_seed(0)).dtype == torch.int64
