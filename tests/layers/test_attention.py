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


# Issue 10: dtypes, overflow, complex and ragged input, whole-number mask sizes -----------------

float_dtypes = st.sampled_from([np.float16, np.float32, np.float64])


@given(float_dtypes, st.integers(0, 1000), st.integers(1, 5), st.integers(1, 5), st.booleans())
def test_output_and_weights_keep_the_input_dtype(dtype, seed, t_q, t_k, masked):
    query, key, value = (array.astype(dtype) for array in random_qkv(seed, t_q=t_q, t_k=t_k))
    mask = np.random.default_rng(seed).random((t_q, t_k)) > 0.5 if masked else None
    output, weights = scaled_dot_product_attention(query, key, value, mask=mask)
    assert output.dtype == dtype and weights.dtype == dtype
    row_sums = weights.astype(np.float64).sum(-1)
    tolerance = 2e-3 if dtype == np.float16 else 1e-5
    # Every row sums to 1, or to 0 where the mask allows no key.
    assert np.all((np.abs(row_sums - 1) < tolerance) | (row_sums == 0))
    expected, _ = scaled_dot_product_attention(*(array.astype(np.float64) for array in (query, key, value)), mask=mask)
    np.testing.assert_allclose(output, expected, rtol=tolerance, atol=tolerance * 10)


def test_integers_give_float64_and_mixed_floats_the_wider_one():
    output, weights = scaled_dot_product_attention(np.ones((2, 3), dtype=int), np.ones((2, 3), dtype=int), np.ones((2, 1), int))
    assert output.dtype == weights.dtype == np.float64
    query, key, value = random_qkv(0)
    output, _ = scaled_dot_product_attention(query.astype(np.float32), key, value.astype(np.float16))
    assert output.dtype == np.float64


def test_float16_scores_that_overflow_float16_are_computed_in_float32():
    # The scores are -200 * 200 * 4 / 2 = -80,000, beyond float16's 65,504.
    query, key, value = np.full((1, 4), 200, np.float16), np.full((2, 4), -200, np.float16), np.ones((2, 1), np.float16)
    output, weights = scaled_dot_product_attention(query, key, value)
    assert output.dtype == np.float16 and output[0, 0] == 1.0
    np.testing.assert_array_equal(weights, [[0.5, 0.5]])


@pytest.mark.parametrize("dtype, size", [(np.float32, 1e20), (np.float64, 1e160)])
def test_scores_that_overflow_are_refused_not_zeroed(dtype, size):
    query, key, value = np.full((1, 4), size, dtype), np.full((2, 4), size, dtype), np.ones((2, 1), dtype)
    with pytest.raises(ValueError, match=f"the scores Q K\\^T / sqrt\\(d_k\\) overflowed {np.dtype(dtype)}"):
        scaled_dot_product_attention(query, key, value)


def test_complex_ragged_and_tensor_inputs_are_named():
    with pytest.raises(TypeError, match="query holds complex numbers"):
        scaled_dot_product_attention(np.ones((2, 2)) * 1j, np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="key is not a rectangular array"):
        scaled_dot_product_attention(np.ones((2, 2)), [[1.0, 2.0], [3.0]], np.ones((2, 2)))
    with pytest.raises(ValueError, match="mask is not a rectangular array"):
        scaled_dot_product_attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), mask=[[True, False], [True]])
    with pytest.raises(TypeError, match="value cannot be read as a NumPy array"):
        scaled_dot_product_attention(np.ones((2, 2)), np.ones((2, 2)), torch.ones(2, 2, requires_grad=True))
    with pytest.raises(TypeError, match="query must hold numbers, got dtype <U1"):
        scaled_dot_product_attention([["a"]], np.ones((2, 1)), np.ones((2, 1)))


def test_empty_features_and_empty_keys_are_named():
    with pytest.raises(ValueError, match=r"at least one feature \(d_k >= 1\)"):
        scaled_dot_product_attention(np.ones((2, 0)), np.ones((3, 0)), np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"at least one key to attend to \(T_k >= 1\)"):
        scaled_dot_product_attention(np.ones((2, 3)), np.ones((0, 3)), np.ones((0, 1)))
    output, weights = scaled_dot_product_attention(np.ones((0, 3)), np.ones((2, 3)), np.ones((2, 1)))
    assert output.shape == (0, 1) and weights.shape == (0, 2)


def test_inputs_are_not_changed():
    query, key, value = random_qkv(4)
    copies = [array.copy() for array in (query, key, value)]
    scaled_dot_product_attention(query, key, value, mask=np.tril(np.ones((4, 5), dtype=bool)))
    for array, copy in zip((query, key, value), copies, strict=True):
        np.testing.assert_array_equal(array, copy)


@pytest.mark.parametrize("length", [0, 3, np.int64(3), np.int32(2)])
def test_causal_mask_takes_whole_lengths(length):
    assert causal_mask(length).shape == (int(length), int(length))


@pytest.mark.parametrize(
    "bad, error, words",
    [(3.5, TypeError, "length must be a whole number"), (4.0, TypeError, "got 4.0"), (True, TypeError, "got True"),
     (-1, ValueError, "length must be 0 or more, got -1"), (None, TypeError, "got None"), ("3", TypeError, "got '3'")],
)
def test_causal_mask_refuses_other_lengths(bad, error, words):
    with pytest.raises(error, match=words):
        causal_mask(bad)


def test_padding_mask_takes_whole_lengths_in_many_forms():
    expected = [[[True, True, False, False]], [[True, True, True, True]]]
    for lengths in ([2, 4], (2, 4), np.array([2, 4], dtype=np.int32), torch.tensor([2, 4])):
        np.testing.assert_array_equal(padding_mask(lengths, 4), expected)
    assert padding_mask([0], 0).shape == (1, 1, 0)


@pytest.mark.parametrize(
    "lengths, max_length, error, words",
    [
        ([2.5], 4, TypeError, r"lengths must be whole numbers \(ints\), got float64 values \[2.5\]"),
        ([2.0], 4, TypeError, "lengths must be whole numbers"),
        ([np.nan], 4, TypeError, "lengths must be whole numbers"),
        ([True, False], 4, TypeError, "lengths must be whole numbers"),
        (["2"], 4, TypeError, "lengths must be whole numbers"),
        ([2], 3.5, TypeError, "max_length must be a whole number"),
        ([2], 4.0, TypeError, "max_length must be a whole number"),
        ([2], True, TypeError, "max_length must be a whole number"),
        ([2], -1, ValueError, "max_length must be 0 or more"),
        ([-1], 4, ValueError, r"values in 0\.\.4, got \[-1\]"),
        ([5], 4, ValueError, r"values in 0\.\.4, got \[5\]"),
        ([], 4, ValueError, r"got \[\]"),
        ([[2, 4]], 4, ValueError, "1-D list"),
        ([[2, 4], [1]], 4, ValueError, "flat list of whole numbers"),
        (3, 4, ValueError, "1-D list"),
    ],
)
def test_padding_mask_refuses_other_lengths(lengths, max_length, error, words):
    with pytest.raises(error, match=words):
        padding_mask(lengths, max_length)
