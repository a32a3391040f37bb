"""Lesson 21's exercises: KIVI's key scales, the bytes a quantized cache holds, which entries an evicting cache keeps,
and the budget that holds a share of the bytes.

Each names the mistakes the lesson warns of where they give another answer: a scale per token where KIVI groups keys
per channel, bytes that forget the scales (or the zero points), bytes counted in bits, evicting the sink, forgetting
the recent window, and a budget counted in pages instead of entries. The expected value is never shown.

21.2's scales and zero points are float32 (QuantizedKVCache's default, the keys' own dtype): with float16 ones, a
count that forgot the zero points but took the scales as float32 would give the right number by two cancelling
mistakes, and no check could name them.
"""

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches, rounding_problem
from attn.course.exercises.registry import exercise

# Exercise 21.1: four positions' keys of one head (rows: positions, columns: channels); channel 1 is an outlier channel.
KEYS = ((0.1, 6.0, -0.2), (0.4, 7.5, 0.1), (-0.2, 6.6, 0.3), (0.3, 7.2, -0.3))
KEY_BITS = 2
# Exercise 21.2: one layer's cache, KIVI's layout, after GROUP positions have been made codes (no residual left).
KV_HEADS, HEAD_DIM, BITS, GROUP, SCALE_BYTES = 3, 64, 4, 32, 4  # float32 scales and zero points
# Exercise 21.3: H2O's accumulated attention of ten positions, the cache's budget, sinks and window.
SCORES = (0.45, 2.1, 0.3, 1.4, 0.2, 1.8, 0.5, 1.1, 0.4, 0.6)
BUDGET, SINKS, WINDOW = 5, 1, 2
# Exercise 21.4: a sequence's length, the share of the full cache's bytes wanted, lesson 19's page size.
LENGTH, SHARE, PAGE_SIZE = 512, 8, 16


def _key_scales(per_token=False, levels=None, symmetric=False, divided=True, half=False):
    """KEYS' 2-bit asymmetric scales, one per channel over the four positions (KIVI's), or a mistake's."""
    import torch  # here, not at the top: ``import attn`` and check() must not import torch

    from attn.compressed_cache import quantize

    keys = torch.tensor(KEYS, dtype=torch.float64)
    if per_token:
        return quantize(keys, KEY_BITS, keys.shape[1], axis=1).scales[:, 0].numpy()
    if symmetric:
        return quantize(keys, KEY_BITS, keys.shape[0], axis=0, symmetric=True).scales[0].numpy()
    spread = (keys.amax(dim=0) - keys.amin(dim=0)).numpy()
    if not divided:
        return spread
    if levels is not None:
        return spread / levels
    if half:  # the scales stored as float16, as KIVI keeps them
        return quantize(keys, KEY_BITS, keys.shape[0], axis=0, scale_dtype=torch.float16).scales[0].double().numpy()
    return quantize(keys, KEY_BITS, keys.shape[0], axis=0).scales[0].numpy()


@exercise(
    "21.1",
    Array("your list of scales"),
    solution=_key_scales,
    success="each channel's scale is its own range over the four positions over 2**2 - 1 = 3 steps, so the small "
            "channels keep steps of their own size; one scale per position would be set by the outlier channel, and "
            "every small number in that position would land on the same code.",
)
def _scales(answer, expected):
    what = "your list of scales"
    if answer.shape == (1, expected.size):
        return (f"your scales have shape (1, {expected.size}): quantize keeps an axis for the groups along the positions "
                "(one group here); give the three scales as one flat list, such as scales[0].")
    per_token = _key_scales(per_token=True)
    if answer.shape == per_token.shape and np.allclose(answer, per_token, rtol=0, atol=0.01):  # printed digits too
        return ("those are one scale per position (per token): KIVI groups keys per channel, so each of the three "
                "channels gets one scale over the four positions.")
    if answer.shape != expected.shape:
        return "give three numbers, one scale for each channel (each column of the keys)."
    if compare(answer, expected, what) is None:
        return None
    if matches(answer, _key_scales(half=True)) or str(getattr(answer, "dtype", "")) == "float16":
        return ("those are float16 scales (as KIVI stores them), rounded to about three significant digits: give them "
                "at full precision, computed in float32 or float64.")
    for mistake, hint in (
        (_key_scales(levels=2**KEY_BITS), "that divides each range by 2**bits = 4: 2 bits give 4 codes, 0 to 3, "
                                          "so a range is cut into 2**bits - 1 steps"),
        (_key_scales(symmetric=True), "that is the symmetric scale, max |x| over the group: the asymmetric codes "
                                      "KIVI uses start at each group's smallest number"),
        (_key_scales(divided=False), "those are the ranges themselves, max - min: the scale is one step of the codes, "
                                     "the range over 2**bits - 1"),
        (np.min(KEYS, axis=0), "those are each channel's minimum, its zero point: the scale beside it is one step of "
                               "the codes"),
    ):
        if matches(answer, mistake):
            return hint + "."
    return compare(answer, expected, what) + " Each scale is one step of its channel's codes."


