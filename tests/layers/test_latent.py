"""attn.latent (lesson 15): latent attention equals transformers' DeepseekV3Attention, plain and absorbed; decoding
with the latent cache equals the full pass; hostile input gets a sentence."""

import os

import pytest
import torch

from attn.latent import LatentAttention, LatentCache, RMSNorm

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: the reference is built from a config

LENGTH = 9


def reference(rope_interleave=True, q_lora_rank=16, attention_bias=False, seed=0):
    """A tiny random DeepseekV3Attention in float64 (weights drawn with std 0.3, so that differences show),
    with its rotary embedding; eager attention, so that the mask is the one built here."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3 import modeling_deepseek_v3

    torch.manual_seed(seed)
    config = DeepseekV3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora_rank, kv_lora_rank=8,
        qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, rope_interleave=rope_interleave,
        attention_bias=attention_bias, attn_implementation="eager",
    )
    module = modeling_deepseek_v3.DeepseekV3Attention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=0.3)
    return module, modeling_deepseek_v3.DeepseekV3RotaryEmbedding(config)


def reference_output(module, rotary, x):
    """The reference's causal output for x (B, T, E): an additive -inf mask above the diagonal."""
    length = x.shape[1]
    cos, sin = rotary(x, torch.arange(length)[None])
    mask = torch.full((length, length), float("-inf"), dtype=x.dtype).triu(1)[None, None]
    with torch.no_grad():
        return module(x, (cos, sin), mask)[0]


