"""Lesson 22's designs against the real thing: transformers' Qwen3NextAttention (the output gate), GptOssAttention's
softmax (sink logits; a sink of 0 is the off-by-one softmax) and DiffLlamaAttention, and fla-core's naive
forgetting and stick-breaking attention, each built from a tiny configuration offline with its weights copied; a
wrong copy is caught."""

import math
import os
import warnings

import pytest
import torch

from attn.gates import DifferentialAttention, GatedAttention, forgetting_attention, stick_breaking_attention
from attn.softmax_variants import softmax_with_sink

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: each reference is built from a config

LENGTH = 9


def randomised(module, seed=0, std=0.3):
    """The module in float64, eval mode, every parameter drawn with ``std`` (norm weights too, so that they matter)."""
    torch.manual_seed(seed)
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=std)
    return module


def causal_output(module, rotary, x):
    """The reference's output for x (B, T, E) under an additive -inf mask above the diagonal (eager attention)."""
    length = x.shape[1]
    cos, sin = rotary(x, torch.arange(length)[None])
    mask = torch.full((length, length), float("-inf"), dtype=x.dtype).triu(1)[None, None]
    with torch.no_grad():
        return module(x, (cos, sin), mask)[0]


def qwen3_next(num_kv_heads=2, bias=False, partial_rotary_factor=0.25):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next import modeling_qwen3_next

    config = Qwen3NextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=16,
                             attention_bias=bias, attn_implementation="eager", num_hidden_layers=1, vocab_size=16,
                             partial_rotary_factor=partial_rotary_factor)
    module = randomised(modeling_qwen3_next.Qwen3NextAttention(config, layer_idx=0))
    return module, modeling_qwen3_next.Qwen3NextRotaryEmbedding(config)


@pytest.mark.parametrize(("num_kv_heads", "bias", "fraction"), [(2, False, 0.25), (4, True, 0.25), (2, False, 1.0)])
def test_gated_attention_equals_qwen3_next(num_kv_heads, bias, fraction):
    """Qwen3-Next's q_norm and k_norm compute in float32 whatever the input: agreement near float32's 1e-7, not 1e-16."""
    module, rotary = qwen3_next(num_kv_heads, bias, fraction)
    assert module.config.rope_parameters["partial_rotary_factor"] == fraction
    x = torch.randn(2, LENGTH, 32, dtype=torch.float64)
    expected = causal_output(module, rotary, x)
    layer = GatedAttention.from_transformers(module)
    with torch.no_grad():
        assert (layer(x) - expected).abs().max() < 5e-6
        layer.gate = False  # the gate rows read as queries: far off
        layer.query_proj = torch.nn.Linear(32, 64, bias=bias, dtype=torch.float64)
        layer.query_proj.weight.copy_(module.q_proj.weight.view(4, 32, 32)[:, :16].reshape(64, 32))
        assert (layer(x) - expected).abs().max() > 1e-2


def test_a_copy_without_the_rotary_reordering_is_caught():
    module, rotary = qwen3_next()
    x = torch.randn(2, LENGTH, 32, dtype=torch.float64)
    expected = causal_output(module, rotary, x)
    layer = GatedAttention.from_transformers(module)
    with torch.no_grad():
        layer.key_proj.weight.copy_(module.k_proj.weight)  # rotate_half's pairs read as neighbouring pairs
        layer.key_norm.weight.copy_(1 + module.k_norm.weight)
        assert (layer(x) - expected).abs().max() > 1e-2


