"""attn.KVCache: decoding step by step with a cache equals one full causal pass, for a layer and a stack of blocks."""

import pytest
import torch

from attn import KVCache, MultiHeadAttention, TransformerBlock
from tests.devices import DEVICES


def test_append_len_nbytes_reset():
    cache = KVCache()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.keys is None and cache.values is None
    assert repr(cache) == "KVCache(empty)"
    first_keys, first_values = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    keys, values = cache.append(first_keys, first_values)
    assert torch.equal(keys, first_keys) and torch.equal(values, first_values)
    first_keys.zero_()
    assert not torch.equal(cache.keys, first_keys), "the cache keeps its own copy"
    keys, values = cache.append(torch.ones(2, 3, 1, 5), torch.full((2, 3, 1, 5), 2.0))
    assert keys.shape == values.shape == (2, 3, 5, 5) and len(cache) == 5
    assert torch.all(keys[:, :, 4] == 1) and torch.all(values[:, :, 4] == 2)
    assert cache.nbytes == 2 * 2 * 3 * 5 * 5 * 4  # 2 (keys, values) * B * H_kv * T * d * 4 bytes
    assert "positions=5" in repr(cache) and "nbytes=1200" in repr(cache)
    with pytest.raises(AttributeError):
        cache.keys = torch.zeros(1)
    cache.reset()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.keys is None


