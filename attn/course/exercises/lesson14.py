"""Lesson 14's exercises: a window's mask with sinks, a windowed model's cache, a learned sink's
weights, and how far a stack of local layers can reach.

The checks never show the expected values: they name the mistake, or say which entry is wrong and which way.
"""

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.registry import exercise

# Exercise 14.1: T = 10 positions, a window of 4 keys (itself included), 3 sink tokens (not the lesson's example).
LENGTH, WINDOW, SINKS = 10, 4, 3
# Exercise 14.2: 48 layers, every 6th global (8 global, 40 local), 8 key/value heads of 128,
# local window 1024, a 131,072-token sequence, bfloat16.
LAYERS, EVERY, KV_HEADS, HEAD_DIM, LOCAL_WINDOW, CONTEXT, BYTES = 48, 6, 8, 128, 1024, 131_072, 2
# Exercise 14.3: one query's scores over 5 keys and its head's learned sink logit (not the lesson's example).
SCORES, SINK = np.array([0.5, 3.0, -1.0, 1.0, 2.0]), 2.5
# Exercise 14.4: 3 local layers of window 64, no global layer.
STACK_LAYERS, STACK_WINDOW = 3, 64


def _window_mask(window=WINDOW, sinks=SINKS, causal_sinks=True, causal=True):
    """(T, T) keep-mask: key j for query p when j <= p and (p - window < j or j < sinks)."""
    query, key = np.arange(LENGTH)[:, None], np.arange(LENGTH)[None, :]
    recent = (key > query - window) & (key <= query if causal else key < query + window)
    sink = (key < sinks) & (key <= query if causal_sinks else True)
    return recent | sink


@exercise(
    "14.1",
    Array("your mask", kind="mask", meaning="True = may attend"),
    solution=_window_mask,
    success="each row keeps its last 4 keys (itself included) and the 3 sinks, and never a key after itself.",
)
def _window_with_sinks(mask, expected):
    pattern = mask.astype(bool)
    if pattern.shape != expected.shape:
        return f"the mask is one row per query and one column per key: ({LENGTH}, {LENGTH}), not {pattern.shape}."
    for mistake, hint in (
        (_window_mask(WINDOW + 1), "the off-by-one window: each row keeps 5 recent keys, one too many. The query at "
                                   "position p keeps p - 4 < j <= p, which is 4 keys counting itself"),
        (_window_mask(WINDOW - 1), "each row keeps only 3 recent keys, one too few: a window of 4 counts the query's "
                                   "own key too, so p - 4 < j <= p"),
        (_window_mask(sinks=0), "the sink tokens are missing: keys 0, 1 and 2 stay visible to every later query"),
        (_window_mask(causal_sinks=False), "the sinks are visible before they exist: query 0 may not see key 1, "
                                           "a sink is still a key in the past"),
        (_window_mask(causal=False, causal_sinks=False), "the band runs both ways: a query may not see keys after itself"),
        (~expected, "True and False are swapped: the course's masks mean True = may attend"),
    ):
        if matches(pattern, mistake):
            return hint + "."
    problem = compare_without_answer(pattern, expected, "your mask")
    if problem is None and mask.dtype != bool:
        return f"the pattern is right, but your mask holds {mask.dtype} numbers; attention functions want dtype=bool."
    return problem


