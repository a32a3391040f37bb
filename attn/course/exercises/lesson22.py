"""Lesson 22's exercises: the keys' weights under a learned sink, a gated head's output, an off-by-one head's output,
and softpick's weights.

Each names the mistakes the lesson warns of where they give another answer: the sink's weight counted as a sixth
output, the gate applied before the softmax, the off-by-one denominator without its 1, and softpick's rectifier
forgotten. The expected value is never shown.
"""

import math

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.registry import exercise

# Exercise 22.1: one row of five scores and a head's learned sink logit.
SINK_SCORES = (1.2, -0.4, 0.3, 2.0, -1.1)
SINK_LOGIT = 1.5
# Exercise 22.2: one query's scores on three keys, their values (one number each) and the query's gate logit.
GATE_SCORES = (0.8, -0.2, 1.5)
GATE_VALUES = (2.0, -1.0, 0.5)
GATE_LOGIT = -1.0
# Exercise 22.3: one query's scores on four keys and their values (one number each), off-by-one softmax.
OFF_SCORES = (-0.5, 0.4, -1.2, 0.1)
OFF_VALUES = (3.0, -2.0, 1.0, 4.0)
# Exercise 22.4: one row of five scores for softpick.
PICK_SCORES = (0.7, -0.9, 1.6, 0.0, -0.3)


def _exps(scores):
    return np.exp(np.asarray(scores, dtype=np.float64))


def _sink_weights(sixth=False, without_sink=False):
    """The five keys' weights under SINK_LOGIT (or a mistake's)."""
    exps = _exps(SINK_SCORES)
    sink = math.exp(SINK_LOGIT)
    if without_sink:
        return exps / exps.sum()
    weights = exps / (sink + exps.sum())
    if sixth:
        return np.append(weights, sink / (sink + exps.sum()))
    return weights


@exercise(
    "22.1",
    Array("your weights"),
    solution=_sink_weights,
    success="each key's weight is e^s over e^z plus the sum of the keys' e^s; the five weights sum to less than 1, and "
            "what is missing went to the sink, which has no value and so is not one of the outputs.",
)
def _sink(answer, expected):
    if matches(answer, _sink_weights(sixth=True)):
        return ("that counts the sink's weight as a sixth output: the sink has no value, so only the five keys get "
                "weights; the sink's share is what the five do not sum to.")
    if matches(answer, _sink_weights(without_sink=True)):
        return ("that is the plain softmax of the five scores (or weights divided by their sum, which is the same): the "
                "sink logit's e^z belongs in every denominator, and the five weights sum to less than 1.")
    if answer.shape != expected.shape:
        return "give five numbers, one weight for each key (the sink is not one of them)."
    problem = compare(answer, expected, "your weights")
    return None if problem is None else problem + " Each weight is e^s_j / (e^z + sum_k e^s_k)."


def _gated_output(before=False, no_sigmoid=False, no_gate=False):
    """The gated head's output for the one query (or a mistake's)."""
    values = np.asarray(GATE_VALUES)
    gate = 1 / (1 + math.exp(-GATE_LOGIT))
    if before:
        scaled = gate * np.asarray(GATE_SCORES)
        return float(np.exp(scaled) / np.exp(scaled).sum() @ values)
    read = float(_exps(GATE_SCORES) / _exps(GATE_SCORES).sum() @ values)
    if no_gate:
        return read
    return read * (GATE_LOGIT if no_sigmoid else gate)