def test_append_refuses_what_does_not_fit():
    cache = KVCache()
    with pytest.raises(TypeError, match="keys must be a torch.Tensor, got list"):
        cache.append([1.0], torch.zeros(1, 1, 1, 1))
    with pytest.raises(ValueError, match=r"values must have shape \(B, H_kv, T_new, d\), got \(1, 1, 1\)"):
        cache.append(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1))
    with pytest.raises(ValueError, match="keys and values must match in shape, dtype and device"):
        cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 3))
    with pytest.raises(ValueError, match="keys and values must match"):
        cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2, dtype=torch.float64))
    cache.append(torch.zeros(2, 2, 3, 4), torch.zeros(2, 2, 3, 4))
    mismatches = [
        ((1, 2, 1, 4), "batch size 2 in the cache, 1 now"),
        ((2, 1, 1, 4), "key/value heads 2 in the cache, 1 now"),
        ((2, 2, 1, 8), "head size 4 in the cache, 8 now"),
    ]
    for shape, expected in mismatches:
        with pytest.raises(ValueError, match=expected):
            cache.append(torch.zeros(shape), torch.zeros(shape))
    with pytest.raises(TypeError, match="the cache holds torch.float32 keys, the new ones are torch.bfloat16"):
        cache.append(torch.zeros(2, 2, 1, 4, dtype=torch.bfloat16), torch.zeros(2, 2, 1, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="the cache is on device cpu, the new keys on meta"):
        cache.append(torch.zeros(2, 2, 1, 4, device="meta"), torch.zeros(2, 2, 1, 4, device="meta"))
    assert len(cache) == 3


def decode(model, x, steps, caches):
    """Feed x (B, T, E) to ``model`` in chunks of ``steps`` tokens, each with is_causal and the caches; concatenate."""
    outputs, start = [], 0
    for size in steps:
        outputs.append(model(x[:, start:start + size], caches))
        start += size
    assert start == x.shape[1]
    return torch.cat(outputs, dim=1)


SCHEDULES = {
    "one token at a time": [1] * 7,
    "prefill then single steps": [4, 1, 1, 1],
    "chunks": [2, 3, 2],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("need_weights", [False, True])
def test_layer_decoding_with_a_cache_equals_one_full_causal_pass(schedule, num_kv_heads, need_weights, device):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads).to(device).eval()
    x = torch.randn(2, 7, 16, device=device)

    def step(chunk, caches):
        output = layer(chunk, chunk, chunk, is_causal=True, need_weights=need_weights, cache=caches[0])
        return output[0] if need_weights else output

    caches = [KVCache()]
    with torch.no_grad():
        full = layer(x, x, x, is_causal=True)
        stepwise = decode(step, x, SCHEDULES[schedule], caches)
    torch.testing.assert_close(stepwise, full, atol=1e-5, rtol=1e-5)
    assert len(caches[0]) == 7


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_a_stack_of_two_blocks_decodes_with_one_cache_per_block(schedule, num_kv_heads, device):
    torch.manual_seed(0)
    blocks = [TransformerBlock(16, 4, num_kv_heads=num_kv_heads).to(device).eval() for _ in range(2)]
    x = torch.randn(2, 7, 16, device=device)

    def stack(chunk, caches):
        for block, cache in zip(blocks, caches, strict=True):
            chunk = block(chunk, is_causal=True, cache=cache)
        return chunk

    caches = [KVCache(), KVCache()]
    with torch.no_grad():
        full = stack(x, [None, None])
        stepwise = decode(stack, x, SCHEDULES[schedule], caches)
    torch.testing.assert_close(stepwise, full, atol=1e-5, rtol=1e-5)
    assert [len(cache) for cache in caches] == [7, 7]


@pytest.mark.parametrize("device", DEVICES)
def test_padding_mask_covers_the_cached_positions(device):
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).to(device).eval()
    x = torch.randn(2, 5, 8, device=device)
    real = torch.tensor([[True] * 5, [False, True, True, True, True]], device=device)  # the second sequence is left-padded
    cache = KVCache()
    with torch.no_grad():
        full = layer(x, x, x, is_causal=True, key_padding_mask=real)
        prefill = layer(x[:, :3], x[:, :3], x[:, :3], is_causal=True, key_padding_mask=real[:, :3], cache=cache)
        steps = [layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True, key_padding_mask=real[:, :t + 1], cache=cache)
                 for t in (3, 4)]
    torch.testing.assert_close(torch.cat([prefill, *steps], dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("num_heads, num_kv_heads", [(8, 8), (8, 4), (8, 2), (8, 1)])
def test_cache_bytes_follow_the_formula_and_shrink_with_fewer_key_value_heads(num_heads, num_kv_heads):
    batch, length, head_dim = 2, 6, 4
    layer = MultiHeadAttention(num_heads * head_dim, num_heads, num_kv_heads=num_kv_heads).eval()
    x = torch.randn(batch, length, num_heads * head_dim)
    cache = KVCache()
    with torch.no_grad():
        layer(x, x, x, is_causal=True, cache=cache)
    element = x.element_size()
    assert cache.nbytes == 2 * batch * num_kv_heads * head_dim * length * element
    full_size = 2 * batch * num_heads * head_dim * length * element  # what an ordinary multi-head layer caches
    assert cache.nbytes * (num_heads // num_kv_heads) == full_size
    assert cache.keys.shape == (batch, num_kv_heads, length, head_dim)


def test_preallocated_cache_writes_in_place_and_equals_kv_cache():
    from attn.kvcache import PreallocatedKVCache

    generator = torch.Generator().manual_seed(0)
    chunks = [torch.randn(2, 3, size, 4, generator=generator) for size in (3, 1, 1, 2)]
    plain, preallocated = KVCache(), PreallocatedKVCache(capacity=8)
    assert repr(preallocated) == "PreallocatedKVCache(capacity=8, empty)" and preallocated.allocated_nbytes == 0
    addresses = set()
    for chunk in chunks:
        expected_keys, expected_values = plain.append(chunk, chunk + 1)
        keys, values = preallocated.append(chunk, chunk + 1)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        addresses.add(keys.data_ptr())
    assert len(addresses) == 1, "every append wrote into the same buffer"
    assert len(preallocated) == 7 and preallocated.nbytes == plain.nbytes == 2 * 2 * 3 * 7 * 4 * 4
    assert preallocated.allocated_nbytes == 2 * 2 * 3 * 8 * 4 * 4
    chunks[0].zero_()
    assert not torch.equal(preallocated.keys[:, :, :3], chunks[0]), "the cache keeps its own copy"
    with pytest.raises(ValueError, match="room for 8 positions, 7 are filled and 2 more do not fit"):
        preallocated.append(torch.zeros(2, 3, 2, 4), torch.zeros(2, 3, 2, 4))
    assert len(preallocated) == 7, "a refused append changes nothing"
    with pytest.raises(ValueError, match="batch size 2 in the cache, 1 now"):
        preallocated.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    preallocated.reset()
    assert len(preallocated) == 0 and preallocated.keys is None
    keys, _ = preallocated.append(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4))  # a new shape: new buffers
    assert keys.shape == (1, 1, 2, 4) and preallocated.allocated_nbytes == 2 * 1 * 1 * 8 * 4 * 4


@pytest.mark.parametrize("capacity", [0, -3, 2.5, "8", None, True])
def test_preallocated_cache_refuses_a_bad_capacity(capacity):
    from attn.kvcache import PreallocatedKVCache

    error = ValueError if isinstance(capacity, int) and not isinstance(capacity, bool) else TypeError
    with pytest.raises(error, match="capacity must be"):
        PreallocatedKVCache(capacity)


def test_a_model_decodes_through_preallocated_caches_as_through_kv_caches():
    from attn.kvcache import PreallocatedKVCache
    from attn.models.decoder import Decoder, stepwise_logits

    torch.manual_seed(0)
    model = Decoder(vocab_size=9, max_length=10, embed_dim=16, num_heads=4, num_layers=2, num_kv_heads=2).eval()
    tokens = torch.randint(9, (3, 10), generator=torch.Generator().manual_seed(1))
    caches = [PreallocatedKVCache(capacity=10) for _ in model.blocks]
    with torch.no_grad():
        logits = torch.cat([model(tokens[:, :4], caches)] + [model(tokens[:, t:t + 1], caches) for t in range(4, 10)], 1)
        torch.testing.assert_close(logits, stepwise_logits(model, tokens), atol=1e-6, rtol=0)
        torch.testing.assert_close(logits, model(tokens), atol=1e-5, rtol=0)


def test_the_lines_lesson10_prints_from_the_layer_are_there():
    """Lesson 10 prints MultiHeadAttention.forward from its key projection to the append."""
    import inspect

    lines = inspect.getsource(MultiHeadAttention.forward).splitlines()
    first = next(i for i, line in enumerate(lines) if "self.key_proj" in line)
    last = next(i for i, line in enumerate(lines) if "cache.append" in line)
    assert 0 < last - first < 10


def test_the_append_lesson10_prints_fits_the_output_column():
    """Lesson 10 prints KVCache.append: every line fits the book's output block (78 characters)."""
    import inspect

    too_long = [line for line in inspect.getsource(KVCache.append).splitlines() if len(line) > 78]
    assert not too_long, too_long
