"""Lesson 21's compressed caches (attn.compressed_cache): codes and their bytes, KIVI's layout, eviction by each rule,
the loops equal to the vectorised versions, the caches inside the course's models, and hostile input refused with a
sentence that leaves the cache as it was. The checks against transformers' QuantizedCache and kvpress's scores are
in test_compressed_cache_reference.py."""

import math

import pytest
import torch

from attn import KVCache, MultiHeadAttention, RingKVCache
from attn.compressed_cache import (
    RULES,
    EvictingKVCache,
    QuantizedKVCache,
    attention_rows,
    caches_for,
    dequantize,
    eviction_scores,
    eviction_scores_loop,
    keep_indices,
    keep_indices_loop,
    pack_codes,
    quantize,
    quantize_loop,
    unpack_codes,
)
from attn.models.decoder import Decoder
from attn.models.llama import LlamaLM


def tiny_llama(seed=0):
    torch.manual_seed(seed)
    model = LlamaLM(vocab_size=50, context_length=128, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2,
                    mlp_hidden_dim=64)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.3)  # weights large enough that attention is far from uniform
    return model.eval()


TOKENS = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(1))
CHUNKS = [16] + [1] * 24  # a prompt of 16, then 24 single steps


@torch.no_grad()
def stepwise(model, make, chunks=CHUNKS, tokens=TOKENS):
    """Logits (B, T, V) of ``tokens`` fed chunk by chunk through ``caches_for(model, make)``, and the caches."""
    caches, logits, start = caches_for(model, make), [], 0
    for size in chunks:
        logits.append(model(tokens[:, start:start + size], caches))
        start += size
    return torch.cat(logits, dim=1), caches


# Codes ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize(("axis", "group_size"), [(-1, 4), (2, 8), (0, None)])
def test_the_loop_over_groups_gives_the_vectorised_codes_number_for_number(bits, symmetric, axis, group_size):
    x = torch.randn(2, 3, 16, 8, generator=torch.Generator().manual_seed(bits)) * torch.linspace(0.1, 4, 8)
    for scale_dtype in (None, torch.float16):
        fast = quantize(x, bits, group_size, axis=axis, symmetric=symmetric, scale_dtype=scale_dtype)
        slow = quantize_loop(x, bits, group_size, axis=axis, symmetric=symmetric, scale_dtype=scale_dtype)
        assert torch.equal(fast.packed, slow.packed) and torch.equal(fast.scales, slow.scales)
        assert (fast.zero_points is None) == symmetric
        assert symmetric or torch.equal(fast.zero_points, slow.zero_points)
        assert torch.equal(dequantize(fast), dequantize(slow))


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
def test_each_number_comes_back_within_half_a_step_of_its_group(bits):
    """The defining identity: x = code * s + z with |error| <= s / 2, codes in range, the extremes hit exactly."""
    x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(0)).double()
    quantized = quantize(x, bits, 8)
    codes, step = quantized.codes, quantized.scales.repeat_interleave(8, dim=-1)  # (3, 5, 32) each
    assert codes.min() >= 0 and codes.max() <= 2**bits - 1
    error = (dequantize(quantized) - x).abs()
    assert (error <= step / 2 * (1 + 1e-9)).all(), f"largest error {error.max():.3g}, half a step {step.max() / 2:.3g}"
    grouped = x.unflatten(-1, (4, 8))
    assert torch.equal(quantized.zero_points, grouped.amin(-1))  # the minimum is code 0
    symmetric = quantize(x, bits, 8, symmetric=True)
    largest = 2 ** (bits - 1) - 1
    assert symmetric.codes.abs().max() == largest and symmetric.zero_points is None
    assert torch.allclose(symmetric.scales, grouped.abs().amax(-1) / largest)


