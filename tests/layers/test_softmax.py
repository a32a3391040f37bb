"""attn.softmax: definition, stability, masking, bad input, and agreement with PyTorch."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from attn import softmax
from attn.softmax import softmax_in_place

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
score_arrays = arrays(np.float64, array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), elements=finite)


def test_known_values():
    np.testing.assert_allclose(softmax([0.0, np.log(3.0)]), [0.25, 0.75])
    np.testing.assert_allclose(softmax([1.0, 1.0, 1.0, 1.0]), [0.25] * 4)


def test_large_scores_do_not_overflow():
    weights = softmax(np.array([1000.0, 1000.0, 990.0]))
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(), 1.0)


def test_axis_argument():
    scores = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(softmax(scores, axis=0).sum(axis=0), np.ones(3))
    np.testing.assert_allclose(softmax(scores, axis=0), softmax(scores.T, axis=-1).T)


def test_masked_entries_get_zero_weight():
    weights = softmax(np.array([2.0, -np.inf, 1.0]))
    assert weights[1] == 0.0
    np.testing.assert_allclose(weights.sum(), 1.0)


def test_fully_masked_row_gives_zeros_not_nan():
    weights = softmax(np.array([[-np.inf, -np.inf], [0.0, 0.0]]))
    np.testing.assert_array_equal(weights, [[0.0, 0.0], [0.5, 0.5]])


def test_keeps_float32_and_converts_integers():
    assert softmax(np.ones(3, dtype=np.float32)).dtype == np.float32
    assert softmax([1, 2, 3]).dtype == np.float64


@pytest.mark.parametrize("bad, word", [([1.0, np.nan], "NaN"), ([1.0, np.inf], r"\+inf")])
def test_nan_and_plus_inf_are_refused(bad, word):
    with pytest.raises(ValueError, match=word):
        softmax(np.array(bad))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="scalar"):
        softmax(3.0)
    with pytest.raises(ValueError, match=r"shape \(2, 0\)"):
        softmax(np.zeros((2, 0)))
    with pytest.raises(TypeError, match="dtype"):
        softmax(np.array(["a", "b"]))


@given(score_arrays)
def test_rows_are_non_negative_and_sum_to_one(scores):
    weights = softmax(scores)
    assert (weights >= 0).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)


@given(score_arrays, st.floats(min_value=-1e5, max_value=1e5))
def test_adding_a_constant_changes_nothing(scores, constant):
    np.testing.assert_allclose(softmax(scores + constant), softmax(scores), atol=1e-9)


@given(arrays(np.float64, st.integers(1, 8), elements=st.floats(-1e300, 1e300)))
def test_huge_and_tiny_inputs_stay_finite(scores):
    weights = softmax(scores)
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(), 1.0)


@given(score_arrays)
def test_matches_torch_in_float64(scores):
    expected = torch.softmax(torch.from_numpy(scores), dim=-1).numpy()
    np.testing.assert_allclose(softmax(scores), expected, rtol=1e-10, atol=1e-12)


# Issue 10: axes, complex and ragged input; the in-place form attention uses ------------------


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_an_axis_out_of_range_is_named_with_the_shape(axis):
    with pytest.raises(ValueError, match=rf"axis {axis} does not exist in an array of shape \(2, 2\) \(valid: -2 to 1\)"):
        softmax(np.ones((2, 2)), axis=axis)


@pytest.mark.parametrize("axis", [1.0, "0", None, True])
def test_an_axis_that_is_not_a_whole_number_is_named(axis):
    with pytest.raises(TypeError, match="axis must be a whole number"):
        softmax(np.ones((2, 2)), axis=axis)


def test_complex_and_ragged_input_are_named():
    with pytest.raises(TypeError, match="complex numbers"):
        softmax(np.array([1.0, 2.0]) + 1j)
    with pytest.raises(ValueError, match="not a rectangular array"):
        softmax([[1.0, 2.0], [3.0]])


def test_the_input_is_not_changed():
    scores = np.array([[1.0, 2.0, -np.inf]])
    softmax(scores)
    np.testing.assert_array_equal(scores, [[1.0, 2.0, -np.inf]])


def test_empty_batches_are_fine():
    assert softmax(np.zeros((0, 3))).shape == (0, 3)


dtypes = st.sampled_from([np.float16, np.float32, np.float64])
masked_scores = arrays(
    np.float64,
    array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
    elements=st.one_of(st.floats(-50, 50), st.just(-np.inf)),
)


@given(masked_scores, dtypes, st.integers(-3, 2))
def test_every_slice_sums_to_one_or_to_zero_in_the_input_dtype(scores, dtype, axis):
    axis = axis % scores.ndim
    weights = softmax(scores.astype(dtype), axis=axis)
    assert weights.dtype == dtype and (weights >= 0).all()
    sums = weights.astype(np.float64).sum(axis=axis)
    all_masked = np.isneginf(scores).all(axis=axis)
    np.testing.assert_allclose(sums[~all_masked], 1.0, rtol=2e-3 if dtype == np.float16 else 1e-6)
    np.testing.assert_array_equal(sums[all_masked], 0.0)


@given(masked_scores)
def test_the_in_place_form_gives_the_same_weights(scores):
    expected = softmax(scores)
    result = softmax_in_place(scores.copy())
    np.testing.assert_array_equal(result, expected)
