"""attn.scaled_dot_product_attention (NumPy): against PyTorch, its invariants, masks and bad input."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn import functional

from attn import causal_mask, padding_mask, scaled_dot_product_attention


def random_qkv(seed, batch=(2,), t_q=4, t_k=5, d_k=3, d_v=2):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((*batch, t_q, d_k)),
        rng.standard_normal((*batch, t_k, d_k)),
        rng.standard_normal((*batch, t_k, d_v)),
    )


def torch_reference(query, key, value, mask=None):
    as_tensor = torch.from_numpy
    attn_mask = None if mask is None else as_tensor(np.broadcast_to(mask, query.shape[:-1] + key.shape[-2:-1]).copy())
    output = functional.scaled_dot_product_attention(as_tensor(query), as_tensor(key), as_tensor(value), attn_mask=attn_mask)
    return output.numpy()


@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
def test_matches_torch_without_mask(batch):
    query, key, value = random_qkv(0, batch=batch)
    output, weights = scaled_dot_product_attention(query, key, value)
    assert output.shape == (*batch, 4, 2) and weights.shape == (*batch, 4, 5)
    np.testing.assert_allclose(output, torch_reference(query, key, value), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_matches_torch_with_masks(seed):
    query, key, value = random_qkv(seed, t_q=5, t_k=5)
    keep = np.random.default_rng(seed).random((2, 5, 5)) > 0.4
    keep[..., 0] = True  # torch gives NaN for rows with nothing allowed; compared separately below
    for mask in (keep, causal_mask(5), padding_mask([3, 5], 5)):
        output, _ = scaled_dot_product_attention(query, key, value, mask=mask)
        np.testing.assert_allclose(output, torch_reference(query, key, value, mask), rtol=1e-10, atol=1e-12)


def test_fully_masked_row_gives_zero_weights_and_output():
    query, key, value = random_qkv(1)
    keep = np.ones((4, 5), dtype=bool)
    keep[2] = False
    output, weights = scaled_dot_product_attention(query, key, value, mask=keep)
    assert np.isfinite(output).all()
    np.testing.assert_array_equal(weights[:, 2], 0.0)
    np.testing.assert_array_equal(output[:, 2], 0.0)


def test_masked_keys_get_no_weight():
    query, key, value = random_qkv(2, t_q=5, t_k=5)
    _, weights = scaled_dot_product_attention(query, key, value, mask=causal_mask(5))
    assert (weights[..., np.triu_indices(5, k=1)[0], np.triu_indices(5, k=1)[1]] == 0).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0)


def test_masks():
    np.testing.assert_array_equal(causal_mask(3), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(padding_mask([1, 3], 3), [[[1, 0, 0]], [[1, 1, 1]]])
    with pytest.raises(ValueError, match=r"0\.\.3"):
        padding_mask([4], 3)


def test_fruit_numbers_from_the_course_plan():
    query = np.array([[1.0, 0.0, 1.0]])
    keys = np.arange(1.0, 10.0).reshape(3, 3)
    output, weights = scaled_dot_product_attention(query, keys, keys / 10)
    np.testing.assert_allclose(output[0], [0.6903, 0.7903, 0.8903], atol=5e-5)


def test_mismatched_d_k_is_named():
    with pytest.raises(ValueError, match=r"query has shape \(4, 3\), key has shape \(5, 2\)"):
        scaled_dot_product_attention(np.ones((4, 3)), np.ones((5, 2)), np.ones((5, 2)))


def test_keys_and_values_of_different_lengths_are_named():
    with pytest.raises(ValueError, match=r"key has shape \(5, 3\), value has shape \(6, 2\)"):
        scaled_dot_product_attention(np.ones((4, 3)), np.ones((5, 3)), np.ones((6, 2)))


def test_mask_that_does_not_broadcast_is_named():
    query, key, value = random_qkv(0)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) does not broadcast to the scores' shape \(2, 4, 5\)"):
        scaled_dot_product_attention(query, key, value, mask=np.ones((3, 5), dtype=bool))
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(query, key, value, mask=np.ones((4, 5)))


def test_other_bad_input():
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        scaled_dot_product_attention(np.ones(3), np.ones((5, 3)), np.ones((5, 2)))
    with pytest.raises(ValueError, match="NaN or inf"):
        scaled_dot_product_attention(np.full((1, 3), np.nan), np.ones((5, 3)), np.ones((5, 2)))
    with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
        scaled_dot_product_attention(np.ones((2, 1, 3)), np.ones((3, 5, 3)), np.ones((3, 5, 2)))


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 6), st.floats(0.01, 100))
def test_properties(seed, t_q, t_k, scale):
    query, key, value = random_qkv(seed, t_q=t_q, t_k=t_k)
    query = query * scale
    output, weights = scaled_dot_product_attention(query, key, value)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-12)
    assert (weights >= 0).all() and np.isfinite(output).all()
    # Each output is a weighted average of the values, so it lies within their range.
    assert (output <= value.max(axis=-2, keepdims=True) + 1e-12).all()
    assert (output >= value.min(axis=-2, keepdims=True) - 1e-12).all()
    # Permuting keys and values together leaves the output unchanged.
    order = np.random.default_rng(seed).permutation(t_k)
    permuted, _ = scaled_dot_product_attention(query, key[..., order, :], value[..., order, :])
    np.testing.assert_allclose(permuted, output, rtol=1e-10, atol=1e-12)
