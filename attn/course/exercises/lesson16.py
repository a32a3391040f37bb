"""Lesson 16's exercises: one Q4_1 block by hand, a grouped-query cache's size, where StreamingLLM puts the
sinks, and bits per character from nats per token.

The checks never show the expected values, nor a factor or a difference that would give them away: they name the
mistake, or say which entry is wrong and which way (``direction_only``, as lessons 17-20's checks do). Numbers are
judged at the course's tolerance (1e-5 of the value): a value rounded as a printout shows it is called rounded.
"""

import math

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.registry import exercise

# Exercise 16.1: one Q4_1 block, 20 bytes: float16 scale d, float16 minimum m, then 16 bytes of two 4-bit codes.
BLOCK = bytes.fromhex("6624" "00ba" "10325476 98badcfe 0f1e2d3c 4b5a6978")
# Exercise 16.2: a grouped-query model, 32 layers, 15 query heads sharing 5 key/value heads of 64, 4,096 tokens, bfloat16.
LAYERS, QUERY_HEADS, KV_HEADS, HEAD_DIM, TOKENS, BYTES = 32, 15, 5, 64, 4096, 2
# Exercise 16.3: StreamingLLM's cache, a window of 256 keys (the query's own included) and 4 sinks; the query at 1,000.
WINDOW, SINKS, QUERY = 256, 4, 1000
# Exercise 16.4: a model's loss on a text of 1,200 tokens and 5,000 characters.
NATS_PER_TOKEN, TOKEN_COUNT, CHARACTERS = 2.9, 1200, 5000


def _q4_1(minimum=True, order="halves", signed=False, swap_scale=False):
    """The block's 32 weights: w = d q + m, codes 0..15, byte j holding weight j (low half) and j + 16 (high)."""
    scale, low_end = np.frombuffer(BLOCK[:4], dtype="<f2").astype(np.float64)
    if swap_scale:
        scale, low_end = low_end, scale
    codes = np.frombuffer(BLOCK[4:], dtype=np.uint8)
    low, high = codes & 0x0F, codes >> 4
    if order == "halves":
        q = np.concatenate([low, high])
    elif order == "high first":
        q = np.concatenate([high, low])
    else:  # "neighbours": byte j holds weights 2j and 2j + 1
        q = np.stack([low, high], axis=1).flatten()
    q = q.astype(np.float64) - (8 if signed else 0)
    return scale * q + (low_end if minimum else 0.0)


@exercise(
    "16.1",
    Array("your weights"),
    solution=_q4_1,
    success="w = d q + m for each code, the low halves of the 16 bytes first, then the high halves.",
)
def _q4_1_block(weights, expected):
    if weights.shape != expected.shape:
        return f"a Q4_1 block holds 32 weights, one per 4-bit code: give an array of 32 numbers, not shape {weights.shape}."
    for mistake, hint in (
        (_q4_1(minimum=False), "the minimum m is missing: Q4_1 adds it to every weight, w = d q + m"),
        (_q4_1(order="high first"), "the halves are swapped: byte j holds weight j in its LOW four bits "
                                    "(byte & 0x0F) and weight j + 16 in its high four bits"),
        (_q4_1(order="neighbours"), "the codes are in the wrong order: byte j holds weights j and j + 16, not "
                                    "two neighbours; the 16 low halves come first, then the 16 high halves"),
        (_q4_1(signed=True), "the codes are centred (q - 8), as Q4_0 stores them; Q4_1 keeps codes 0 to 15 "
                             "and adds the minimum instead"),
        (_q4_1(swap_scale=True), "the scale and the minimum are swapped: the first float16 is d, the second m"),
    ):
        if matches(weights, mistake, atol=1e-6):
            return hint + "."
    return compare(weights, expected, "your weights", atol=1e-6)


def _cache_mib(heads=KV_HEADS, tensors=2, bytes_per_number=BYTES, layers=LAYERS, head_dim=HEAD_DIM):
    return tensors * layers * heads * head_dim * bytes_per_number * TOKENS / 2**20


