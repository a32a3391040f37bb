"""Paired comparisons over seeds: the mean difference and its 95% interval (Student's t), for lessons 14-15.

Two arms trained with the same seeds (the same weights' start and data for both) are compared seed by seed:
the differences d_i = a_i - b_i, their mean, and mean +- t * sd / sqrt(n), with t the 97.5% point of Student's t
on n - 1 degrees of freedom. An interval that holds 0 has not shown a difference.
"""

import math

from attn.common.validate import type_name

# Student's t, 97.5% point, by degrees of freedom (tables; 1.96 beyond 30)
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
         21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


def _numbers(name, values):
    if not isinstance(values, list | tuple) or not all(
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) for value in values):
        raise TypeError(f"{name} must be a list of finite numbers, one per seed, got {type_name(values)} {values!r:.60}")
    return [float(value) for value in values]


def paired_interval(a, b):
    """(mean, low, high) of a[i] - b[i] over seeds: the mean difference and its 95% interval; a, b lists of n >= 2."""
    a, b = _numbers("a", a), _numbers("b", b)
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a and b need the same number of seeds, at least 2, got {len(a)} and {len(b)}")
    differences = [x - y for x, y in zip(a, b, strict=True)]
    n = len(differences)
    mean = sum(differences) / n
    spread = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = T_975.get(n - 1, 1.96) * spread / math.sqrt(n)
    return mean, mean - half, mean + half


def describe(mean, low, high):
    """Words for a paired interval: which arm it shows ahead, or that it shows neither."""
    if low > 0:
        return "the first ahead"
    if high < 0:
        return "the second ahead"
    return "not shown (the interval holds 0)"
