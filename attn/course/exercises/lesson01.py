"""Lesson 1's exercises: one-hot weights, weights for a given price, and a lookup made of weights.

The names below are the lesson's own (keys, key_array, values, one_hot_weights), so that the
solution of exercise 1.3 reads as it does in the notebook.
"""

import numpy as np

from attn.course import fruit
from attn.course.exercises.answers import AnswerError, Array, Function, Number, attempt, call
from attn.course.exercises.judging import compare, matches, rounding_problem
from attn.course.exercises.registry import exercise
from attn.course.exercises.wording import apart, show

keys = list(fruit.NAMES)  # T_k = 3 names
key_array = np.array(keys)  # (T_k,) of strings
values = np.array([fruit.PRICES[key] for key in keys], dtype=float)  # (T_k,) prices


def one_hot_weights(query, key_array):
    """One weight per key, (T_k,): 1.0 where the key equals the query, else 0.0."""
    return (key_array == query).astype(float)


def weighted_lookup(query):
    """Exercise 1.3's solution: the price of ``query`` as one-hot weights @ values; KeyError if no key matches."""
    weights = one_hot_weights(query, key_array)  # (T_k,)
    if weights.sum() == 0:
        raise KeyError(query)
    return weights @ values


@exercise(
    "1.1",
    Array("your weight vector"),
    solution=lambda: one_hot_weights("banana", key_array),
    success="these one-hot weights select banana, and weights @ prices gives its price, 6.",
)
def _one_hot_banana(weights, expected):
    for name in keys:
        if name != "banana" and matches(weights, one_hot_weights(name, key_array)):
            return f"your weights are one-hot, but they pick {name!r}; banana is item {keys.index('banana')}."
    blends = weights.shape == expected.shape and np.isclose(weights @ values, expected @ values) and (weights >= 0).all()
    if blends and not matches(weights, expected):
        return (
            "your weights do give banana's price, but by blending other items whose prices average to it; the "
            "exercise asks for one-hot weights, one 1 and the rest 0, that select banana alone."
        )
    return compare(weights, expected, "your weight vector")


TARGET_PRICE = 5.0  # exercise 1.2: a price between chair's 3 and apple's 9


def apple_chair_blend(target):
    """Weights (T_k,) on apple and chair only, non-negative and summing to 1, whose blended price is ``target``."""
    apple, chair = keys.index("apple"), keys.index("chair")
    apple_share = (target - values[chair]) / (values[apple] - values[chair])  # target = s * 9 + (1 - s) * 3
    weights = np.zeros(len(keys))  # (T_k,)
    weights[apple], weights[chair] = apple_share, 1.0 - apple_share
    return weights


@exercise(
    "1.2",
    Array("your weight vector"),
    solution=lambda: apple_chair_blend(TARGET_PRICE),
    success="a third on apple and two thirds on chair: 9/3 + 2 * 3/3 = 5.",
)
def _weights_for_a_price(weights, expected):
    target = show(TARGET_PRICE)
    if weights.shape == () and matches(weights, TARGET_PRICE):
        return f"{target} is the price; give the weights that produce it, a (3,) array in the order apple, banana, chair."
    if weights.shape != expected.shape:
        return compare(weights, expected, "your weight vector")
    if not matches(weights, expected):
        rounded = rounding_problem(weights, expected, "your weight vector")
        if rounded is not None:
            return rounded + " Write exact fractions, such as 1 / 3."
    return _weights_problem(weights, target) or compare(weights, expected, "your weight vector")


def _weights_problem(weights, target):
    """What is wrong with (T_k,) weights meant to be non-negative, sum to 1, skip banana and price ``target``."""
    price, total = float(weights @ values), float(weights.sum())
    if (weights < 0).any():
        return "a weight is negative; weights are shares of the total, 0 or more."
    if weights[keys.index("banana")] != 0:
        return "your weights put something on banana; this exercise blends apple and chair only."
    if not np.isclose(total, 1.0, rtol=0, atol=1e-6):
        return (
            f"your weights sum to {total:.4g}, not 1 (they price {price:.4g}); a blend is a weighted average, "
            f"so its weights sum to 1: write the apple share as s and the chair share as 1 - s."
        )
    if np.isclose(price, TARGET_PRICE, rtol=0, atol=1e-6):
        return None
    if np.isclose(price, TARGET_PRICE, rtol=0, atol=0.05):
        shown = apart(price, TARGET_PRICE)[0]
        return f"your weights price {shown}, not quite {target}: are they rounded? Write exact fractions, such as 1 / 3."
    if np.isclose(price, values[0] + values[2] - TARGET_PRICE):
        return f"your weights price {price:.4g}: apple and chair are the wrong way round."
    return f"your weights price {price:.4g}, not {target}: solve s * 9 + (1 - s) * 3 = {target} for the apple share s."


PRICE = Number("the price")
SECOND_SHOP = {"pear": 4.0, "plum": 5.0, "stool": 1.0}  # swapped into key_array and values to see that they are read


@exercise(
    "1.3",
    Function("your lookup", calls=lambda: [(f"with {name!r}", (name,)) for name in keys], returns=PRICE),
    solution=lambda: weighted_lookup,
    success=(
        "your lookup returns every price, raises KeyError for 'fruit', and reads key_array and values: it also priced "
        "a second shop put in their place."
    ),
)
def _weighted_lookup(lookup, expected):
    for name, price, right in zip(keys, lookup.outputs, expected.outputs, strict=True):
        problem = compare(price, right, f"the price your lookup gives for {name!r}")
        if problem:
            return problem
    return _refuses_unknown_names(lookup.function) or _reads_key_array_and_values(lookup.function)


def _refuses_unknown_names(lookup):
    got, error = attempt(lookup, "fruit")
    if isinstance(error, KeyError):
        return None
    if error is not None:
        return f"'fruit' should raise KeyError, but your lookup raised {type(error).__name__}."
    return f"'fruit' is not a key, so it should raise KeyError, but your lookup returned {show(got)}."


def _reads_key_array_and_values(lookup):
    """Put a second shop where the lookup reads key_array and values: its answers must follow.

    This tells a lookup made of the lesson's arrays from one that reads a dictionary.
    """
    if isinstance(getattr(lookup, "__self__", None), dict):
        return (
            "that is the dictionary's own lookup; this exercise asks for the price through one-hot weights: "
            "one_hot_weights(query, key_array) @ values."
        )
    scope = getattr(lookup, "__globals__", {})
    if "key_array" not in scope or "values" not in scope:
        return (
            "your lookup gives the right prices, but the check cannot find the key_array and values it should read "
            "(it swaps in a second shop to see that the prices come from them); define weighted_lookup in the lesson's "
            "notebook, with one_hot_weights, key_array and values."
        )
    saved = {"key_array": scope["key_array"], "values": scope["values"]}
    scope.update(key_array=np.array(list(SECOND_SHOP)), values=np.array(list(SECOND_SHOP.values())))
    problem = None
    try:
        for name, price in SECOND_SHOP.items():
            got = call(lookup, f"with {name!r}", (name,), PRICE)
            problem = compare(got, np.asarray(price), f"the price it gives for {name!r}")
            if problem:
                break
    except AnswerError as error:
        problem = str(error)
    finally:
        scope.update(saved)
    if problem is None:
        return None
    shop = ", ".join(f"{name} {price:g}" for name, price in SECOND_SHOP.items())
    return (
        f"your lookup gives the right prices for this shop, but not from key_array and values: with a second shop "
        f"put in their place ({shop}), {problem} Compute the price as one_hot_weights(query, key_array) @ values."
    )