def test_codes_are_packed_four_and_two_to_a_byte_and_nbytes_counts_what_is_held():
    codes = torch.tensor([[3, 0, 1, 2, 3]])
    packed = pack_codes(codes, 2)
    assert packed.tolist() == [[3 | 0 << 2 | 1 << 4 | 2 << 6, 3]]  # the first code in the lowest bits
    assert torch.equal(unpack_codes(packed, 2, 5), codes)
    for bits, per_row in ((2, 2), (4, 4), (8, 8), (16, 16)):  # bytes for a row of 8 codes
        row = torch.randint(0, 2**bits, (3, 8))
        assert pack_codes(row, bits).shape == (3, per_row) and torch.equal(unpack_codes(pack_codes(row, bits), bits, 8), row)
    x = torch.randn(2, 3, 10, 16)
    quantized = quantize(x, 4, 8)  # 960 numbers: 480 bytes of codes; 120 groups: 120 scales and 120 zero points
    assert quantized.nbytes == 480 + 2 * 120 * 4
    assert quantize(x, 4, 8, symmetric=True).nbytes == 480 + 120 * 4
    assert quantize(x, 4, 8, scale_dtype=torch.float16).nbytes == 480 + 2 * 120 * 2


def test_fp8_codes_are_torchs_float8_of_x_over_its_scale():
    x = torch.randn(2, 3, 10, 16, generator=torch.Generator().manual_seed(2))
    one = quantize(x, "fp8", None)
    scale = x.abs().max() / 448
    assert torch.equal(one.scales, scale) and one.packed.dtype == torch.float8_e4m3fn
    assert torch.equal(one.packed, (x / scale).to(torch.float8_e4m3fn))
    assert torch.equal(dequantize(one), one.packed.float() * scale) and one.nbytes == x.numel() + 4
    grouped = quantize(x, "fp8", 8)
    assert grouped.scales.shape == (2, 3, 10, 2) and grouped.nbytes == x.numel() + x.numel() // 8 * 4
    error = (dequantize(grouped) - x).abs().max().item()
    assert error < (dequantize(one) - x).abs().max().item(), "a scale per group of 8 is closer than one for all"


# The quantized cache ------------------------------------------------------------------------------------------------


