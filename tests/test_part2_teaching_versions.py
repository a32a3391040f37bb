"""The teaching versions of lessons 8 and 9 (loops written out in the lesson) agree with the attn package."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn import sinusoidal_positions
from attn.decoder import Decoder, generate
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson8():
    return teaching_namespace(ROOT / "lessons" / "08_order_and_blocks.ipynb")


@pytest.fixture(scope="module")
def lesson9():
    return teaching_namespace(ROOT / "lessons" / "09_generating.ipynb")


@given(st.integers(1, 40), st.integers(1, 12))
def test_sinusoidal_loop_equals_the_package(lesson8, length, half_dim):
    looped = lesson8["sinusoidal_loop"](length, 2 * half_dim)
    np.testing.assert_allclose(looped, sinusoidal_positions(length, 2 * half_dim), rtol=0, atol=1e-12)


def test_sinusoidal_loop_follows_vaswani_at_known_entries(lesson8):
    table = lesson8["sinusoidal_loop"](3, 4)
    np.testing.assert_allclose(table[0], [0.0, 1.0, 0.0, 1.0])  # position 0: sin 0 = 0, cos 0 = 1
    np.testing.assert_allclose(table[2], [np.sin(2), np.cos(2), np.sin(2 / 100), np.cos(2 / 100)])  # 10000^(2/4) = 100


@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_generate_without_cache_equals_the_package_both_ways(lesson9, num_kv_heads):
    torch.manual_seed(0)
    model = Decoder(vocab_size=7, max_length=12, embed_dim=16, num_heads=2, num_layers=2, num_kv_heads=num_kv_heads).eval()
    prompt = torch.randint(7, (3, 2), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        taught = lesson9["generate_without_cache"](model, prompt, 10)
    assert taught.shape == (3, 12)
    assert torch.equal(taught, generate(model, prompt, 10, use_cache=False))
    assert torch.equal(taught, generate(model, prompt, 10, use_cache=True))
