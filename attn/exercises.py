"""The exercises' self-checks, one function per exercise, looked up by its id.

In a lesson: ``check("1.2", my_answer)`` prints either "Correct: ..." or
"Not yet: ..." with what is wrong, so a learner never has to compare numbers
by eye. The expected answers are computed here from the course's own data and
functions, not typed in.
"""

import numpy as np

from attn import fruit
from attn.checks import describe_array_problem, report

_CHECKS = {}


def _exercise(exercise_id, success):
    def register(function):
        _CHECKS[exercise_id] = (function, success)
        return function

    return register


def check(exercise_id, answer):
    """Run the self-check of exercise ``exercise_id`` (for example "1.2") on ``answer``."""
    if exercise_id not in _CHECKS:
        known = ", ".join(sorted(_CHECKS))
        raise ValueError(f"there is no exercise {exercise_id!r}; the exercises are {known}")
    function, success = _CHECKS[exercise_id]
    report(function(answer), success)


# Lesson 1 ---------------------------------------------------------------


@_exercise("1.1", "these one-hot weights select banana, and weights @ prices gives its price, 6.")
def _one_hot_banana(answer):
    expected = np.array([0.0, 1.0, 0.0])
    problem = describe_array_problem(answer, expected, "your weight vector")
    if problem is None or answer is None or answer is Ellipsis:
        return problem
    weights = np.asarray(answer, dtype=float)
    if weights.shape == expected.shape and np.isclose(weights.sum(), 1) and set(np.unique(weights)) <= {0.0, 1.0}:
        picked = fruit.NAMES[int(np.argmax(weights))]
        return f"your weights are one-hot, but they pick {picked!r}; banana is item {fruit.NAMES.index('banana')}."
    return problem


@_exercise("1.2", "half apple and half banana gives 0.5 * 9 + 0.5 * 6 = 7.5, a price no single item has.")
def _blend_price(answer):
    prices = np.array([fruit.PRICES[name] for name in fruit.NAMES], dtype=float)
    expected = np.array([0.5, 0.5, 0.0]) @ prices
    if isinstance(answer, np.ndarray) and answer.shape == (3,):
        return "you have a vector of three numbers; multiply the weights by the prices and add them up (weights @ prices)."
    return describe_array_problem(answer, expected, "your blended price")


@_exercise("1.3", "your lookup returns every price through one-hot weights and refuses unknown names with a KeyError.")
def _weighted_lookup(answer):
    if not callable(answer):
        return f"pass the function itself (no brackets), not a {type(answer).__name__}."
    for name, price in fruit.PRICES.items():
        try:
            got = answer(name)
        except Exception as error:  # noqa: BLE001 - any failure is reported to the learner
            return f"looking up {name!r} raised {type(error).__name__}: {error}"
        if got is None or not np.isclose(float(got), price):
            return f"looking up {name!r} gave {got!r}, expected {price}."
    try:
        got = answer("fruit")
    except KeyError:
        return None
    except Exception as error:  # noqa: BLE001
        return f"'fruit' should raise KeyError, but it raised {type(error).__name__}."
    return f"'fruit' is not a key, so it should raise KeyError, but your function returned {got!r}."
