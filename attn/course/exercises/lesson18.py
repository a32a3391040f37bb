"""Lesson 18's exercises: the keys one query keeps, the weights of top-k attention, and the keys an NSA query reads.

Each names the mistakes the lesson warns of where they give another answer: the top-k off-by-one, forgetting
causality (choosing among future keys), a query that does not see itself, the softmax over all keys instead of
the kept ones, and (for NSA) leaving out a branch or counting blocks as keys. The expected value is never shown.
"""

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches, rounding_problem
from attn.course.exercises.registry import exercise

# Exercise 18.1: one query at position 5 of 8 keys (positions 0 to 7), top_k = 3, no sinks.
KEEP_SCORES = (0.3, 2.1, -0.5, 1.7, 0.9, 1.2, 3.0, 2.5)
KEEP_POSITION, KEEP_TOP_K = 5, 3
# Exercise 18.2: one query that sees six keys, top_k = 3.
WEIGHT_SCORES = (1.0, 3.0, 0.0, 2.0, 2.5, -1.0)
WEIGHT_TOP_K = 3
# Exercise 18.3: NSA at the last of 32,768 positions: blocks of 64 keys, 16 blocks selected, a window of 256.
NSA_LENGTH, NSA_BLOCK, NSA_SELECTED, NSA_WINDOW = 32_768, 64, 16, 256


def _kept(top_k=KEEP_TOP_K, last=KEEP_POSITION, lowest=False):
    """The sorted positions of the top_k best (or worst) scores among keys 0..last."""
    visible = np.asarray(KEEP_SCORES[:last + 1])
    order = np.argsort(visible if lowest else -visible, kind="stable")
    return np.sort(order[:top_k]).astype(np.int64)


@exercise(
    "18.1",
    Array("your key positions", kind="whole"),
    solution=_kept,
    success="the query at position 5 sees keys 0 to 5 (itself included) and keeps the three best of those six; "
            "keys 6 and 7 score higher but lie in its future, so a causal top-k never looks at them.",
)
def _which_keys(positions, expected):
    if positions.ndim != 1:
        return "give the kept key positions as one list of whole numbers, such as [0, 1, 2]."
    if positions.size > 2 and set(positions.tolist()) <= {0, 1}:
        return ("that looks like a mask, a 0 or 1 for each key: give the kept keys' positions instead, a list of "
                "three whole numbers such as [0, 1, 2].")
    positions = np.sort(positions)
    if len(np.unique(positions)) != len(positions):
        return "a key appears twice in your list; each kept key is one position, listed once."
    if positions.size and (positions.min() < 0 or positions.max() >= len(KEEP_SCORES)):
        return f"the keys are at positions 0 to {len(KEEP_SCORES) - 1}; your list holds a position outside them."
    if positions.size == KEEP_TOP_K + 1:
        return "that keeps four keys: top_k = 3 keeps three (an off-by-one, as `ranks <= top_k` instead of `<`)."
    if positions.size == KEEP_TOP_K - 1:
        return "that keeps two keys: top_k = 3 keeps three (an off-by-one, as `ranks < top_k - 1`)."
    if positions.size != KEEP_TOP_K:
        return f"top_k = 3 keeps three keys; your list holds {positions.size}."
    if compare(positions, expected, "your key positions") is None:
        return None
    for mistake, hint in (
        (_kept(last=len(KEEP_SCORES) - 1), "that chooses among all eight keys, the future ones included: forgetting "
                                           "causality; the query at position 5 may read only keys 0 to 5"),
        (_kept(last=KEEP_POSITION - 1), "that leaves the query's own key out: a query at position 5 sees keys 0 to 5, "
                                        "itself included, as in every causal mask of the course"),
        (_kept(lowest=True), "those are the lowest scores; top-k keeps the highest"),
        (np.arange(KEEP_POSITION - KEEP_TOP_K + 1, KEEP_POSITION + 1), "those are the three most recent keys: a "
                                                                        "sliding window; top-k chooses by score"),
    ):
        if matches(positions, mistake):
            return hint + "."
    future = positions[positions > KEEP_POSITION]
    if future.size:
        return f"key {int(future[0])} lies after the query (position 5): a causal top-k never keeps a future key."
    missing = sorted(set(expected.tolist()) - set(positions.tolist()))
    return (f"{len(missing)} of your keys {'is' if len(missing) == 1 else 'are'} not among the three best scores of "
            f"keys 0 to 5: rank the six visible scores again.")


