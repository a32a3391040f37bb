"""Scaled dot-product attention in NumPy, and the masks that go with it."""

import numpy as np

from attn.softmax import as_float_array, softmax


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
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length T_k: "
            f"key has shape {key.shape}, value has shape {value.shape}"
        )
    try:
        np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the batch dimensions do not broadcast: query {query.shape}, key {key.shape}, value {value.shape}"
        ) from None


def _check_mask(keep_mask, scores_shape):
    keep_mask = np.asarray(keep_mask)
    if keep_mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {keep_mask.dtype}")
    try:
        fits = np.broadcast_shapes(keep_mask.shape, scores_shape) == tuple(scores_shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {keep_mask.shape} does not broadcast to the scores' shape {tuple(scores_shape)}")
    return keep_mask


def scaled_dot_product_attention(query, key, value, mask=None):
    """Attention output and weights: softmax(Q K^T / sqrt(d_k)) V.

    query: (..., T_q, d_k)   key: (..., T_k, d_k)   value: (..., T_k, d_v)
    mask:  optional boolean, broadcastable to (..., T_q, T_k); True = may attend.
    Returns ``(output, weights)``: output (..., T_q, d_v), weights (..., T_q, T_k).
    A query row with no allowed key gets zero weights and a zero output.
    """
    query = as_float_array(query, "query")
    key = as_float_array(key, "key")
    value = as_float_array(value, "value")
    _check_inputs(query, key, value)
    d_k = query.shape[-1]
    scores = query @ np.swapaxes(key, -1, -2) / np.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        keep_mask = _check_mask(mask, scores.shape)
        scores = np.where(keep_mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)  # (..., T_q, T_k), rows sum to 1 (or 0 if fully masked)
    return weights @ value, weights  # (..., T_q, d_v)


def causal_mask(length):
    """Boolean (T, T) keep-mask: position i may attend to positions 0..i."""
    return np.tril(np.ones((length, length), dtype=bool))


def padding_mask(lengths, max_length):
    """Boolean (B, 1, T) keep-mask: in sequence b only the first lengths[b] keys are real.

    The middle axis of size 1 broadcasts over the query positions.
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or (lengths < 0).any() or (lengths > max_length).any():
        raise ValueError(f"lengths must be a 1-D list of values in 0..{max_length}, got {lengths.tolist()}")
    positions = np.arange(max_length)  # (T,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (B, 1, T)