@exercise(
    "16.2",
    Number("your size in MiB"),
    solution=_cache_mib,
    success="2 x 32 layers x 5 key/value heads x 64 x 2 bytes is 40 KiB a token: 160 MiB for 4,096 tokens, "
            "a third of what 15 key/value heads would need.",
)
def _grouped_cache(size, expected):
    if size.shape != ():
        return "give one number: the cache's size in MiB."
    if compare(size, expected, "your size in MiB") is None:
        return None
    for mistake, hint in (
        (_cache_mib(heads=QUERY_HEADS), "that counts a key and a value for each of the 15 query heads (multi-head "
                                        "attention); here 5 key/value heads are shared, three query heads each"),
        # Two mistakes give each of the next two numbers: the reply names both readings.
        (_cache_mib(tensors=1), "that is the keys alone, or 1 byte per number: the cache holds keys and values, "
                                "and bfloat16 uses 2 bytes per number"),
        (_cache_mib(bytes_per_number=4), "that counts 4 bytes per number (float32), or heads of d = 128: bfloat16 "
                                         "uses 2 bytes per number, and these heads have d = 64"),
        (_cache_mib(layers=1), "that is one layer's cache; each of the 32 layers keeps its own"),
    ):
        if matches(size, mistake, atol=1e-3):
            return hint + "."
    if matches(size, expected * 2**20, atol=1):
        return "that is the size in bytes; divide by 2**20 for MiB."
    if matches(size, expected * 2**20 / 1e6, atol=1e-3):
        return "that is in MB (10**6 bytes); a MiB is 2**20 bytes."
    if matches(size, expected * 2**10, atol=1e-3):
        return "check the units: that looks like the size in KiB (2**10 bytes); the question asks for MiB (2**20 bytes)."
    if matches(size, expected / 2**10, atol=1e-3):  # 0.156 as well as the whole value: the unit is the mistake
        return "check the units: that looks like the size in GiB (2**30 bytes); the question asks for MiB (2**20 bytes)."
    return direction_only(size, expected, "your size in MiB")


def _sink_distances(query_place=SINKS + WINDOW - 1, absolute=False):
    place = QUERY if absolute else query_place
    return np.array([place - sink for sink in range(SINKS)], dtype=np.int64)


@exercise(
    "16.3",
    Array("your distances", kind="whole"),
    solution=_sink_distances,
    success="the cache holds 4 sinks and 256 recent keys, the query's own the last of them at place 259, "
            "so the sinks sit 259, 258, 257 and 256 places before it, wherever the text has got to.",
)
def _streaming_distances(distances, expected):
    if distances.shape != expected.shape:
        return f"give one distance per sink, 4 whole numbers (sink 0 first), not shape {distances.shape}."
    for mistake, hint in (
        (_sink_distances(absolute=True), "those are the distances at absolute positions, lesson 14's placement; "
                                         "StreamingLLM rotates each key at its place in the cache"),
        (_sink_distances(SINKS + WINDOW), "off by one: the window of 256 includes the query's own key, so the cache "
                                          "has 4 + 256 places, numbered from 0, and the query holds the last one"),
        (_sink_distances(WINDOW - 1), "that places the query at the end of the window alone; the 4 sinks come "
                                      "first in the cache, before the window's keys"),
        (expected[::-1], "the order is reversed: sink 0, the first token, is the furthest from the query"),
    ):
        if matches(distances, mistake):
            return hint + "."
    return compare(distances, expected, "your distances")


def _bits_per_character(log_base=2.0, per="character"):
    nats = NATS_PER_TOKEN * TOKEN_COUNT
    if per == "token":
        return nats / TOKEN_COUNT / math.log(log_base)
    if per == "inverted":
        return nats / TOKEN_COUNT * CHARACTERS / TOKEN_COUNT / math.log(log_base)
    return nats / CHARACTERS / math.log(log_base)


@exercise(
    "16.4",
    Number("your bits per character"),
    solution=_bits_per_character,
    success="1,200 tokens at 2.9 nats are 3,480 nats; over 5,000 characters, 0.696 nats or about 1.004 bits each.",
)
def _bits(value, expected):
    if value.shape != ():
        return "give one number: the text's bits per character."
    if compare(value, expected, "your bits per character") is None:
        return None
    for mistake, hint in (
        (_bits_per_character(log_base=math.e), "that is nats per character; a bit is ln 2 = 0.693 nats, so divide "
                                               "by ln 2"),
        (_bits_per_character(per="token"), "that is bits per token; a token covers several characters here, so "
                                           "spread the text's bits over its 5,000 characters"),
        (_bits_per_character(per="inverted"), "the ratio is upside down: a text's bits divided by its characters "
                                              "is (nats per token x tokens) / characters / ln 2"),
        (_bits_per_character() * math.log(2) ** 2, "that multiplies by ln 2; nats become bits by DIVIDING by ln 2"),
    ):
        if matches(value, mistake, atol=1e-3):
            return hint + "."
    return direction_only(value, expected, "your bits per character")
