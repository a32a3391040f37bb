"""Lesson 19's paged KV cache: pages, block tables, the loop and the gather equal to a contiguous cache (float64),
windows in pages, shared prefixes with copy-on-write, and PyTorch's own PagedAttention on the same pages."""

import math

import pytest
import torch

from attn.serving import PagedKVCache, chunk_attention, merge_attention, paged_attention
from attn.serving.reference import torch_paged_attention


def contiguous_attention(query, keys, values, query_position, window=None):
    """query (H, d) at ``query_position`` over keys, values (H_kv, T, d): the reference, written out."""
    groups = query.shape[0] // keys.shape[0]
    keys, values = keys.repeat_interleave(groups, 0), values.repeat_interleave(groups, 0)  # (H, T, d)
    scores = (keys @ query[:, :, None])[..., 0] / math.sqrt(query.shape[-1])  # (H, T)
    positions = torch.arange(keys.shape[1])
    if window is not None:
        scores = scores.masked_fill(positions <= query_position - window, -math.inf)
    return (torch.softmax(scores, -1)[:, None, :] @ values)[:, 0]  # (H, d)


def paged_attention_loop(query, cache, seq):
    """The lesson's loop version: walk the block table page by page, then softmax over what was read."""
    keys, values = [], []
    for index, page in enumerate(cache.block_tables[seq]):
        used = min(cache.page_size, cache.lengths[seq] - index * cache.page_size)
        keys.append(cache.key_pages[0, page, :used].transpose(0, 1))  # (H_kv, used, d)
        values.append(cache.value_pages[0, page, :used].transpose(0, 1))
    return contiguous_attention(query, torch.cat(keys, 1), torch.cat(values, 1), cache.lengths[seq] - 1)


def filled_cache(lengths, page_size=4, num_pages=32, kv_heads=2, head_dim=8, seed=0):
    """A float64 cache holding sequences of ``lengths``, appended in random interleaved pieces; and the truth."""
    generator = torch.Generator().manual_seed(seed)
    cache = PagedKVCache(num_pages, page_size, kv_heads, head_dim, dtype=torch.float64)
    truth = {seq: (torch.randn(kv_heads, n, head_dim, generator=generator, dtype=torch.float64),
                   torch.randn(kv_heads, n, head_dim, generator=generator, dtype=torch.float64))
             for seq, n in enumerate(lengths)}
    done = dict.fromkeys(truth, 0)
    while any(done[seq] < n for seq, n in enumerate(lengths)):  # interleaved: pages of sequences alternate in the pool
        for seq, n in enumerate(lengths):
            size = min(int(torch.randint(1, 6, (), generator=generator)), n - done[seq])
            if size:
                keys, values = truth[seq]
                cache.append(seq, keys[:, done[seq]:done[seq] + size], values[:, done[seq]:done[seq] + size])
                done[seq] += size
    return cache, truth


