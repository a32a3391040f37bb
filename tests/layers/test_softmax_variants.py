"""attn.softmax_variants (lesson 22): softmax with a sink logit and softpick, loops equal to the vectorised forms,
their identities, stability, masked keys, and a sentence for hostile input; attn.softmax reaches them."""

import math

import numpy as np
import pytest
import torch

import attn
from attn.softmax_variants import softmax_with_sink, softmax_with_sink_loop, softpick, softpick_loop

INF = float("inf")


def scores_with_masks(seed=0, dtype=torch.float64):
    """(2, 3, 6) scores with a fully masked row, a partly masked row and a row of non-positive scores."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 3, 6, generator=generator, dtype=dtype) * 3
    scores[0, 0] = -INF
    scores[1, 1, ::2] = -INF
    scores[1, 2] = -scores[1, 2].abs()
    return scores


def test_attn_softmax_is_still_the_numpy_softmax_and_reaches_the_variants():
    row = np.array([1.0, 2.0, 3.0])
    assert np.allclose(attn.softmax(row), np.exp(row) / np.exp(row).sum())
    assert attn.softmax(row, axis=0).shape == (3,)
    assert attn.softmax.softmax_with_sink is softmax_with_sink
    assert attn.softmax.softpick is softpick
    from attn.softmax import softmax_with_sink as imported

    assert imported is softmax_with_sink
    with pytest.raises(AttributeError, match="no attribute 'softmax_with_snk'"):
        attn.softmax.softmax_with_snk  # noqa: B018 - a misspelt name still fails as a name


@pytest.mark.parametrize("sink", [0.0, 1.5, -4.0])
def test_the_sink_loop_equals_the_vectorised_form(sink):
    scores = scores_with_masks()
    assert torch.allclose(softmax_with_sink(scores, sink), softmax_with_sink_loop(scores, sink), atol=1e-15, rtol=0)


def test_the_softpick_loop_equals_the_vectorised_form():
    scores = scores_with_masks()
    assert torch.allclose(softpick(scores), softpick_loop(scores), atol=1e-15, rtol=0)


def test_a_sink_of_zero_is_the_off_by_one_softmax():
    """exp(s) / (1 + sum exp(s)): Miller's off-by-one softmax, written directly (safe for these small scores)."""
    scores = torch.randn(4, 7, dtype=torch.float64)
    direct = scores.exp() / (1 + scores.exp().sum(-1, keepdim=True))
    assert (softmax_with_sink(scores, 0.0) - direct).abs().max() < 1e-15


def test_the_sinks_share_is_what_the_keys_do_not_get():
    """The weights are softmax over [scores, sink] with the sink's column dropped; the missing mass is its share."""
    scores = torch.randn(3, 5, dtype=torch.float64)
    sink = torch.tensor([[0.5], [-1.0], [3.0]], dtype=torch.float64)
    full = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)
    weights = softmax_with_sink(scores, sink)
    assert (weights - full[:, :-1]).abs().max() < 1e-15
    assert (1 - weights.sum(-1) - full[:, -1]).abs().max() < 1e-15


def test_per_head_sinks_broadcast_and_other_dims_work():
    scores = torch.randn(2, 3, 4, 4, dtype=torch.float64)  # (B, H, T_q, T_k)
    sinks = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    weights = softmax_with_sink(scores, sinks.view(3, 1, 1))
    for head in range(3):
        assert torch.allclose(weights[:, head], softmax_with_sink(scores[:, head], float(sinks[head])), atol=1e-15)
    assert torch.allclose(softmax_with_sink(scores, 0.5, dim=2), softmax_with_sink(scores.transpose(2, 3), 0.5)
                          .transpose(2, 3), atol=1e-15)
    assert torch.allclose(softpick(scores, dim=0), softpick(scores.movedim(0, -1)).movedim(-1, 0), atol=1e-15)


def test_softpick_identities():
    """Non-negative, rows sum to at most 1, keys at or below 0 get nothing, all-masked and all-negative rows give 0;
    a row whose scores are all positive sums to exactly 1 (then |e^s - 1| = e^s - 1 everywhere)."""
    scores = scores_with_masks()
    weights = softpick(scores)
    assert (weights >= 0).all() and (weights.sum(-1) <= 1 + 1e-12).all()
    assert (weights[scores <= 0] == 0).all()
    assert (weights[0, 0] == 0).all() and (weights[1, 2] == 0).all()
    positive = torch.rand(5, 8, dtype=torch.float64) + 0.1
    assert (softpick(positive).sum(-1) - 1).abs().max() < 1e-14
    direct = torch.relu(scores[0, 1].exp() - 1) / (scores[0, 1].exp() - 1).abs().sum()
    assert (weights[0, 1] - direct).abs().max() < 1e-15


