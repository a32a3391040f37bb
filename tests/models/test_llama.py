"""Lesson 16's decoder: RMSNorm, SwiGLU, the Llama block and the whole model equal transformers' Llama (built offline
from tiny random configurations); lesson 10's generation and KV caches, lessons 13 and 14's helpers work with it;
hostile input gets a sentence."""

import os

import pytest
import torch

from attn.experiments import austen_heads, window_austen
from attn.latent import RMSNorm as LessonFifteenRMSNorm
from attn.models.decoder import generate, stepwise_logits
from attn.models.llama import (
    SMOLLM2_135M,
    WEIGHTS_LIMIT_BYTES,
    LlamaBlock,
    LlamaLM,
    _check_weights_size,
    pairs_to_rotate_half,
    rotate_half_to_pairs,
)
from attn.norms import RMSNorm
from attn.swiglu import SwiGLU

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: every reference is built from a config

VOCAB, LENGTH = 97, 13


def config(num_kv_heads=2, **changes):
    """A tiny Llama configuration: E 48, H 6 (head size 8), F 80, two layers, rotary base 100000, tied embeddings."""
    from transformers import LlamaConfig

    settings = dict(vocab_size=VOCAB, hidden_size=48, num_attention_heads=6, num_key_value_heads=num_kv_heads,
                    num_hidden_layers=2, intermediate_size=80, rope_theta=100000.0, rms_norm_eps=1e-5,
                    tie_word_embeddings=True, max_position_embeddings=64, attn_implementation="eager",
                    bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaConfig(**(settings | changes))


def reference(num_kv_heads=2, dtype=torch.float32, seed=0, **changes):
    """A random transformers LlamaForCausalLM (weights normal with std 0.3, norms around 1, so that differences show)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(config(num_kv_heads, **changes)).to(dtype).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
            else:
                parameter.normal_(std=0.3)
    return model


def tokens(batch=2, length=LENGTH, seed=1):
    return torch.randint(VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def float64_reference(monkeypatch):
    """transformers' Llama computes its RMSNorm, rotary angles and eager softmax in float32 whatever its input;
    with those three steps in float64 it can be compared at float64's rounding."""
    from transformers.models.llama import modeling_llama

    def rms_norm(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    def rotary(self, x, position_ids):
        dim, base = 2 * self.inv_freq.shape[0], self.config.rope_parameters["rope_theta"]
        frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (d / 2,)
        angles = position_ids[..., None].double() * frequencies  # (B, T, d / 2)
        angles = torch.cat((angles, angles), dim=-1)  # rotate_half's layout
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        groups = module.num_key_value_groups
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        scores = query @ key.transpose(2, 3) * scaling + attention_mask
        weights = torch.softmax(scores, dim=-1)
        return (weights @ value).transpose(1, 2).contiguous(), weights

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_norm)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary)
    monkeypatch.setattr(modeling_llama, "eager_attention_forward", eager)


# The pieces ---------------------------------------------------------------------------------------------


