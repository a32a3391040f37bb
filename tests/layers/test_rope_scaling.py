"""Lesson 17's pieces: rotary scalings equal to transformers' ROPE_INIT_FUNCTIONS, YaRN's attention factor, partial
rotary equal to Phi's attention, the layer's and the Austen model's options, log-n scaling, and hostile input."""

import math
import os

import numpy as np
import pytest
import torch

from attn import MultiHeadAttention, apply_rotary
from attn.positions import ntk_aware_base, rotary_frequencies, yarn_attention_factor, yarn_mscale, yarn_ramp
from attn.softmax import log_n_scale
from attn.window import rotary_pairing

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: every reference is built from a config

TRAINED = 256  # the trained length L of every scaling below (lesson 13's context)
FACTORS = (1.5, 2.0, 4.0, 8.0, 40.0)


def scalings(factor):
    """One dict per rope_type (YaRN twice: transformers' defaults, and DeepSeek's mscales with other betas)."""
    return {
        "linear": {"rope_type": "linear", "factor": factor},
        "yarn": {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": TRAINED},
        "yarn-deepseek": {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": TRAINED,
                          "beta_fast": 16, "beta_slow": 2, "mscale": 0.707, "mscale_all_dim": 1.0},
        "yarn-untruncated": {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": TRAINED,
                             "truncate": False},
        "llama3": {"rope_type": "llama3", "factor": factor, "original_max_position_embeddings": TRAINED,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    }


def transformers_frequencies(head_dim, base, parameters, max_positions, seq_len=None):
    """transformers' own inverse frequencies (float64 NumPy) and attention factor, from a tiny Llama config."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=max_positions, rope_parameters={"rope_theta": base, **parameters})
    extra = {} if seq_len is None else {"seq_len": seq_len}
    frequencies, factor = ROPE_INIT_FUNCTIONS[parameters["rope_type"]](config, None, **extra)
    return frequencies.double().numpy(), factor


def largest_relative_gap(ours, theirs):
    assert ours.shape == theirs.shape and ours.dtype == np.float64
    return float(np.abs(ours / theirs - 1).max())


@pytest.mark.parametrize("name", ["linear", "yarn", "yarn-deepseek", "yarn-untruncated", "llama3"])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_every_scaling_equals_transformers(name, base):
    """Over dims 8 to 128 and factors 1.5 to 40: transformers computes in float32, so agreement to a few of its ulps."""
    worst = 0.0
    for dim in (8, 16, 32, 64, 128):
        for factor in FACTORS:
            parameters = scalings(factor)[name]
            theirs, attention_factor = transformers_frequencies(dim, base, parameters, int(TRAINED * factor))
            worst = max(worst, largest_relative_gap(rotary_frequencies(dim, base, parameters), theirs))
            assert yarn_attention_factor(parameters) == pytest.approx(attention_factor, rel=1e-12)
    assert worst < 2e-6


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_dynamic_ntk_equals_transformers_at_every_length_read(base):
    """transformers reads the trained length from config.max_position_embeddings; the course from the dict."""
    worst = 0.0
    for dim in (8, 32, 128):
        for factor in FACTORS:
            for length in (1, 100, TRAINED, TRAINED + 1, 1024, 5000):
                theirs, _ = transformers_frequencies(dim, base, {"rope_type": "dynamic", "factor": factor}, TRAINED,
                                                     seq_len=length)
                parameters = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": TRAINED}
                worst = max(worst, largest_relative_gap(rotary_frequencies(dim, base, parameters, length), theirs))
    assert worst < 2e-6


def test_plain_frequencies_and_what_each_scaling_keeps():
    plain = rotary_frequencies(64)
    np.testing.assert_allclose(plain, 10000.0 ** (-np.arange(0, 64, 2) / 64), rtol=1e-15)
    for name, parameters in scalings(4.0).items():
        scaled = rotary_frequencies(64, scaling=parameters)
        assert scaled[-1] == pytest.approx(plain[-1] / 4, rel=1e-12), name  # the slowest pair: interpolated by all
        if name != "linear":
            assert scaled[0] == pytest.approx(plain[0], rel=1e-12), name  # the fastest: kept by all but PI
    assert rotary_frequencies(64, scaling={"rope_type": "default"}).tolist() == plain.tolist()


def test_ntk_aware_base_is_dynamic_ntk_at_one_length():
    """NTK-aware: the slowest pair exactly s times slower, the fastest kept; dynamic NTK is it with s * n / L - (s - 1)."""
    raised = ntk_aware_base(64, 10000.0, 4.0)
    assert raised == pytest.approx(10000.0 * 4.0 ** (64 / 62), rel=1e-12)
    ntk = rotary_frequencies(64, raised)
    plain = rotary_frequencies(64)
    assert ntk[0] == plain[0] and ntk[-1] == pytest.approx(plain[-1] / 4.0 ** (64 / 62 * 62 / 64), rel=1e-12)
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": TRAINED}
    np.testing.assert_allclose(rotary_frequencies(64, scaling=dynamic, length=TRAINED), plain, rtol=1e-15)
    np.testing.assert_allclose(rotary_frequencies(64, scaling=dynamic, length=TRAINED * 2),
                               rotary_frequencies(64, ntk_aware_base(64, 10000.0, 4.0 * 2 - 3)), rtol=1e-12)


def test_yarn_ramp_and_attention_factor():
    parameters = scalings(4.0)["yarn"]
    ramp = yarn_ramp(64, 10000.0, parameters)
    turns = TRAINED * rotary_frequencies(64) / (2 * math.pi)  # (32,): how often each pair turns within L
    assert ramp.shape == (32,) and (np.diff(ramp) >= 0).all()
    assert (ramp[turns > 32] == 0).all() and (ramp[turns < 1] == 1).all()
    assert yarn_mscale(4.0) == pytest.approx(0.1 * math.log(4.0) + 1) and yarn_mscale(0.5) == 1.0
    assert yarn_attention_factor(parameters) == pytest.approx(0.1 * math.log(4.0) + 1)
    assert yarn_attention_factor({**parameters, "attention_factor": 1.0}) == 1.0  # YaRN without its temperature
    assert yarn_attention_factor(None) == 1.0 and yarn_attention_factor(scalings(4.0)["linear"]) == 1.0
    deepseek = scalings(40.0)["yarn-deepseek"]
    assert yarn_attention_factor(deepseek) == pytest.approx(yarn_mscale(40.0, 0.707) / yarn_mscale(40.0, 1.0))


def halves_to_pairs(head_dim, rotated):
    """The feature order (d,) taking a head whose first ``rotated`` features turn in the rotate_half layout (the rest
    passing through) to the course's layout: rotary_pairing on the first ``rotated``, the rest in place."""
    return torch.cat([rotary_pairing(rotated), torch.arange(rotated, head_dim)])


@pytest.mark.parametrize("scaling", [None, {"rope_type": "linear", "factor": 4.0},
                                     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
                                     {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16}])
def test_partial_rotary_layer_equals_phi_attention(scaling):
    """MultiHeadAttention(rotary_fraction=0.5, rotary_scaling=...) is transformers' PhiAttention (partial rotary: the
    first half of each head turns, in the rotate_half layout), weights copied and reordered, 40 positions, float64."""
    from transformers import PhiConfig
    from transformers.models.phi import modeling_phi

    torch.manual_seed(0)
    rope = {"rope_type": "default", "rope_theta": 10000.0} if scaling is None else {"rope_theta": 10000.0, **scaling}
    config = PhiConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, partial_rotary_factor=0.5,
                       max_position_embeddings=16, rope_parameters=rope, attn_implementation="eager")
    module = modeling_phi.PhiAttention(config, layer_idx=0).double().eval()
    rotary = modeling_phi.PhiRotaryEmbedding(config)
    layer = MultiHeadAttention(32, 4, rotary_base=10000.0, rotary_fraction=0.5, rotary_scaling=scaling).double().eval()
    rows = (torch.arange(4)[:, None] * 8 + halves_to_pairs(8, 4)).flatten()  # (32,): every head reordered
    with torch.no_grad():
        for ours, theirs, reorder in ((layer.query_proj, module.q_proj, True), (layer.key_proj, module.k_proj, True),
                                      (layer.value_proj, module.v_proj, False), (layer.out_proj, module.dense, False)):
            theirs.weight.normal_(std=0.3)
            order = rows if reorder else torch.arange(32)
            ours.weight.copy_(theirs.weight[order])
            ours.bias.copy_(theirs.bias[order])
    x = torch.randn(2, 40, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(40)[None]
    mask = torch.full((40, 40), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        expected = module(x, rotary(x, positions), mask)[0]
        ours = layer(x, x, x, is_causal=True)
        gap = (ours - expected).abs().max().item() / expected.abs().max().item()
        assert gap < 1e-6  # relative to outputs of about 10: the reference computes its angles in float32
        layer.rotary_fraction = 1.0  # every feature turned instead: far off
        assert (layer(x, x, x, is_causal=True) - expected).abs().max().item() > 1e-3


def test_partial_rotary_passes_the_rest_through_and_keeps_the_default_bit_for_bit():
    x = torch.randn(2, 3, 7, 8, generator=torch.Generator().manual_seed(2))
    half = apply_rotary(x, rotary_fraction=0.5)
    assert torch.equal(half[..., 4:], x[..., 4:]) and torch.equal(half[..., :4], apply_rotary(x[..., :4]))
    assert torch.equal(apply_rotary(x, rotary_fraction=1.0), apply_rotary(x))
    assert torch.equal(apply_rotary(x, scaling=None), apply_rotary(x))
    assert torch.equal(apply_rotary(x, rotary_fraction=0.25)[..., 2:], x[..., 2:])


def test_scaled_rotary_turns_by_the_scaled_frequencies():
    x = torch.randn(1, 50, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for parameters in scalings(4.0).values():
        parameters = {**parameters, "original_max_position_embeddings": 16} if "original_max_position_embeddings" in \
            parameters else parameters
        frequencies = torch.from_numpy(rotary_frequencies(16, scaling=parameters))
        angles = torch.arange(50, dtype=torch.float64)[:, None] * frequencies  # (T, 8)
        pairs = x.unflatten(-1, (8, 2))
        expected = torch.stack((pairs[..., 0] * angles.cos() - pairs[..., 1] * angles.sin(),
                                pairs[..., 0] * angles.sin() + pairs[..., 1] * angles.cos()), dim=-1).flatten(-2)
        expected = expected * yarn_attention_factor(parameters)
        torch.testing.assert_close(apply_rotary(x, scaling=parameters), expected, rtol=0, atol=1e-12)
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 16}
    frequencies = torch.from_numpy(rotary_frequencies(16, scaling=dynamic, length=50))
    turned = apply_rotary(x, scaling=dynamic)  # the length read: the last position + 1 = 50
    assert torch.allclose(turned[0, 1, :2], torch.stack([x[0, 1, 0] * frequencies[0].cos() - x[0, 1, 1] *
                                                         frequencies[0].sin(), x[0, 1, 0] * frequencies[0].sin() +
                                                         x[0, 1, 1] * frequencies[0].cos()]), atol=1e-12)
    assert torch.equal(apply_rotary(x[:, :16], scaling=dynamic), apply_rotary(x[:, :16]))  # within L: unchanged


def test_layer_options_nope_and_set_rotary_scaling():
    torch.manual_seed(4)
    layer = MultiHeadAttention(16, 2, rotary_base=10000.0).double()
    x = torch.randn(1, 30, 16, dtype=torch.float64)
    with torch.no_grad():
        before = layer(x, x, x, is_causal=True)
        scaled = layer.set_rotary_scaling({"rope_type": "linear", "factor": 2.0})(x, x, x, is_causal=True)
        assert (scaled - before).abs().max().item() > 1e-6
        assert torch.equal(layer.set_rotary_scaling(None)(x, x, x, is_causal=True), before)
    with pytest.raises(ValueError, match="need a rotary_base .* without one the layer has no positions"):
        MultiHeadAttention(16, 2, rotary_fraction=0.5)
    with pytest.raises(ValueError, match="no rotary positions"):
        MultiHeadAttention(16, 2).set_rotary_scaling(None)
    with pytest.raises(ValueError, match="sink_positions='cache' runs its own written-out path"):
        MultiHeadAttention(16, 2, rotary_base=10000.0, window=4, sink_positions="cache", rotary_fraction=0.5)


def test_the_austen_model_reads_further_with_a_scaling():
    from attn.lm import AustenLM

    torch.manual_seed(5)
    model = AustenLM(vocab_size=32, context_length=16, embed_dim=16, num_heads=2, num_layers=2).eval()
    tokens = torch.randint(0, 32, (1, 48))
    with torch.no_grad():
        before = model(tokens)
        yarn = {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": model.context_length}
        scaled = model.set_rotary_scaling(yarn)(tokens)
        assert (scaled - before).abs().max().item() > 1e-6
        assert all(block.attention.rotary_scaling["factor"] == 3.0 for block in model.blocks)
        assert torch.equal(model.set_rotary_scaling(None)(tokens), before)
    with pytest.raises(ValueError, match="unknown rope_type 'ntk'"):
        model.set_rotary_scaling({"rope_type": "ntk", "factor": 2.0})


def test_a_llama_model_reads_further_as_transformers_does():
    """LlamaLM.set_rotary_scaling equals transformers' Llama with the same rope_parameters (YaRN: frequencies and
    attention factor), 48 positions past a trained length of 16; float64, tiny random weights copied."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from attn.models.llama import LlamaLM

    def llama(rope):
        torch.manual_seed(6)
        config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
                             rope_parameters={"rope_theta": 10000.0, **rope}, attn_implementation="eager")
        return LlamaForCausalLM(config).double().eval()

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    trained = llama({"rope_type": "default"})  # from_transformers copies a model without scaling
    with torch.no_grad():  # queries and keys large enough that positions change the weights visibly
        for layer in trained.model.layers:
            layer.self_attn.q_proj.weight.normal_(std=0.5)
            layer.self_attn.k_proj.weight.normal_(std=0.5)
    model = LlamaLM.from_transformers(trained).double().eval()
    reference = llama(yarn)  # the same weights (same seed), read with YaRN
    reference.load_state_dict(trained.state_dict())
    tokens = torch.randint(0, 32, (1, 48))
    with torch.no_grad():
        expected = reference(tokens).logits
        plain = model(tokens)
        scaled = model.set_rotary_scaling(yarn)(tokens)
    size = expected.abs().max().item()
    assert (scaled - expected).abs().max().item() / size < 1e-6  # the reference's angles are float32
    assert (plain - expected).abs().max().item() / size > 1e-2


def test_log_n_scale():
    assert log_n_scale(100, 256) == 1.0 and log_n_scale(256, 256) == 1.0
    assert log_n_scale(1024, 256) == pytest.approx(math.log(1024) / math.log(256))
    assert log_n_scale(65536, 256) == pytest.approx(2.0)


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: rotary_frequencies(64, scaling={**YARN, "factor": 0}), ValueError,
         "scaling['factor'] must be a finite number > 0, got 0.0"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "factor": -2.0}), ValueError, "must be a finite number > 0"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "factor": float("nan")}), ValueError, "got nan"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "factor": "4"}), TypeError, "scaling['factor'] must be a number"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "rope_type": "ntk"}), ValueError,
         "unknown rope_type 'ntk'; the course implements default, linear, dynamic, yarn, llama3"),
        (lambda: rotary_frequencies(64, scaling={"factor": 4.0}), ValueError, "scaling needs a 'rope_type' key"),
        (lambda: rotary_frequencies(64, scaling={"rope_type": "linear"}), ValueError,
         "scaling of rope_type 'linear' needs the key(s) ['factor']"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "factr": 2}), ValueError, "unknown key(s) ['factr']"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "original_max_position_embeddings": 0}), ValueError,
         "scaling['original_max_position_embeddings'] must be a positive int, got 0"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "original_max_position_embeddings": 256.0}), TypeError,
         "must be a positive int, got float 256.0"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "beta_fast": 1, "beta_slow": 32}), ValueError,
         "must be larger than beta_slow"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "rope_theta": 500000.0}), ValueError,
         "differs from base=10000.0"),
        (lambda: rotary_frequencies(64, scaling={**YARN, "partial_rotary_factor": 0.5}), ValueError,
         "give the rotated size as dim"),
        (lambda: rotary_frequencies(64, scaling=[("rope_type", "linear")]), TypeError, "scaling must be None or a dict"),
        (lambda: rotary_frequencies(63), ValueError, "dim must be even"),
        (lambda: rotary_frequencies(2, scaling={"rope_type": "dynamic", "factor": 2.0,
                                                "original_max_position_embeddings": 8}), ValueError, "needs dim >= 4"),
        (lambda: rotary_frequencies(64, scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings":
                                                 256, "low_freq_factor": 4.0, "high_freq_factor": 1.0}), ValueError,
         "must be larger than low_freq_factor"),
        (lambda: rotary_frequencies(64, scaling={"rope_type": "dynamic", "factor": 1e300,
                                                 "original_max_position_embeddings": 8}, length=10**6), ValueError,
         "beyond float64"),
        (lambda: rotary_frequencies(64, length=0), ValueError, "length must be positive"),
        (lambda: ntk_aware_base(64, 10000.0, 0.0), ValueError, "factor must be a finite number > 0"),
        (lambda: ntk_aware_base(64, 10000.0, 1e300), ValueError, "beyond float64"),
        (lambda: yarn_ramp(64, 1.0, YARN), ValueError, "base must be above 1"),
        (lambda: yarn_ramp(64, 10000.0, {"rope_type": "linear", "factor": 2.0}), ValueError, "rope_type 'yarn'"),
        (lambda: yarn_attention_factor({**YARN, "attention_factor": -1.0}), ValueError, "attention_factor"),
        (lambda: apply_rotary(torch.zeros(3, 8), rotary_fraction=0.0), ValueError, "finite number > 0, got 0.0"),
        (lambda: apply_rotary(torch.zeros(3, 8), rotary_fraction=1.5), ValueError, "must lie in (0, 1]"),
        (lambda: apply_rotary(torch.zeros(3, 8), rotary_fraction=float("nan")), ValueError, "got nan"),
        (lambda: apply_rotary(torch.zeros(3, 8), rotary_fraction=0.3), ValueError,
         "rotary_fraction=0.3 of d=8 features is 2.4: not a whole, positive number of pairs"),
        (lambda: apply_rotary(torch.zeros(3, 12), rotary_fraction=0.25), ValueError, "is 3: not a whole"),
        (lambda: apply_rotary(torch.zeros(3, 8), scaling={"rope_type": "yarn"}), ValueError, "needs the key(s)"),
        (lambda: MultiHeadAttention(16, 2, rotary_base=10000.0, rotary_fraction=0.3), ValueError, "not a whole"),
        (lambda: MultiHeadAttention(16, 2, rotary_base=10000.0, rotary_scaling={"rope_type": "x"}), ValueError,
         "unknown rope_type 'x'"),
        (lambda: log_n_scale(0, 256), ValueError, "length must be a positive int, got 0"),
        (lambda: log_n_scale(512, 1), ValueError, "context_length must be at least 2"),
        (lambda: log_n_scale(512.0, 256), TypeError, "length must be a positive int, got float"),
    ],
)
def test_hostile_input_gets_a_sentence(call, error, words):
    with pytest.raises(error) as raised:
        call()
    assert words in str(raised.value)