def _cache_bytes(scales=True, zero_points=True, scale_bytes=SCALE_BYTES, code_bits=BITS):
    """Bytes held by one layer's keys and values, GROUP positions as codes in KIVI's layout (or a mistake's count)."""
    codes = 2 * KV_HEADS * GROUP * HEAD_DIM * code_bits // 8  # keys and values
    key_groups = KV_HEADS * HEAD_DIM * (GROUP // GROUP)  # one group per channel over the GROUP positions
    value_groups = KV_HEADS * GROUP * (HEAD_DIM // GROUP)  # per position, HEAD_DIM / GROUP groups of channels
    per_group = scale_bytes * (int(scales) + int(zero_points))
    return codes + (key_groups + value_groups) * per_group


@exercise(
    "21.2",
    Number("your count", whole=True),
    solution=_cache_bytes,
    success="the 4-bit codes take half a byte a number, and every group adds a float32 scale and zero point: one per "
            "channel for the keys, one per 32 channels of each position for the values. Those add half again to the "
            "codes here, which is why a 4-bit cache holds more than an eighth of float32's bytes (float16 scales, as "
            "KIVI keeps them, would add a quarter).",
)
def _bytes(count, expected):
    if count.shape != ():
        return "give one whole number: the bytes the layer's keys and values hold."
    if compare(count, np.asarray(expected), "your count") is None:
        return None
    for mistake, hint in (
        (_cache_bytes(scales=False, zero_points=False), "that counts the codes alone: bytes that forget the scales; "
                                                        "every group also stores a scale and a zero point"),
        (_cache_bytes(scale_bytes=2), "that gives each group 4 bytes besides its codes: float16 scales and zero points "
                                      "(as KIVI keeps them), or float32 scales without their zero points; this cache "
                                      "keeps both, each in float32"),
        (_cache_bytes(zero_points=False), "that counts the codes and the scales but forgets the zero points: "
                                          "asymmetric codes store one beside each scale"),
        (_cache_bytes(zero_points=False, scale_bytes=2), "that counts float16 scales and no zero points: this cache "
                                                         "keeps a scale and a zero point for every group, each in float32"),
        (_cache_bytes(code_bits=8), "that gives each 4-bit code a byte of its own: two codes are packed into a byte"),
        (2 * KV_HEADS * GROUP * HEAD_DIM * 4, "that is the float32 cache's bytes, before any codes"),
        (_cache_bytes() // 2, "that counts keys or values, not both"),
        (8 * _cache_bytes(), "that counts bits, not bytes: a byte is 8 bits"),
    ):
        if matches(count, mistake):
            return hint + "."
    rounded = rounding_problem(count, np.asarray(expected), "your count", whole=True)
    if rounded is not None:
        return rounded + " Count the bytes exactly: a count of bytes is a whole number, not an estimate."
    return direction_only(count, expected, "your count")


def _kept(sinks=SINKS, window=WINDOW, lowest=False):
    """The positions an evicting cache keeps (or a mistake's), from the course's keep_indices."""
    import torch

    from attn.compressed_cache import keep_indices

    scores = torch.tensor(SCORES, dtype=torch.float64)[None, None]  # (1, 1, 10)
    positions = torch.arange(len(SCORES))[None, None]
    return keep_indices(-scores if lowest else scores, positions, BUDGET, sinks, window, len(SCORES))[0, 0].numpy()


@exercise(
    "21.3",
    Array("your positions", kind="whole"),
    solution=_kept,
    success="the sink (position 0) and the last two positions stay whatever their scores, and the two highest scores "
            "among the rest fill the budget of five; the sink's own score is low here, and without its protection "
            "the rule would have evicted it.",
)
def _positions(answer, expected):
    if answer.ndim != 1:
        return "give the kept positions as one list of whole numbers, such as [0, 3, 4]."
    answer = np.sort(answer)
    if matches(answer, expected):
        return None
    for mistake, hint in (
        (_kept(sinks=0), "that evicts the sink: position 0 is a sink token, kept whatever its score"),
        (_kept(window=0), "that evicts one of the two most recent positions: the window is kept whatever its scores"),
        (_kept(sinks=0, window=0), "that ranks every position by its score alone: evicting the sink and the window; "
                                   "both are kept first"),
        (_kept(lowest=True), "that keeps the lowest scores: H2O keeps the entries that drew the most attention"),
    ):
        if matches(answer, mistake):
            return hint + "."
    if answer.size != BUDGET:
        return (f"the budget counts every entry kept, sinks and window included: keep {BUDGET} positions, "
                f"not {answer.size}.")
    if answer.min() < 0 or answer.max() >= len(SCORES) or len(set(answer.tolist())) != answer.size:
        return f"give {BUDGET} different positions from 0 to {len(SCORES) - 1}."
    return "keep the sink and the window first, then the highest scores among the other positions."


def _budget(in_pages=False):
    """Entries per head that hold 1/SHARE of a full LENGTH-position cache's bytes (a mistake: in pages)."""
    entries = LENGTH // SHARE
    return entries // PAGE_SIZE if in_pages else entries


@exercise(
    "21.4",
    Number("your budget", whole=True),
    solution=_budget,
    success="an evicting cache's budget counts entries per key/value head, each as many bytes as a full cache's "
            "position, so an eighth of the entries' bytes is an eighth of the positions; the pages they sit in are another "
            "matter: entries scattered over the sequence can keep many more pages than budget / page_size.",
)
def _entries(budget, expected):
    if budget.shape != ():
        return "give one whole number: the budget you would pass to EvictingKVCache."
    if compare(budget, np.asarray(expected), "your budget") is None:
        return None
    for mistake, hint in (
        (_budget(in_pages=True), "that counts the budget in pages instead of entries: EvictingKVCache's budget is "
                                 "entries per key/value head, whatever page they sit in"),
        (LENGTH - _budget(), "that is how many positions are evicted, not how many are kept"),
        (SHARE, "that is the share's denominator: the budget is a number of entries, a share of the sequence's"),
    ):
        if matches(budget, mistake):
            return hint + "."
    return direction_only(budget, expected, "your budget")
