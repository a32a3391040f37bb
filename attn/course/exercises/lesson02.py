"""Lesson 2's exercises: dot-product scores, cosine similarity, and hard attention over vectors."""

import numpy as np

from attn.course import fruit
from attn.course.exercises.answers import Array, Number
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.registry import exercise

DURABLE_QUERY = np.array([0.1, 0.9, 0.2])  # "something hard-wearing": the query of lessons 2-4's exercises


def argmax_one_hot(scores):
    """One-hot weights (T_k,) on the best-scoring key: hard attention."""
    weights = np.zeros_like(scores)
    weights[np.argmax(scores)] = 1.0
    return weights


def cosine_similarity(a, b):
    return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


@exercise(
    "2.1",
    Array("your score vector"),
    solution=lambda: fruit.KEYS @ DURABLE_QUERY,
    success="the durable query matches chair best (0.84), then banana (0.28), then apple (0.22).",
)
def _durable_scores(scores, expected):
    if matches(scores, expected / np.sqrt(fruit.KEYS.shape[1])):
        return "these are scaled by 1/sqrt(3); this exercise asks for the plain dot products (scaling is lesson 3)."
    return compare(scores, expected, "your score vector")


BANANA = fruit.KEYS[fruit.NAMES.index("banana")]  # (d_k,)


@exercise(
    "2.2",
    Number("your cosine similarity"),
    solution=lambda: cosine_similarity(BANANA, DURABLE_QUERY),
    success=(
        "cosine similarity divides the dot product by both lengths, so it lies between -1 and 1: durable and banana "
        "get 0.33, far below the fruit query's 0.83 with banana."
    ),
)
def _cosine_durable_banana(cosine, expected):
    dot, lengths = BANANA @ DURABLE_QUERY, (np.linalg.norm(BANANA), np.linalg.norm(DURABLE_QUERY))
    if matches(cosine, dot / lengths[0] * lengths[1]) or matches(cosine, dot / lengths[1] * lengths[0]):
        return (
            "that is what a @ b / x * y gives: Python divides by x, then multiplies by y (here both lengths are "
            "nearly equal, so it is also the plain dot product). Put the product of the lengths in brackets: "
            "a @ b / (x * y)."
        )
    if matches(cosine, dot):
        return "that is the plain dot product; divide it by the lengths of both vectors (np.linalg.norm)."
    if matches(cosine, cosine_similarity(BANANA, fruit.QUERY)):
        return "that is the fruit query's cosine with banana; this exercise asks about durable."
    return compare_without_answer(cosine, expected, "your cosine similarity")


@exercise(
    "2.3",
    Array("your output"),
    solution=lambda: argmax_one_hot(fruit.KEYS @ DURABLE_QUERY) @ fruit.VALUES,
    success="hard attention over vectors returns the whole value row of the best-matching key: chair's.",
)
def _hard_attention_durable(output, expected):
    if matches(output, argmax_one_hot(fruit.KEYS @ DURABLE_QUERY)):
        return "that is the one-hot weight vector; multiply it by values to get the value row it selects."
    return compare(output, expected, "your output")
