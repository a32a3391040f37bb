"""Lesson 15's teaching versions (written out in the lesson) agree with attn.latent and attn.linear."""

import pytest
import torch

from attn.latent import LatentAttention
from attn.linear import gated_delta_rule, linear_attention
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson15():
    return teaching_namespace(ROOT / "lessons" / "15_latent_and_linear.ipynb")


def draw(length, d_k=3, d_v=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 2, length, d_k, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 2, length, d_v, generator=generator, dtype=torch.float64)
    alpha = torch.rand(2, 2, length, generator=generator, dtype=torch.float64)
    beta = torch.rand(2, 2, length, generator=generator, dtype=torch.float64)
    return q, torch.nn.functional.normalize(k, dim=-1), v, alpha, beta


@pytest.mark.parametrize("length", [1, 6, 11])
def test_linear_attention_teaching_forms(lesson15, length):
    q, k, v, _, _ = draw(length)
    expected = linear_attention(q, k, v)
    for got in (lesson15["linear_attention_loop"](q, k, v), lesson15["linear_attention_parallel"](q, k, v),
                lesson15["linear_attention_chunks"](q, k, v, 4)):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("length", [1, 7])
def test_gated_delta_teaching_loop(lesson15, length):
    q, k, v, alpha, beta = draw(length, seed=1)
    torch.testing.assert_close(
        lesson15["gated_delta_loop"](q, k, v, alpha, beta), gated_delta_rule(q, k, v, alpha, beta), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("query_latent_dim", [None, 8])
def test_latent_teaching_forms(lesson15, query_latent_dim):
    torch.manual_seed(5)
    layer = LatentAttention(16, 2, latent_dim=6, nope_dim=4, rope_dim=2, value_dim=3,
                            query_latent_dim=query_latent_dim).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    positions = torch.arange(5)
    with torch.no_grad():
        pieces = (layer, *layer.queries(x, positions), *layer.compress(x, positions))
        expected = layer(x)
        for name in ("plain_latent_attention", "absorbed_latent_attention"):
            heads = lesson15[name](*pieces)  # (B, H, T, d_v)
            torch.testing.assert_close(layer.out_proj(heads.transpose(1, 2).flatten(2)), expected, rtol=0, atol=1e-12)
