"""Lesson 20's library against one-device attention, forward and backward in float64, in real gloo processes.

Each test starts its processes with ``attn.distributed.spawn`` and runs many cases inside one start, so the
whole file takes a few seconds. The autouse fixture proves that no test leaves a process behind.
"""

import multiprocessing

import pytest
import torch
from torch.nn import functional

from attn.distributed import (
    all_gather_bytes,
    causal_work,
    count_traffic,
    delta_rule_relay,
    latent_ring_attention,
    ring_attention,
    ring_bytes,
    shard,
    shard_positions,
    spawn,
    ulysses_attention,
    ulysses_bytes,
    unshard,
)
from attn.distributed.blocks import block_attention, merge_partials
from attn.latent import LatentAttention
from attn.linear import gated_delta_rule_loop

CASES = [(causal, layout) for causal in (False, True) for layout in ("contiguous", "zigzag")]


@pytest.fixture(autouse=True)
def no_process_left_behind():
    yield
    assert multiprocessing.active_children() == [], "a test left processes running"


def inputs(batch, heads, kv_heads, length, head_dim, value_dim, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, length, head_dim), (batch, kv_heads, length, head_dim), (batch, kv_heads, length, value_dim),
              (batch, heads, length, value_dim)]
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes]


def one_device(query, key, value, grad_output, is_causal):
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]
    output = functional.scaled_dot_product_attention(*leaves, is_causal=is_causal, enable_gqa=True)
    output.backward(grad_output)
    return [output.detach()] + [t.grad for t in leaves]


def _every_case(rank, world_size, attention, tensors):
    results = []
    for is_causal, layout in CASES:
        query, key, value, grad_output = (shard(t, rank, world_size, layout).clone() for t in tensors)
        leaves = [t.requires_grad_() for t in (query, key, value)]
        with count_traffic() as forward:
            output = attention(*leaves, is_causal=is_causal, layout=layout)
        with count_traffic() as backward:
            output.backward(grad_output)
        results.append(([output.detach()] + [t.grad for t in leaves], forward, backward))
    return results


def _largest_differences(attention, world_size, tensors):
    per_rank = spawn(_every_case, world_size, attention, tensors)
    worst = 0.0
    for case, (is_causal, layout) in enumerate(CASES):
        expected = one_device(*tensors, is_causal)
        for part in range(4):
            got = unshard([per_rank[rank][case][0][part] for rank in range(world_size)], layout)
            worst = max(worst, (got - expected[part]).abs().max().item())
    return worst, per_rank


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ring_attention_equals_one_device_forward_and_backward(world_size):
    tensors = inputs(2, 4, 2, 4 * world_size + 3, 8, 6)  # T not a multiple of N; grouped-query heads; d_v != d_k
    worst, _ = _largest_differences(ring_attention, world_size, tensors)
    assert worst < 1e-12, f"ring attention differs from one device by {worst:.1e}"


@pytest.mark.parametrize("world_size", [2, 4])
def test_ulysses_attention_equals_one_device_forward_and_backward(world_size):
    tensors = inputs(2, 4, 4, 5 * world_size + 1, 8, 6)
    worst, _ = _largest_differences(ulysses_attention, world_size, tensors)
    assert worst < 1e-12, f"Ulysses differs from one device by {worst:.1e}"


def test_counted_bytes_equal_the_formulas():
    batch, heads, kv_heads, length, head_dim, value_dim, world_size = 1, 4, 2, 24, 8, 6, 4
    tensors = inputs(batch, heads, kv_heads, length, head_dim, value_dim)
    sizes = (batch, heads, kv_heads, length, world_size, head_dim, value_dim, 8)
    for attention, formula in ((ring_attention, ring_bytes), (ulysses_attention, ulysses_bytes)):
        if attention is ulysses_attention:
            tensors = inputs(batch, heads, heads, length, head_dim, value_dim)
            sizes = (batch, heads, heads, length, world_size, head_dim, value_dim, 8)
        per_rank = spawn(_every_case, world_size, attention, tensors)
        expected = formula(*sizes)
        for rank in range(world_size):
            for _, forward, backward in per_rank[rank]:
                assert (forward.sent_bytes, backward.sent_bytes) == (expected["forward"], expected["backward"])
    gathered = all_gather_bytes(*sizes)
    assert gathered["forward"] == ring_bytes(*sizes)["forward"] and gathered["backward"] < ring_bytes(*sizes)["backward"]


