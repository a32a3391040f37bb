"""Position information for attention, which by itself cannot tell word order (lesson 8).

``sinusoidal_positions`` (NumPy) builds the fixed table that Vaswani et al. (2017) add to the token
embeddings; ``apply_rotary`` (PyTorch, imported only when called) rotates queries and keys by their
positions (RoFormer, Su et al. 2021), so that their dot product depends only on the distance between them.
"""

import numbers

import numpy as np

from attn.common.sizes import check_allocation


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def _larger_of(length, dim):
    """The argument to make smaller: the larger of the two ("length" on a tie)."""
    return "dim" if dim > length else "length"


def sinusoidal_positions(length, dim):
    """Sinusoidal position encodings, a NumPy float64 array (T, dim) with T = length and dim even.

    Row p, column 2i holds sin(p / 10000^(2i / dim)); column 2i + 1 holds cos of the same angle
    (Vaswani et al. 2017). Each pair of columns is a clock turning at its own speed, fast to slow.
    """
    length, dim = _positive_int("length", length), _positive_int("dim", dim)
    if dim % 2:
        raise ValueError(f"dim must be even (columns come in sin/cos pairs), got {dim}")
    check_allocation(f"sinusoidal_positions(length={length}, dim={dim})", 8 * length * (dim + dim // 2 + 1),
                     advice=f"use a smaller {_larger_of(length, dim)}")  # the table and its angles
    positions = np.arange(length)[:, None]  # (T, 1)
    wavelengths = 10000.0 ** (np.arange(0, dim, 2) / dim)  # (dim / 2,): 10000^(2i / dim)
    angles = positions / wavelengths  # (T, dim / 2)
    table = np.empty((length, dim))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table


def apply_rotary(x, positions=None, base=10000.0):
    """Rotary position embedding: ``x`` (..., T, d) rotated pair by pair, same shape and dtype.

    Pairing: neighbouring features (2i, 2i + 1) form pair i, as in the RoFormer paper. The code of
    GPT-NeoX, and the Llama and Qwen implementations, pair feature i with i + d/2 instead (their helper
    is called rotate_half): the same rotation once the features are permuted (lesson 8). At position p,
    pair i turns by the angle p * base^(-2i / d). Apply it to queries and keys (not values): then
    q_m . k_n depends on m - n only. positions: a tensor of shape (T,), or broadcastable to
    x.shape[:-1] with last axis T, default arange(T); with a KV cache pass arange(T) + len(cache).
    Angles are computed in float64 for float64 input, otherwise in float32.
    """
    import torch  # here, not at the top: the NumPy lessons import this module without PyTorch

    from attn.common.layer_checks import check_rotary_angles, check_rotary_arguments

    check_rotary_arguments(x, positions, base)
    length, dim = x.shape[-2], x.shape[-1]
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    if positions is None:
        positions = torch.arange(length, device=x.device)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=compute, device=x.device) / dim)  # (d / 2,)
    angles = positions.to(compute)[..., None] * frequencies  # (..., T, d / 2)
    check_rotary_angles(angles, base)
    cos, sin = angles.cos(), angles.sin()
    pairs = x.to(compute).unflatten(-1, (dim // 2, 2))  # (..., T, d / 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., T, d / 2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., T, d)
