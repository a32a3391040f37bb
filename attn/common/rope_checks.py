"""Checks for rotary scaling (lesson 17): a ``rope_parameters`` dict, a rotary fraction, a trained length.

Each wrong value becomes one sentence naming the key or argument. No PyTorch at import time: the NumPy
helpers of ``attn.positions`` use these too.
"""

import math
import numbers

import numpy as np

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
COMMON_KEYS = ("rope_type", "rope_theta", "partial_rotary_factor")
REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}
OPTIONAL = {"yarn": ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate")}
YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}  # as in Peng et al. (2023) and transformers
NON_NEGATIVE = ("mscale", "mscale_all_dim")  # 0 means "not given", as DeepSeek's code reads it


def _name_of(value):
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def real_number(name, value, minimum=0.0, inclusive=False):
    """``value`` as a float: a finite real number (not a bool) above ``minimum`` (or at it, with ``inclusive``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {_name_of(value)} {value!r:.60}")
    value = float(value)
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


def positive_whole(name, value):
    """``value`` as an int: a whole number >= 1 (not a bool, not a float such as 256.0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {_name_of(value)} {value!r:.60}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return int(value)


def rotary_dim(dim):
    """The number of features rotated: a positive even int (features turn in pairs)."""
    dim = positive_whole("dim", dim)
    if dim % 2:
        raise ValueError(f"dim must be even (rotary turns features in pairs), got {dim}")
    return dim


def rotated_features(head_dim, rotary_fraction):
    """How many of a head's ``head_dim`` features ``rotary_fraction`` in (0, 1] rotates: a whole, even number."""
    fraction = real_number("rotary_fraction", rotary_fraction)
    if fraction > 1:
        raise ValueError(f"rotary_fraction must lie in (0, 1] (the share of each head's features rotated), got {fraction!r}")
    rotated = head_dim * fraction
    if abs(rotated - round(rotated)) > 1e-9 or round(rotated) % 2 or round(rotated) == 0:
        raise ValueError(
            f"rotary_fraction={fraction!r} of d={head_dim} features is {rotated:g}: not a whole, positive number of "
            f"pairs; choose a fraction that makes an even count (such as {2 / head_dim:g} per pair)"
        )
    return round(rotated)


def _check_type(scaling):
    if "rope_type" not in scaling:
        raise ValueError(f"scaling needs a 'rope_type' key (one of {', '.join(ROPE_TYPES)}), got keys {sorted(scaling)}")
    rope_type = scaling["rope_type"]
    if not isinstance(rope_type, str):
        raise TypeError(f"scaling['rope_type'] must be a str, got {_name_of(rope_type)} {rope_type!r:.60}")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"unknown rope_type {rope_type!r:.60}; the course implements {', '.join(ROPE_TYPES)}")
    return rope_type


def check_rope_scaling(scaling, base=None):
    """None, or ``scaling`` (a dict in transformers' ``rope_parameters`` form) checked, with YaRN's defaults filled in.

    Keys by ``rope_type``: 'linear' factor; 'dynamic' factor and original_max_position_embeddings (the trained
    length, which transformers reads from config.max_position_embeddings); 'yarn' factor, original_max_position_embeddings
    and optionally attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim, truncate; 'llama3' factor,
    original_max_position_embeddings, low_freq_factor, high_freq_factor. Any type may carry rope_theta (it must
    equal ``base``, unless base is None) and partial_rotary_factor (only 1: give the rotated size itself instead).
    """
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be None or a dict such as {{'rope_type': 'linear', 'factor': 4.0}}, "
                        f"got {_name_of(scaling)}")
    rope_type = _check_type(scaling)
    allowed = COMMON_KEYS + REQUIRED[rope_type] + OPTIONAL.get(rope_type, ())
    unknown = sorted(str(key) for key in scaling if key not in allowed)
    if unknown:
        raise ValueError(f"scaling of rope_type {rope_type!r} has unknown key(s) {unknown}; it takes {', '.join(allowed)}")
    missing = [key for key in REQUIRED[rope_type] if key not in scaling]
    if missing:
        raise ValueError(f"scaling of rope_type {rope_type!r} needs the key(s) {missing}")
    checked = {"rope_type": rope_type, **{key: value for key, value in YARN_DEFAULTS.items() if rope_type == "yarn"}}
    for key, value in scaling.items():
        if key == "rope_type":
            continue
        if key == "truncate":
            if not isinstance(value, bool):
                raise TypeError(f"scaling['truncate'] must be True or False, got {_name_of(value)} {value!r:.60}")
            checked[key] = value
        elif key == "original_max_position_embeddings":
            checked[key] = positive_whole(f"scaling[{key!r}]", value)
        elif value is not None or key not in OPTIONAL.get(rope_type, ()):  # transformers writes None for "not given"
            checked[key] = real_number(f"scaling[{key!r}]", value, inclusive=key in NON_NEGATIVE)
    _check_consistency(checked, base)
    return checked


