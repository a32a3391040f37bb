"""Lesson 20's teaching versions equal attn.distributed's: the merge and partial attention, the positions of each
cut, the ring as loops and in processes, the backward as loops, and the all-to-all as a transposition."""

import multiprocessing

import pytest
import torch
from torch.nn import functional

from attn.distributed import shard_positions, spawn
from attn.distributed.blocks import block_attention, merge_partials
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson20():
    return teaching_namespace(ROOT / "lessons" / "20_attention_across_devices.ipynb")


def _tensors(length, seed, width=6):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(length, width, dtype=torch.float64, generator=generator) for _ in range(4)]


def test_partial_attention_and_merge_equal_the_package(lesson20):
    query, key, value, _ = _tensors(10, 0)
    positions = torch.arange(10)
    for split in (1, 4, 9):
        keep_a = positions[:split][None, :] <= positions[:, None]
        keep_b = positions[split:][None, :] <= positions[:, None]
        a = lesson20["partial_attention"](query, key[:split], value[:split], keep_a)
        b = lesson20["partial_attention"](query, key[split:], value[split:], keep_b)
        package_a = block_attention(query[None, None], key[None, None, :split], value[None, None, :split],
                                    positions, positions[:split], True)
        torch.testing.assert_close(a[0], package_a[0][0, 0], rtol=0, atol=1e-12)
        assert torch.equal(torch.isinf(a[1]), torch.isinf(package_a[1][0, 0]))
        merged, lse = lesson20["merge"](*a, *b)
        package, package_lse = merge_partials(a[0], a[1], b[0], b[1])
        torch.testing.assert_close(merged, package, rtol=0, atol=1e-12)
        whole = functional.scaled_dot_product_attention(query[None], key[None], value[None], is_causal=True)[0]
        torch.testing.assert_close(merged, whole, rtol=0, atol=1e-12)
        assert not torch.isnan(lse).any()


def test_positions_of_equals_shard_positions(lesson20):
    for layout in ("contiguous", "zigzag"):
        for length, world_size in ((16, 4), (23, 4), (9, 3), (7, 1)):
            mine = lesson20["positions_of"](length, world_size, layout)
            assert all(torch.equal(a, b) for a, b in zip(mine, shard_positions(length, world_size, layout), strict=True))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ring_by_loops_and_in_processes_equal_one_device(lesson20, world_size):
    query, key, value, _ = _tensors(4 * world_size + 3, world_size)
    for is_causal in (False, True):
        expected = functional.scaled_dot_product_attention(query[None], key[None], value[None], is_causal=is_causal)[0]
        for layout in ("contiguous", "zigzag"):
            loops = lesson20["ring_by_loops"](query, key, value, world_size, layout, is_causal)
            torch.testing.assert_close(loops, expected, rtol=0, atol=1e-12)
            rows = spawn(lesson20["ring_process"], world_size, query, key, value, layout, is_causal)
            for rank, positions in enumerate(shard_positions(len(query), world_size, layout)):
                torch.testing.assert_close(rows[rank], expected[positions], rtol=0, atol=1e-12)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_ring_backward_by_loops_equals_autograd(lesson20, world_size):
    query, key, value, grad = _tensors(4 * world_size + 1, 10 + world_size)
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]
    functional.scaled_dot_product_attention(*(t[None] for t in leaves), is_causal=True)[0].backward(grad)
    for layout in ("contiguous", "zigzag"):
        grads = lesson20["ring_backward_by_loops"](query, key, value, grad, world_size, layout)
        for got, leaf in zip(grads, leaves, strict=True):
            torch.testing.assert_close(got, leaf.grad, rtol=0, atol=1e-12)


def test_all_to_all_by_loops_is_a_transposition(lesson20):
    pieces = [[(i, j) for j in range(3)] for i in range(3)]
    received = lesson20["all_to_all_by_loops"](pieces)
    assert all(received[j][i] == (i, j) for i in range(3) for j in range(3))
    assert len(received) == 3


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ulysses_process_equals_one_device(lesson20, world_size):
    generator = torch.Generator().manual_seed(20 + world_size)
    query, key, value = (torch.randn(4, 4 * world_size + 3, 6, dtype=torch.float64, generator=generator)
                         for _ in range(3))
    for is_causal in (False, True):
        expected = functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal)
        rows = spawn(lesson20["ulysses_process"], world_size, query, key, value, is_causal)
        torch.testing.assert_close(torch.cat(rows, dim=1), expected, rtol=0, atol=1e-12)
