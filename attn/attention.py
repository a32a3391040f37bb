"""Scaled dot-product attention in NumPy, and the masks that go with it."""

import math
import operator

import numpy as np

from attn.common.sizes import check_allocation
from attn.softmax import as_float_array, softmax_in_place


def _check_inputs(query, key, value):
    for name, array in (("query", query), ("key", key), ("value", value)):
        if array.ndim < 2:
            raise ValueError(f"{name} needs at least 2 dimensions (..., T, d), got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError(f"{name} of shape {array.shape} contains NaN or inf")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same size d_k in their last dimension: "
            f"query has shape {query.shape}, key has shape {key.shape}"
        )
    if query.shape[-1] == 0:
        raise ValueError(f"query and key need at least one feature (d_k >= 1): query has shape {query.shape}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length T_k: "
            f"key has shape {key.shape}, value has shape {value.shape}"
        )
    if key.shape[-2] == 0:
        raise ValueError(f"there must be at least one key to attend to (T_k >= 1): key has shape {key.shape}")
    try:
        np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the batch dimensions do not broadcast: query {query.shape}, key {key.shape}, value {value.shape}"
        ) from None


def _check_mask(keep_mask, scores_shape):
    try:
        keep_mask = np.asarray(keep_mask)
    except ValueError:
        raise ValueError("mask is not a rectangular array: are some of its rows longer than others?") from None
    if keep_mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {keep_mask.dtype}")
    try:
        fits = np.broadcast_shapes(keep_mask.shape, scores_shape) == tuple(scores_shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {keep_mask.shape} does not broadcast to the scores' shape {tuple(scores_shape)}")
    return keep_mask


def _check_scores(scores):
    """Finite inputs can still give non-finite scores when their products overflow the dtype."""
    if not (np.isfinite(np.min(scores, initial=0.0)) and np.isfinite(np.max(scores, initial=0.0))):  # no T x T temporary
        raise ValueError(
            f"the scores Q K^T / sqrt(d_k) overflowed {scores.dtype}: the inputs are finite, but their dot products "
            f"are too large to represent; scale the query and key down, or pass float64 arrays"
        )


def _working_dtype(*arrays):
    """The dtype to compute in: the inputs' common float type, but at least float32.

    float16 scores overflow at 65,504, so float16 inputs are computed in float32 and the
    results converted back.
    """
    return np.promote_types(np.result_type(*arrays), np.float32)


def scaled_dot_product_attention(query, key, value, mask=None):
    """Attention output and weights: softmax(Q K^T / sqrt(d_k)) V.

    query: (..., T_q, d_k)   key: (..., T_k, d_k)   value: (..., T_k, d_v)
    mask:  optional boolean, broadcastable to (..., T_q, T_k); True = may attend.
    Returns ``(output, weights)``: output (..., T_q, d_v), weights (..., T_q, T_k), both in the
    inputs' common float dtype (integers give float64). A query row with no allowed key gets
    zero weights and a zero output. Only one (..., T_q, T_k) array is kept at a time.
    """
    query = as_float_array(query, "query")
    key = as_float_array(key, "key")
    value = as_float_array(value, "value")
    _check_inputs(query, key, value)
    result_dtype = np.result_type(query, key, value)
    query, key, value = (array.astype(_working_dtype(result_dtype), copy=False) for array in (query, key, value))
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by _check_scores instead
        scores = query @ np.swapaxes(key, -1, -2)  # (..., T_q, T_k)
        scores *= 1 / math.sqrt(query.shape[-1])  # in place: a Python float keeps the dtype
    _check_scores(scores)
    if mask is not None:
        keep_mask = _check_mask(mask, scores.shape)
        np.copyto(scores, -np.inf, where=~keep_mask)
    weights = softmax_in_place(scores, axis=-1)  # (..., T_q, T_k), rows sum to 1 (or 0 if fully masked)
    output = weights @ value  # (..., T_q, d_v)
    return output.astype(result_dtype, copy=False), weights.astype(result_dtype, copy=False)


def _whole_number(value, name):
    """``value`` as a Python int >= 0; bools and floats (even 4.0) are refused."""
    try:
        number = None if isinstance(value, bool | np.bool_) else operator.index(value)
    except TypeError:
        number = None
    if number is None:
        raise TypeError(f"{name} must be a whole number (an int), got {value!r}")
    if number < 0:
        raise ValueError(f"{name} must be 0 or more, got {number}")
    return number


def causal_mask(length):
    """Boolean (T, T) keep-mask: position i may attend to positions 0..i. ``length`` is an int >= 0."""
    length = _whole_number(length, "length")
    check_allocation(f"causal_mask(length={length}), a T x T array of bools,", length * length,
                     advice="use a smaller length")
    return np.tril(np.ones((length, length), dtype=bool))


def _checked_lengths(lengths, max_length):
    try:
        lengths = np.asarray(lengths)
    except ValueError:
        raise ValueError("lengths must be a flat list of whole numbers, one per sequence") from None
    except (TypeError, RuntimeError) as error:
        raise TypeError(f"lengths cannot be read as a NumPy array: {error}") from None
    if lengths.size and (lengths.dtype == bool or not np.issubdtype(lengths.dtype, np.integer)):
        raise TypeError(f"lengths must be whole numbers (ints), got {lengths.dtype} values {lengths.tolist()}")
    if lengths.ndim != 1 or lengths.size == 0 or (lengths < 0).any() or (lengths > max_length).any():
        raise ValueError(f"lengths must be a 1-D list of values in 0..{max_length}, got {lengths.tolist()}")
    return lengths


def padding_mask(lengths, max_length):
    """Boolean (B, 1, T) keep-mask: in sequence b only the first lengths[b] keys are real.

    lengths: B whole numbers in 0..max_length; max_length: an int >= 0 (T). Floats are
    refused, even whole ones such as 4.0. The middle axis of size 1 broadcasts over the
    query positions.
    """
    max_length = _whole_number(max_length, "max_length")
    lengths = _checked_lengths(lengths, max_length)
    check_allocation(f"padding_mask for {len(lengths)} sequences of max_length={max_length}",
                     (len(lengths) + 8) * max_length)  # the (B, 1, T) bools and the positions 0..T-1
    positions = np.arange(max_length)  # (T,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (B, 1, T)