def _cache_gib(global_layers=LAYERS // EVERY, window_on_global=False, tensors=2, bytes_per_number=BYTES, all_global=False):
    local_layers = LAYERS - global_layers
    per_position = tensors * KV_HEADS * HEAD_DIM * bytes_per_number
    if all_global:
        return LAYERS * CONTEXT * per_position / 2**30
    global_length = LOCAL_WINDOW if window_on_global else CONTEXT
    return (local_layers * LOCAL_WINDOW + global_layers * global_length) * per_position / 2**30


def _cache_with_window(window):
    """The cache in GiB with local windows of ``window`` positions: 1,023 and 1,025 are the off-by-one windows."""
    per_position = 2 * KV_HEADS * HEAD_DIM * BYTES
    global_layers = LAYERS // EVERY
    return ((LAYERS - global_layers) * window + global_layers * CONTEXT) * per_position / 2**30


@exercise(
    "14.2",
    Number("your size in GiB"),
    solution=_cache_gib,
    success="40 local layers keep 1,024 positions and 8 global layers all 131,072: about 4.2 GiB, "
            "against 24 GiB if every layer were global.",
)
def _windowed_cache(size, expected):
    if size.shape != ():
        return "give one number: the cache's size in GiB."
    if compare(size, np.asarray(expected), "your size in GiB") is None:
        return None
    for mistake, hint in (
        (_cache_gib(all_global=True), "that is the cache with every layer global; 40 of the 48 layers keep only their "
                                      "last 1,024 positions"),
        (_cache_gib(window_on_global=True), "that gives the global layers a window too; the 8 global layers keep every "
                                            "one of the 131,072 positions"),
        (_cache_gib(global_layers=LAYERS // (EVERY - 1)), "that counts one global layer in 5; the pattern is 5 local "
                                                          "then 1 global, one in 6: 8 of the 48"),
        (_cache_gib(tensors=1), "that is half the cache: either the keys alone (the cache holds a key and a value per "
                                "position) or 1 byte per number (bfloat16 uses 2)"),
        (_cache_gib(bytes_per_number=4), "that counts 4 bytes per number (float32); bfloat16 uses 2"),
        (_cache_with_window(LOCAL_WINDOW - 1), "that keeps 1,023 positions per local layer, the off-by-one: a window "
                                               "of 1,024 keys counts the query's own, so a local layer keeps 1,024"),
        (_cache_with_window(LOCAL_WINDOW + 1), "that keeps 1,025 positions per local layer, the off-by-one: a window "
                                               "of 1,024 keys counts the query's own, so a local layer keeps 1,024, "
                                               "not 1,024 before the query"),
    ):
        if matches(size, mistake, atol=1e-9):
            return hint + "."
    if matches(size, expected * 2**30, atol=1):
        return "that is the size in bytes; divide by 2**30 for GiB."
    if matches(size, expected * 2**30 / 1e9, atol=1e-6):
        return "that is in GB (10**9 bytes); a GiB is 2**30 bytes."
    return direction_only(size, expected, "your size in GiB")


def _sink_weights(renormalise=False, keep_sink=False):
    exponentials = np.exp(np.append(SCORES, SINK))
    weights = exponentials / exponentials.sum()
    if keep_sink:
        return weights
    weights = weights[:-1]
    return weights / weights.sum() if renormalise else weights


@exercise(
    "14.3",
    Array("your weights"),
    solution=_sink_weights,
    success="the sink takes its share of the denominator and gives nothing back: the five weights sum to less than 1.",
)
def _learned_sink(weights, expected):
    if matches(weights, _sink_weights(keep_sink=True)):
        return "that keeps the sink's own weight as a sixth entry; the sink has no value, so drop its column: five weights."
    if matches(weights, _sink_weights(renormalise=True)):
        return ("those weights sum to 1: that is the plain softmax of the scores (or the sink's share dropped and the rest "
                "renormalised). The sink stays in the denominator, so the five weights sum to less than 1.")
    shifted = np.exp(SCORES + SINK) / np.exp(SCORES + SINK).sum()
    if matches(weights, shifted):
        return "that adds the sink logit to every score, which softmax cancels; the sink is one more entry in the denominator."
    return compare_without_answer(weights, expected, "your weights")


def _reach(layers=STACK_LAYERS, window=STACK_WINDOW):
    return layers * (window - 1)


@exercise(
    "14.4",
    Number("your distance", whole=True),
    solution=_reach,
    success="each local layer carries information at most W - 1 = 63 positions further back: 3 x 63 = 189.",
)
def _receptive_field(distance, expected):
    for mistake, hint in (
        (STACK_LAYERS * STACK_WINDOW, "the off-by-one window: a window of 64 keys counts the query's own key, so one "
                                      "layer reaches 63 positions back, not 64"),
        (STACK_WINDOW - 1, "that is one layer's reach; each further local layer reads positions that have already "
                           "read 63 further back"),
        (STACK_WINDOW, "that is one layer's window; each further local layer reads positions that have already read "
                       "further back"),
    ):
        if matches(distance, np.asarray(mistake)):
            return hint + "."
    if distance.shape != ():
        return "give one whole number: the largest distance."
    return compare(distance, np.asarray(expected), "your distance") and direction_only(distance, expected, "your distance")