def test_kivi_groups_keys_per_channel_and_values_per_token_and_keeps_the_recent_past_exact():
    cache = QuantizedKVCache(bits=2, group_size=4, residual=8)
    keys, values = torch.randn(1, 2, 21, 8), torch.randn(1, 2, 21, 8)
    returned = cache.append(keys[:, :, :13], values[:, :, :13])
    assert torch.equal(returned[0], keys[:, :, :13]), "a step reads its own keys at full precision"
    for position in range(13, 21):
        cache.append(keys[:, :, position:position + 1], values[:, :, position:position + 1])
    assert (cache.quantized_positions, cache.residual_positions, len(cache)) == (16, 5, 21)
    key_codes, value_codes = cache._codes
    assert key_codes.scales.shape == (1, 2, 4, 8), "keys: one scale per channel for each run of 4 positions"
    assert value_codes.scales.shape == (1, 2, 16, 2), "values: one scale per group of 4 channels of each position"
    assert torch.equal(cache.keys[:, :, 16:], keys[:, :, 16:]), "the residual is held in full precision"
    assert torch.equal(key_codes.zero_points[:, :, 1], keys[:, :, 4:8].amin(dim=2))
    # bytes: codes 2 * 16 * 8 * 2 / 8 for keys and values, scales and zero points (4 * 8 + 16 * 2) * 2 * 2 * 4 bytes
    # each, and the residual's 2 * 5 * 8 * 2 float32 numbers
    expected = 2 * (2 * 16 * 8 * 2 // 8) + 2 * (4 * 8 + 16 * 2) * 2 * 4 + 2 * 2 * 5 * 8 * 4
    assert cache.nbytes == expected and cache.bytes_per_token() == expected / 21
    token = QuantizedKVCache(bits=2, group_size=4, residual=8, key_grouping="token")
    token.append(keys, values)
    assert token._codes[0].scales.shape == (1, 2, 16, 2), "the planted mistake: keys scaled per position"


def test_at_16_bits_the_quantized_cache_decodes_as_the_full_cache_to_rounding():
    """Logits of about 6: a 16-bit step is 1/65,535 of a group's range, 256 times finer than an 8-bit one."""
    model = tiny_llama()
    full, _ = stepwise(model, KVCache)
    eight = (stepwise(model, lambda: QuantizedKVCache(8, 4, 8))[0] - full).abs().max().item()
    for make in (lambda: QuantizedKVCache(16, 4, 8), lambda: QuantizedKVCache(16, 8, 0, key_grouping="token")):
        ours, caches = stepwise(model, make)
        difference = (ours - full).abs().max().item()
        assert difference < 1e-3 and difference < eight / 100, \
            f"16-bit codes: largest logit difference {difference:.3g} (8-bit: {eight:.3g})"
    fewer, caches = stepwise(model, lambda: QuantizedKVCache(2, 4, 8))
    assert (fewer - full).abs().max() > eight, "2-bit codes change the logits more than 8-bit ones"
    # 2 * B * H_kv * 40 * 8 numbers: 1 byte of codes and 8 of float32 scale and zero point for every 4 of them, so
    # 9/16 of the full cache's 4 bytes a number (the scales' share is why KIVI stores them in float16)
    assert caches[0].nbytes == 2 * 2 * 2 * 40 * 8 // 4 * 9 and caches[0].bytes_per_token() == 256 * 9 / 16


def test_the_fp8_cache_keeps_the_scales_its_first_codes_set():
    cache = QuantizedKVCache("fp8", None, 0)
    first = torch.randn(1, 2, 6, 8)
    cache.append(first, first)
    scale = cache._codes[0].scales
    cache.append(first[:, :, :1] * 1000, first[:, :, :1])  # far larger: clipped at 448 * scale, the scale stays
    assert torch.equal(cache._codes[0].scales, scale)
    assert torch.allclose(cache.keys[:, :, -1].abs().max(), 448 * scale)
    assert cache.nbytes == 2 * (2 * 7 * 8 + 4) and len(cache) == 7


# Eviction --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_eviction_with_a_budget_as_large_as_the_sequence_equals_full_attention_exactly(rule):
    model = tiny_llama()
    full, _ = stepwise(model, KVCache)
    kept, caches = stepwise(model, lambda: EvictingKVCache(40, rule, 2, 4))
    assert torch.equal(kept, full), f"largest difference {(kept - full).abs().max().item():.3g}"
    assert caches[0].stored == 40 and torch.equal(caches[0].positions[0, 0], torch.arange(40))


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_keeps_its_budget_its_sinks_and_its_window(rule):
    model = tiny_llama()
    _, caches = stepwise(model, lambda: EvictingKVCache(12, rule, 2, 4))
    for cache in caches:
        positions = cache.positions  # (B, H_kv, 12)
        assert cache.stored == 12 and len(cache) == 40
        assert (positions[..., :2] == torch.tensor([0, 1])).all(), "the sinks survive"
        assert (positions[..., -4:] == torch.arange(36, 40)).all(), "the window survives"
        assert (positions.diff(dim=-1) > 0).all(), "entries stay in time order"
        assert cache.nbytes == 2 * 2 * 2 * 12 * 8 * 4 and cache.bytes_per_token() == cache.nbytes / 40
    if rule == "streaming":
        assert (caches[0].positions[..., 2:] == torch.arange(30, 40)).all()
    if rule == "tova":
        assert (caches[0].positions[:, :1] == caches[0].positions).all(), "TOVA's heads choose alike"


def test_h2os_score_is_the_attention_each_key_received_summed_over_queries_and_grouped_heads():
    """The identity, against the weights the layer itself returns with need_weights=True."""
    layer = MultiHeadAttention(16, 4, num_kv_heads=2, rotary_base=10000.0)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.5)
    x = torch.randn(1, 10, 16)
    cache = EvictingKVCache(10, "h2o", 0, 0)
    with torch.no_grad():
        _, weights = layer(x, x, x, is_causal=True, need_weights=True, cache=cache)  # (1, 4, 10, 10)
    expected = weights.unflatten(1, (2, 2)).sum(dim=(2, 3))  # (1, 2, 10)
    assert torch.allclose(cache._scores, expected, atol=1e-6), f"largest difference {(cache._scores - expected).abs().max():.3g}"


