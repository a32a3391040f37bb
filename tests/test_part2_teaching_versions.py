"""The teaching versions of lessons 8, 9 and 10 (loops written out in the lesson) agree with the attn package."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn import sinusoidal_positions
from attn.decoder import Decoder, generate
from attn.induction import make_repeat_data, previous_occurrence
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson8():
    return teaching_namespace(ROOT / "lessons" / "08_order_and_blocks.ipynb")


@pytest.fixture(scope="module")
def lesson9():
    return teaching_namespace(ROOT / "lessons" / "09_generating.ipynb")


@pytest.fixture(scope="module")
def lesson10():
    return teaching_namespace(ROOT / "lessons" / "10_induction_heads.ipynb")


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


def package_guesses(tokens):
    """tokens (1, T) -> the lookup's T - 1 guesses from attn.induction.previous_occurrence (None: no entry)."""
    earlier = previous_occurrence(tokens)[0].tolist()  # (T,)
    return [None if position < 0 else tokens[0, position + 1].item() for position in earlier[:-1]]


@given(seed=st.integers(0, 10_000), length=st.integers(1, 24), vocab_size=st.integers(1, 8))
def test_the_lookup_dictionary_equals_previous_occurrence(lesson10, seed, length, vocab_size):
    tokens = torch.randint(vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))  # repeats of any kind
    assert lesson10["predict_by_lookup"](tokens[0].tolist()) == package_guesses(tokens)


def test_the_lookup_dictionary_on_a_repeated_block(lesson10):
    data = make_repeat_data(1, length=20, block_lengths=6, block_start=2, seed=4)  # copies at 2-7 and 8-13
    tokens = data.tokens[0].tolist()
    guesses = lesson10["predict_by_lookup"](tokens)
    assert guesses == package_guesses(data.tokens)
    assert [guesses[t] for t in range(8, 13)] == tokens[9:14], "every guess inside the second copy is right"
    assert all(guesses[t] is None for t in range(8)) and all(guesses[t] is None for t in range(14, 19))