def test_lesson_15s_rmsnorm_is_the_one_in_attn_norms():
    assert LessonFifteenRMSNorm is RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rmsnorm_equals_pytorch_and_transformers(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x = torch.randn(3, 5, 16, dtype=dtype, generator=torch.Generator().manual_seed(0)) * 3
    ours, torchs, llamas = RMSNorm(16, eps=1e-5).to(dtype), torch.nn.RMSNorm(16, eps=1e-5, dtype=dtype), LlamaRMSNorm(16, 1e-5)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        torchs.weight.copy_(ours.weight)
        llamas.weight.copy_(ours.weight.float())
        difference_torch = (ours(x) - torchs(x)).abs().max().item()
        difference_llama = (ours(x).float() - llamas(x.float())).abs().max().item()
    print(f"RMSNorm {dtype}: largest difference from torch.nn.RMSNorm {difference_torch:.1e}, "
          f"from LlamaRMSNorm (in float32) {difference_llama:.1e}")
    assert difference_torch < (1e-6 if dtype == torch.float32 else 1e-14)
    assert difference_llama < 1e-6


def test_rmsnorm_in_bfloat16_is_computed_in_float32_as_transformers_does():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x = (torch.randn(4, 32, generator=torch.Generator().manual_seed(1)) * 5).bfloat16()
    ours, llamas = RMSNorm(32, eps=1e-5).bfloat16(), LlamaRMSNorm(32, 1e-5).bfloat16()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        llamas.weight.copy_(ours.weight)
        assert torch.equal(ours(x), llamas(x))
        naive = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * ours.weight  # all in bfloat16
        assert not torch.equal(naive, ours(x)), "computing in bfloat16 rounds differently"


def test_rmsnorm_by_hand():
    norm = RMSNorm(2, eps=0.0)
    x = torch.tensor([[3.0, 4.0]])
    torch.testing.assert_close(norm(x), x / (12.5**0.5))  # mean of squares (9 + 16) / 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_swiglu_equals_transformers_llama_mlp(dtype):
    from transformers.models.llama.modeling_llama import LlamaMLP

    theirs = LlamaMLP(config()).to(dtype)
    ours = SwiGLU(48, 80).to(dtype)
    ours.load_state_dict(theirs.state_dict())  # the same names and shapes
    x = torch.randn(2, 7, 48, dtype=dtype, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        difference = (ours(x) - theirs(x)).abs().max().item()
        by_hand = ours.down_proj(torch.nn.functional.silu(x @ ours.gate_proj.weight.T) * (x @ ours.up_proj.weight.T))
    print(f"SwiGLU {dtype}: largest difference from LlamaMLP {difference:.1e}")
    assert difference < (1e-6 if dtype == torch.float32 else 1e-15)
    torch.testing.assert_close(ours(x), by_hand)


@pytest.mark.parametrize("num_kv_heads", [2, 3, 6])
def test_the_block_equals_transformers_decoder_layer(float64_reference, num_kv_heads):
    model = reference(num_kv_heads, torch.float64)
    layer = model.model.layers[0]
    ours = LlamaLM.from_transformers(model).blocks[0]
    x = torch.randn(2, LENGTH, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    positions = torch.arange(LENGTH)[None]
    mask = torch.full((LENGTH, LENGTH), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        expected = layer(x, attention_mask=mask, position_ids=positions,
                         position_embeddings=model.model.rotary_emb(x, positions))
        difference = (ours(x) - expected).abs().max().item()
    print(f"LlamaBlock, H_kv {num_kv_heads}, float64: largest difference from LlamaDecoderLayer {difference:.1e}")
    assert difference < 1e-12


# The whole model ----------------------------------------------------------------------------------------


def differences_from(model, ours):
    """transformers' output, our weights, and the largest differences: logits (explicit path), logits (fused), weights."""
    ids = tokens()
    with torch.no_grad():
        expected = model(ids, output_attentions=True)
        logits, weights = ours(ids, need_weights=True)
        fused = ours(ids)
    differences = [(logits - expected.logits).abs().max().item(), (fused - expected.logits).abs().max().item(),
                   (weights - torch.stack(expected.attentions)).abs().max().item()]
    return expected, weights, differences


@pytest.mark.parametrize("num_kv_heads", [2, 3, 6])
def test_logits_and_weights_equal_transformers_in_float32(num_kv_heads):
    model = reference(num_kv_heads)
    ours = LlamaLM.from_transformers(model)
    expected, weights, differences = differences_from(model, ours)
    print(f"H_kv {num_kv_heads}, float32, logits up to {expected.logits.abs().max().item():.1f}: largest differences "
          f"{differences[0]:.1e} (explicit path), {differences[1]:.1e} (fused), weights {differences[2]:.1e}")
    assert weights.shape == (2, 2, 6, LENGTH, LENGTH)
    assert max(differences[:2]) < 2e-5 and differences[2] < 1e-5  # float32 rounding on logits up to about 10


@pytest.mark.parametrize("num_kv_heads", [2, 3, 6])
def test_logits_and_weights_equal_transformers_in_float64(float64_reference, num_kv_heads):
    model = reference(num_kv_heads, torch.float64)
    ours = LlamaLM.from_transformers(model)
    assert ours.token_embedding.weight.dtype == torch.float64 and ours.readout.weight is ours.token_embedding.weight
    expected, weights, differences = differences_from(model, ours)
    print(f"H_kv {num_kv_heads}, float64: largest differences {differences[0]:.1e} (explicit path), "
          f"{differences[1]:.1e} (fused), weights {differences[2]:.1e}")
    assert max(differences) < 1e-12


def test_skipping_the_rotary_reordering_gives_wrong_logits(monkeypatch):
    model = reference(3)
    ids = tokens()
    with torch.no_grad():
        expected = model(ids).logits
        right = LlamaLM.from_transformers(model)(ids)
        monkeypatch.setattr("attn.models.llama.rotate_half_to_pairs", lambda weight, num_heads: weight)
        wrong = LlamaLM.from_transformers(model)(ids)
    assert (right - expected).abs().max() < 1e-5
    assert (wrong - expected).abs().max() > 0.1
    assert torch.allclose(wrong[:, 0], expected[:, 0], atol=1e-5), "position 0 turns by no angle: only later ones differ"


def test_the_reordering_is_undone_by_its_inverse_and_is_llama_cpps():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    weight = torch.randn(3 * 8, 5, generator=torch.Generator().manual_seed(4))  # 3 heads of 8 features
    pairs = rotate_half_to_pairs(weight, 3)
    torch.testing.assert_close(pairs_to_rotate_half(pairs, 3), weight, rtol=0, atol=0)
    assert torch.equal(pairs[:8:2], weight[:4]) and torch.equal(pairs[1:8:2], weight[4:8])  # head 0: (i, i + d/2)
    # transformers undoes llama.cpp's permutation when it loads a GGUF file: a GGUF's rows are the course's.
    undone = LlamaTensorProcessor()._reverse_permute_weights(pairs.numpy(), 3, 3)
    assert torch.equal(torch.from_numpy(undone), weight)
    bias = torch.arange(16.0)  # a bias (H * d,) reorders as the rows do
    assert rotate_half_to_pairs(bias, 2).tolist()[:4] == [0.0, 4.0, 1.0, 5.0]


def test_greedy_generation_with_the_kv_cache_equals_the_full_pass_and_transformers():
    model = reference(3)
    ours = LlamaLM.from_transformers(model)
    prompt = tokens(batch=2, length=5)
    cached = generate(ours, prompt, 20)
    assert torch.equal(cached, generate(ours, prompt, 20, use_cache=False))
    with torch.no_grad():
        theirs = model.generate(prompt, max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(prompt))
        full = ours(cached)
        stepped = stepwise_logits(ours, cached, [5] + [1] * 20)
    assert torch.equal(cached, theirs)
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-4)  # float32 on logits up to about 10: 2e-5 seen


def test_weights_with_a_cache_are_the_last_rows_of_the_full_pass():
    model = LlamaLM.from_transformers(reference(3, torch.float64))
    ids = tokens(batch=2, length=9)
    caches = model.new_caches()
    with torch.no_grad():
        _, full = model(ids, need_weights=True)  # (L, B, H, 9, 9)
        model(ids[:, :6], caches)
        _, stepped = model(ids[:, 6:], caches, need_weights=True)  # (L, B, H, 3, 9): three queries, nine keys
    assert stepped.shape == (2, 2, 6, 3, 9)
    torch.testing.assert_close(stepped, full[:, :, :, 6:], rtol=0, atol=1e-12)


def test_sampling_with_and_without_the_cache_agree():
    ours = LlamaLM.from_transformers(reference(2))
    prompt = tokens(batch=1, length=4)
    runs = [generate(ours, prompt, 15, use_cache=use_cache, temperature=0.9, top_k=20,
                     generator=torch.Generator().manual_seed(5)) for use_cache in (True, False)]
    assert torch.equal(*runs)


def test_the_model_has_austen_lms_interface():
    model = LlamaLM(**dict(SMOLLM2_135M, vocab_size=VOCAB, embed_dim=48, num_heads=6, num_kv_heads=2, num_layers=2,
                           mlp_hidden_dim=80))
    assert model.readout.weight is model.token_embedding.weight
    assert (model.vocab_size, model.context_length, model.num_heads) == (VOCAB, 8192, 6)
    assert model.max_length >= model.context_length
    assert len(model.new_caches()) == 2
    names = list(model.state_dict())
    assert names[:10] == ["token_embedding.weight", "blocks.0.attention_norm.weight",
                          "blocks.0.attention.query_proj.weight", "blocks.0.attention.key_proj.weight",
                          "blocks.0.attention.value_proj.weight", "blocks.0.attention.out_proj.weight",
                          "blocks.0.mlp_norm.weight", "blocks.0.mlp.gate_proj.weight", "blocks.0.mlp.up_proj.weight",
                          "blocks.0.mlp.down_proj.weight"]
    assert names[-2:] == ["norm.weight", "readout.weight"] and len(names) == 1 + 2 * 9 + 2
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    assert shapes["blocks.1.attention.key_proj.weight"] == (16, 48) and shapes["blocks.1.mlp.down_proj.weight"] == (48, 80)


def test_the_mask_takes_the_first_token_away_as_for_austen_lm():
    model = LlamaLM.from_transformers(reference(2, torch.float64))
    ids = tokens(batch=1)
    keep = torch.ones(LENGTH, LENGTH, dtype=torch.bool)
    keep[1:, 0] = False  # later positions may not read position 0
    with torch.no_grad():
        masked = model(ids, mask=keep)
        alone = model(ids[:, 1:])  # the same as reading the text from position 1, but for the positions' angles
        _, weights = model(ids, need_weights=True, mask=keep)
    assert weights[:, :, :, 1:, 0].abs().max() == 0
    assert not torch.allclose(masked[:, 1:], model(ids)[:, 1:])
    assert alone.shape == (1, LENGTH - 1, VOCAB)


def test_the_fused_path_runs_without_need_weights(monkeypatch):
    model = LlamaLM.from_transformers(reference(2))
    ids = tokens()

    def refuse(*arguments):
        raise AssertionError("the explicit path ran")

    monkeypatch.setattr("attn.multihead._explicit_attention", refuse)
    with torch.no_grad():
        model(ids)
        with pytest.raises(AssertionError, match="the explicit path ran"):
            model(ids, need_weights=True)


# Lessons 13 and 14's helpers ----------------------------------------------------------------------------


def test_ablating_a_head_equals_zeroing_its_columns_in_transformers():
    model = reference(3)
    ours = LlamaLM.from_transformers(model)
    ids = tokens()
    with torch.no_grad():
        before = ours(ids)
        with austen_heads.ablate_head(ours, 1, 4):
            ablated = ours(ids)
        model.model.layers[1].self_attn.o_proj.weight[:, 32:40] = 0  # head 4 reads features 32..39
        expected = model(ids).logits
    assert (ablated - expected).abs().max() < 1e-5
    torch.testing.assert_close(ours(ids), before)


def test_a_window_set_by_lesson_14s_helper_is_the_band_mask():
    model = LlamaLM.from_transformers(reference(2, torch.float64))
    ids = tokens()
    rows, columns = torch.arange(LENGTH)[:, None], torch.arange(LENGTH)
    band = (columns <= rows) & (columns > rows - 4)  # (T, T): the last 4 positions
    with torch.no_grad():
        expected = model(ids, mask=band)
        window_austen.set_window(model, 4)
        windowed = model(ids)
        window_austen.set_window(model, None)
    torch.testing.assert_close(windowed, expected, rtol=0, atol=1e-12)


# Hostile input ------------------------------------------------------------------------------------------

SMALL = dict(vocab_size=VOCAB, context_length=32, embed_dim=48, num_heads=6, num_kv_heads=2, num_layers=2,
             mlp_hidden_dim=80)


@pytest.mark.parametrize(("changes", "error", "words"), [
    ({"num_kv_heads": 4}, ValueError, "num_kv_heads=4 must divide num_heads=6"),
    ({"num_heads": 5}, ValueError, "embed_dim=48 must be a multiple of num_heads=5"),
    ({"embed_dim": 18, "num_heads": 6, "num_kv_heads": 3}, ValueError, "head size must be even"),
    ({"num_layers": 0}, ValueError, "num_layers must be positive"),
    ({"vocab_size": True}, TypeError, "vocab_size must be a positive int"),
    ({"mlp_hidden_dim": 80.0}, TypeError, "mlp_hidden_dim must be a positive int"),
    ({"context_length": "32"}, TypeError, "context_length must be a positive int"),
    ({"vocab_size": 10**12}, ValueError, "more than the"),
    ({"mlp_hidden_dim": 10**11}, ValueError, "more than the"),
    ({"rotary_base": None}, ValueError, "rotary_base must be a number > 1"),
    ({"rotary_base": 1.0}, ValueError, "rotary_base must be a finite number > 1"),
    ({"rotary_base": True}, TypeError, "rotary_base must be None or a number"),
    ({"norm_eps": -1.0}, ValueError, "eps must be a finite number >= 0"),
    ({"norm_eps": float("nan")}, ValueError, "eps must be a finite number >= 0"),
    ({"norm_eps": "small"}, TypeError, "eps must be a number >= 0"),
])
def test_wrong_constructor_arguments_get_a_sentence(changes, error, words):
    with pytest.raises(error, match=words):
        LlamaLM(**(SMALL | changes))


def test_wrong_tokens_get_a_sentence():
    model = LlamaLM(**SMALL)
    for wrong, error, words in (
        (torch.tensor([[1, VOCAB]]), ValueError, f"token ids from 0 to {VOCAB - 1}"),
        (torch.tensor([[-1, 2]]), ValueError, "token ids from 0"),
        (torch.zeros(1, 3), TypeError, "integer token ids"),
        (torch.zeros(1, 3, dtype=torch.bool), TypeError, "integer token ids"),
        (torch.zeros(1, 3, dtype=torch.int16), TypeError, "must be int64"),
        (torch.zeros(3, dtype=torch.long), ValueError, r"shape \(B, T\)"),
        (torch.zeros(1, 0, dtype=torch.long), ValueError, r"shape \(B, T\) with T >= 1"),
        ([[1, 2]], TypeError, "must be a torch.Tensor"),
        (torch.zeros(1, model.max_length + 1, dtype=torch.long), ValueError, "more than the model's max_length"),
    ):
        with pytest.raises(error, match=words):
            model(wrong)
    with pytest.raises(TypeError, match="need_weights must be True or False"):
        model(torch.zeros(1, 3, dtype=torch.long), need_weights=1)
    with pytest.raises(TypeError, match="caches must be a list of attn.KVCache"):
        model(torch.zeros(1, 3, dtype=torch.long), caches="cache")


def test_weights_that_would_be_enormous_are_refused_before_anything_is_computed(monkeypatch):
    model = LlamaLM(**SMALL)
    monkeypatch.setattr(model.token_embedding, "forward", lambda ids: pytest.fail("the model ran"))
    with pytest.raises(ValueError, match=r"L \* B \* H \* T \* T_k = 2 \* 1 \* 6 \* 20000 \* 20000 weights, 19.2 GB"):
        model(torch.zeros(1, 20000, dtype=torch.long), need_weights=True)
    # SmolLM2-135M's sizes: 30 layers, 9 heads.
    with pytest.raises(ValueError, match=r"432.0 GB, more than the 4.0 GB allowed"):
        _check_weights_size((30, 1, 9, 20000, 20000), torch.float32, "cpu")
    _check_weights_size((30, 1, 9, 512, 512), torch.float32, "cpu")  # lesson 16's texts: 283 MB
    assert 30 * 9 * 1900**2 * 4 < WEIGHTS_LIMIT_BYTES < 30 * 9 * 2000**2 * 4  # "about 1,900 tokens", as documented


def test_wrong_block_input_gets_a_sentence():
    block = LlamaBlock(48, 6, 2, 80)
    for wrong, error, words in (
        (torch.zeros(1, 3, 48, dtype=torch.long), TypeError, "floating-point"),
        (torch.zeros(1, 3, 40), ValueError, r"shape \(B, T, 48\)"),
        (torch.zeros(1, 3, 48, dtype=torch.float64), TypeError, "is torch.float64 but the layer.s weights"),
        (torch.full((1, 3, 48), float("nan")), ValueError, "contains NaN or inf"),
        (torch.full((1, 3, 48), 1e20), ValueError, "RMSNorm would overflow squaring it"),
    ):
        with pytest.raises(error, match=words):
            block(wrong)
    with pytest.raises(TypeError, match="need_weights must be True or False"):
        block(torch.zeros(1, 3, 48), need_weights="yes")


def test_wrong_norm_and_mlp_arguments_and_inputs_get_a_sentence():
    for build, error, words in (
        (lambda: RMSNorm(0), ValueError, "dim must be positive"),
        (lambda: RMSNorm(True), TypeError, "dim must be a positive int"),
        (lambda: RMSNorm(4, eps=-1e-6), ValueError, "eps must be a finite number >= 0"),
        (lambda: RMSNorm(10**13), ValueError, "more than the"),
        (lambda: SwiGLU(4, 2.5), TypeError, "hidden_dim must be a positive int"),
        (lambda: SwiGLU(10**6, 10**6), ValueError, "more than the"),
        (lambda: RMSNorm(4)(torch.zeros(2, 3)), ValueError, r"shape \(\.\.\., 4\)"),
        (lambda: RMSNorm(4)(torch.ones(4, dtype=torch.int64)), TypeError, "floating-point"),
        (lambda: RMSNorm(4)(torch.tensor(1.0)), ValueError, r"shape \(\.\.\., 4\)"),
        (lambda: SwiGLU(4, 8)(torch.zeros(2, 4, dtype=torch.float64)), TypeError, "is torch.float64 but the layer.s weights"),
        (lambda: SwiGLU(4, 8)([1.0, 2.0, 3.0, 4.0]), TypeError, "must be a torch.Tensor"),
    ):
        with pytest.raises(error, match=words):
            build()


def test_wrong_reordering_arguments_get_a_sentence():
    for weight, heads, error, words in (
        (torch.zeros(10, 4), 3, ValueError, "num_heads \\* d rows"),
        (torch.zeros(10, 4), 2, ValueError, "even head size"),  # head size 5
        (torch.zeros(()), 1, ValueError, "num_heads \\* d rows"),
        ("weight", 1, TypeError, "must be a torch.Tensor"),
        (torch.zeros(8, 4), True, TypeError, "num_heads must be a positive int"),
        (torch.zeros(8, 4), 0, ValueError, "num_heads must be positive"),
    ):
        with pytest.raises(error, match=words):
            rotate_half_to_pairs(weight, heads)


@pytest.mark.parametrize(("changes", "words"), [
    ({"attention_bias": True}, "its attention projections have biases"),
    ({"mlp_bias": True}, "its MLP has biases"),
    ({"hidden_act": "gelu"}, "its MLP uses 'gelu'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100000.0}}, "it scales its rotary"),
    ({"head_dim": 16}, "its head size 16 is not hidden_size / num_attention_heads"),
    ({"tie_word_embeddings": False}, "its readout \\(lm_head\\) is not tied"),
])
def test_models_the_course_cannot_hold_are_refused(changes, words):
    with pytest.raises(ValueError, match="the course's LlamaLM cannot hold this model: " + words):
        LlamaLM.from_transformers(reference(2, **changes))


def test_from_transformers_refuses_what_is_not_a_llama_model():
    for wrong in (torch.nn.Linear(2, 2), "SmolLM2", reference(2).model):
        with pytest.raises(TypeError, match="must be a transformers LlamaForCausalLM"):
            LlamaLM.from_transformers(wrong)