def test_causal_work_contiguous_grows_with_rank_and_zigzag_balances():
    contiguous, zigzag = causal_work(4096, 8, "contiguous"), causal_work(4096, 8, "zigzag")
    assert sum(contiguous) == sum(zigzag) == 4096 * 4097 // 2
    assert contiguous == sorted(contiguous) and contiguous[-1] > 14 * contiguous[0]
    assert max(zigzag) - min(zigzag) <= 0.01 * max(zigzag)


def test_ring_computes_no_block_a_causal_query_cannot_see():
    tensors = inputs(1, 1, 1, 16, 4, 4)
    per_rank = spawn(_every_case, 4, ring_attention, tensors)
    computed = {layout: [per_rank[rank][CASES.index((True, layout))][1].pairs for rank in range(4)]
                for layout in ("contiguous", "zigzag")}
    assert computed["contiguous"] == [16, 32, 48, 64]  # 1, 2, 3, 4 blocks of 4 x 4 pairs: the diagonal one masked
    assert max(computed["zigzag"]) - min(computed["zigzag"]) <= 8


def test_shard_and_unshard_are_inverse_and_zigzag_pairs_head_with_tail():
    x = torch.arange(2 * 3 * 11 * 2, dtype=torch.float64).view(2, 3, 11, 2)
    for layout in ("contiguous", "zigzag"):
        for world_size in (1, 2, 3, 5):
            assert torch.equal(unshard([shard(x, r, world_size, layout) for r in range(world_size)], layout), x)
    assert [p.tolist() for p in shard_positions(8, 2, "zigzag")] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert [p.tolist() for p in shard_positions(7, 2, "contiguous")] == [[0, 1, 2, 3], [4, 5, 6]]


def test_merge_of_partials_equals_attention_over_all_keys_and_keeps_empty_rows_zero():
    query, key, value, _ = inputs(1, 2, 2, 9, 4, 3)
    positions = torch.arange(9)
    whole, whole_lse, _ = block_attention(query, key, value, positions, positions, True)
    first = block_attention(query, key[:, :, :4], value[:, :, :4], positions, positions[:4], True)
    second = block_attention(query, key[:, :, 4:], value[:, :, 4:], positions, positions[4:], True)
    merged, merged_lse = merge_partials(first[0], first[1], second[0], second[1])
    assert (merged - whole).abs().max() < 1e-14 and (merged_lse - whole_lse).abs().max() < 1e-14
    assert torch.isinf(second[1][:, :, :4]).all() and not second[0][:, :, :4].any()  # no key yet: zero, -inf
    empty, empty_lse = merge_partials(second[0][:, :, :4], second[1][:, :, :4], second[0][:, :, :4], second[1][:, :, :4])
    assert not torch.isnan(empty).any() and not empty.any()


def _beyond(rank, world_size, layer, x, recurrence, layout):
    pieces = shard(x[:, None], rank, world_size, layout)[:, 0]
    with count_traffic() as latent_traffic:
        latent = latent_ring_attention(layer, pieces, layout)
    q, k, v, alpha, beta = (shard(t if t.dim() == 4 else t[..., None], rank, world_size, "contiguous")
                            for t in recurrence)
    with count_traffic() as relay_traffic:
        relayed = delta_rule_relay(q, k, v, alpha[..., 0], beta[..., 0])
    return latent, relayed, latent_traffic.sent_bytes, relay_traffic.sent_bytes