@pytest.mark.parametrize("rule", RULES)
def test_the_scores_written_as_loops_equal_the_vectorised_ones(rule):
    generator = torch.Generator().manual_seed(3)
    queries, keys = torch.randn(2, 4, 6, 8, generator=generator), torch.randn(2, 2, 11, 8, generator=generator)
    weights = attention_rows(queries, keys, 6)  # (2, 4, 6, 11)
    positions = torch.arange(11).expand(2, 2, 11)
    needs = rule in ("h2o", "snapkv", "tova")
    fast = eviction_scores(rule, weights if needs else None, keys, positions, window=3, kernel_size=3)
    slow = eviction_scores_loop(rule, weights if needs else None, keys, positions, window=3, kernel_size=3)
    assert torch.allclose(fast.double(), slow, atol=1e-6), f"largest difference {(fast.double() - slow).abs().max():.3g}"
    for budget, sinks, window in ((5, 1, 2), (11, 0, 0), (3, 3, 0)):
        chosen = keep_indices(fast, positions, budget, sinks, window, 11)
        assert torch.equal(chosen, keep_indices_loop(fast, positions, budget, sinks, window, 11))


def test_keep_indices_keeps_the_highest_scores_and_the_earlier_of_equal_ones():
    scores = torch.tensor([[[5.0, 1.0, 3.0, 3.0, 0.0, 2.0]]])
    positions = torch.arange(6).expand(1, 1, 6)
    assert keep_indices(scores, positions, 3, 0, 0, 6).tolist() == [[[0, 2, 3]]]
    assert keep_indices(scores, positions, 2, 0, 0, 6).tolist() == [[[0, 2]]]
    assert keep_indices(scores, positions, 3, 1, 1, 6).tolist() == [[[0, 2, 5]]], "sink 0 and the newest, then the best"


def test_an_entry_not_attended_yet_counts_as_never_attended_when_observe_is_skipped():
    cache = EvictingKVCache(3, "h2o", 1, 1)
    keys = torch.randn(1, 1, 4, 8)
    cache.append(keys, keys)  # no observe: the layer would call it
    assert cache.stored == 4
    cache.append(keys[:, :, :1], keys[:, :, :1])  # evicts down to 3 first, then adds one
    assert cache.stored == 4 and cache.positions[0, 0].tolist() == [0, 1, 3, 4]


def test_pages_are_freed_only_when_every_head_has_evicted_every_entry_in_them():
    cache = EvictingKVCache(4, "knorm", 1, 1)
    keys = torch.ones(1, 2, 12, 4)
    keys[:, 0, [3, 5]] = 0.1  # small norms: kept by head 0
    keys[:, 1, [6, 9]] = 0.1  # and by head 1
    cache.append(keys, keys)
    assert cache.positions.tolist() == [[[0, 3, 5, 11], [0, 6, 9, 11]]]
    assert cache.pages_held(4).tolist() == [3], "pages 0, 1 and 2 each hold an entry of some head"
    assert cache.pages_held(2).tolist() == [6], "no page of 2 is freed, though 2 of every 3 entries are gone"
    assert cache.pages_held(12).tolist() == [1]


def test_evict_then_quantize_holds_the_budgets_codes():
    model = tiny_llama()
    evicted, _ = stepwise(model, lambda: EvictingKVCache(12, "h2o", 2, 4))
    both, caches = stepwise(model, lambda: EvictingKVCache(12, "h2o", 2, 4, bits=8, group_size=4))
    assert (both - evicted).abs().max() < 0.1, "8-bit codes barely move the evicting cache's logits"
    # per head 12 entries of 8 channels at 8 bits, two scales and two zero points of 4 bytes each
    assert caches[0].nbytes == 2 * 2 * 2 * 12 * (8 + 2 * 2 * 4) and caches[0].stored == 12