@exercise(
    "22.2",
    Number("your output"),
    solution=_gated_output,
    success="the softmax reads the values as usual, and the gate, sigmoid of the query's own gate logit, then scales "
            "what the head read; a gate logit far below 0 would close the head whatever its weights.",
)
def _gated(answer, expected):
    if answer.shape != ():
        return "give one number: the head's output for this query (its values are one number each)."
    if compare(answer, np.asarray(expected), "your output") is None:
        return None
    for mistake, hint in (
        (_gated_output(before=True), "that applies the gate before the softmax, to the scores: the output gate "
                                     "multiplies the head's output, after the weights have read the values"),
        (_gated_output(no_sigmoid=True), "that multiplies by the gate logit itself: the gate is sigmoid(g), a number "
                                         "between 0 and 1"),
        (_gated_output(no_gate=True), "that is the head's output without its gate: multiply it by sigmoid(g)"),
    ):
        if matches(answer, mistake):
            return hint + "."
    return direction_only(answer, expected, "your output")


def _off_by_one_output(without_one=False, one_per_key=False):
    """The off-by-one head's output for the one query (or a mistake's)."""
    exps = _exps(OFF_SCORES)
    total = exps.sum() + (0 if without_one else len(exps) if one_per_key else 1)
    return float(exps / total @ np.asarray(OFF_VALUES))


@exercise(
    "22.3",
    Number("your output"),
    solution=_off_by_one_output,
    success="the 1 in the denominator is e^0, a sink fixed at 0: it takes its share of the row, so the four "
            "weights sum to less than 1 and the output is drawn toward 0.",
)
def _off_by_one(answer, expected):
    if answer.shape != ():
        return "give one number: the head's output for this query (its values are one number each)."
    if compare(answer, np.asarray(expected), "your output") is None:
        return None
    for mistake, hint in (
        (_off_by_one_output(without_one=True), "that is the plain softmax's output: the off-by-one denominator without "
                                               "its 1; add 1 to the sum of e^s"),
        (_off_by_one_output(one_per_key=True), "that adds 1 for every key: the off-by-one softmax adds a single 1, "
                                               "one sink logit of 0, to each row's denominator"),
    ):
        if matches(answer, mistake):
            return hint + "."
    return direction_only(answer, expected, "your output")


def _softpick_weights(rectified=True, absolute=True, rectified_total=False):
    """Softpick's weights for PICK_SCORES (or a mistake's)."""
    terms = np.expm1(np.asarray(PICK_SCORES, dtype=np.float64))
    kept = np.maximum(terms, 0) if rectified_total else np.abs(terms) if absolute else terms  # the denominator's terms
    total = kept.sum()
    return (np.maximum(terms, 0) if rectified else terms) / total


@exercise(
    "22.4",
    Array("your weights"),
    solution=_softpick_weights,
    success="keys scoring at or below 0 get nothing, and the denominator still counts their |e^s - 1|, so these "
            "weights sum to less than 1: the rest is what the head declines to read.",
)
def _softpick(answer, expected):
    if answer.shape != expected.shape:
        return "give five numbers, one weight for each key."
    if compare(answer, expected, "your weights") is None:
        return None
    for mistake, hint in (
        (_softpick_weights(rectified=False), "that forgets softpick's rectifier: the numerator is max(e^s - 1, 0), "
                                             "so a key scoring below 0 gets 0, never a negative weight"),
        (_softpick_weights(absolute=False), "that sums e^s - 1 in the denominator with its signs: the denominator "
                                            "adds |e^s - 1|, every key's size"),
        (_softpick_weights(rectified=False, absolute=False), "that forgets the rectifier and the absolute values: "
                                                             "softpick is max(e^s - 1, 0) / sum |e^s - 1|"),
        (_softpick_weights(rectified_total=True), "that rectifies the denominator too, so the weights sum to 1: the "
                                                  "denominator keeps every key's |e^s - 1|, the negative ones included"),
        (_exps(PICK_SCORES) / _exps(PICK_SCORES).sum(), "that is the plain softmax: softpick puts e^s - 1 where "
                                                        "softmax has e^s"),
    ):
        if matches(answer, mistake):
            return hint + "."
    return compare(answer, expected, "your weights") + " Each weight is max(e^s_j - 1, 0) / sum_k |e^s_k - 1|."
