"""Lesson 3's exercises: scaled scores, many queries in one product, and a variance predicted before it is measured."""

import numpy as np

from attn.course import fruit
from attn.course.exercises.answers import Array, Function, Number
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.lesson02 import DURABLE_QUERY
from attn.course.exercises.registry import exercise
from attn.course.exercises.wording import show

D_K = fruit.KEYS.shape[1]  # 3


def scaled_scores(query, keys):
    """Exercise 3.1's solution: query (d_k,), keys (T_k, d_k) -> scaled scores (T_k,)."""
    return keys @ query / np.sqrt(keys.shape[1])


# Exercise 3.1's calls: the durable query against the fruit keys, then hidden tables that are not square
# (more keys than features, and fewer), so that dividing by sqrt(T_k), or by the fruit's d_k = 3 whatever
# the table, gives a different answer from dividing by sqrt(d_k).
SCORE_TABLES = ((5, 2, 31), (2, 8, 32))  # (T_k, d_k, seed)


def _scaled_score_calls():
    calls = [("with durable and the fruit keys", (DURABLE_QUERY.copy(), fruit.KEYS.copy()))]
    for n_keys, size, seed in SCORE_TABLES:
        rng = np.random.default_rng(seed)
        query, keys = rng.standard_normal(size), rng.standard_normal((n_keys, size))  # (d_k,), (T_k, d_k)
        calls.append((f"with a query of {size} entries and {n_keys} keys, keys of shape {(n_keys, size)}", (query, keys)))
    return calls


def _scaled_score_mistakes():
    """(wrong function, hint) for the common mistakes of exercise 3.1."""
    return [
        (lambda query, keys: keys @ query / np.sqrt(len(keys)), (
            "you divided by the square root of the number of keys, T_k; the fruit table hides this (3 keys of 3 "
            "entries), but d_k is the number of entries in each key: keys.shape[1]."
        )),
        (lambda query, keys: keys @ query / np.sqrt(D_K), (
            "you divided by sqrt(3), the fruit's d_k, whatever the table; read d_k from the keys you are given, "
            "keys.shape[1]."
        )),
        (lambda query, keys: keys @ query, "these are the unscaled dot products; divide by sqrt(d_k)."),
        (lambda query, keys: keys @ query / keys.shape[1], "you divided by d_k; divide by its square root instead."),
    ]


@exercise(
    "3.1",
    Function("your scaled_scores function", calls=_scaled_score_calls, returns=Array("the scores")),
    solution=lambda: scaled_scores,
    success=(
        "keys @ query / sqrt(d_k), with d_k = keys.shape[1]: for durable and the fruit keys that is apple 0.13, "
        "banana 0.16, chair 0.48, and it holds for tables of any shape."
    ),
)
def _scaled_scores(answer, expected):
    calls = _scaled_score_calls()
    for (label, _), output, right in zip(calls, answer.outputs, expected.outputs, strict=True):
        if output.shape != right.shape:
            return f"called {label}, your function returned shape {output.shape}; it should return one score per key."
    for mistake, hint in _scaled_score_mistakes():
        if all(matches(output, mistake(*arguments)) for output, (_, arguments) in zip(answer.outputs, calls, strict=True)):
            return hint
    for (label, _), output, right in zip(calls, answer.outputs, expected.outputs, strict=True):
        problem = compare(output, right, "the scores it returned")
        if problem is not None:
            return f"called {label}, {problem}"
    return None


@exercise(
    "3.2",
    Array("your score matrix"),
    solution=lambda: np.stack([fruit.QUERY, DURABLE_QUERY]) @ fruit.KEYS.T / np.sqrt(D_K),  # (2, 3)
    success="one matrix product scores both queries against all three keys: a (2, 3) matrix.",
)
def _two_queries(scores, expected):
    if scores.shape == (3, 2):
        return "your matrix has shape (3, 2), one row per key; put the queries in rows: queries @ keys.T."
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
    """Common wrong predictions for exercise 3.3, each with a hint that names it without working it out."""
    d_k, query_std, key_std = TRIAL_D_K, TRIAL_QUERY_STD, TRIAL_KEY_STD
    raw = dot_product_variance(d_k, query_std, key_std)
    scaled = scaled_score_variance(d_k, query_std, key_std)
    rule = "the first rule: the variance of a product of independent factors is the product of their variances"
    return [
        (np.sqrt(scaled), "that looks like a standard deviation, not a variance (or a standard deviation used "
         f"where a variance belongs: {rule})."),
        (scaled_score_variance(d_k), "that is the scaled variance for unit-variance entries; here the query's entries "
         f"have standard deviation {show(query_std)}: use {rule}, and remember a variance is a standard deviation squared."),
        (raw, "that is the variance of the unscaled q . k; dividing a score by sqrt(d_k) divides its variance by d_k."),
        (np.sqrt(raw), "that looks like a standard deviation of the unscaled q . k; the exercise asks for the variance "
         "of the scaled score."),
        (raw / np.sqrt(d_k), "you divided the variance by sqrt(d_k); dividing a number by c divides its variance by "
         "c**2."),
        (dot_product_variance(d_k), "that is the variance of the unscaled q . k for unit-variance entries; here the "
         f"query's entries have standard deviation {show(query_std)}, and the score is scaled."),
        (dot_product_variance(d_k, np.sqrt(query_std)), "you used the query's standard deviation where its variance "
         "belongs, and left the score unscaled."),
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
