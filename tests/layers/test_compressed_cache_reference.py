"""Lesson 21's caches against the real things.

- ``transformers``' QuantizedCache: its ``quanto`` backend (optimum-quanto's group-wise codes) and its ``fp8``
  backend, against the course's quantize and QuantizedKVCache, tensor by tensor and inside a tiny random Llama
  and SmolLM2 (a transformers LlamaForCausalLM holding the course's SmolLM2 weights), largest differences in the
  asserts. transformers' QuantizedLayer re-quantizes everything it holds at each flush, from numbers already read
  back from codes: with runs of codes that line up with the course's (prompts a multiple of the residual), that
  gives the same codes again, so the two agree to float32 rounding. Its FP8 layer reads the newest position back
  from its codes too, where the course's caches read a step's own keys at full precision: the states held agree
  exactly, the logits after the prompt by what that position's codes change.
- ``kvpress``'s scorers (KnormPress, SnapKVPress, TOVAPress, StreamingLLMPress) are checked by their defining
  identities, written here from their definitions: kvpress 0.5.5, its latest release, requires
  transformers < 5.3 and the course pins transformers 5.24.0 (and it would bring datasets, pandas, peft and fire),
  so it cannot be installed beside the course's pins.
"""

import os
import types

import pytest
import torch

from attn import KVCache, MultiHeadAttention
from attn.compressed_cache import EvictingKVCache, QuantizedKVCache, caches_for, dequantize, quantize
from attn.models.llama import SMOLLM2_135M, LlamaLM, pairs_to_rotate_half
from attn.models.pretrained import FOLDER, WEIGHTS_NAME
from attn.window import rotary_pairing

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from transformers.cache_utils import QuantizedCache  # noqa: E402 - after the skip


