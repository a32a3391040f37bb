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
from attn.course.exercises.judging import compare, matches, rounding_problem
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


def _is(answer, mistake, expected):
    """True when ``answer`` is ``mistake``, or ``mistake`` rounded as a printout rounds it (and not also the right
    answer rounded): a planted mistake copied from rounded digits is still named."""
    if matches(answer, mistake):
        return True
    mistake = np.asarray(mistake, dtype=np.float64)
    if answer.shape != mistake.shape or answer.dtype.kind != "f" or matches(answer, expected):
        return False
    return (rounding_problem(answer, mistake, "x") is not None
            and rounding_problem(answer, np.asarray(expected, dtype=np.float64), "x") is None)


def _flat_five(answer, what):
    """The shape sentence for a list of five weights: a (1, 5) tensor is named, not just told "five numbers"."""
    if answer.size == 5:
        return f"{what} has shape {answer.shape}: give a flat list of five numbers, one weight for each key."
    return None


def _sink_weights(sixth=False, without_sink=False, sink_logit=SINK_LOGIT):
    """The five keys' weights under SINK_LOGIT (or a mistake's; sink_logit=0 is the off-by-one softmax)."""
    exps = _exps(SINK_SCORES)
    sink = math.exp(sink_logit)
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
    for mistake, hint in (
        (_sink_weights(sixth=True), "that counts the sink's weight as a sixth output: the sink has no value, so only "
                                    "the five keys get weights; the sink's share is what the five do not sum to"),
        (_sink_weights(without_sink=True), "that is the plain softmax of the five scores (or weights divided by their "
                                           "sum, which is the same): the sink logit's e^z belongs in every "
                                           "denominator, and the five weights sum to less than 1"),
        (_sink_weights(sink_logit=0.0), "that is the off-by-one softmax, a sink fixed at 0: this head learned its "
                                        "own sink logit z, and e^z goes in the denominator"),
        (100 * expected, "those look like percentages: give each weight as a fraction of 1"),
        (expected[::-1], "those are the weights in reverse order: give them in the order of the keys' scores"),
    ):
        if _is(answer, mistake, expected):
            return hint + "."
    if answer.shape != expected.shape:
        return _flat_five(answer, "your weights") or "give five numbers, one weight for each key (the sink is not one of them)."
    problem = compare(answer, expected, "your weights")
    return None if problem is None else problem + " Each weight is e^s_j / (e^z + sum_k e^s_k)."


def _gated_output(before=False, no_sigmoid=False, no_gate=False, flipped=False):
    """The gated head's output for the one query (or a mistake's; flipped: sigmoid(-g), which is 1 - sigmoid(g))."""
    values = np.asarray(GATE_VALUES)
    gate = 1 / (1 + math.exp(GATE_LOGIT if flipped else -GATE_LOGIT))
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
        (_gated_output(flipped=True), "that uses sigmoid(-g), which is 1 - sigmoid(g): the gate is sigmoid(g) "
                                      "itself, small when g is below 0"),
    ):
        if _is(answer, mistake, expected):
            return hint + "."
    return direction_only(answer, expected, "your output")


def _off_by_one_output(without_one=False, one_per_key=False, shifted_one=False):
    """The off-by-one head's output for the one query (or a mistake's; shifted_one: the scores shifted by their
    largest, as a stable softmax does, with the 1 left unshifted)."""
    if shifted_one:
        exps = _exps(np.asarray(OFF_SCORES) - max(OFF_SCORES))
        return float(exps / (exps.sum() + 1) @ np.asarray(OFF_VALUES))
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
        (_off_by_one_output(shifted_one=True), "that shifts the scores by their largest, m, but adds 1 unshifted: "
                                               "the 1 is e^0, a logit of 0, so after the shift it is e^(0 - m), "
                                               "shifted like every other term"),
    ):
        if _is(answer, mistake, expected):
            return hint + "."
    return direction_only(answer, expected, "your output")


def _softpick_weights(rectified=True, absolute=True, rectified_total=False, absolute_top=False):
    """Softpick's weights for PICK_SCORES (or a mistake's; absolute_top: |e^s - 1| in the numerator too)."""
    terms = np.expm1(np.asarray(PICK_SCORES, dtype=np.float64))
    kept = np.maximum(terms, 0) if rectified_total else np.abs(terms) if absolute else terms  # the denominator's terms
    total = kept.sum()
    if absolute_top:
        return np.abs(terms) / total
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
        return _flat_five(answer, "your weights") or "give five numbers, one weight for each key."
    if compare(answer, expected, "your weights") is None:
        return None
    for mistake, hint in (
        (_softpick_weights(absolute_top=True), "keys scoring below 0 got weight: the numerator is max(e^s - 1, 0), "
                                               "not |e^s - 1|"),
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
        if _is(answer, mistake, expected):
            return hint + "."
    return compare(answer, expected, "your weights") + " Each weight is max(e^s_j - 1, 0) / sum_k |e^s_k - 1|."
