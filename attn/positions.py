"""Position information for attention, which by itself cannot tell word order (lesson 8).

``sinusoidal_positions`` (NumPy) builds the fixed table that Vaswani et al. (2017) add to the token
embeddings; ``apply_rotary`` (PyTorch, imported only when called) rotates queries and keys by their
positions (RoFormer, Su et al. 2021), so that their dot product depends only on the distance between them.

Lesson 17 reads past the trained length: ``rotary_frequencies`` (NumPy) gives the inverse frequencies of
each rotary scaling in transformers' ``rope_parameters`` form (position interpolation, dynamic NTK, YaRN,
Llama 3), ``ntk_aware_base`` the raised base of NTK-aware scaling, ``yarn_attention_factor`` YaRN's
temperature; ``apply_rotary`` takes the scaling and a ``rotary_fraction`` (partial rotary).
"""

import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from attn.common.rope_checks import (
    check_frequencies,
    check_ntk_dim,
    check_rope_scaling,
    real_number,
    rotary_dim,
    rotated_features,
)
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


def rotary_frequencies(dim, base=10000.0, scaling=None, length=None):
    """Inverse frequencies theta_i of rotary positions, a NumPy float64 array (dim / 2,): pair i turns p * theta_i.

    Without ``scaling``, theta_i = base^(-2i / dim) (lesson 8). ``scaling``: a dict in transformers'
    ``rope_parameters`` form (attn.common.rope_checks.check_rope_scaling lists its keys), with factor s and
    trained length L (original_max_position_embeddings):
    'linear' (position interpolation): theta_i / s; 'dynamic' (dynamic NTK): ``ntk_aware_base`` with the factor
    s * n / L - (s - 1) that follows the length n read (``length``, None meaning L; no change up to L);
    'yarn': each pair interpolated or kept by how often it turns within L (``yarn_ramp``); 'llama3': the same
    idea with Llama 3's wavelength bounds (``_llama3_frequencies``). Equal to transformers' ROPE_INIT_FUNCTIONS.
    """
    dim, base = rotary_dim(dim), real_number("base", base)
    scaling = check_rope_scaling(scaling, base)
    length = None if length is None else _positive_int("length", length)
    rope_type = "default" if scaling is None else scaling["rope_type"]
    if rope_type == "dynamic":
        check_ntk_dim(dim, rope_type)
        trained = scaling["original_max_position_embeddings"]
        read = max(trained if length is None else length, trained)  # n: no change up to the trained length
        factor = scaling["factor"]
        grown = factor * read / trained - (factor - 1)  # transformers' formula, kept for its exact rounding
        if factor > 2**52:  # there s - 1 rounds to s, and s n / L - (s - 1) loses its 1: the same number, written safely
            grown = 1 + factor * (read - trained) / trained
        base = ntk_aware_base(dim, base, grown)
    plain = np.float64(base) ** (-np.arange(0, dim, 2) / dim)  # (dim / 2,): base^(-2i / dim)
    if rope_type == "linear":
        plain = plain / scaling["factor"]  # every pair turns s times slower: positions p / s
    elif rope_type == "yarn":
        interpolate = yarn_ramp(dim, base, scaling)  # (dim / 2,): 0 keeps theta_i, 1 divides it by s
        plain = plain * (1 - interpolate) + plain / scaling["factor"] * interpolate
    elif rope_type == "llama3":
        plain = _llama3_frequencies(plain, scaling)
    check_frequencies(plain, f"rotary_frequencies(dim={dim}, scaling={scaling})")
    return plain


def ntk_aware_base(dim, base, factor):
    """NTK-aware scaling (bloc97 2023): the base raised to base * s^(dim / (dim - 2)), a float.

    The slowest pair (i = dim / 2 - 1) then turns s times slower, as position interpolation would make it, while
    the fastest (i = 0) keeps its speed: high frequencies extrapolated, low ones interpolated, a smooth blend.
    """
    dim, base, factor = rotary_dim(dim), real_number("base", base), real_number("factor", factor)
    check_ntk_dim(dim, "NTK-aware")
    with np.errstate(over="ignore"):  # an overflow becomes inf, refused just below
        raised = np.float64(base) * np.float64(factor) ** (dim / (dim - 2))
    if not math.isfinite(raised):
        raise ValueError(f"factor={factor!r} raises base={base!r} beyond float64: use a smaller factor")
    return float(raised)