def quantos_unpack(packed, bits):
    """quanto's packed codes undone as its Python fallback undoes them: slot i of every byte holds bits i * bits ..
    (i + 1) * bits - 1, and the codes of slot i follow those of slot i - 1 along the first axis."""
    return torch.cat([(packed >> (bits * slot)) & (2**bits - 1) for slot in range(8 // bits)]).to(torch.uint8)


@pytest.fixture
def quanto(monkeypatch):
    """optimum-quanto, its codes unpacked in Python: on the CPU it would otherwise compile a C++ unpacking kernel into
    its installed folder on first use (minutes, and a compiler needed), for the same numbers."""
    pytest.importorskip("optimum.quanto", reason="optimum-quanto (requirements.txt) is not installed")
    from optimum.quanto.library.extensions import cpp

    monkeypatch.setattr(cpp.ext, "_lib", types.SimpleNamespace(unpack=quantos_unpack))


def tiny_pair(seed=0):
    """A tiny random transformers Llama and the course's copy of it."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=True)
    theirs = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.3)
    return theirs, LlamaLM.from_transformers(theirs)


@torch.no_grad()
def both_decode(theirs, their_cache, ours, make, tokens, prompt):
    """Logits (1, T, V) of the prompt then one token at a time, through their cache and through ours."""
    their_logits, our_logits, caches = [], [], caches_for(ours, make)
    for start, end in [(0, prompt)] + [(t, t + 1) for t in range(prompt, tokens.shape[1])]:
        their_logits.append(theirs(input_ids=tokens[:, start:end], cache=their_cache, use_cache=True).logits)
        our_logits.append(ours(tokens[:, start:end], caches))
    return torch.cat(their_logits, dim=1), torch.cat(our_logits, dim=1), caches


@pytest.mark.parametrize("bits", [2, 4])
def test_quantize_gives_quantos_codes_bit_for_bit(bits, quanto):
    """transformers' quanto layer: axis 0 groups contiguous numbers (a position's channels), axis -1 a channel's run
    of positions (KIVI's keys); the course names the axis the groups run along."""
    from transformers.cache_utils import QuantoQuantizedLayer

    x = torch.randn(2, 3, 32, 16, generator=torch.Generator().manual_seed(bits)) * torch.linspace(0.1, 5, 16)
    for their_axis, our_axis in ((0, 3), (-1, 2)):
        layer = QuantoQuantizedLayer(nbits=bits, axis_key=their_axis, q_group_size=8, residual_length=8)
        theirs = layer._dequantize(layer._quantize(x, axis=their_axis))
        ours = dequantize(quantize(x, bits, 8, axis=our_axis))
        assert torch.equal(theirs, ours), f"axis {their_axis}: largest difference {(theirs - ours).abs().max():.3g}"


@pytest.mark.parametrize("bits", [2, 4])
def test_kivis_cache_decodes_as_transformers_quantized_cache_with_quanto(bits, quanto):
    theirs, ours = tiny_pair()
    tokens = torch.randint(0, 64, (1, 32), generator=torch.Generator().manual_seed(1))
    # keys per channel in runs of 8 positions (axis_key=-1), values per position in groups of 8 channels
    cache = QuantizedCache("quanto", theirs.config, nbits=bits, axis_key=-1, axis_value=0, q_group_size=8, residual_length=8)
    their_logits, our_logits, _ = both_decode(theirs, cache, ours, lambda: QuantizedKVCache(bits, 8, 8), tokens, 16)
    difference = (their_logits - our_logits).abs().max().item()
    print(f"{bits}-bit KIVI against transformers' quanto cache: largest logit difference {difference:.3g}")
    assert difference < 1e-5, f"largest logit difference {difference:.3g}"
    # Keys grouped per position need the whole head as one group here: the course's LlamaLM holds each head's
    # features in another order (rotary pairs), which permutes a head's channels and so any smaller group.
    cache = QuantizedCache("quanto", theirs.config, nbits=bits, axis_key=0, axis_value=0, q_group_size=16, residual_length=16)
    their_logits, our_logits, _ = both_decode(theirs, cache, ours, lambda: QuantizedKVCache(bits, 16, 16, key_grouping="token"),
                                              tokens, 16)
    difference = (their_logits - our_logits).abs().max().item()
    assert difference < 1e-4, f"keys per position: largest logit difference {difference:.3g} (logits of about 7)"


class ReadFromCodes(QuantizedKVCache):
    """The course's FP8 cache reading a step's own keys and values back from their codes, as transformers' FP8 layer
    does after the prompt: what the only difference between the two is."""

    def append(self, keys, values):
        first = self._layout is None
        returned = super().append(keys, values)
        return returned if first else (self.keys, self.values)


def test_the_fp8_cache_holds_transformers_fp8_states_exactly():
    theirs, ours = tiny_pair()
    tokens = torch.randint(0, 64, (1, 24), generator=torch.Generator().manual_seed(2))
    cache = QuantizedCache("fp8", theirs.config)
    their_logits, our_logits, caches = both_decode(theirs, cache, ours, lambda: QuantizedKVCache("fp8", None, 0), tokens, 12)
    prompt = (their_logits[:, :12] - our_logits[:, :12]).abs().max().item()
    after = (their_logits[:, 12:] - our_logits[:, 12:]).abs().max().item()
    their_cache = QuantizedCache("fp8", theirs.config)
    read_back = both_decode(theirs, their_cache, ours, lambda: ReadFromCodes("fp8", None, 0), tokens, 12)
    same_reading = (read_back[0] - read_back[1]).abs().max().item()
    read_back = (*read_back, their_cache.layers)
    print(f"FP8 against transformers' fp8 cache, largest logit differences: prompt {prompt:.3g}, after it {after:.3g} "
          f"(the newest position at full precision), {same_reading:.3g} when it too is read from its codes")
    assert prompt < 1e-5, f"the prompt is read at full precision by both: largest logit difference {prompt:.3g}"
    assert same_reading < 1e-4 < after, f"read from codes: {same_reading:.3g}; at full precision: {after:.3g}"
    pairing = rotary_pairing(16)  # the course's key feature k is transformers' feature pairing[k]
    held = [(cache.layers[0], caches[0])]  # the first layer's inputs are the same in both runs; later ones differ
    held += list(zip(read_back[3], read_back[2], strict=True))  # every layer, when both read the newest from codes
    for layer, our_cache in held:
        their_keys = layer._dequantize(layer._quantized_keys)[..., pairing]
        their_values = layer._dequantize(layer._quantized_values)
        assert torch.equal(their_keys, our_cache.keys) and torch.equal(their_values, our_cache.values)
        assert torch.equal(layer._quantized_keys[1], our_cache._codes[0].scales)


def transformers_smollm2(ours):
    """A transformers LlamaForCausalLM holding the course's SmolLM2 weights (W_q, W_k rows back in rotate_half order)."""
    sizes = SMOLLM2_135M
    config = transformers.LlamaConfig(vocab_size=sizes["vocab_size"], hidden_size=sizes["embed_dim"],
                                      intermediate_size=sizes["mlp_hidden_dim"], num_hidden_layers=sizes["num_layers"],
                                      num_attention_heads=sizes["num_heads"], num_key_value_heads=sizes["num_kv_heads"],
                                      max_position_embeddings=sizes["context_length"], rope_theta=sizes["rotary_base"],
                                      rms_norm_eps=sizes["norm_eps"], tie_word_embeddings=True)
    with torch.device("meta"):
        theirs = transformers.LlamaForCausalLM(config)
    state = {"model.embed_tokens.weight": ours.token_embedding.weight, "model.norm.weight": ours.norm.weight,
             "lm_head.weight": ours.token_embedding.weight}
    for index, block in enumerate(ours.blocks):
        name, attention = f"model.layers.{index}.", block.attention
        state |= {name + "input_layernorm.weight": block.attention_norm.weight,
                  name + "post_attention_layernorm.weight": block.mlp_norm.weight,
                  name + "self_attn.q_proj.weight": pairs_to_rotate_half(attention.query_proj.weight, attention.num_heads),
                  name + "self_attn.k_proj.weight": pairs_to_rotate_half(attention.key_proj.weight, attention.num_kv_heads),
                  name + "self_attn.v_proj.weight": attention.value_proj.weight,
                  name + "self_attn.o_proj.weight": attention.out_proj.weight}
        state |= {f"{name}mlp.{part}.weight": getattr(block.mlp, part).weight for part in ("gate_proj", "up_proj", "down_proj")}
    theirs.load_state_dict({key: value.detach() for key, value in state.items()}, assign=True)
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    theirs.model.rotary_emb = LlamaRotaryEmbedding(config=config)  # its frequencies are a buffer the weights lack
    return theirs.eval()


def test_smollm2_decodes_through_kivi_and_fp8_as_transformers_does(quanto):
    if not (FOLDER / WEIGHTS_NAME).is_file():
        pytest.skip("SmolLM2's converted weights are not in data/smollm2: fetch them with 'python -m attn.pretrained'")
    from attn import pretrained

    ours, tokenizer = pretrained.load()
    theirs = transformers_smollm2(ours)
    text = ("Sir Walter Elliot, of Kellynch-hall, in Somersetshire, was a man who, for his own amusement, never took up "
            "any book but the Baronetage; there he found occupation for an idle hour")
    tokens = torch.tensor([tokenizer.encode(text)[:40]])
    cache = QuantizedCache("quanto", theirs.config, nbits=2, axis_key=-1, axis_value=0, q_group_size=16, residual_length=32)
    their_logits, our_logits, _ = both_decode(theirs, cache, ours, lambda: QuantizedKVCache(2, 16, 32), tokens, 32)
    kivi = (their_logits - our_logits).abs().max().item()
    fp8_cache = QuantizedCache("fp8", theirs.config)
    their_fp8, our_fp8, _ = both_decode(theirs, fp8_cache, ours, lambda: QuantizedKVCache("fp8", None, 0), tokens, 32)
    prompt, after = ((their_fp8 - our_fp8)[:, s].abs().max().item() for s in (slice(0, 32), slice(32, None)))
    print(f"SmolLM2, largest logit differences: 2-bit KIVI {kivi:.3g}; FP8 prompt {prompt:.3g}, after it {after:.3g}")
    assert kivi < 1e-3, f"2-bit KIVI: largest logit difference {kivi:.3g} (logits of about 20)"
    assert prompt < 1e-3 and after < 1.0, f"FP8: prompt {prompt:.3g}, after it {after:.3g}"


# kvpress's scorers, by their definitions -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompt_attention():
    """A layer with rotary positions and grouped heads, its keys (B, H_kv, T, d) and its weights (B, H, T, T)."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(64, 8, num_kv_heads=2, rotary_base=10000.0, bias=False)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.3)
    x = torch.randn(2, 48, 64)
    full = KVCache()
    with torch.no_grad():
        _, weights = layer(x, x, x, is_causal=True, need_weights=True, cache=full)
    return layer, x, full.keys, weights


def kept_by_our_cache(prompt_attention, rule, budget, sinks, window):
    layer, x, _, _ = prompt_attention
    cache = EvictingKVCache(budget, rule, sinks, window)
    with torch.no_grad():
        layer(x, x, x, is_causal=True, cache=cache)
    return cache


def top(scores, count):
    """kvpress's choice: the ``count`` highest scores of each head (torch.topk), in increasing position order."""
    return scores.topk(count, dim=-1).indices.sort(dim=-1).values


def top_scores(scores, positions):
    """The scores (B, H_kv, K) of the entries at ``positions``."""
    return scores.gather(2, positions)


def test_knorm_keeps_the_keys_of_smallest_norm(prompt_attention):
    keys = prompt_attention[2]
    cache = kept_by_our_cache(prompt_attention, "knorm", 20, 0, 0)
    assert torch.equal(cache.positions, top(-keys.norm(dim=-1), 20))


def test_snapkv_keeps_the_window_and_the_best_pooled_attention_from_it(prompt_attention):
    _, _, keys, weights = prompt_attention  # weights (2, 8, 48, 48)
    window, kernel = 8, 5
    observed = weights[:, :, -window:, :-window].mean(dim=2)  # (2, 8, 40): what the window's queries gave each key
    ones = torch.ones(1, 1, kernel) / kernel
    pooled = torch.nn.functional.conv1d(observed.reshape(-1, 1, 40), ones, padding=kernel // 2).reshape(2, 8, 40)
    scores = pooled.unflatten(1, (2, 4)).mean(dim=2)  # (2, 2, 40), averaged over each key head's query heads
    scores = torch.cat((scores, torch.full((2, 2, window), scores.max().item() + 1)), dim=-1)
    cache = kept_by_our_cache(prompt_attention, "snapkv", 20, 0, window)
    assert torch.equal(cache.positions, top(scores, 20))
    difference = (cache._scores[..., :-window] - top_scores(scores, cache.positions)[..., :-window]).abs().max().item()
    assert difference < 1e-7, f"largest SnapKV score difference {difference:.3g}"


def test_tova_keeps_what_the_newest_query_attends_to_averaged_over_every_head(prompt_attention):
    weights = prompt_attention[3]
    scores = weights[:, :, -1, :-1].mean(dim=1, keepdim=True).expand(-1, 2, -1)  # (2, 2, 47): one choice for all heads
    scores = torch.cat((scores, torch.full((2, 2, 1), scores.max().item() + 1)), dim=-1)  # the newest is kept
    cache = kept_by_our_cache(prompt_attention, "tova", 20, 0, 1)
    assert torch.equal(cache.positions, top(scores, 20))
    difference = (cache._scores[..., :-1] - top_scores(scores, cache.positions)[..., :-1]).abs().max().item()
    assert difference < 1e-7, f"largest TOVA score difference {difference:.3g}"


def test_streaming_keeps_the_sinks_and_the_most_recent(prompt_attention):
    cache = kept_by_our_cache(prompt_attention, "streaming", 20, 4, 0)
    expected = torch.cat((torch.arange(4), torch.arange(48 - 16, 48)))
    assert (cache.positions == expected).all()
