"""Lesson 3's exercises: scaled scores, many queries in one product, and a variance predicted before it is measured."""

import numpy as np

from attn.course import fruit
from attn.course.exercises.answers import Array, Number, compare, compare_without_answer, matches, show
from attn.course.exercises.lesson02 import DURABLE_QUERY
from attn.course.exercises.registry import exercise

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


# Exercise 3.3: random vectors whose query entries are larger than the key entries.
TRIAL_D_K = 32
TRIAL_QUERY_STD, TRIAL_KEY_STD = 2.0, 1.0


def dot_product_variance(d_k, query_std=1.0, key_std=1.0):
    """The variance of q . k for independent zero-mean entries: d_k products, each of variance query_std^2 key_std^2."""
    return d_k * query_std**2 * key_std**2


def scaled_score_variance(d_k, query_std=1.0, key_std=1.0):
    """The variance of q . k / sqrt(d_k): dividing by sqrt(d_k) divides the variance by d_k."""
    return dot_product_variance(d_k, query_std, key_std) / d_k


def _known_mistakes():
    """Common wrong predictions for exercise 3.3, each with a hint that names it."""
    d_k, query_std, key_std = TRIAL_D_K, TRIAL_QUERY_STD, TRIAL_KEY_STD
    raw = dot_product_variance(d_k, query_std, key_std)  # 128
    scaled = scaled_score_variance(d_k, query_std, key_std)  # 4
    std, product = show(query_std), f"{show(query_std)}**2 * {show(key_std)}**2"
    return [
        (np.sqrt(scaled), "that is the standard deviation of the scaled score, not its variance (or the query's "
         f"standard deviation used where its variance belongs: each product q_j k_j has variance {product})."),
        (scaled_score_variance(d_k), "that is the scaled variance for unit-variance entries; here every query entry "
         f"has standard deviation {std}, so each product q_j k_j has variance {product}."),
        (raw, "that is the variance of the unscaled q . k; dividing a score by sqrt(d_k) divides its variance by d_k."),
        (np.sqrt(raw), "that is the standard deviation of the unscaled q . k; the exercise asks for the variance of "
         "the scaled score."),
        (raw / np.sqrt(d_k), "you divided the variance by sqrt(d_k); dividing a number by c divides its variance by "
         "c**2, so by d_k."),
        (dot_product_variance(d_k), "that is the variance of the unscaled q . k for unit-variance entries; here the "
         f"query's entries have standard deviation {std}, and the score is scaled."),
        (dot_product_variance(d_k, np.sqrt(query_std)), f"you used the query's standard deviation, {std}, where its "
         "variance belongs, and left the score unscaled."),
    ]


def _success():
    d_k, query_std, key_std = TRIAL_D_K, TRIAL_QUERY_STD, TRIAL_KEY_STD
    each = query_std**2 * key_std**2
    return (
        f"each product q_j k_j has variance {show(query_std)}**2 * {show(key_std)}**2 = {show(each)}, the {d_k} of them "
        f"add up to {show(dot_product_variance(d_k, query_std, key_std))}, and dividing by sqrt({d_k}) divides that "
        f"by {d_k}: {show(scaled_score_variance(d_k, query_std, key_std))}. Scaling undoes the growth with d_k, "
        f"not the size of the entries."
    )


@exercise(
    "3.3",
    Number("your predicted variance"),
    solution=lambda: scaled_score_variance(TRIAL_D_K, TRIAL_QUERY_STD, TRIAL_KEY_STD),
    success=_success(),
)
def _predicted_variance(prediction, expected):
    if prediction.shape != ():
        return compare_without_answer(prediction, expected, "your predicted variance")
    if prediction < 0:
        return "a variance is an average of squares, so it cannot be negative."
    for wrong, hint in _known_mistakes():
        if matches(prediction, wrong):
            return hint
    if not matches(prediction, expected) and abs(prediction - expected) <= 0.08 * expected:
        return (
            f"{show(float(prediction))} is close, as a measurement would be, but a prediction from the rules is an "
            f"exact number: work it out from the variances, without random draws."
        )
    return compare_without_answer(prediction, expected, "your predicted variance")