def yarn_ramp(dim, base, scaling):
    """YaRN's share of interpolation per pair, a NumPy float64 array (dim / 2,) from 0 (keep) to 1 (divide by s).

    Pair i turns r_i = L theta_i / (2 pi) times within the trained length L. Pairs with r_i > beta_fast (32 by
    default) keep their frequency, pairs with r_i < beta_slow (1) are interpolated, and between the two the share
    rises linearly in i. The bounds are the pair indices where r_i = beta_fast and r_i = beta_slow,
    i(r) = dim ln(L / (2 pi r)) / (2 ln base), rounded outwards when scaling['truncate'] (the default).
    """
    dim, base = rotary_dim(dim), real_number("base", base)
    scaling = check_rope_scaling(scaling, base)
    if scaling is None or scaling["rope_type"] != "yarn":
        raise ValueError("yarn_ramp needs a scaling of rope_type 'yarn'")
    if base <= 1:
        raise ValueError(f"YaRN counts turns with ln(base), so base must be above 1, got {base!r}")
    trained = scaling["original_max_position_embeddings"]

    def pair_turning(turns):  # the (fractional) pair index i whose pair turns `turns` times within L
        return dim * math.log(trained / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(scaling["beta_fast"]), pair_turning(scaling["beta_slow"])
    if scaling["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)  # the bounds transformers clamps to
    high = high + 0.001 if high == low else high  # one pair alone: a step instead of a ramp
    return np.clip((np.arange(dim // 2) - low) / (high - low), 0.0, 1.0)


def _llama3_frequencies(frequencies, scaling):
    """Llama 3's scaling (Grattafiori et al. 2024) of inverse frequencies (dim / 2,), a checked 'llama3' scaling.

    Wavelength w_i = 2 pi / theta_i. Pairs whose wavelength exceeds L / low_freq_factor turn s times slower;
    pairs shorter than L / high_freq_factor keep their speed; between, a blend with weight
    (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor) on the kept speed.
    """
    trained, factor = scaling["original_max_position_embeddings"], scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelengths = 2 * math.pi / frequencies  # (dim / 2,)
    kept = (trained / wavelengths - low) / (high - low)  # (dim / 2,): 0 at w = L / low, 1 at w = L / high
    blended = (1 - kept) * frequencies / factor + kept * frequencies
    scaled = np.where(wavelengths > trained / low, frequencies / factor, blended)
    return np.where(wavelengths < trained / high, frequencies, scaled)


def yarn_mscale(factor, mscale=1.0):
    """YaRN's magnitude correction 0.1 mscale ln s + 1 for s > 1, else 1 (Peng et al. 2024), a float."""
    factor, mscale = real_number("factor", factor), real_number("mscale", mscale, inclusive=True)
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_attention_factor(scaling):
    """What rotated queries and keys are multiplied by (so scores by its square): a float, 1 unless YaRN.

    YaRN: scaling['attention_factor'] if given; else, with both mscale and mscale_all_dim (DeepSeek),
    yarn_mscale(s, mscale) / yarn_mscale(s, mscale_all_dim); else yarn_mscale(s) = 0.1 ln s + 1.
    Set attention_factor to 1.0 for YaRN's frequencies without its temperature.
    """
    scaling = check_rope_scaling(scaling)
    if scaling is None or scaling["rope_type"] != "yarn":
        return 1.0
    if "attention_factor" in scaling:
        return scaling["attention_factor"]
    factor = scaling["factor"]
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return yarn_mscale(factor, scaling["mscale"]) / yarn_mscale(factor, scaling["mscale_all_dim"])
    return yarn_mscale(factor)


def apply_rotary(x, positions=None, base=10000.0, scaling=None, rotary_fraction=1.0):
    """Rotary position embedding: ``x`` (..., T, d) rotated pair by pair, same shape and dtype.

    Pairing: neighbouring features (2i, 2i + 1) form pair i, as in the RoFormer paper. The code of
    GPT-NeoX, and the Llama and Qwen implementations, pair feature i with i + d/2 instead (their helper
    is called rotate_half): the same rotation once the features are permuted (lesson 8). At position p,
    pair i turns by the angle p * base^(-2i / d). Apply it to queries and keys (not values): then
    q_m . k_n depends on m - n only. positions: a tensor of shape (T,), or broadcastable to
    x.shape[:-1] with last axis T, default arange(T); with a KV cache pass arange(T) + len(cache).
    Angles are computed in float64 for float64 input, otherwise in float32.
    Lesson 17: ``scaling`` (see ``rotary_frequencies``; 'dynamic' reads the length max(positions) + 1) changes
    the frequencies, and YaRN multiplies the rotated features by ``yarn_attention_factor``; ``rotary_fraction``
    rotates only the first d * rotary_fraction features (whole pairs) and passes the rest through unchanged.
    With 'dynamic' and a KV cache, keys cached earlier keep the frequencies of the length read then (as in transformers).
    Lesson 19: the work splits in two, ``rotary_angles`` (the cos and sin of every angle, which depend on the positions
    only) and ``rotate`` (turning x by them), so that a model can build the angles once per call for all its layers.
    """
    import torch  # here, not at the top: the NumPy lessons import this module without PyTorch

    from attn.common.layer_checks import check_rotary_arguments, largest_magnitude
    from attn.common.validate import has_only_finite

    check_rotary_arguments(x, positions, base)
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = _angles(positions, x.shape[-1], base, scaling, rotary_fraction, compute)
    turned = _rotate(x, angles)
    # The door's one check of the result, where it can overflow: a YaRN factor, or float16 (a turned pair can be
    # sqrt(2) times longer than its largest feature, past 65,504).
    if (angles.factor != 1.0 or x.dtype == torch.float16) and not has_only_finite(turned):
        times = f" times YaRN's attention factor {angles.factor:.3g}" if angles.factor != 1.0 else ""
        raise ValueError(f"x is finite, but rotating it{times} overflows {x.dtype}: the largest |x| is "
                         f"{largest_magnitude(x):.3g}; scale x down{', use a smaller attention_factor' if times else ''} "
                         "or use a wider dtype")
    return turned


class RotaryAngles(NamedTuple):
    """What ``rotate`` turns by, for T positions and the r / 2 pairs turned: cos (..., T, r / 2, 2) holds each
    angle's cos twice, sin (..., T, r / 2, 2) its -sin and +sin, so that a pair (a, b) turns to
    (a, b) * cos + (b, a) * sin = (a cos - b sin, b cos + a sin); factor: what the turned features are multiplied
    by (YaRN's temperature, 1.0 otherwise)."""

    cos: Any
    sin: Any
    factor: float


def rotary_angles(positions, dim, base=10000.0, scaling=None, rotary_fraction=1.0, dtype=None):
    """The angles apply_rotary turns features at ``positions`` by: a RotaryAngles of cos and sin (..., T, r / 2, 2).

    positions: an integer or real tensor (T,) (or with leading axes), on the device of the features to turn; dim: the
    features d of one head (even); base, scaling, rotary_fraction: as for ``apply_rotary``, r = d * rotary_fraction.
    dtype: what the angles are computed in, float32 (the default) or float64 (for float64 features). Built once,
    they turn every layer's queries and keys at these positions (``rotate``): what lesson 19's model does.
    """
    import torch

    from attn.common.validate import require_computable

    dim, base = rotary_dim(dim), real_number("base", base)
    dtype = torch.float32 if dtype is None else dtype
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64 (what the angles are computed in), got {dtype!r:.60}")
    require_computable("positions", positions)
    if positions.dim() == 0 or positions.dtype == torch.bool or positions.dtype.is_complex:
        raise TypeError(f"positions must be a tensor (T,) of integers or real numbers, got {positions.dtype} of shape "
                        f"{tuple(positions.shape)}")
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError("positions contains NaN or inf")
    check_allocation(f"rotary_angles for {positions.numel():,} positions and dim={dim}",  # angles, cos and sin
                     3 * (positions.numel() + 1) * (dim // 2) * dtype.itemsize, positions.device,
                     advice=f"use a smaller {'dim' if dim > positions.numel() else 'number of positions'}")
    return _angles(positions, dim, base, scaling, rotary_fraction, dtype)


def _angles(positions, dim, base, scaling, rotary_fraction, compute):
    """``rotary_angles`` after its checks (apply_rotary has made them)."""
    import torch

    from attn.common.layer_checks import check_rotary_angles

    rotated = rotated_features(dim, rotary_fraction)  # r: the first r features turn
    frequencies = _frequencies(rotated, base, scaling, positions, compute)  # (r / 2,)
    angles = positions.to(compute)[..., None] * frequencies  # (..., T, r / 2)
    check_rotary_angles(angles, base)
    factor = yarn_attention_factor(scaling) if scaling is not None else 1.0
    cos, sin = angles.cos(), angles.sin()
    return RotaryAngles(torch.stack((cos, cos), dim=-1), torch.stack((-sin, sin), dim=-1), factor)


def rotate(x, angles):
    """``x`` (..., T, d) turned by ``angles`` (a RotaryAngles for its T positions, from ``rotary_angles``): the
    first r features pair by pair, computed in the angles' dtype, the rest passed through; same shape and dtype.

    Checks kinds and shapes only (no pass over the numbers): the angles come checked from ``rotary_angles``, and a
    model checks its input once at its door, not in each of its layers' rotations.
    """
    check_rotate_arguments(x, angles)
    return _rotate(x, angles)


def check_rotate_arguments(x, angles):
    """``rotate``'s arguments: x a floating-point tensor (..., T, d), angles a RotaryAngles for T positions and at
    most d / 2 pairs, on x's device."""
    import torch

    if not isinstance(angles, RotaryAngles) or not all(isinstance(part, torch.Tensor) for part in angles[:2]):
        raise TypeError(f"angles must be the RotaryAngles that rotary_angles returns, got {type(angles).__name__}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2:
        got = f"{x.dtype} of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating-point tensor (..., T, d), got {got}")
    cos = angles.cos
    if cos.dim() < 3 or cos.shape[-3] != x.shape[-2] or 2 * cos.shape[-2] > x.shape[-1] or cos.device != x.device:
        raise ValueError(f"angles for {cos.shape[-3] if cos.dim() > 2 else '?'} positions and "
                         f"{cos.shape[-2] if cos.dim() > 1 else '?'} pairs on {cos.device} cannot turn x of shape "
                         f"{tuple(x.shape)} on {x.device}: make them with rotary_angles for x's positions, head size "
                         "and device")


def _rotate(x, angles):
    """``rotate`` without its checks."""
    import torch

    rotated = 2 * angles.cos.shape[-2]  # r
    turned = _turn_pairs(x[..., :rotated].to(angles.cos.dtype), angles.cos, angles.sin)  # (..., T, r)
    turned = turned * angles.factor if angles.factor != 1.0 else turned  # YaRN's temperature, on queries and keys alike
    if rotated == x.shape[-1]:
        return turned.to(x.dtype)
    return torch.cat([turned.to(x.dtype), x[..., rotated:]], dim=-1)  # (..., T, d): the rest passes through


def _frequencies(dim, base, scaling, positions, compute):
    """The inverse frequencies (dim / 2,) as a tensor of dtype ``compute`` on the positions' device.

    Without scaling they are computed in ``compute`` itself, as lesson 8 does (bit for bit the angles the course's
    models were trained with); with one, by ``rotary_frequencies`` in float64, then rounded to ``compute``."""
    import torch

    if scaling is None:
        return base ** (-torch.arange(0, dim, 2, dtype=compute, device=positions.device) / dim)
    length = None
    if check_rope_scaling(scaling, base)["rope_type"] == "dynamic":  # the length read: the last position + 1
        length = max(int(positions.max().item()) + 1, 1) if positions.numel() else 1
    return torch.as_tensor(rotary_frequencies(dim, base, scaling, length), dtype=compute, device=positions.device)


def _turn_pairs(x, cos, sin):
    """Pair i of x (..., T, r) turned by the angle whose cos and signed sin (..., T, r / 2, 2) are given (see
    RotaryAngles): (a, b) * cos + (b, a) * sin, which is (a cos - b sin, b cos + a sin). Returns (..., T, r)."""
    pairs = x.unflatten(-1, (x.shape[-1] // 2, 2))  # (..., T, r / 2, 2): (a, b)
    return (pairs * cos + pairs.flip(-1) * sin).flatten(-2)  # (..., T, r)
