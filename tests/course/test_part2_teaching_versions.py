"""The teaching versions of lessons 8 to 11 (loops written out in the lesson) agree with the attn package."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn import apply_rotary, sinusoidal_positions
from attn.models.decoder import Decoder, generate
from attn.models.induction import (
    duplicate_token_scores,
    induction_scores,
    make_repeat_data,
    previous_occurrence,
    previous_token_scores,
)
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson8():
    return teaching_namespace(ROOT / "lessons" / "08_order.ipynb")


@pytest.fixture(scope="module")
def lesson9():
    return teaching_namespace(ROOT / "lessons" / "09_transformer_block.ipynb")


@pytest.fixture(scope="module")
def lesson10():
    return teaching_namespace(ROOT / "lessons" / "10_generating.ipynb")


@pytest.fixture(scope="module")
def lesson11():
    return teaching_namespace(ROOT / "lessons" / "11_induction_heads.ipynb")


@given(st.integers(1, 40), st.integers(1, 12))
def test_sinusoidal_loop_equals_the_package(lesson8, length, half_dim):
    looped = lesson8["sinusoidal_loop"](length, 2 * half_dim)
    np.testing.assert_allclose(looped, sinusoidal_positions(length, 2 * half_dim), rtol=0, atol=1e-12)


def test_sinusoidal_loop_follows_vaswani_at_known_entries(lesson8):
    table = lesson8["sinusoidal_loop"](3, 4)
    np.testing.assert_allclose(table[0], [0.0, 1.0, 0.0, 1.0])  # position 0: sin 0 = 0, cos 0 = 1
    np.testing.assert_allclose(table[2], [np.sin(2), np.cos(2), np.sin(2 / 100), np.cos(2 / 100)])  # 10000^(2/4) = 100


@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_generate_without_cache_equals_the_package_both_ways(lesson10, num_kv_heads):
    torch.manual_seed(0)
    model = Decoder(vocab_size=7, max_length=12, embed_dim=16, num_heads=2, num_layers=2, num_kv_heads=num_kv_heads).eval()
    prompt = torch.randint(7, (3, 2), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        taught = lesson10["generate_without_cache"](model, prompt, 10)
    assert taught.shape == (3, 12)
    assert torch.equal(taught, generate(model, prompt, 10, use_cache=False))
    assert torch.equal(taught, generate(model, prompt, 10, use_cache=True))


def package_guesses(tokens):
    """tokens (1, T) -> the lookup's T - 1 guesses from attn.models.induction.previous_occurrence (None: no entry)."""
    earlier = previous_occurrence(tokens)[0].tolist()  # (T,)
    return [None if position < 0 else tokens[0, position + 1].item() for position in earlier[:-1]]


@given(seed=st.integers(0, 10_000), length=st.integers(1, 24), vocab_size=st.integers(1, 8))
def test_the_lookup_dictionary_equals_previous_occurrence(lesson11, seed, length, vocab_size):
    tokens = torch.randint(vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))  # repeats of any kind
    assert lesson11["predict_by_lookup"](tokens[0].tolist()) == package_guesses(tokens)


def test_the_lookup_dictionary_on_a_repeated_block(lesson11):
    data = make_repeat_data(1, length=20, block_lengths=6, block_start=2, seed=4)  # copies at 2-7 and 8-13
    tokens = data.tokens[0].tolist()
    guesses = lesson11["predict_by_lookup"](tokens)
    assert guesses == package_guesses(data.tokens)
    assert [guesses[t] for t in range(8, 13)] == tokens[9:14], "every guess inside the second copy is right"
    assert all(guesses[t] is None for t in range(8)) and all(guesses[t] is None for t in range(14, 19))


def random_weights(seed, batch, heads, length):
    """(B, H, T, T) causal attention weights: each row a softmax over the keys up to the query."""
    scores = torch.randn(batch, heads, length, length, generator=torch.Generator().manual_seed(seed))
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)


@given(seed=st.integers(0, 10_000), batch=st.integers(1, 4), length=st.integers(2, 20), vocab_size=st.integers(1, 10),
       keep=st.floats(0.2, 1.0))
def test_the_lessons_scores_equal_the_package(lesson11, seed, batch, length, vocab_size, keep):
    """Lesson 11's loop-and-index scores against attn.models.induction's, on random weights and tokens with repeats of any
    kind (a token may occur many times: both take its most recent earlier occurrence) and random chosen queries."""
    generator = torch.Generator().manual_seed(seed)
    weights = random_weights(seed, batch, 2, length)  # (B, H, T, T)
    tokens = torch.randint(vocab_size, (batch, length), generator=generator)
    chosen = torch.rand(batch, length, generator=generator) < keep  # (B, T) bool
    found = lesson11["repeats"](tokens, chosen)
    has_earlier = (previous_occurrence(tokens) >= 0) & chosen
    for head in range(2):
        head_weights = weights[:, head]  # (B, T, T)
        torch.testing.assert_close(lesson11["previous_token_score"](head_weights), previous_token_scores(weights)[head])
        if not has_earlier.any():
            assert found.shape == (3, 0)
            continue
        torch.testing.assert_close(lesson11["induction_score"](head_weights, found),
                                   induction_scores(weights, tokens, chosen)[head])
        torch.testing.assert_close(lesson11["duplicate_token_score"](head_weights, found),
                                   duplicate_token_scores(weights, tokens, chosen)[head])