def test_the_caches_run_in_lesson_10s_decoder_and_with_the_llamas_weights():
    torch.manual_seed(0)
    decoder = Decoder(vocab_size=50, max_length=64, embed_dim=16, num_heads=2, num_layers=2).eval()
    tokens = TOKENS[:, :20]
    full, _ = stepwise(decoder, KVCache, [8] + [1] * 12, tokens)
    for make in (lambda: EvictingKVCache(32, "tova", 1, 2), lambda: QuantizedKVCache(16, 4, 4)):
        ours, _ = stepwise(decoder, make, [8] + [1] * 12, tokens)
        assert (ours - full).abs().max() < 1e-4
    model = tiny_llama()
    caches = caches_for(model, lambda: EvictingKVCache(6, "snapkv", 1, 2))
    with torch.no_grad():
        model(TOKENS[:, :10], caches)
        logits, weights = model(TOKENS[:, 10:12], caches, need_weights=True)
    assert weights.shape == (2, 2, 4, 2, 8), "each layer's weights over the 6 entries held and the 2 new positions"


def test_every_cache_says_its_bytes_per_token():
    keys = torch.randn(2, 3, 10, 8)
    full, ring, evicting = KVCache(), RingKVCache(4, sink_tokens=1), EvictingKVCache(5, "knorm", 1, 1, bits="fp8", group_size=4)
    assert full.bytes_per_token() == ring.bytes_per_token() == evicting.bytes_per_token() == 0.0, "0.0 while empty"
    for cache in (full, ring, evicting):
        cache.append(keys, keys)
    assert full.bytes_per_token() == 2 * 2 * 3 * 8 * 4 and full.stored == 10
    assert ring.bytes_per_token() == 2 * 2 * 3 * 5 * 8 * 4 / 10 and ring.stored == 5
    # 5 entries of each of 2 * 3 heads, keys and values: 8 FP8 codes and two float32 scales each
    assert evicting.nbytes == 2 * 2 * 3 * 5 * (8 + 2 * 4) and evicting.bytes_per_token() == evicting.nbytes / 10
    assert evicting.bookkeeping_nbytes == 2 * 3 * 5 * (8 + 4), "positions (int64) and scores (float32, knorm's norms)"


def test_caches_for_makes_one_new_cache_per_block():
    model = tiny_llama()
    caches = caches_for(model, lambda: QuantizedKVCache(4, 4, 4))
    assert len(caches) == 2 and caches[0] is not caches[1]
    one = KVCache()
    with pytest.raises(TypeError, match=r"make\(\) must return a new cache"):
        caches_for(model, lambda: one)
    with pytest.raises(TypeError, match="model must be a language model with blocks"):
        caches_for(torch.nn.Linear(2, 2), KVCache)


# Hostile input --------------------------------------------------------------------------------------------------------


def test_bits_group_sizes_budgets_and_rules_that_cannot_work_get_a_sentence():
    x = torch.randn(2, 3, 8, 6)
    with pytest.raises(ValueError, match=r"bits must be 2, 4, 8 or 16 .* got 0 \(a cache stored in 0 bits keeps nothing\)"):
        quantize(x, 0, 2)
    with pytest.raises(ValueError, match="got 64 .64-bit codes take more room"):
        QuantizedKVCache(64, 4, 4)
    with pytest.raises(ValueError, match="group_size=4 must divide the 6 numbers along axis 3"):
        quantize(x, 4, 4)
    with pytest.raises(ValueError, match="residual must be a positive multiple of 4, got 6"):
        QuantizedKVCache(4, 4, 6)
    with pytest.raises(ValueError, match="a budget of 0|budget must be at least 1"):
        EvictingKVCache(0, "h2o", 0, 0)
    with pytest.raises(ValueError, match="a budget of 3 entries cannot hold 4 sink tokens and a window of 0"):
        EvictingKVCache(3, "h2o", 4, 0)
    with pytest.raises(ValueError, match=r"rule must be one of 'h2o', 'snapkv', 'tova', 'knorm', 'streaming', got 'h20'"):
        EvictingKVCache(8, "h20", 1, 1)
    with pytest.raises(ValueError, match="window must be at least 1"):
        EvictingKVCache(8, "snapkv", 1, 0)
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        quantize(torch.tensor([1.0, math.nan]), 4, 2)
    with pytest.raises(ValueError, match="scale x down"):
        quantize(torch.tensor([-3e38, 3e38]), 4, 2)