def _weights(top_k=WEIGHT_TOP_K, renormalised=True, exponent=True):
    """The softmax weights of top-k attention over WEIGHT_SCORES, zero for the dropped keys."""
    scores = np.asarray(WEIGHT_SCORES)
    kept = np.zeros(len(scores), dtype=bool)
    kept[np.argsort(-scores, kind="stable")[:top_k]] = True
    values = np.exp(scores) if exponent else scores.copy()
    if not renormalised:
        return np.where(kept, values / values.sum(), 0.0)
    values = np.where(kept, values, 0.0)
    return values / values.sum()


@exercise(
    "18.2",
    Array("your weights"),
    solution=_weights,
    success="keys 1, 4 and 3 are kept; the softmax runs over their three scores alone, so their weights sum to 1 "
            "and the three dropped keys get exactly 0.",
)
def _topk_weights(weights, expected):
    if weights.shape != expected.shape:
        return f"give six weights, one per key (0 for a dropped key), not shape {weights.shape}."
    if compare(weights, expected, "your weights") is None:
        return None
    for mistake, hint in (
        (_weights(renormalised=False), "that takes the softmax over all six keys and then zeroes the dropped ones, "
                                       "so the weights sum to less than 1: the softmax runs over the kept keys "
                                       "alone"),
        (_weights(top_k=len(WEIGHT_SCORES)), "that is the softmax over all six keys: nothing was dropped; top-k "
                                              "keeps three"),
        (_weights(top_k=WEIGHT_TOP_K + 1), "that keeps four keys: top_k = 3 keeps three (an off-by-one)"),
        (_weights(top_k=WEIGHT_TOP_K - 1), "that keeps two keys: top_k = 3 keeps three (an off-by-one)"),
        (_weights(exponent=False), "those are the scores divided by their sum; the softmax exponentiates first"),
    ):
        if matches(weights, mistake):
            return hint + "."
    rounded = rounding_problem(weights, expected, "your weights")
    if rounded is not None:
        return rounded
    if not np.isclose(weights.sum(), 1.0, atol=1e-4):
        return "your weights do not sum to 1: a softmax over the kept keys gives weights that do."
    if np.count_nonzero(weights) != WEIGHT_TOP_K:
        return f"{np.count_nonzero(weights)} of your weights are not zero; top_k = 3 keeps three keys."
    return compare(weights, expected, "your weights")


def _keys_read(compressed=True, selected_as_keys=True, window=True, raw_compressed=False):
    compressed_keys = NSA_LENGTH if raw_compressed else NSA_LENGTH // NSA_BLOCK
    selected = NSA_SELECTED * (NSA_BLOCK if selected_as_keys else 1)
    return compressed * compressed_keys + selected + window * NSA_WINDOW


@exercise(
    "18.3",
    Number("your count", whole=True),
    solution=_keys_read,
    success="512 block means + 16 blocks of 64 keys + a window of 256 keys = 1,792 keys read, about 5% of the "
            "32,768 a dense query reads; each branch reads its own keys, so the three are added.",
)
def _nsa_keys(count, expected):
    if count.shape != ():
        return "give one whole number: the keys the last query reads in all three branches."
    if compare(count, np.asarray(expected), "your count") is None:
        return None
    for mistake, hint in (
        (NSA_LENGTH, "that is what dense attention reads; NSA reads block means, a few chosen blocks and a window"),
        (_keys_read(compressed=False), "that leaves out the compressed branch: it reads one mean key per block of "
                                       "64, for all the blocks before the query"),
        (_keys_read(window=False), "that leaves out the sliding window: its 256 recent keys are read as well"),
        (_keys_read(selected_as_keys=False), "that counts each selected block as one key; a selected block is read "
                                             "whole, its 64 keys"),
        (_keys_read(raw_compressed=True), "that counts every key under the compressed branch; it reads one mean per "
                                          "block, 32,768 / 64 of them"),
        (_keys_read(compressed=False, window=False), "that counts the selected blocks alone; the compressed branch "
                                                     "and the window are read too"),
        (_keys_read() - 1, "that leaves out a key: the last block, positions 32,704 to 32,767, ends at the query "
                           "itself, so it is complete and the compressed branch reads its mean too; and the window's "
                           "256 keys include the query's own"),
    ):
        if matches(count, mistake):
            return hint + "."
    return direction_only(count, expected, "your count")