def test_the_lessons_scores_on_known_patterns(lesson11):
    """A head that looks one back scores 1 as a previous-token head; one that looks after the earlier copy scores 1
    as an induction head and 0 as a duplicate-token head, and the other way round."""
    data = make_repeat_data(3, length=16, block_lengths=5, block_start=2, vocab_size=20, seed=7)
    chosen = torch.nn.functional.pad(data.second_copy, (1, 0))  # (N, T): the queries of the second copy
    found = lesson11["repeats"](data.tokens, chosen)
    assert found.shape == (3, 3 * 4), "four queries per second copy have an earlier occurrence"
    one_back = torch.zeros(3, 16, 16)
    one_back[:, 0, 0] = 1
    one_back[:, torch.arange(1, 16), torch.arange(0, 15)] = 1
    assert lesson11["previous_token_score"](one_back).item() == 1.0
    after_copy = torch.zeros(3, 16, 16)
    sequences, queries, earlier = found
    after_copy[sequences, queries, earlier + 1] = 1
    assert lesson11["induction_score"](after_copy, found).item() == 1.0
    assert lesson11["duplicate_token_score"](after_copy, found).item() == 0.0


# Lessons 8 and 9: rotary as a loop, the halves layout; LayerNorm and GELU by hand (issue 23).


def complex_rotary(x, positions):
    """An independent reference: pair i as the complex number x[2i] + j x[2i + 1], times e^(j p theta_i)."""
    dim = x.shape[-1]
    theta = 10000.0 ** (-np.arange(0, dim, 2) / dim)  # (d/2,)
    pairs = x[:, 0::2] + 1j * x[:, 1::2]  # (T, d/2)
    turned = pairs * np.exp(1j * np.asarray(positions, dtype=float)[:, None] * theta)
    out = np.empty_like(x)
    out[:, 0::2], out[:, 1::2] = turned.real, turned.imag
    return out


@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 10_000), st.integers(0, 3000))
def test_rotary_loop_equals_apply_rotary(lesson8, length, half_dim, seed, first_position):
    x = torch.randn(length, 2 * half_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    positions = torch.arange(length) * 7 + first_position  # (T,): any positions, not only 0, 1, 2, ...
    looped = lesson8["rotary_loop"](x, positions)
    torch.testing.assert_close(looped, apply_rotary(x, positions=positions), rtol=0, atol=1e-12)
    np.testing.assert_allclose(looped.numpy(), complex_rotary(x.numpy(), positions.numpy()), rtol=0, atol=1e-10)


def test_rotary_loop_turns_one_pair_by_one_radian_per_position(lesson8):
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # d = 2: theta_0 = 1
    turned = lesson8["rotary_loop"](x, [2])
    torch.testing.assert_close(turned, torch.tensor([[np.cos(2.0), np.sin(2.0)]], dtype=torch.float64))


@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 10_000))
def test_rotary_halves_is_apply_rotary_up_to_a_reordering(lesson8, length, half, seed):
    x = torch.randn(length, 2 * half, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    positions = torch.arange(length) + seed % 100
    to_pairs = torch.stack((torch.arange(half), torch.arange(half) + half), dim=1).flatten()  # 0, h, 1, h + 1, ...
    halves = lesson8["rotary_halves"](x, positions)
    torch.testing.assert_close(halves[:, to_pairs], apply_rotary(x[:, to_pairs], positions=positions), rtol=0, atol=1e-12)


def test_the_two_rotary_layouts_differ_without_the_reordering(lesson8):
    x = torch.randn(16, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    positions = torch.arange(16)
    difference = (lesson8["rotary_halves"](x, positions) - apply_rotary(x, positions=positions)).abs().max()
    assert difference > 1, "the layouts are different functions of the same input"
    halves = lesson8["rotary_halves"](x, torch.zeros(16, dtype=torch.long))
    torch.testing.assert_close(halves, x, rtol=0, atol=0)  # at position 0 nothing turns in either layout


@given(st.integers(1, 4), st.integers(2, 24), st.integers(0, 10_000))
def test_layer_norm_by_hand_equals_nn_layernorm(lesson9, tokens, embed, seed):
    generator = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(tokens, embed, dtype=torch.float64, generator=generator) + 5
    norm = torch.nn.LayerNorm(embed, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(embed, generator=generator))
        norm.bias.copy_(torch.randn(embed, generator=generator))
        torch.testing.assert_close(lesson9["layer_norm"](x, norm.weight, norm.bias), norm(x), rtol=0, atol=1e-12)


def test_layer_norm_divides_by_e_and_keeps_a_constant_token_finite(lesson9):
    token = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    assert lesson9["layer_norm"](token, 1.0, 0.0)[-1].item() == pytest.approx(3 / np.sqrt(3.5 + 1e-5), rel=1e-12)
    constant = lesson9["layer_norm"](torch.full((5,), 7.0, dtype=torch.float64), 1.0, 0.5)
    torch.testing.assert_close(constant, torch.full((5,), 0.5, dtype=torch.float64))  # eps: 0 / sqrt(eps), not 0 / 0


def test_gelu_by_hand_equals_nn_gelu_both_forms(lesson9):
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    torch.testing.assert_close(lesson9["gelu"](x), torch.nn.GELU()(x), rtol=0, atol=1e-14)
    torch.testing.assert_close(lesson9["gelu_tanh"](x), torch.nn.GELU(approximate="tanh")(x), rtol=0, atol=1e-14)
    assert (lesson9["gelu_tanh"](x) - lesson9["gelu"](x)).abs().max() > 1e-5, "an approximation, not the same function"