@pytest.mark.parametrize("rope_interleave", [True, False])
@pytest.mark.parametrize("q_lora_rank", [16, None])
@pytest.mark.parametrize("attention_bias", [False, True])
def test_equals_deepseek_v3_plain_and_absorbed(rope_interleave, q_lora_rank, attention_bias):
    """The reference runs RMSNorm, softmax and the rotary angles in float32 whatever its input: agreement near 1e-7."""
    module, rotary = reference(rope_interleave, q_lora_rank, attention_bias)
    x = torch.randn(2, LENGTH, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = reference_output(module, rotary, x)
    layer = LatentAttention.from_transformers(module)
    with torch.no_grad():
        plain, absorbed = layer(x), layer(x, absorbed=True)
    assert (plain - expected).abs().max().item() < 1e-6
    assert (absorbed - expected).abs().max().item() < 1e-6
    torch.testing.assert_close(absorbed, plain, rtol=0, atol=1e-12)


def test_a_wrong_copy_is_caught():
    """Swapping the rotary layout (copying a non-interleaved module as if it were interleaved) is far off."""
    module, rotary = reference(rope_interleave=False)
    x = torch.randn(1, LENGTH, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    expected = reference_output(module, rotary, x)
    module.config.rope_interleave = True  # lie about the layout: no reordering happens
    layer = LatentAttention.from_transformers(module)
    with torch.no_grad():
        assert (layer(x) - expected).abs().max().item() > 1e-3


def test_decoding_with_the_latent_cache_equals_the_full_pass():
    layer = LatentAttention(16, 2, latent_dim=6, nope_dim=4, rope_dim=4, value_dim=3, query_latent_dim=8).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    cache = LatentCache()
    with torch.no_grad():
        full = layer(x)
        first = layer(x[:, :3], absorbed=True, cache=cache)  # a prompt of three tokens, then one at a time
        steps = [layer(x[:, t: t + 1], absorbed=True, cache=cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full, rtol=0, atol=1e-12)
    assert len(cache) == 7
    assert cache.nbytes == 2 * 7 * (6 + 4) * 8  # batch x tokens x (r + d_rope) x 8 bytes
    assert layer.cache_numbers_per_token() == 10


def test_rmsnorm_by_hand():
    norm = RMSNorm(2, eps=0.0)
    x = torch.tensor([[3.0, 4.0]])
    torch.testing.assert_close(norm(x), x / (12.5**0.5))


def yarn_reference(factor, rope_interleave, mscale=0.707, mscale_all_dim=1.0, seed=0):
    """A tiny random DeepseekV3Attention with DeepSeek-V3's YaRN (trained on 16 positions, read further), float64."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3 import modeling_deepseek_v3

    torch.manual_seed(seed)
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": factor, "original_max_position_embeddings": 16,
            "mscale": mscale, "mscale_all_dim": mscale_all_dim}
    config = DeepseekV3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8,
        qk_nope_head_dim=6, qk_rope_head_dim=8, v_head_dim=5, rope_interleave=rope_interleave,
        attn_implementation="eager", max_position_embeddings=int(16 * factor), rope_parameters=rope,
    )
    module = modeling_deepseek_v3.DeepseekV3Attention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=0.3)
    return module, modeling_deepseek_v3.DeepseekV3RotaryEmbedding(config)


@pytest.mark.parametrize("factor", [4.0, 40.0])
@pytest.mark.parametrize("rope_interleave", [True, False])
@pytest.mark.parametrize("mscales", [(0.707, 1.0), (1.0, 1.0), (0.0, 0.0)])
def test_equals_deepseek_v3_with_yarn(factor, rope_interleave, mscales):
    """Read 40 positions past a trained length of 16: YaRN's frequencies, the rotary keys and queries multiplied by its
    attention factor, and DeepSeek's softmax temperature mscale(s, mscale_all_dim)^2, all as DeepseekV3Attention."""
    module, rotary = yarn_reference(factor, rope_interleave, *mscales)
    x = torch.randn(2, 40, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    expected = reference_output(module, rotary, x)
    layer = LatentAttention.from_transformers(module)
    built = LatentAttention(32, 4, 8, 6, 8, 5, 16, rope_scaling=layer.rope_scaling)  # the temperature from the dict
    assert built.scaling == pytest.approx(module.scaling, rel=1e-12)
    with torch.no_grad():
        plain, absorbed = layer(x), layer(x, absorbed=True)
        assert (plain - expected).abs().max().item() < 1e-6
        assert (absorbed - expected).abs().max().item() < 1e-6
        layer.rope_scaling = None  # the default rotary instead: far off, so the scaling is what made them equal
        assert (layer(x) - expected).abs().max().item() > 1e-3


def test_yarn_without_the_temperature_differs():
    """Forgetting DeepSeek's softmax temperature (the default score scale with mscale_all_dim) is caught."""
    module, rotary = yarn_reference(40.0, True)
    x = torch.randn(1, 40, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    expected = reference_output(module, rotary, x)
    layer = LatentAttention.from_transformers(module)
    layer.scaling = 1 / (6 + 8) ** 0.5
    with torch.no_grad():
        assert (layer(x) - expected).abs().max().item() > 1e-3


def test_other_scalings_and_wrong_modules_are_refused():
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3 import modeling_deepseek_v3

    config = DeepseekV3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8,
        qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5,
        rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    )
    with pytest.raises(ValueError, match="'linear' rotary scaling; the course's latent attention takes the default"):
        LatentAttention.from_transformers(modeling_deepseek_v3.DeepseekV3Attention(config, layer_idx=0))
    with pytest.raises(TypeError, match="DeepseekV3Attention"):
        LatentAttention.from_transformers(torch.nn.Linear(2, 2))


@pytest.mark.parametrize(
    "arguments, error, words",
    [
        (dict(embed_dim=0), ValueError, "embed_dim must be positive"),
        (dict(rope_dim=3), ValueError, "rope_dim must be even"),
        (dict(latent_dim=2.5), TypeError, "latent_dim must be a positive int"),
        (dict(rope_base="10000"), TypeError, "rope_base must be a positive number"),
        (dict(eps=0.0), ValueError, "eps must be a positive finite number"),
        (dict(scaling=float("nan")), ValueError, "scaling must be a positive finite number"),
        (dict(bias=1), TypeError, "bias must be True or False"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 0.0, "original_max_position_embeddings": 16}), ValueError,
         "scaling['factor'] must be a finite number > 0, got 0.0"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), ValueError,
         "needs the key(s) ['original_max_position_embeddings']"),
        (dict(rope_scaling="yarn"), TypeError, "scaling must be None or a dict"),
    ],
)
def test_constructor_arguments(arguments, error, words):
    settings = dict(embed_dim=8, num_heads=2, latent_dim=4, nope_dim=2, rope_dim=2, value_dim=2) | arguments
    with pytest.raises(error) as raised:
        LatentAttention(**settings)
    assert words in str(raised.value)


def test_hostile_forward_input():
    layer = LatentAttention(8, 2, latent_dim=4, nope_dim=2, rope_dim=2, value_dim=2)
    x = torch.randn(1, 3, 8)
    cases = [
        (dict(x=x.numpy()), TypeError, "torch.as_tensor"),
        (dict(x=x[..., :5]), ValueError, "(B, T, 8)"),
        (dict(x=x.double()), TypeError, "the layer is torch.float32"),
        (dict(x=x * float("inf")), ValueError, "NaN or inf"),
        (dict(x=x, absorbed="yes"), TypeError, "absorbed must be True or False"),
        (dict(x=x, cache={}), TypeError, "LatentCache"),
    ]
    for arguments, error, words in cases:
        with pytest.raises(error) as raised:
            layer(**arguments)
        assert words in str(raised.value), str(raised.value)
    cache = LatentCache()
    layer(x, cache=cache)
    with pytest.raises(ValueError, match="start a new LatentCache"):
        layer(torch.randn(2, 1, 8), cache=cache)


def test_the_whole_difference_is_the_references_float32_steps(monkeypatch):
    """With its RMSNorm, softmax and rotary angles computed in float64, the reference agrees to float64's rounding:
    those three steps, which the reference runs in float32 whatever its input, are the whole difference."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3

    def rms_norm_float64(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)

    def eager_float64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        scores = query @ key.transpose(2, 3) * scaling + attention_mask
        weights = torch.softmax(scores, dim=-1)
        return (weights @ value).transpose(1, 2).contiguous(), weights

    monkeypatch.setattr(modeling_deepseek_v3.DeepseekV3RMSNorm, "forward", rms_norm_float64)
    monkeypatch.setattr(modeling_deepseek_v3, "eager_attention_forward", eager_float64)
    module, _ = reference()
    x = torch.randn(2, LENGTH, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rope = module.config.qk_rope_head_dim
    frequencies = 10000.0 ** (-torch.arange(0, rope, 2, dtype=torch.float64) / rope)
    angles = torch.arange(LENGTH, dtype=torch.float64)[:, None] * frequencies  # (T, rope / 2)
    angles = torch.cat([angles, angles], dim=-1)[None]  # the reference's (1, T, rope) layout
    mask = torch.full((LENGTH, LENGTH), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    layer = LatentAttention.from_transformers(module)
    with torch.no_grad():
        expected = module(x, (angles.cos(), angles.sin()), mask)[0]
        torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-13)
        torch.testing.assert_close(layer(x, absorbed=True), expected, rtol=0, atol=1e-13)
