"""A numerically stable softmax in NumPy, and lesson 17's log-n scaling of the scores it reads.

The module is callable: ``attn.softmax(x, axis=-1)`` is its NumPy ``softmax`` (lessons 3 and 4), and
``attn.softmax.X`` reaches the rest. Lesson 22's PyTorch softmaxes whose rows may sum to less than 1
(``softmax_with_sink``, ``softpick`` and their loops) live in ``attn.softmax_variants`` and are reached
from here as well, imported on first use, so that the NumPy lessons never import PyTorch.
"""

import importlib
import math
import operator
import sys
import types

import numpy as np

from attn.common.rope_checks import positive_whole


def as_float_array(x, name):
    """Return ``x`` as a real floating NumPy array: floats keep their dtype, integers become float64.

    Text, booleans, complex numbers and other objects get a ``TypeError``; a ragged list
    (rows of different lengths) gets a ``ValueError``. Both name ``name``.
    """
    try:
        array = np.asarray(x)
    except ValueError:
        raise ValueError(f"{name} is not a rectangular array: are some of its rows longer than others?") from None
    except (TypeError, RuntimeError) as error:  # e.g. a PyTorch tensor that requires grad or lives on a GPU
        raise TypeError(f"{name} cannot be read as a NumPy array: {error}") from None
    if np.iscomplexobj(array):
        raise TypeError(f"{name} holds complex numbers (dtype {array.dtype}); attention works on real numbers")
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise TypeError(f"{name} must hold numbers, got dtype {array.dtype}")
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    return array


def _checked_axis(axis, ndim, shape):
    """``axis`` as a non-negative index into ``shape``, or a ValueError naming both."""
    try:
        index = None if isinstance(axis, bool | np.bool_) else operator.index(axis)
    except TypeError:
        index = None
    if index is None:
        raise TypeError(f"axis must be a whole number, got {axis!r}")
    if not -ndim <= index < ndim:
        raise ValueError(f"axis {axis!r} does not exist in an array of shape {shape} (valid: {-ndim} to {ndim - 1})")
    return index % ndim


def softmax(x, axis=-1):
    """Softmax along ``axis``: non-negative weights that sum to 1.

    x: any shape; the result has the same shape and floating dtype.
    ``-inf`` entries (masked scores) get weight 0. A slice that is ``-inf``
    everywhere has nothing to attend to and gets all-zero weights, not NaN.
    NaN and ``+inf`` cannot be given a meaning and raise ``ValueError``.
    """
    scores, axis = checked_scores(x, axis, "softmax input")
    return softmax_in_place(scores.copy(), axis)


def checked_scores(x, axis, name):
    """``x`` as a float array and ``axis`` as an index, if a softmax can be taken along it.

    ValueError/TypeError naming ``name`` for a scalar, an empty axis, NaN or +inf (-inf is a masked score).
    """
    scores = as_float_array(x, name)
    if scores.ndim == 0:
        raise ValueError(f"{name} needs at least one axis, got a scalar")
    axis = _checked_axis(axis, scores.ndim, scores.shape)
    if scores.shape[axis] == 0:
        raise ValueError(f"{name} needs at least one entry along axis {axis}, got shape {scores.shape}")
    largest = np.max(scores, initial=-np.inf)  # NaN if there is any NaN; +inf if there is any +inf
    if np.isnan(largest) or np.isposinf(largest):
        bad = "NaN" if np.isnan(largest) else "+inf"
        raise ValueError(f"{name} of shape {scores.shape} contains {bad}; only finite values and -inf (masked) are allowed")
    return scores, axis


def softmax_in_place(scores, axis=-1):
    """Overwrite ``scores`` with its softmax along ``axis`` and return it.

    For callers that own ``scores`` and have checked it (no NaN, no +inf): it allocates
    nothing of the size of ``scores``, so attention keeps one T x T array instead of several.
    """
    if not isinstance(scores, np.ndarray) or not np.issubdtype(scores.dtype, np.floating) or scores.ndim == 0:
        raise TypeError(f"scores must be a floating-point NumPy array with at least one axis (it is overwritten), "
                        f"got {type(scores).__name__}")
    _checked_axis(axis, scores.ndim, scores.shape)
    row_max = np.max(scores, axis=axis, keepdims=True)
    # Subtracting the maximum keeps exp() at or below 1, so it cannot overflow.
    # A row that is all -inf has no maximum to subtract: use 0, and its exps are all 0.
    row_max[np.isneginf(row_max)] = 0.0
    with np.errstate(over="ignore"):  # float16: a gap past 65,504 becomes -inf, whose exp is 0, as it should be
        scores -= row_max
    np.exp(scores, out=scores)
    # Summed in float32 at least: a float16 row of 70,000 equal scores would sum to inf (its largest is 65,504).
    totals = np.sum(scores, axis=axis, keepdims=True, dtype=np.promote_types(scores.dtype, np.float32))
    totals[totals == 0] = 1.0  # an all-zero row stays zero instead of becoming 0 / 0
    scores /= totals
    return scores


def log_n_scale(length, context_length):
    """Log-n scaling (lesson 17): the factor for the scores of a query that sees ``length`` keys, a float.

    log(length) / log(context_length) past the trained length (Chiang and Cholak 2022; Qwen's "logn" attention),
    1 up to it. A softmax over n keys spreads its weight thinner as n grows (dilution); multiplying the scores
    by this factor keeps a key that stands out by a margin as sharply preferred as it was at the trained length.
    """
    length, context_length = positive_whole("length", length), positive_whole("context_length", context_length)
    if context_length < 2:
        raise ValueError(f"context_length must be at least 2 (log 1 = 0 cannot divide), got {context_length}")
    return 1.0 if length <= context_length else math.log(length) / math.log(context_length)


_VARIANTS = {"softmax_with_sink", "softmax_with_sink_loop", "softpick", "softpick_loop"}  # attn.softmax_variants


def __getattr__(name):
    if name in _VARIANTS:
        return getattr(importlib.import_module("attn.softmax_variants"), name)
    raise AttributeError(f"module 'attn.softmax' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_VARIANTS])


class _CallableModule(types.ModuleType):
    """This module's type: calling the module calls its NumPy softmax, so ``attn.softmax(x)`` works as it always has."""

    def __call__(self, x, axis=-1):
        return softmax(x, axis)


sys.modules[__name__].__class__ = _CallableModule
