"""Lesson 12's teaching versions (loops written out in the lesson) agree with the attn package and PyTorch."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn import scaled_dot_product_attention, softmax
from attn.flash import online_softmax, tiled_attention
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson12():
    return teaching_namespace(ROOT / "lessons" / "12_inside_the_kernel.ipynb")


@st.composite
def rows(draw):
    length = draw(st.integers(1, 25))
    generator = np.random.default_rng(draw(st.integers(0, 2**31)))
    row = generator.normal(scale=10.0, size=length)
    row[generator.random(length) < draw(st.sampled_from([0.0, 0.5, 1.0]))] = -math.inf
    return row


@given(row=rows(), block_size=st.integers(1, 30))
def test_online_softmax_loop_equals_the_package_and_the_stable_softmax(lesson12, row, block_size):
    looped = lesson12["online_softmax_loop"](row, block_size)
    np.testing.assert_allclose(looped, softmax(row), rtol=0, atol=1e-12)
    np.testing.assert_allclose(looped, online_softmax(row, block_size), rtol=0, atol=1e-12)


@settings(max_examples=60)
@given(seed=st.integers(0, 2**31), length=st.integers(1, 40), dim=st.integers(1, 9), block_size=st.integers(1, 45))
def test_attend_one_query_equals_lesson_5(lesson12, seed, length, dim, block_size):
    generator = np.random.default_rng(seed)
    query, keys, values = generator.normal(size=dim), generator.normal(size=(length, dim)), generator.normal(size=(length, 3))
    expected, _ = scaled_dot_product_attention(query[None], keys, values)
    np.testing.assert_allclose(lesson12["attend_one_query"](query, keys, values, block_size), expected[0], atol=1e-12)


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**31), t_q=st.integers(1, 30), t_k=st.integers(1, 30),
    block_q=st.integers(1, 35), block_k=st.integers(1, 35),
)
def test_tiled_loop_equals_the_package_and_counts_the_formula(lesson12, seed, t_q, t_k, block_q, block_k):
    generator = np.random.default_rng(seed)
    query, key, value = generator.normal(size=(t_q, 8)), generator.normal(size=(t_k, 8)), generator.normal(size=(t_k, 8))
    memory = lesson12["SlowMemory"]()
    output, logsumexp = lesson12["tiled_attention_loop"](query, key, value, block_q, block_k, memory)
    ours, ours_lse = tiled_attention(*(torch.from_numpy(a)[None, None] for a in (query, key, value)), block_q=3, block_k=5)
    np.testing.assert_allclose(output, ours[0, 0].numpy(), atol=1e-12)
    np.testing.assert_allclose(logsumexp, ours_lse[0, 0].numpy(), atol=1e-12)
    query_tiles = -(-t_q // block_q)
    assert memory.reads == t_q * 8 + query_tiles * 2 * t_k * 8  # Q once, K and V once per query tile
    assert memory.writes == t_q * 8 + t_q  # the output and one log-sum-exp per row


@pytest.mark.parametrize(("length", "dim"), [(1, 1), (7, 3), (64, 16)])
def test_explicit_counted_equals_lesson_5_and_counts_4t2_plus_4td(lesson12, length, dim):
    generator = np.random.default_rng(length)
    query, key, value = (generator.normal(size=(length, dim)) for _ in range(3))
    memory = lesson12["SlowMemory"]()
    output = lesson12["explicit_attention_counted"](query, key, value, memory)
    np.testing.assert_allclose(output, scaled_dot_product_attention(query, key, value)[0], atol=1e-12)
    assert memory.reads + memory.writes == 4 * length**2 + 4 * length * dim
