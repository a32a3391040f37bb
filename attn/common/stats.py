"""Paired comparisons over seeds: the mean difference and its 95% interval (Student's t), for lessons 14-15.

Two arms trained with the same seeds (the same weights' start and data for both) are compared seed by seed:
the differences d_i = a_i - b_i, their mean, and mean +- t * sd / sqrt(n), with t the 97.5% point of Student's t
on n - 1 degrees of freedom. An interval that holds 0 has not shown a difference.
"""

import math
import numbers

from attn.common.validate import positive_int, type_name

# Student's t, 97.5% point, for 1 .. 30 degrees of freedom (any statistics table); beyond, 1.96 + 2.4 / df is within 0.003.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile(degrees):
    """Student's t 0.975 quantile for ``degrees`` >= 1 degrees of freedom (a 95% two-sided interval)."""
    degrees = positive_int("degrees", degrees)
    return T_975[degrees - 1] if degrees <= len(T_975) else 1.96 + 2.4 / degrees


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
    half = t_quantile(n - 1) * spread / math.sqrt(n)
    return mean, mean - half, mean + half


def describe(mean, low, high):
    """Words for a paired interval: which arm it shows ahead, or that it shows neither."""
    _check_interval(mean, low, high)
    if low > 0:
        return "the first ahead"
    if high < 0:
        return "the second ahead"
    return "not shown (the interval holds 0)"


def _check_interval(mean, low, high):
    """mean, low and high: finite numbers with low <= mean <= high, as paired_interval returns them."""
    for name, value in (("mean", mean), ("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number (paired_interval gives them), got {type_name(value)} {value!r:.60}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number (paired_interval gives mean, low, high), got {value!r}")
    if not low <= mean <= high:
        raise ValueError(f"an interval has low <= mean <= high, got mean {mean!r}, low {low!r}, high {high!r}")


def t_quantile_at(probability, degrees):
    """Student's t quantile (probability in (0.5, 1), degrees >= 1) by bisection on the distribution's integral
    (Simpson's rule on the density): for intervals beyond t_quantile's 0.975
    (a Bonferroni-adjusted family, say)."""
    if not isinstance(probability, numbers.Real) or isinstance(probability, bool) or not 0.5 < probability < 1:
        raise ValueError(f"probability must be a number strictly between 0.5 and 1, got {type_name(probability)} "
                         f"{probability!r:.60}")
    degrees = positive_int("degrees", degrees)

    def density(x):
        return math.exp(math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2)
                        - 0.5 * math.log(degrees * math.pi) - (degrees + 1) / 2 * math.log1p(x * x / degrees))

    def below(t, n=2000):  # P(0 < X < t)
        h = t / n
        return h / 3 * (density(0) + density(t) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n)))

    low, high = 0.0, 1000.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if 0.5 + below(middle) < probability else (low, middle)
    return (low + high) / 2