@pytest.mark.parametrize("make", [lambda: QuantizedKVCache(4, 4, 4), lambda: EvictingKVCache(4, "h2o", 1, 1),
                                  lambda: EvictingKVCache(4, "knorm", 1, 1, bits=4, group_size=4)],
                         ids=["quantized", "evicting", "evict-then-quantize"])
def test_a_refused_append_leaves_the_cache_as_it_was(make):
    cache = make()
    good = torch.randn(1, 2, 6, 8)
    cache.append(good, good)
    if hasattr(cache, "observe"):
        cache.observe(torch.randn(1, 4, 6, 8))
    before = (len(cache), cache.stored, cache.nbytes, cache.keys.clone(), cache.values.clone(), repr(cache))
    nan = good[:, :, :1].clone()
    nan[0, 0, 0, 0] = math.nan
    refusals = [((nan, good[:, :, :1]), ValueError, "keys contains NaN or inf"),
                ((good[:, :1], good[:, :1]), ValueError, "key/value heads 2 in the cache, 1 now"),
                ((good.double(), good.double()), TypeError, "the cache holds torch.float32 keys")]
    for arguments, error, message in refusals:
        with pytest.raises(error, match=message):
            cache.append(*arguments)
        after = (len(cache), cache.stored, cache.nbytes, cache.keys, cache.values, repr(cache))
        assert after[:3] == before[:3] and torch.equal(after[3], before[3]) and torch.equal(after[4], before[4])
        assert after[5] == before[5]


def test_a_group_size_that_does_not_divide_the_head_is_refused_at_the_first_append_without_a_trace():
    for cache in (QuantizedKVCache(4, 3, 3, key_grouping="token"), QuantizedKVCache(4, 3, 6),
                  EvictingKVCache(4, "h2o", 1, 1, bits=4, group_size=3)):
        with pytest.raises(ValueError, match="group_size=3 does not divide the head size d=8"):
            cache.append(torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))
        assert len(cache) == 0 and cache.stored == 0 and cache.nbytes == 0
        cache.append(torch.randn(1, 2, 6, 6), torch.randn(1, 2, 6, 6))  # d = 6: 3 divides it
        assert len(cache) == 6


def test_observe_refuses_queries_that_do_not_belong_and_the_layer_refuses_masks_and_windows():
    cache = EvictingKVCache(4, "tova", 1, 1)
    with pytest.raises(ValueError, match="call append first"):
        cache.observe(torch.randn(1, 4, 1, 8))
    keys = torch.randn(1, 2, 6, 8)
    cache.append(keys, keys)
    for queries, message in ((torch.randn(1, 3, 1, 8), "H a multiple of the 2 key/value heads"),
                             (torch.full((1, 4, 1, 8), math.nan), "queries contain NaN"),
                             (torch.randn(1, 4, 7, 8), r"1 <= T_q <= 6")):
        with pytest.raises(ValueError, match=message):
            cache.observe(queries)
    assert cache.stored == 6, "nothing evicted by a refused observe"
    cache.observe(torch.randn(1, 4, 1, 8))
    assert cache.stored == 4
    x = torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match="has a window of its own"):
        MultiHeadAttention(16, 4, window=3)(x, x, x, cache=EvictingKVCache(4, "h2o", 1, 1))
    with pytest.raises(ValueError, match="mask and key_padding_mask cannot be used with an evicting cache"):
        MultiHeadAttention(16, 4)(x, x, x, mask=torch.ones(5, 5, dtype=torch.bool), cache=EvictingKVCache(4, "h2o", 1, 1))