def test_masked_keys_add_nothing_to_either_denominator():
    scores = torch.tensor([[0.3, -INF, 1.2, -INF]], dtype=torch.float64)
    kept = scores[:, [0, 2]]
    assert torch.equal(softpick(scores)[:, [1, 3]], torch.zeros(1, 2, dtype=torch.float64))
    assert torch.allclose(softpick(scores)[:, [0, 2]], softpick(kept), atol=1e-16)
    assert torch.allclose(softmax_with_sink(scores, 0.2)[:, [0, 2]], softmax_with_sink(kept, 0.2), atol=1e-16)


def test_huge_and_tiny_scores_stay_finite_and_right():
    """Scores of 1e4 overflow exp in any dtype; the shifted forms do not. Scores near 0 keep their precision (expm1)."""
    scores = torch.tensor([[1e4, 1e4 - 1.0, -3.0]], dtype=torch.float32)
    weights = softmax_with_sink(scores, 1e4 - 2.0)
    expected = torch.softmax(torch.tensor([0.0, -1.0, -2.0]), dim=0)[:2]
    assert torch.isfinite(weights).all() and torch.allclose(weights[0, :2], expected, atol=1e-6)
    picked = softpick(scores)
    assert torch.allclose(picked[0, :2], torch.tensor([1.0, math.exp(-1.0)]) / (1 + math.exp(-1.0)), atol=1e-6)
    tiny = torch.tensor([[1e-9, -1e-9, 2e-9]], dtype=torch.float64)
    assert torch.allclose(softpick(tiny), torch.tensor([[0.25, 0.0, 0.5]], dtype=torch.float64), rtol=1e-6)
    half = softmax_with_sink(torch.tensor([[3.0, 1.0]], dtype=torch.float16), 0.0)
    assert half.dtype == torch.float16 and torch.isfinite(half).all()


def test_gradients_flow_through_both():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: softmax_with_sink(s, 0.3), (scores,))
    positive = (torch.rand(3, 5, dtype=torch.float64) + 0.2).requires_grad_()
    assert torch.autograd.gradcheck(softpick, (positive,))


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: softmax_with_sink(torch.zeros(2, 3), float("nan")), ValueError, "NaN sink makes every weight NaN"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), torch.tensor([[float("nan")], [0.0]])), ValueError, "NaN or inf"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), INF), ValueError, "finite sink"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), 1e300), ValueError, "NaN or inf"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), True), TypeError, "sink_logit must be a number"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), "0"), TypeError, "sink_logit must be a number"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), torch.zeros(3)), ValueError, "does not broadcast to one logit per row"),
    (lambda: softmax_with_sink(torch.zeros(2, 3, 4), torch.zeros(3)), ValueError, "sinks.view"),
    (lambda: softmax_with_sink(torch.zeros(2, 3), torch.zeros(2, 1, dtype=torch.int64)), TypeError, "floating"),
    (lambda: softmax_with_sink_loop(torch.zeros(2, 3), torch.zeros(2, 1)), ValueError, "one sink for every row"),
    (lambda: softmax_with_sink(torch.tensor([[0.0, float("nan")]]), 0.0), ValueError, "NaN or \\+inf"),
    (lambda: softpick(torch.tensor([[0.0, INF]])), ValueError, "NaN or \\+inf"),
    (lambda: softpick(torch.zeros(2, 0)), ValueError, "no keys"),
    (lambda: softpick(torch.tensor(1.0)), ValueError, "at least one axis"),
    (lambda: softpick(torch.zeros(2, 3), dim=2), ValueError, "dim=2 does not exist"),
    (lambda: softpick(torch.zeros(2, 3), dim=1.0), TypeError, "dim must be a whole number"),
    (lambda: softpick(torch.zeros(2, 3, dtype=torch.int64)), TypeError, "floating-point"),
    (lambda: softpick(np.zeros((2, 3))), TypeError, "torch.as_tensor"),
    (lambda: softpick_loop(torch.empty(2, 3, device="meta")), ValueError, "meta device"),
])
def test_hostile_input_gets_a_sentence(call, error, words):
    with pytest.raises(error, match=words):
        call()
