"""Lesson 4's exercises: a stable softmax, the first attention output, and temperature."""

import numpy as np

from attn.attention import scaled_dot_product_attention
from attn.course import fruit
from attn.course.exercises.answers import Array, compare, matches
from attn.course.exercises.lesson02 import DURABLE_QUERY
from attn.course.exercises.registry import exercise
from attn.softmax import softmax

BIG_SCORES = np.array([1000.0, 1001.0, 1002.0])  # exp() of these overflows


def fruit_scores():
    """The fruit query's scaled scores against the three keys, (3,)."""
    return fruit.KEYS @ fruit.QUERY / np.sqrt(fruit.KEYS.shape[1])


@exercise(
    "4.1",
    Array("your weight vector", if_not_finite="exp(1000) overflows; subtract the largest score before exp"),
    solution=lambda: softmax(BIG_SCORES),
    success="subtracting the maximum first gives exp(-2), exp(-1), exp(0) over their sum: no overflow.",
)
def _stable_softmax(weights, expected):
    if matches(weights, np.exp(BIG_SCORES - BIG_SCORES.max())):
        return "these are the exponentials; divide them by their sum so that the weights add up to 1."
    return compare(weights, expected, "your weight vector")


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
        return "you multiplied by the temperature; divide the scores by it (a low temperature makes them larger)."
    return compare(weights, expected, "your weight vector", atol=1e-4)