def test_latent_ring_and_delta_relay_equal_one_device_and_send_what_they_should():
    torch.manual_seed(0)
    layer = LatentAttention(32, 4, 8, 6, 4, 6).double()
    x = torch.randn(2, 13, 32, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 13, d, generator=generator, dtype=torch.float64) for d in (4, 4, 5))
    k = functional.normalize(k, dim=-1)
    alpha, beta = (torch.rand(2, 3, 13, generator=generator, dtype=torch.float64) for _ in range(2))
    expected_relay, _ = gated_delta_rule_loop(q, k, v, alpha, beta)
    with torch.no_grad():
        expected_latent = layer(x)
    for world_size, layout in ((2, "zigzag"), (3, "contiguous")):
        results = spawn(_beyond, world_size, layer, x, (q, k, v, alpha, beta), layout)
        latent = unshard([r[0][:, None] for r in results], layout)[:, 0]
        relayed = unshard([r[1] for r in results], "contiguous")
        assert (latent - expected_latent).abs().max() < 1e-12
        assert (relayed - expected_relay).abs().max() < 1e-12
        lengths = [len(p) for p in shard_positions(13, world_size, layout)]
        for rank, result in enumerate(results):  # latents and rotary keys only: (8 + 4) float64 per position
            assert result[2] == sum(lengths[(rank - step) % world_size] for step in range(world_size - 1)) * 2 * 12 * 8
            assert result[3] == (0 if rank == world_size - 1 else 2 * 3 * 4 * 5 * 8)  # one state, whatever T


# Hostile input: a sentence, every process ended ------------------------------------------------------------


def test_without_a_process_group_each_function_says_so():
    query, key, value, _ = inputs(1, 2, 2, 4, 4, 4)
    for function in (ring_attention, ulysses_attention):
        with pytest.raises(ValueError, match="initialised process group"):
            function(query, key, value)


def _uneven(rank, world_size):
    query = torch.randn(1, 2, 3 + rank * 2, 4, dtype=torch.float64)  # 3 and 5: not a split tensor_split gives
    return ring_attention(query, query, query)


def _heads(rank, world_size):
    query = torch.randn(1, 4, 2, 4, dtype=torch.float64)
    return ulysses_attention(query, query, query)


def _dtypes(rank, world_size):
    query = torch.randn(1, 2, 3, 4, dtype=torch.float64 if rank else torch.float32)
    return ring_attention(query, query, query)


def _one_refuses(rank, world_size):
    query = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    return ring_attention(query, query if rank else query[..., :2], query)


def _too_short(rank, world_size):
    query = torch.randn(1, 2, 1, 4, dtype=torch.float64)
    return ring_attention(query, query, query, layout="zigzag")


@pytest.mark.parametrize("function, world_size, words", [
    (_uneven, 2, "lengths \\[3, 5\\]"), (_heads, 3, "must divide both the query heads"),
    (_dtypes, 2, "disagree on dtype"), (_one_refuses, 2, "must have query's d_k"),
    (_too_short, 2, "cannot be split over 2 processes in the zigzag layout"),
])
def test_bad_shards_get_a_sentence_from_every_process(function, world_size, words):
    with pytest.raises(ValueError, match=words):
        spawn(function, world_size)


def _sleeps(rank, world_size):
    import time
    time.sleep(60)


def _returns_a_lambda(rank, world_size):
    return lambda: rank


def test_spawn_refuses_bad_arguments_and_ends_every_process():
    with pytest.raises(TypeError, match="function to call"):
        spawn("not a function", 2)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        spawn(_sleeps, 0)
    with pytest.raises(RuntimeError, match="did not finish within 1 s"):
        spawn(_sleeps, 2, timeout=1)
    with pytest.raises(TypeError, match="cannot be sent back"):
        spawn(_returns_a_lambda, 2)
    assert spawn(_every_rank, 3) == [(0, 3), (1, 3), (2, 3)]


def _every_rank(rank, world_size):
    return rank, world_size


def _two_rings(rank, world_size, query):
    import torch.distributed as dist

    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every process creates every group, in one order
    mine, rank_in_group = groups[rank // 2], rank % 2
    pieces = shard(query, rank_in_group, 2, "zigzag")
    return [attention(pieces, pieces, pieces, is_causal=True, layout="zigzag", group=mine)
            for attention in (ring_attention, ulysses_attention)]


def test_a_subgroup_runs_its_own_ring():
    query = inputs(1, 2, 2, 9, 4, 4)[0]
    results = spawn(_two_rings, 4, query)
    expected = functional.scaled_dot_product_attention(query, query, query, is_causal=True)
    for first, second in ((0, 1), (2, 3)):
        for which in range(2):
            got = unshard([results[first][which], results[second][which]], "zigzag")
            assert (got - expected).abs().max() < 1e-12