def _check_consistency(checked, base):
    """What no single key shows: rope_theta against base, the partial factor, the order of YaRN's and Llama 3's bounds."""
    if base is not None and "rope_theta" in checked and not math.isclose(checked["rope_theta"], base, rel_tol=1e-12):
        raise ValueError(f"scaling['rope_theta']={checked['rope_theta']!r} differs from base={base!r}; pass the model's "
                         "rope_theta as base")
    if checked.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"scaling['partial_rotary_factor']={checked['partial_rotary_factor']!r}: give the rotated size "
                         "as dim (or rotary_fraction to apply_rotary) instead, and leave it out of scaling")
    if checked.get("beta_fast", math.inf) <= checked.get("beta_slow", 0.0):
        raise ValueError(f"scaling['beta_fast']={checked['beta_fast']!r} must be larger than beta_slow="
                         f"{checked['beta_slow']!r}: pairs turning more than beta_fast times keep their frequency, "
                         "fewer than beta_slow times are interpolated")
    if checked.get("high_freq_factor", math.inf) <= checked.get("low_freq_factor", 0.0):
        raise ValueError(f"scaling['high_freq_factor']={checked['high_freq_factor']!r} must be larger than "
                         f"low_freq_factor={checked['low_freq_factor']!r} (Llama 3 uses 4 and 1)")


def check_ntk_dim(dim, rope_type):
    """NTK-aware scaling raises the base to the power dim / (dim - 2): dim must be at least 4."""
    if dim < 4:
        raise ValueError(f"{rope_type} scaling raises the base by factor^(dim / (dim - 2)), which needs dim >= 4, got {dim}")


def check_frequencies(frequencies, what):
    """ValueError unless every inverse frequency (NumPy float64 (dim / 2,)) is finite and positive: huge factors
    overflow. ``what``: the call that made them, named in the sentence."""
    if not isinstance(frequencies, np.ndarray) or frequencies.dtype != np.float64 or not isinstance(what, str):
        raise TypeError(f"check_frequencies takes a NumPy float64 array and a str, got {_name_of(frequencies)} and "
                        f"{_name_of(what)}")
    if not (frequencies.size and (frequencies > 0).all() and (frequencies < math.inf).all()):
        raise ValueError(f"{what} gives inverse frequencies that are not finite and positive (a factor or length so "
                         "large that the base overflows float64); use a smaller factor")


def check_rotary_options(rotary_base, rotary_scaling, rotary_fraction, head_dim):
    """A layer's rotary options: (scaling checked, fraction as a float); scaling and a fraction need a rotary_base."""
    if rotary_base is None and (rotary_scaling is not None or rotary_fraction != 1.0):
        raise ValueError("rotary_scaling and rotary_fraction change rotary positions, so they need a rotary_base "
                         "(10000.0 is usual); without one the layer has no positions (NoPE)")
    if rotary_base is None:
        return None, 1.0
    rotated_features(head_dim, rotary_fraction)
    return check_rope_scaling(rotary_scaling, rotary_base), float(rotary_fraction)
