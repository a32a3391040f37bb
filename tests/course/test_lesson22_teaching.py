"""Lesson 22's teaching versions (the sink softmax and softpick as loops and vectorised, the gated head as a loop,
differential and forgetting attention as loops and vectorised, QK-clip as a loop over heads, written out in the
lesson) equal attn.softmax_variants' and attn.gates'; each can fail (a planted change is caught)."""

import math

import pytest
import torch
from torch.nn import functional

from attn import MultiHeadAttention
from attn.gates import GatedAttention, differential_attention, forgetting_attention, largest_logits, qk_clip_
from attn.softmax_variants import softmax_with_sink, softpick
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson22():
    return teaching_namespace(ROOT / "lessons" / "22_attention_that_may_say_nothing.ipynb")


def causal_scores(generator, heads=3, length=6):
    scores = torch.randn(2, heads, length, length, dtype=torch.float64, generator=generator) * 3
    return scores.masked_fill(torch.ones(length, length).triu(1).bool(), -math.inf)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_sink_softmax_loop_and_vectors_equal_the_package(lesson22, seed):
    generator = torch.Generator().manual_seed(seed)
    scores = causal_scores(generator)
    sinks = torch.randn(3, dtype=torch.float64, generator=generator) * 2
    ours = lesson22["sink_softmax"](scores, sinks)
    torch.testing.assert_close(ours, softmax_with_sink(scores, sinks.view(3, 1, 1)), rtol=0, atol=1e-14)
    for row in scores[0, 1].tolist():
        expected = softmax_with_sink(torch.tensor(row, dtype=torch.float64), float(sinks[1]))
        torch.testing.assert_close(torch.tensor(lesson22["sink_softmax_row"](row, float(sinks[1])),
                                                dtype=torch.float64), expected, rtol=0, atol=1e-14)
    assert (ours - torch.softmax(scores, -1)).abs().max() > 1e-3  # a sink changes the weights


def test_softpick_loop_and_vectors_equal_the_package(lesson22):
    generator = torch.Generator().manual_seed(2)
    rows = torch.randn(50, 7, dtype=torch.float64, generator=generator) * 2
    rows[0] = -1.0  # nothing above 0: zeros
    rows[1, 3] = -math.inf  # a masked key
    torch.testing.assert_close(lesson22["softpick_rows"](rows), softpick(rows), rtol=0, atol=1e-14)
    loop = torch.tensor([lesson22["softpick_row"](r) for r in rows[2:].tolist()], dtype=torch.float64)
    torch.testing.assert_close(loop, softpick(rows[2:]), rtol=0, atol=1e-14)
    huge = torch.tensor([[1000.0, 999.0, -5.0, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(lesson22["softpick_rows"](huge), softpick(huge), rtol=0, atol=1e-14)


def test_the_gated_loop_equals_gated_attention(lesson22):
    torch.manual_seed(3)
    layer = GatedAttention(16, 4, num_kv_heads=2).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        q, k, v, gate = layer.projections(x)
        ours = layer.out_proj(lesson22["gated_heads_loop"](q, k, v, gate).flatten(2))
        torch.testing.assert_close(ours, layer(x), rtol=0, atol=1e-12)
        shut = layer.out_proj(lesson22["gated_heads_loop"](q, k, v, gate - 50).flatten(2))
        assert shut.abs().max() < 1e-12 < layer(x).abs().max()  # a closed gate: the head says nothing


@pytest.mark.parametrize("lam", [0.2, 0.8, -0.3])
def test_differential_loop_and_vectors_equal_the_package(lesson22, lam):
    generator = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(3, 2, 2, 5, 8, dtype=torch.float64, generator=generator)
    ours = lesson22["differential"](q, k, v, lam)
    torch.testing.assert_close(ours, differential_attention(q, k, v, lam), rtol=0, atol=1e-12)
    row = lesson22["differential_row"](q[1, 0, 3], k[1, 0, :4], v[1, 0, :4], lam)
    torch.testing.assert_close(row, ours[1, 0, 3], rtol=0, atol=1e-12)


def test_forgetting_loop_and_vectors_equal_the_package(lesson22):
    generator = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(3, 2, 2, 6, 4, dtype=torch.float64, generator=generator)
    log_forget = functional.logsigmoid(torch.randn(2, 2, 6, dtype=torch.float64, generator=generator))
    ours = lesson22["forgetting"](q, k, v, log_forget)
    torch.testing.assert_close(ours, forgetting_attention(q, k, v, log_forget), rtol=0, atol=1e-12)
    row = lesson22["forgetting_row"](q[0, 1, 4], k[0, 1, :5], v[0, 1, :5], log_forget[0, 1, :5])
    torch.testing.assert_close(row, ours[0, 1, 4], rtol=0, atol=1e-12)
    assert (lesson22["forgetting"](q, k, v, log_forget.flip(-1)) - ours).abs().max() > 1e-3  # the order matters


def test_the_qk_clip_loop_equals_the_package(lesson22):
    torch.manual_seed(6)
    layer = MultiHeadAttention(16, 4, bias=False).double()
    with torch.no_grad():
        layer.query_proj.weight[4:12] *= 8  # heads 1 and 2 pass the threshold
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    before = largest_logits(layer, x)
    threshold = float(before.sort().values[1]) + 0.1  # two heads over, two under
    copy = MultiHeadAttention(16, 4, bias=False).double()
    copy.load_state_dict(layer.state_dict())
    lesson22["qk_clip_loop"](layer, before, threshold)
    qk_clip_(copy, before, threshold)
    torch.testing.assert_close(layer.query_proj.weight, copy.query_proj.weight, rtol=0, atol=1e-14)
    torch.testing.assert_close(layer.key_proj.weight, copy.key_proj.weight, rtol=0, atol=1e-14)
    after = largest_logits(layer, x)
    over = before > threshold
    assert over.sum() == 2
    torch.testing.assert_close(after[over], torch.full((2,), threshold, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(after[~over], before[~over], rtol=0, atol=0)
