"""A numerically stable softmax in NumPy."""

import numpy as np


def as_float_array(x, name):
    """Return ``x`` as a floating NumPy array (float64 unless it already is a float)."""
    array = np.asarray(x)
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise TypeError(f"{name} must hold numbers, got dtype {array.dtype}")
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    return array


def softmax(x, axis=-1):
    """Softmax along ``axis``: non-negative weights that sum to 1.

    x: any shape; the result has the same shape and floating dtype.
    ``-inf`` entries (masked scores) get weight 0. A slice that is ``-inf``
    everywhere has nothing to attend to and gets all-zero weights, not NaN.
    NaN and ``+inf`` cannot be given a meaning and raise ``ValueError``.
    """
    scores = as_float_array(x, "softmax input")
    if scores.ndim == 0:
        raise ValueError("softmax needs at least one axis, got a scalar")
    if scores.shape[axis] == 0:
        raise ValueError(f"softmax needs at least one entry along axis {axis}, got shape {scores.shape}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        bad = "NaN" if np.isnan(scores).any() else "+inf"
        raise ValueError(
            f"softmax input of shape {scores.shape} contains {bad}; only finite values and -inf (masked) are allowed"
        )
    row_max = np.max(scores, axis=axis, keepdims=True)
    # Subtracting the maximum keeps exp() at or below 1, so it cannot overflow.
    # A row that is all -inf has no maximum to subtract: use 0 and let it sum to 0.
    row_max = np.where(np.isneginf(row_max), 0.0, row_max)
    exps = np.exp(scores - row_max)
    totals = np.sum(exps, axis=axis, keepdims=True)
    return np.divide(exps, totals, out=np.zeros_like(exps), where=totals > 0)
