"""Lesson 4's exercises: a stable softmax, the first attention output, and temperature."""

import numpy as np

from attn.attention import scaled_dot_product_attention
from attn.course import fruit
from attn.course.exercises.answers import Array, Function
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.lesson02 import DURABLE_QUERY
from attn.course.exercises.registry import exercise
from attn.softmax import softmax

BIG_SCORES = np.array([1000.0, 1001.0, 1002.0])  # exp() of these overflows


def fruit_scores():
    """The fruit query's scaled scores against the three keys, (3,)."""
    return fruit.KEYS @ fruit.QUERY / np.sqrt(fruit.KEYS.shape[1])


def stable_softmax(scores):
    """Exercise 4.1's solution: scores (T_k,) -> weights (T_k,), with the largest score subtracted before exp."""
    shifted = scores - scores.max()  # every exponent is 0 or below: nothing overflows
    return np.exp(shifted) / np.exp(shifted).sum()


# Exercise 4.1's calls: big_scores, then hidden rows with a wide spread (subtracting the smallest score leaves
# exponents as large as the spread, which overflow) and a row of very negative scores (which underflow unshifted).
SPREAD_ROWS = (
    ("with big_scores, [1000, 1001, 1002]", BIG_SCORES),
    ("with a wide spread of scores, from -1000 to 1000", np.array([-1000.0, 0.0, 999.0, 1000.0])),
    ("with very negative scores, [-1002, -1001, -1000]", -BIG_SCORES[::-1]),
)
HELPERS = ("softmax", "softmax_stable", "log_softmax")  # the functions exercise 4.1 asks not to call


def _spread_calls():
    return [(label, (row.copy(),)) for label, row in SPREAD_ROWS]


def _overflow_hint():
    return (
        "exp of a large positive number overflows to inf, and inf / inf is NaN: subtract the largest score before "
        "exp, so that every exponent is 0 or below (subtracting the smallest score leaves exponents as large as "
        "the spread of the scores)"
    )


def calls_a_helper(function, names=HELPERS):
    """The name of a softmax helper that ``function`` reads (from its code and the code inside it), or None.

    A learner's function reaches a helper through a global name (``softmax``, ``attn.softmax``,
    ``scipy.special.softmax``); names read as attributes count too, so ``torch.softmax`` is seen.
    """
    code = getattr(function, "__code__", None)
    stack, seen = ([code] if code is not None else []), set()
    while stack:
        current = stack.pop()
        seen |= set(current.co_names) | set(current.co_freevars)
        stack.extend(constant for constant in current.co_consts if hasattr(constant, "co_names"))
    return next((name for name in names if name in seen), None)


@exercise(
    "4.1",
    Function(
        "your stable_softmax function",
        calls=_spread_calls,
        returns=Array("the weights", if_not_finite=_overflow_hint()),
    ),
    solution=lambda: stable_softmax,
    success=(
        "subtracting the maximum first makes every exponent 0 or below: no overflow for big_scores, none for a "
        "wide spread, and no 0 / 0 for very negative scores."
    ),
)
def _stable_softmax(answer, expected):
    calls = _spread_calls()
    for (label, (row,)), output, right in zip(calls, answer.outputs, expected.outputs, strict=True):
        if output.shape == right.shape and matches(output, np.exp(row - row.max())) and not matches(output, right):
            return f"called {label}, these are the exponentials; divide them by their sum so that the weights add up to 1."
        problem = compare(output, right, "the weights it returned")
        if problem is not None:
            return f"called {label}, {problem}"
    helper = calls_a_helper(answer.function)
    if helper is not None:
        return (
            f"the weights are right, but your function calls {helper}, which this exercise asks you to do without: "
            "write it with np.exp, .max() and .sum()."
        )
    return None


@exercise(
    "4.2",
    Array("your output"),
    solution=lambda: scaled_dot_product_attention(DURABLE_QUERY[None, :], fruit.KEYS, fruit.VALUES)[0][0],  # (d_v,)
    success="the durable query's output leans towards the chair's value: a lower price, a higher use.",
)
def _durable_output(output, expected):
    if matches(output, softmax(fruit.KEYS @ DURABLE_QUERY) @ fruit.VALUES):
        return "close, but the scores were not scaled: divide by sqrt(d_k) before the softmax."
    return compare(output, expected, "your output", atol=1e-4)


@exercise(
    "4.3",
    Array("your weight vector"),
    solution=lambda: softmax(fruit_scores() / 0.5),
    success="at temperature 0.5 the fruit weights sharpen: the best match gains and the worst loses.",
)
def _temperature(weights, expected):
    if matches(weights, softmax(fruit_scores() * 0.5)):
        return (
            "these are the weights at temperature 2 (the scores divided by 2, or multiplied by 0.5): flatter, not "
            "sharper. Temperature 0.5 divides the scores by 0.5, which makes them larger."
        )
    if matches(weights, softmax(fruit_scores())):
        return "these are the weights at temperature 1; divide the scores by the temperature, 0.5, first."
    return compare(weights, expected, "your weight vector", atol=1e-4)
