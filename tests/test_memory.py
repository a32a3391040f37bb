"""Lesson 11's memory claim, measured: the explicit path's peak grows like T^2, the tiled one's like T.

Peaks come from attn.memory.peak_bytes (the process's resident-memory high-water mark on Linux).
The ranges leave room for the allocator: about 4x per doubling of T against about 2x.
"""

import sys

import pytest
import torch

from attn.flash import flash_attention, tiled_attention
from attn.memory import peak_bytes
from attn.multihead import explicit_attention

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak_bytes reads Linux's /proc")


def inputs(length, requires_grad=False):
    generator = torch.Generator().manual_seed(length)
    return [torch.randn(1, 1, length, 64, generator=generator, requires_grad=requires_grad) for _ in range(3)]


def tiled(query, key, value):
    return tiled_attention(query, key, value, block_q=128, block_k=128)


def test_explicit_peak_grows_about_4x_per_doubling_and_tiled_about_2x():
    for attend in (explicit_attention, tiled):  # a first call sets up what later calls reuse
        peak_bytes(attend, *inputs(256))
    explicit = [peak_bytes(explicit_attention, *inputs(length)) for length in (2048, 4096)]
    tiles = [peak_bytes(tiled, *inputs(length)) for length in (4096, 8192)]
    assert 3.0 < explicit[1] / explicit[0] < 5.0, explicit
    assert 1.4 < tiles[1] / tiles[0] < 2.8, tiles
    assert explicit[1] > 2 * 4096**2 * 4 * 0.9  # at least the scores and the weights, T x T float32 each


def training_step(attend, length):
    query, key, value = inputs(length, requires_grad=True)

    def step():
        attend(query, key, value).sum().backward()

    return peak_bytes(step)


def test_recomputing_backward_keeps_training_memory_linear():
    explicit = training_step(lambda q, k, v: explicit_attention(q, k, v)[0], 2048)
    recomputed = training_step(lambda q, k, v: flash_attention(q, k, v, block_q=128, block_k=128), 2048)
    assert explicit > 10 * recomputed, (explicit, recomputed)


def test_peak_bytes_refuses_what_it_cannot_measure():
    with pytest.raises(TypeError, match="peak_bytes measures a function, got int"):
        peak_bytes(3)
