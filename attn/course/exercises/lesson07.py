"""Lesson 7's exercises: chance level, recall by hand, and how the recall model's size depends on its heads.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

import numpy as np

from attn.course.exercises.answers import Array, Function, Number
from attn.course.exercises.judging import compare_without_answer, matches
from attn.course.exercises.registry import exercise

N_KEYS, N_VALUES, EMBED_DIM = 16, 16, 32  # the lesson's RecallModel
N_EXAMPLES = 200  # the examples exercise 7.2's function is called on
MANY_HEADS = 8  # exercise 7.3: the lesson's model with this many heads instead of one


WIDE_IDS = 1000  # the second call's ids run up to this, far beyond the trained model's 16: only a lookup works


def _recall_examples(ids=N_KEYS):
    """Fresh examples each time, so that a function that changes its arguments cannot spoil the next check."""
    from attn.models.recall import make_recall_data

    return make_recall_data(N_EXAMPLES, n_keys=ids, n_values=ids, seed=7)


def _recall_calls():
    data, wide = _recall_examples(), _recall_examples(WIDE_IDS)
    return [
        (f"with the keys, values and query of {N_EXAMPLES} examples", (data.keys, data.values, data.query)),
        (
            f"with {N_EXAMPLES} examples whose ids run up to {WIDE_IDS - 1}, far beyond the trained model's "
            f"{N_KEYS} (a lookup by hand works for any ids; the model cannot)",
            (wide.keys, wide.values, wide.query),
        ),
    ]


def hard_recall(keys, values, query):
    """Exercise 7.2's solution: keys, values (N, P), query (N,) -> values (N,), by one-hot weights."""
    weights = (keys == query[:, None]).long()  # (N, P): 1 at the matching pair
    return (weights * values).sum(dim=1)  # (N,)


def _parameter_count(num_heads):
    import torch

    from attn.models.recall import RecallModel

    with torch.device("meta"):  # shapes only: no memory, and the learner's random numbers are left alone
        model = RecallModel(n_keys=N_KEYS, n_values=N_VALUES, embed_dim=EMBED_DIM, num_heads=num_heads)
    return sum(parameter.numel() for parameter in model.parameters())


@exercise(
    "7.1",
    Number("your accuracy"),
    solution=lambda: 1 / N_VALUES,
    success="guessing among 16 equally likely values is right 1 time in 16: 0.0625.",
)
def _chance(accuracy, expected):
    if matches(accuracy, N_VALUES):
        return "that is the number of values; an accuracy is a fraction: right 1 time in how many?"
    if matches(accuracy, 100 * expected):
        return "that is a percentage; give the accuracy as a fraction between 0 and 1."
    return compare_without_answer(accuracy, expected, "your accuracy")


@exercise(
    "7.2",
    Function("your recall function", calls=_recall_calls, returns=Array("the values", kind="whole")),
    solution=lambda: hard_recall,
    success=(
        f"all {2 * N_EXAMPLES} lookups are right, ids the trained model never saw included: one-hot weights from "
        f"keys == query, times the values, give exact recall (lesson 1's hard attention)."
    ),
)
def _recall_by_hand(recall, expected):
    calls = zip(_recall_calls(), recall.outputs, expected.outputs, (N_KEYS, WIDE_IDS), strict=True)
    for (label, _), predicted, target, ids in calls:
        problem = _recall_problem(predicted, target, _recall_examples(ids))
        if problem is not None:
            return f"called {label}, {problem}"
    return None


def _recall_problem(predicted, target, data):
    if predicted.shape != target.shape:
        return f"your function returned shape {predicted.shape}; it should return one value per example, {target.shape}."
    if not np.array_equal(predicted, target) and np.array_equal(predicted, data.position.numpy()):
        return "your function returned positions (where the matching key sits), not values: multiply the weights by the values."
    if not np.array_equal(predicted, target) and np.array_equal(predicted, data.query.numpy()):
        return "your function returned the keys it looked up, not their values: multiply the weights by the values, not the keys."
    wrong = int((predicted != target).sum())
    if wrong:
        lookups = "lookup is" if wrong == 1 else "lookups are"
        return f"{wrong} of {len(target)} {lookups} wrong; the weights should be 1 exactly where keys == query[:, None]."
    return None


@exercise(
    "7.3",
    Number("your count", whole=True),
    solution=lambda: _parameter_count(MANY_HEADS),
    success=(
        f"{MANY_HEADS} heads give the same 5,776 parameters as one: the heads slice the E = {EMBED_DIM} features that "
        f"the same four E x E projections produce (d = {EMBED_DIM // MANY_HEADS} each), so H appears nowhere in the count."
    ),
)
def _recall_parameters_with_more_heads(count, expected):
    one_head = _parameter_count(1)
    attention = 4 * EMBED_DIM**2 + 4 * EMBED_DIM  # four E x E projections with biases (lesson 6)
    head_dim = EMBED_DIM // MANY_HEADS
    readout = EMBED_DIM * N_VALUES + N_VALUES  # Linear(32, 16) with its bias
    if matches(count, one_head + (MANY_HEADS - 1) * attention):
        return (
            f"that gives every head its own E x E projections; the {MANY_HEADS} heads share the four projections, "
            f"each head reading its own slice of d = E / H = {head_dim} of their E outputs."
        )
    if matches(count, MANY_HEADS * one_head):
        return f"that multiplies the whole model by {MANY_HEADS}; the embeddings and the readout do not depend on the heads."
    if matches(count, one_head - attention + 4 * (EMBED_DIM * head_dim + head_dim)):
        return (
            f"that counts one head's slice of each projection (E x d = {EMBED_DIM} x {head_dim}); "
            f"the {MANY_HEADS} slices together make the whole E x E projection."
        )
    if matches(count, attention):
        return "that is the attention layer alone; the model also has its two embedding tables and the readout."
    if matches(count, expected - readout):
        return "you left out the readout, a Linear(32, 16) with its bias."
    return compare_without_answer(count, expected, "your count")