def test_the_whole_qwen3_next_difference_is_its_float32_steps(monkeypatch):
    """With its norms, softmax and rotary angles computed in float64, the reference agrees to float64's rounding."""
    from transformers.models.qwen3_next import modeling_qwen3_next

    def norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)

    def attention(module, query, key, value, attention_mask, scaling, **kwargs):
        groups = module.num_key_value_groups
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        weights = torch.softmax(query @ key.transpose(2, 3) * scaling + attention_mask, dim=-1)
        return (weights @ value).transpose(1, 2), weights

    monkeypatch.setattr(modeling_qwen3_next.Qwen3NextRMSNorm, "forward", norm)
    monkeypatch.setattr(modeling_qwen3_next, "eager_attention_forward", attention)
    module, _ = qwen3_next()
    x = torch.randn(2, LENGTH, 32, dtype=torch.float64)
    rotated = 4  # 16 * 0.25 features turn
    angles = torch.arange(LENGTH, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
    angles = torch.cat([angles, angles], dim=-1)[None]  # (1, T, r): rotate_half's layout
    mask = torch.full((LENGTH, LENGTH), -math.inf, dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        expected = module(x, (angles.cos(), angles.sin()), mask)[0]
        assert (GatedAttention.from_transformers(module)(x) - expected).abs().max() < 1e-13


def diffllama(num_kv_heads=2, layer_idx=2, bias=False):
    from transformers import DiffLlamaConfig
    from transformers.models.diffllama import modeling_diffllama

    config = DiffLlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=8,
                             attention_bias=bias, attn_implementation="eager", num_hidden_layers=4, vocab_size=16)
    module = modeling_diffllama.DiffLlamaAttention(config, layer_idx=layer_idx)
    torch.manual_seed(1)
    module = module.double().eval()
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            parameter.normal_(std=0.1 if name.startswith("lambda") else 0.3)  # lambda stays below 1, as in training
    return module, modeling_diffllama.DiffLlamaRotaryEmbedding(config)


@pytest.mark.parametrize(("num_kv_heads", "layer_idx", "bias"), [(2, 2, False), (4, 0, True)])
def test_differential_attention_equals_diffllama(num_kv_heads, layer_idx, bias):
    """DiffLlama sums lambda's dot products in float32: agreement near 1e-7."""
    module, rotary = diffllama(num_kv_heads, layer_idx, bias)
    x = torch.randn(2, LENGTH, 32, dtype=torch.float64)
    expected = causal_output(module, rotary, x)
    layer = DifferentialAttention.from_transformers(module)
    assert layer.lambda_init == module.lambda_init
    with torch.no_grad():
        assert (layer(x) - expected).abs().max() < 1e-6
        layer.lambda_init = 0.1  # another lambda: far off
        assert (layer(x) - expected).abs().max() > 1e-2


def test_the_sink_softmax_equals_gpt_oss_and_a_zero_sink_is_off_by_one():
    """GptOssAttention's eager softmax (its sinks (H,) appended to every row, then dropped) against softmax_with_sink."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss import modeling_gpt_oss

    config = GptOssConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                          attn_implementation="eager", num_hidden_layers=1, vocab_size=16)
    module = randomised(modeling_gpt_oss.GptOssAttention(config, layer_idx=0), std=1.0)
    query = torch.randn(2, 4, LENGTH, 8, dtype=torch.float64) * 2
    key, value = (torch.randn(2, 2, LENGTH, 8, dtype=torch.float64) * 2 for _ in range(2))
    mask = torch.full((LENGTH, LENGTH), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    _, reference = modeling_gpt_oss.eager_attention_forward(module, query, key, value, mask, module.scaling)
    scores = query @ key.repeat_interleave(2, dim=1).transpose(-2, -1) * module.scaling + mask
    weights = softmax_with_sink(scores, module.sinks.view(4, 1, 1))
    assert (weights - reference).abs().max() < 1e-15
    with torch.no_grad():
        module.sinks.zero_()
    _, reference = modeling_gpt_oss.eager_attention_forward(module, query, key, value, mask, module.scaling)
    off_by_one = scores.exp() / (1 + scores.exp().sum(-1, keepdim=True))
    assert (softmax_with_sink(scores, 0.0) - reference).abs().max() < 1e-15
    assert (off_by_one - reference).abs().max() < 1e-15


def test_the_gated_layers_sink_option_equals_gpt_oss_attention_weights():
    """GatedAttention(normalize='sink') returns the weights GptOss's eager attention gives for the same q and k."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss import modeling_gpt_oss

    config = GptOssConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=4, head_dim=4,
                          attn_implementation="eager", num_hidden_layers=1, vocab_size=16)
    module = randomised(modeling_gpt_oss.GptOssAttention(config, layer_idx=0), std=1.0)
    layer = GatedAttention(16, 4, gate=False, qk_norm=False, normalize="sink", rotary_base=None).double()
    with torch.no_grad():
        layer.sink_logits.copy_(module.sinks)
    x = torch.randn(2, LENGTH, 16, dtype=torch.float64)
    q, k, v, _ = layer.projections(x)
    mask = torch.full((LENGTH, LENGTH), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    _, reference = modeling_gpt_oss.eager_attention_forward(module, q, k, v, mask, 0.5)
    _, weights = layer(x, need_weights=True)
    assert (weights - reference).abs().max() < 1e-15


def test_forgetting_attention_equals_fla_cores_naive_reference():
    """fla-core's naive_forgetting_attn computes in float32 (its layout (B, T, H, d)): agreement near 1e-7."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla warns, on import, that Triton has no GPU here; the naive form needs none
        from fla.ops.forgetting_attn.naive import naive_forgetting_attn

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, LENGTH, 8, generator=generator)
    key, value = (torch.randn(2, 2, LENGTH, 8, generator=generator) for _ in range(2))
    log_forget = torch.nn.functional.logsigmoid(torch.randn(2, 4, LENGTH, generator=generator) + 1.0)
    bthd = lambda t: t.transpose(1, 2)  # noqa: E731 - (B, H, T, ...) <-> (B, T, H, ...)
    expected = bthd(naive_forgetting_attn(bthd(query), bthd(key), bthd(value), bthd(log_forget)))
    assert (forgetting_attention(query, key, value, log_forget) - expected).abs().max() < 2e-6
    reversed_gates = log_forget.flip(-1)  # the same gates in the wrong order: far off
    assert (forgetting_attention(query, key, value, reversed_gates) - expected).abs().max() > 1e-2


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_equals_fla_cores_naive_reference(attend_current):
    """fla-core's naive_stickbreaking_attn stays in float64 for float64 input: agreement to float64's rounding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla warns, on import, that Triton has no GPU here; the naive form needs none
        from fla.ops.stickbreaking_attn.naive import naive_stickbreaking_attn

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, LENGTH, 8, generator=generator, dtype=torch.float64)
    key, value = (torch.randn(2, 2, LENGTH, 8, generator=generator, dtype=torch.float64) for _ in range(2))
    bthd = lambda t: t.transpose(1, 2)  # noqa: E731 - (B, H, T, ...) <-> (B, T, H, ...)
    expected, left = naive_stickbreaking_attn(bthd(query), bthd(key), bthd(value), attend_current=attend_current)
    output, ours_left = stick_breaking_attention(query, key, value, attend_current)
    assert (output - bthd(expected)).abs().max() < 1e-13 and (ours_left - left.transpose(1, 2)).abs().max() < 1e-13
    other, _ = stick_breaking_attention(query, key, value, not attend_current)  # the other choice: far off
    assert (other - bthd(expected)).abs().max() > 1e-2
