"""Lesson 3's exercises: scaled scores, many queries in one product, and how much scaling shrinks them."""

import numpy as np

from attn import fruit
from attn.exercises.answers import Array, Number, compare, matches
from attn.exercises.lesson02 import DURABLE_QUERY
from attn.exercises.registry import exercise

D_K = fruit.KEYS.shape[1]  # 3


@exercise(
    "3.1",
    Array("your scaled score vector"),
    solution=lambda: fruit.KEYS @ DURABLE_QUERY / np.sqrt(D_K),
    success="scaled by 1/sqrt(3) the durable query scores apple 0.13, banana 0.16, chair 0.48.",
)
def _scaled_durable(scaled, expected):
    if matches(scaled, fruit.KEYS @ DURABLE_QUERY):
        return "these are the unscaled dot products; divide by sqrt(d_k) = sqrt(3)."
    if matches(scaled, fruit.KEYS @ DURABLE_QUERY / D_K):
        return "you divided by d_k = 3; divide by its square root instead."
    return compare(scaled, expected, "your scaled score vector")


@exercise(
    "3.2",
    Array("your score matrix"),
    solution=lambda: np.stack([fruit.QUERY, DURABLE_QUERY]) @ fruit.KEYS.T / np.sqrt(D_K),  # (2, 3)
    success="one matrix product scores both queries against all three keys: a (2, 3) matrix.",
)
def _two_queries(scores, expected):
    if scores.shape == (3, 2):
        return "your matrix has shape (3, 2), one row per key; put the queries in rows: queries @ KEYS.T."
    if matches(scores, expected * np.sqrt(D_K)):
        return "these are the unscaled dot products; divide by sqrt(d_k) = sqrt(3)."
    return compare(scores, expected, "your score matrix")


@exercise(
    "3.3",
    Number("your ratio"),
    solution=lambda: np.sqrt(256),
    success="at d_k = 256 the unscaled scores are 16 times larger than the scaled ones, and softmax saturates.",
)
def _saturation_ratio(ratio, expected):
    if matches(ratio, expected**2):
        return "that is the ratio of the variances; the typical size (standard deviation) is its square root."
    if matches(ratio, 1 / expected):
        return "that is the ratio the other way round: how much smaller the scaled scores are."
    return compare(ratio, expected, "your ratio")