def test_pages_hold_what_a_contiguous_cache_holds_and_attention_over_them_equals_it():
    lengths = [5, 13, 1, 8]
    cache, truth = filled_cache(lengths)
    assert cache.num_free_pages == 32 - sum(-(-n // 4) for n in lengths)
    query = torch.randn(len(lengths), 4, 1, 8, dtype=torch.float64)  # H = 4 queries heads, H_kv = 2
    tables, counts = cache.block_table_tensor(range(len(lengths))), torch.tensor(lengths)
    gathered, _ = paged_attention(query, cache.key_pages[0], cache.value_pages[0], tables, counts)
    for seq, n in enumerate(lengths):
        keys, values = cache.read(seq)
        assert torch.equal(keys, truth[seq][0]) and torch.equal(values, truth[seq][1])
        expected = contiguous_attention(query[seq, :, 0], *truth[seq], n - 1)
        torch.testing.assert_close(paged_attention_loop(query[seq, :, 0], cache, seq), expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(gathered[seq, :, 0], expected, rtol=0, atol=1e-12)
    cache.free(1)
    assert cache.num_free_pages == 32 - sum(-(-n // 4) for n in (5, 1, 8))


@pytest.mark.parametrize("page_size", [3, 4])
def test_a_window_frees_the_pages_it_leaves_and_attention_over_the_rest_is_the_windowed_attention(page_size):
    window, length = 6, 23  # a page size of 4 does not divide 6 (nor 3 the length)
    cache, truth = filled_cache([length], page_size=page_size)
    freed = cache.free_outside_window(0, window)
    oldest_visible = length - window + 1  # the next query (position 23) sees 18 .. 23
    assert freed == oldest_visible // page_size
    assert all(page is None for page in cache.block_tables[0][:freed])
    assert cache.block_tables[0][freed] is not None
    new_key, new_value = torch.randn(2, 1, 8, dtype=torch.float64), torch.randn(2, 1, 8, dtype=torch.float64)
    cache.append(0, new_key, new_value)  # the next token, at position 23: its key appended, then it attends
    query = torch.randn(1, 4, 1, 8, dtype=torch.float64)
    tables = cache.block_table_tensor([0])
    output, _ = paged_attention(query, cache.key_pages[0], cache.value_pages[0], tables, torch.tensor([length + 1]),
                                window=window)
    keys, values = torch.cat((truth[0][0], new_key), 1), torch.cat((truth[0][1], new_value), 1)
    expected = contiguous_attention(query[0, :, 0], keys, values, length, window)
    torch.testing.assert_close(output[0, :, 0], expected, rtol=0, atol=1e-12)


def test_chunked_prefill_merged_by_log_sum_exp_equals_attention_over_everything():
    generator = torch.Generator().manual_seed(1)
    cache, truth = filled_cache([9])
    chunk = 5
    query = torch.randn(1, 4, chunk, 8, dtype=torch.float64, generator=generator)
    new_keys = torch.randn(1, 2, chunk, 8, dtype=torch.float64, generator=generator)
    new_values = torch.randn(1, 2, chunk, 8, dtype=torch.float64, generator=generator)
    tables = cache.block_table_tensor([0])
    cached = paged_attention(query, cache.key_pages[0], cache.value_pages[0], tables, torch.tensor([9]))
    own = chunk_attention(query, new_keys, new_values, torch.tensor([chunk]))
    merged, _ = merge_attention(*cached, *own)
    keys, values = torch.cat((truth[0][0], new_keys[0]), 1), torch.cat((truth[0][1], new_values[0]), 1)
    for i in range(chunk):
        expected = contiguous_attention(query[0, :, i], keys[:, :9 + i + 1], values[:, :9 + i + 1], 9 + i)
        torch.testing.assert_close(merged[0, :, i], expected, rtol=0, atol=1e-12)


def test_shared_prefixes_are_found_by_name_and_copied_before_a_write():
    cache = PagedKVCache(16, 4, 1, 2, dtype=torch.float64)
    prompt = list(range(10))  # two full pages and a partial one
    assert cache.add_sequence("a", prompt) == 0
    slots = cache.reserve("a", 10, prompt)
    cache.write(0, slots, torch.arange(10.0, dtype=torch.float64)[:, None, None].expand(10, 1, 2), torch.zeros(10, 1, 2,
                dtype=torch.float64))
    assert cache.add_sequence("b", prompt[:8] + [99, 98]) == 8  # the two full pages are shared
    assert cache.block_tables["b"] == cache.block_tables["a"][:2]
    assert [cache.ref_counts[page] for page in cache.block_tables["a"]] == [2, 2, 1]
    assert cache.add_sequence("c", prompt[:8]) == 7  # found whole: its last position is recomputed...
    shared = cache.block_tables["c"][1]
    cache.reserve("c", 1, [7])  # ...so writing it copies the shared page first
    assert cache.block_tables["c"][1] != shared and cache.copies == 1
    assert torch.equal(cache.read("c")[0], cache.read("a")[0][:, :8])
    cache.free("a")
    cache.free("b")
    assert cache.ref_counts[shared] == 0 and shared in cache.free_pages
    assert cache.add_sequence("d", prompt) == 8  # freed pages keep their names until handed out again
    cache.fork("d", "e")  # a fork shares the partial tail too: its first write copies it
    cache.reserve("d", 3, [8, 9, 10])
    cache.reserve("e", 1, [50])
    assert cache.block_tables["d"][2] != cache.block_tables["e"][2]


def test_pytorch_paged_attention_reads_the_same_pages():
    lengths = [5, 13, 1, 8]
    cache, _ = filled_cache(lengths)
    cache32 = PagedKVCache(32, 4, 2, 8)
    cache32.key_pages.copy_(cache.key_pages)
    cache32.value_pages.copy_(cache.value_pages)
    cache32.block_tables, cache32.lengths = cache.block_tables, cache.lengths
    query = torch.randn(len(lengths), 4, 1, 8)
    ours, _ = paged_attention(query, cache32.key_pages[0], cache32.value_pages[0],
                              cache32.block_table_tensor(range(4)), torch.tensor(lengths))
    theirs = torch_paged_attention(cache32, range(4), query)
    difference = (ours - theirs).abs().max().item()
    print(f"largest difference from PyTorch's PagedAttention (float32): {difference:.1e}")
    assert difference < 1e-5


@pytest.mark.parametrize(("arguments", "error"), [
    ((0, 4, 2, 8), ValueError), ((4, 0, 2, 8), ValueError), ((4, 4.5, 2, 8), TypeError), ((2**40, 4, 2, 8), ValueError),
])
def test_hostile_pools_get_a_sentence(arguments, error):
    with pytest.raises(error, match="must"):
        PagedKVCache(*arguments)


def test_a_full_pool_refuses_with_a_sentence_and_takes_nothing():
    cache = PagedKVCache(2, 4, 1, 2)
    cache.append("a", torch.zeros(1, 8, 2), torch.zeros(1, 8, 2))
    with pytest.raises(ValueError, match="free pages"):
        cache.append("a", torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    assert cache.lengths["a"] == 8
    with pytest.raises(ValueError, match="not in the cache"):
        cache.read("nobody")
