"""attn.masks: every mask the layer accepts becomes one 4-D keep-mask; the causal mask is aligned to the end of the keys."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn import KVCache
from attn.masks import add_causal, build_keep_mask, causal_keep_mask, open_empty_rows
from tests.attention_reference import full_keep_mask


@pytest.mark.parametrize("t_q, t_k", [(4, 4), (1, 5), (2, 6), (5, 3), (1, 1)])
def test_causal_keep_mask_is_end_aligned(t_q, t_k):
    mask = causal_keep_mask(t_q, t_k)
    assert mask.shape == (1, 1, t_q, t_k) and mask.dtype == torch.bool
    for i in range(t_q):
        position = t_k - t_q + i  # query i's place in the whole sequence
        assert mask[0, 0, i].tolist() == [j <= position for j in range(t_k)]


def test_causal_keep_mask_with_equal_lengths_is_torch_tril():
    assert torch.equal(causal_keep_mask(5, 5)[0, 0], torch.ones(5, 5, dtype=torch.bool).tril())


def test_add_causal_combines_with_a_keep_mask():
    keep = torch.tensor([True, False, True])[None, None, None]  # (1, 1, 1, T_k)
    assert add_causal(keep, False, 3, 3, "cpu") is keep
    combined = add_causal(keep, True, 3, 3, "cpu")
    assert combined[0, 0].tolist() == [[True, False, False], [True, False, False], [True, False, True]]
    assert torch.equal(add_causal(None, True, 2, 3, "cpu"), causal_keep_mask(2, 3))


def test_open_empty_rows():
    keep = torch.tensor([[True, False], [False, False]])[None, None]
    opened, has_any = open_empty_rows(keep)
    assert opened[0, 0].tolist() == [[True, False], [True, True]]
    assert has_any.shape == (1, 1, 2, 1) and has_any.flatten().tolist() == [True, False]


@pytest.mark.parametrize(
    "shape, normalised",
    [((), (1, 1, 1, 1)), ((7,), (1, 1, 1, 7)), ((5, 7), (1, 1, 5, 7)), ((2, 5, 7), (2, 1, 5, 7)), ((2, 3, 5, 7), (2, 3, 5, 7)),
     ((1, 7), (1, 1, 1, 7)), ((2, 1, 1), (2, 1, 1, 1))],
)
def test_every_rank_becomes_four_dimensional(shape, normalised):
    query, key = torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 7, 4)  # (B, H, T_q, d), (B, H, T_k, d)
    assert build_keep_mask(torch.ones(shape, dtype=torch.bool), None, query, key).shape == normalised


def test_no_mask_gives_none_and_padding_alone_gives_b_1_1_tk():
    query, key = torch.zeros(2, 3, 5, 4), torch.zeros(2, 1, 7, 4)
    assert build_keep_mask(None, None, query, key) is None
    padding = torch.rand(2, 7) > 0.5
    keep = build_keep_mask(None, padding, query, key)
    assert keep.shape == (2, 1, 1, 7) and torch.equal(keep[:, 0, 0], padding)


def test_with_a_cache_the_masks_cover_cached_keys_too():
    cache = KVCache()
    cache.append(torch.zeros(2, 1, 4, 4), torch.zeros(2, 1, 4, 4))
    query, key = torch.zeros(2, 3, 1, 4), torch.zeros(2, 1, 1, 4)  # one new query and key after 4 cached
    assert build_keep_mask(torch.ones(1, 5, dtype=torch.bool), None, query, key, cache).shape == (1, 1, 1, 5)
    assert build_keep_mask(None, torch.ones(2, 5, dtype=torch.bool), query, key, cache).shape == (2, 1, 1, 5)
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, T_k\) = \(2, 5\), got \(2, 1\)"):
        build_keep_mask(None, torch.ones(2, 1, dtype=torch.bool), query, key, cache)


@st.composite
def mask_cases(draw):
    batch, heads, t_q, t_k = (draw(st.integers(1, 3)) for _ in range(4))
    rank = draw(st.integers(0, 4))
    full = [(), (t_k,), (t_q, t_k), (batch, t_q, t_k), (batch, heads, t_q, t_k)][rank]
    shape = tuple(size if draw(st.booleans()) else 1 for size in full)
    return (batch, heads, t_q, t_k), shape, draw(st.booleans()), draw(st.integers(0, 2**16))


@given(mask_cases())
def test_normalised_mask_means_what_the_arguments_say(case):
    (batch, heads, t_q, t_k), shape, with_padding, seed = case
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) > 0.4
    padding = torch.rand(batch, t_k, generator=generator) > 0.4 if with_padding else None
    keep = build_keep_mask(mask, padding, torch.zeros(batch, heads, t_q, 2), torch.zeros(batch, 1, t_k, 2))
    assert keep.dim() == 4
    expected = full_keep_mask(batch, heads, t_q, t_k, mask=mask, key_padding_mask=padding)
    assert torch.equal(keep.expand(batch, heads, t_q, t_k), expected)


@given(st.integers(1, 9), st.integers(0, 9))
def test_causal_keep_mask_is_pytorchs_causal_lower_right(t_q, extra):
    """PyTorch's is_causal=True is the top-left triangle; its causal_lower_right bias is the course's end-aligned mask."""
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.functional import scaled_dot_product_attention

    t_k = t_q + extra
    zeros_q, zeros_k = torch.zeros(1, 1, t_q, 2), torch.zeros(1, 1, t_k, 2)
    identity = torch.eye(t_k)[None, None]  # values that are one-hots: the output is the weight matrix
    weights = scaled_dot_product_attention(zeros_q, zeros_k, identity, attn_mask=causal_lower_right(t_q, t_k))
    assert torch.equal(weights > 0, causal_keep_mask(t_q, t_k))
    top_left = scaled_dot_product_attention(zeros_q, zeros_k, identity, is_causal=True)
    assert torch.equal(top_left > 0, torch.ones(t_q, t_k, dtype=torch.bool).tril()[None, None])
