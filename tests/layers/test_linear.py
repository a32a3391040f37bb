"""attn.linear (lesson 15): the recurrences as loops, parallel and chunked forms, equal in float64; the gated
delta rule against transformers' Qwen3NextGatedDeltaNet fallback; hostile input gets a sentence."""

import inspect
import os

import pytest
import torch

from attn.linear import (
    decay_ratios,
    delta_rule,
    gated_delta_rule,
    gated_delta_rule_chunked,
    gated_delta_rule_loop,
    gated_delta_rule_parallel,
    linear_attention,
    linear_attention_chunked,
    linear_attention_loop,
    linear_attention_parallel,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: the reference is built from a config

SHAPES = [(1, 1, 1, 2, 3), (2, 3, 7, 4, 5), (1, 2, 16, 8, 8), (2, 1, 13, 3, 6)]  # (B, H, T, d_k, d_v)
CHUNKS = [1, 3, 4, 5, 64]


def draw(batch, heads, length, d_k, d_v, seed=0, zero_alpha=False):
    """Seeded float64 inputs with unit-length keys, beta in (0, 1), alpha in (0, 1) (one alpha 0 if asked)."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, heads, length, d_k, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(batch, heads, length, d_v, generator=generator, dtype=torch.float64)
    k = torch.nn.functional.normalize(k, dim=-1)
    alpha = torch.rand(batch, heads, length, generator=generator, dtype=torch.float64) * 0.5 + 0.5
    beta = torch.rand(batch, heads, length, generator=generator, dtype=torch.float64)
    if zero_alpha:
        alpha[0, 0, length // 2] = 0.0
    return q, k, v, alpha, beta


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_linear_attention_three_ways(shape, chunk):
    q, k, v, _, _ = draw(*shape)
    loop = linear_attention_loop(q, k, v)
    torch.testing.assert_close(linear_attention_parallel(q, k, v), loop, rtol=0, atol=1e-12)
    torch.testing.assert_close(linear_attention_chunked(q, k, v, chunk), loop, rtol=0, atol=1e-12)
    torch.testing.assert_close(linear_attention(q, k, v, chunk_size=chunk), loop, rtol=0, atol=1e-12)


def test_linear_attention_is_a_sum_of_outer_products():
    """The state after T tokens is sum_t k_t v_t^T, and the output of the last token reads it with q_T."""
    q, k, v, _, _ = draw(1, 1, 6, 4, 3)
    table = sum(torch.outer(k[0, 0, t], v[0, 0, t]) for t in range(6))  # (d_k, d_v)
    torch.testing.assert_close(linear_attention(q, k, v)[0, 0, -1], table.T @ q[0, 0, -1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("zero_alpha", [False, True])
def test_gated_delta_rule_three_ways(shape, chunk, zero_alpha):
    q, k, v, alpha, beta = draw(*shape, seed=1, zero_alpha=zero_alpha)
    loop, last = gated_delta_rule_loop(q, k, v, alpha, beta)
    parallel, parallel_last = gated_delta_rule_parallel(q, k, v, alpha, beta)
    chunked, chunked_last = gated_delta_rule_chunked(q, k, v, alpha, beta, chunk)
    for got in (parallel, chunked, gated_delta_rule(q, k, v, alpha, beta, chunk_size=chunk)):
        torch.testing.assert_close(got, loop, rtol=0, atol=1e-12)
    torch.testing.assert_close(parallel_last, last, rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked_last, last, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk", [2, 5, 64])
def test_delta_rule_is_the_gate_open(chunk):
    q, k, v, _, beta = draw(2, 2, 11, 4, 3, seed=2)
    loop, _ = gated_delta_rule_loop(q, k, v, torch.ones_like(beta), beta)
    torch.testing.assert_close(delta_rule(q, k, v, beta, chunk_size=chunk), loop, rtol=0, atol=1e-12)


def test_delta_rule_by_hand():
    """Two writes to one unit key with beta = 1: the second value replaces the first (S^T k = v_2 exactly)."""
    k = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 1, 2, 2)
    v = torch.tensor([[3.0], [5.0]], dtype=torch.float64)[None, None]  # (1, 1, 2, 1)
    beta = torch.ones(1, 1, 2, dtype=torch.float64)
    assert delta_rule(k, k, v, beta)[0, 0, :, 0].tolist() == [3.0, 5.0]
    assert linear_attention(k, k, v)[0, 0, :, 0].tolist() == [3.0, 8.0]  # linear attention adds: a blend


def test_decay_ratios_match_products():
    alpha = torch.tensor([[[0.5, 0.0, 0.25, 0.8]]], dtype=torch.float64)
    ratios = decay_ratios(alpha)[0, 0]  # (4, 5)
    for t in range(4):
        for start in range(-1, 4):
            expected = torch.prod(alpha[0, 0, start + 1: t + 1]).item() if start <= t else 0.0
            assert ratios[t, start + 1].item() == pytest.approx(expected, abs=1e-15), (t, start)


def test_gradients_flow_through_the_chunked_form():
    q, k, v, alpha, beta = draw(1, 1, 9, 3, 2, seed=3)
    for tensor in (q, k, v, alpha, beta):
        tensor.requires_grad_(True)
    gated_delta_rule(q, k, v, alpha, beta, chunk_size=4).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v, alpha, beta))


# Against transformers' Qwen3-Next ------------------------------------------------------------------------


def reference_inputs_and_output():
    """A tiny random Qwen3NextGatedDeltaNet (float64, seeded) run on random hidden states, with the inputs and output
    of the recurrence inside it captured: q, k (B, T, H_k, d_k), v (B, T, H_v, d_v), g, beta (B, T, H_v)."""
    import transformers
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next import modeling_qwen3_next

    transformers.logging.set_verbosity_error()  # the fallback's notice that a faster kernel is not installed
    torch.manual_seed(0)
    config = Qwen3NextConfig(
        hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=4, num_hidden_layers=4,
    )
    layer = modeling_qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0).double()
    captured = {}
    original = modeling_qwen3_next.torch_chunk_gated_delta_rule

    def spy(query, key, value, g, beta, **options):
        assert options["use_qk_l2norm_in_kernel"]
        output = inspect.unwrap(original)(query, key, value, g=g, beta=beta, **options)  # PyTorch's, not fla-core's kernel
        captured.update(q=query, k=key, v=value, g=g, beta=beta, output=output[0])
        return output

    modeling_qwen3_next.torch_chunk_gated_delta_rule = spy
    try:
        with torch.no_grad():
            layer(torch.randn(2, 11, 32, dtype=torch.float64))
    finally:
        modeling_qwen3_next.torch_chunk_gated_delta_rule = original
    return captured


def reference_l2norm(x):
    """The reference's normalisation: x / sqrt(|x|^2 + 1e-6) (F.normalize divides by max(|x|, eps) instead)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def course_form(captured, normalise=reference_l2norm):
    """The captured tensors as the course's (B, H, T, d) arguments, with the reference's preprocessing done."""
    q, k, v = (captured[name].transpose(1, 2) for name in "qkv")
    repeat = v.shape[1] // q.shape[1]  # each key head serves `repeat` consecutive value heads
    q, k = q.repeat_interleave(repeat, dim=1), k.repeat_interleave(repeat, dim=1)
    q = normalise(q) / q.shape[-1] ** 0.5
    return q, normalise(k), v, captured["g"].transpose(1, 2).exp(), captured["beta"].transpose(1, 2)


def test_gated_delta_rule_equals_qwen3_next():
    """The reference computes in float32 whatever its input, so float64 agreement stops near float32's precision."""
    captured = reference_inputs_and_output()
    expected = captured["output"].transpose(1, 2)
    q, k, v, alpha, beta = course_form(captured)
    loop, _ = gated_delta_rule_loop(q, k, v, alpha, beta)
    assert (loop - expected).abs().max().item() < 1e-7
    assert (gated_delta_rule(q, k, v, alpha, beta) - expected).abs().max().item() < 1e-7
    # F.normalize's formula differs: far more than float32 rounding, so the test can tell the two apart
    q2, k2, *_ = course_form(captured, lambda x: torch.nn.functional.normalize(x, dim=-1))
    assert (gated_delta_rule_loop(q2, k2, v, alpha, beta)[0] - expected).abs().max().item() > 1e-6


# Hostile input -------------------------------------------------------------------------------------------

GOOD = draw(1, 2, 5, 3, 4)


def hostile_cases():
    q, k, v, alpha, beta = GOOD
    nan = q.clone()
    nan[0, 0, 0, 0] = float("nan")
    return [
        ("q", dict(q=q.numpy()), TypeError, "torch.as_tensor"),
        ("ints", dict(q=q.long()), TypeError, "floating-point"),
        ("3-D", dict(q=q[0]), ValueError, "(B, H, T, d)"),
        ("empty", dict(q=q[:, :, :0], k=k[:, :, :0], v=v[:, :, :0]), ValueError, "no size 0"),
        ("d_k", dict(k=k[..., :2]), ValueError, "q and k must both be"),
        ("T", dict(v=v[:, :, :3]), ValueError, "same B, H and T"),
        ("dtype", dict(v=v.float()), TypeError, "v.to(q)"),
        ("nan", dict(q=nan), ValueError, "NaN"),
        ("beta shape", dict(beta=beta[..., :2]), ValueError, "beta must have shape (B, H, T)"),
        ("beta range", dict(beta=beta + 3), ValueError, "beta must lie in [0, 2]"),
        ("alpha range", dict(alpha=-alpha), ValueError, "alpha must lie in [0, 1]"),
        ("alpha nan", dict(alpha=alpha * float("nan")), ValueError, "alpha contains NaN"),
        ("chunk", dict(chunk_size=0), ValueError, "chunk_size must be positive"),
        ("chunk float", dict(chunk_size=2.0), TypeError, "chunk_size must be a positive int"),
    ]


@pytest.mark.parametrize("label, changes, error, words", hostile_cases(), ids=[case[0] for case in hostile_cases()])
def test_hostile_input_gets_a_sentence(label, changes, error, words):
    q, k, v, alpha, beta = GOOD
    arguments = dict(q=q, k=k, v=v, alpha=alpha, beta=beta, chunk_size=2) | changes
    calls = [lambda a: gated_delta_rule(**a)]
    if "alpha" not in label:
        calls.append(lambda a: delta_rule(**{n: a[n] for n in ("q", "k", "v", "beta", "chunk_size")}))
    if "alpha" not in label and "beta" not in label:
        calls.append(lambda a: linear_attention(**{n: a[n] for n in ("q", "k", "v", "chunk_size")}))
    for call in calls:
        with pytest.raises(error, match=None) as raised:
            call(arguments)
        assert words in str(raised.value), str(raised.value)
