"""Lesson 12's exercises: the running statistics of the online softmax, the tiles a causal kernel skips,
the rescaling step written by the learner, and what the explicit path's scores weigh at T = 32,768.

Each is predict-first or checked on hidden rows: a wrong answer is told what kind of mistake it looks
like and how far off it is in words, never the expected value.
"""

import math

import numpy as np

from attn.course.exercises.answers import Array, Function, Number, attempt
from attn.course.exercises.judging import how_far, matches
from attn.course.exercises.registry import exercise

# Exercise 12.1: one row of nine scores read in blocks of three.
ROW = np.array([2.0, 0.5, 1.0, 3.0, 1.0, 0.0, 1.0, 5.0, 2.0])
BLOCK = 3
# Exercise 12.2: a causal kernel's tile grid.
LENGTH, TILE = 4096, 128
# Exercise 12.4: the explicit path's scores, float32.
BATCH, HEADS, LONG, FLOAT32 = 4, 16, 32_768, 4


def running_statistics(scores, block_size, blocks):
    """(running maximum, running sum of exp(score - maximum)) after the first ``blocks`` blocks of a row."""
    row_max, row_sum = -math.inf, 0.0
    for start in range(0, blocks * block_size, block_size):
        row_max, row_sum = update_statistics(row_max, row_sum, scores[start:start + block_size])
    return np.array([row_max, row_sum])


def update_statistics(row_max, row_sum, block):
    """Exercise 12.3's solution: the running maximum and sum after one more block of scores (1-D)."""
    new_max = max(row_max, float(np.max(block)))
    shift = new_max if new_max > -math.inf else 0.0  # every score so far masked: subtract 0, as the lesson's loop
    new_sum = row_sum * math.exp(row_max - shift) + float(np.exp(block - shift).sum())
    return new_max, new_sum


@exercise(
    "12.1",
    Array("your running maximum and sum"),
    solution=lambda: running_statistics(ROW, BLOCK, 2),
    success=(
        "the second block raises the maximum from 2 to 3, so the first block's sum is scaled by exp(2 - 3) "
        "before the second block's exps, measured against 3, are added."
    ),
)
def _running_statistics(statistics, expected):
    if matches(statistics, expected):
        return None
    if statistics.shape != (2,):
        return "give two numbers in a list: [the running maximum, the running sum]."
    if matches(statistics, expected[::-1]):
        return "those are the right two numbers the other way round: the maximum comes first, then the sum."
    first, third = running_statistics(ROW, BLOCK, 1), running_statistics(ROW, BLOCK, 3)
    if matches(statistics, first):
        return "those are the statistics after the first block; read the second block too."
    if matches(statistics, third):
        return "those are the statistics after the third block, the whole row; stop after the second."
    if not matches(statistics[:1], expected[:1]):
        return "your running maximum is off: it is the largest score in the first two blocks."
    old_max, old_sum = first
    second = ROW[BLOCK:2 * BLOCK]
    new_exps = np.exp(second - expected[0]).sum()
    if matches(statistics[1:], [old_sum + new_exps]):
        return (
            "your maximum is right, but the first block's sum was measured against the old maximum: "
            "multiply it by exp(m_old - m_new) before adding the new block's exps."
        )
    if matches(statistics[1:], [old_sum * math.exp(expected[0] - old_max) + new_exps]):
        return (
            "your maximum is right, but the rescaling runs the wrong way: "
            "exp(m_old - m_new) is below 1 when the maximum rises."
        )
    if matches(statistics[1:], [np.exp(ROW[:2 * BLOCK]).sum()]):
        return "your maximum is right, but your sum adds exp(score) itself; the running sum adds exp(score - running maximum)."
    return "your maximum is right; " + how_far(statistics[1], expected[1], "your sum")


@exercise(
    "12.2",
    Number("your number of skipped tiles", whole=True),
    solution=lambda: _tile_counts()[1] - _tile_counts()[0],
    success=(
        "of the 32 x 32 = 1,024 tiles, the 32 on the diagonal and the 496 below it are read; the 496 above it "
        "hold only keys in every query's future, and a causal kernel never loads them."
    ),
)
def _skipped_tiles(skipped, expected):
    read, total = _tile_counts()
    per_side = LENGTH // TILE
    if skipped.shape != ():
        return "give one whole number: how many tiles the kernel never reads."
    count = int(skipped)
    if count == expected:
        return None
    if count == read:
        return "that is the number of tiles the kernel reads; the question asks how many it skips."
    if count == total // 2:
        return (
            "half the grid would be right if the diagonal tiles could be skipped too, but each of them holds some "
            "keys that some of its queries may see, so it is read (and masked inside)."
        )
    if count == total:
        return "that is every tile in the grid; the tiles on and below the diagonal must still be read."
    if count in (per_side, total - per_side):
        return "count the tiles wholly above the diagonal: in row i of the grid, the tiles after the diagonal one."
    if not 0 <= count <= total:
        return f"the grid has {per_side} x {per_side} tiles, so the count lies between 0 and that."
    return how_far(count, expected, "your count")


def _tile_counts():
    """(tiles read, tiles in the grid) for causal attention at T = 4096 in tiles of 128 x 128."""
    per_side = LENGTH // TILE
    read = per_side * (per_side + 1) // 2
    return read, per_side * per_side


def _update_calls():
    """Hidden blocks: the first (nothing read yet), one that raises the maximum, one that does not, one with -inf."""
    rows = [
        ("on the first block (running maximum -inf, sum 0)", (-math.inf, 0.0, np.array([0.5, -1.0, 2.0]))),
        ("on a block that raises the maximum", (1.0, 2.5, np.array([4.0, 0.0, 3.5, -2.0]))),
        ("on a block that does not raise the maximum", (6.0, 1.75, np.array([1.0, 5.5]))),
        ("on a block with masked (-inf) scores", (2.0, 1.2, np.array([-math.inf, 3.0, -math.inf]))),
    ]
    return [(label, (row_max, row_sum, block.copy())) for label, (row_max, row_sum, block) in rows]


def _not_finite_hint():
    return (
        "on the first block the running maximum is -inf; the new maximum, the larger of it and the block's, "
        "is finite, and exp(m_old - m_new) with that new maximum multiplies the old sum 0 by exp(-inf) = 0"
    )


@exercise(
    "12.3",
    Function(
        "your update function",
        calls=_update_calls,
        returns=Array("[new maximum, new sum]", if_not_finite=_not_finite_hint()),
    ),
    solution=lambda: update_statistics,
    success="exp(m_old - m_new) brings the old sum into the new maximum's units, so every block is read once.",
)
def _update(updated, expected):
    for (label, (row_max, row_sum, block)), output, target in zip(
        _update_calls(), updated.outputs, expected.outputs, strict=True
    ):
        if output.shape != (2,):
            return f"called {label}, your function should return two numbers, (new maximum, new sum)."
        if matches(output, target):
            continue
        if matches(output, target[::-1]):
            return f"called {label}, your function returns (new sum, new maximum), the other way round: the maximum comes first."
        if not matches(output[:1], target[:1]):
            return f"called {label}, your new maximum is off: it is the larger of the running maximum and the block's."
        new_max = target[0]
        new_exps = np.exp(block - new_max).sum()
        if matches(output[1:], [row_sum + new_exps]):
            return f"called {label}, the old sum was not rescaled: multiply it by exp(m_old - m_new) first."
        if matches(output[1:], [row_sum * math.exp(new_max - row_max) + new_exps]) and new_max != row_max:
            return f"called {label}, the rescaling runs the wrong way: use exp(m_old - m_new), not exp(m_new - m_old)."
        if matches(output[1:], [row_sum * math.exp(row_max - new_max) + np.exp(block).sum()]):
            return f"called {label}, the block's exps are not shifted: add exp(score - m_new), not exp(score)."
        return f"called {label}, " + how_far(output[1], target[1], "your new sum")
    return _all_masked_first_block(updated.function)


ALL_MASKED = np.array([-math.inf, -math.inf, -math.inf])  # a first block whose keys are all masked
AFTER_IT = np.array([1.0, 2.5])  # the block that follows it


def _all_masked_first_block(update):
    """None if ``update`` survives an all-masked first block and then gives the right pair on the next one."""
    label = "on an all-masked first block (every score -inf), then on a block of real scores"
    first, error = attempt(update, -math.inf, 0.0, ALL_MASKED.copy())
    pair = _as_pair(first)
    if error is not None or pair is None:
        what = f"raised {type(error).__name__}" if error is not None else "did not return two numbers"
        return f"called {label}, your function {what} on the all-masked block."
    if math.isnan(pair[0]) or math.isnan(pair[1]):
        return (
            f"called {label}, your function returns NaN on the all-masked block: with the running maximum and the "
            "new one both -inf, exp(m_old - m_new) is exp(-inf + inf) = exp(NaN). Subtract a shift that is 0 while "
            "every score so far is -inf, as the lesson's loop does with shift."
        )
    second, error = attempt(update, *pair, AFTER_IT.copy())
    pair, right = _as_pair(second), update_statistics(*update_statistics(-math.inf, 0.0, ALL_MASKED), AFTER_IT)
    if error is not None or pair is None or not matches(np.array(pair), np.array(right)):
        return (
            f"called {label}, your function gives a wrong pair on the block after the all-masked one: after a block "
            "of -inf scores the running sum should still be 0, and the maximum still -inf."
        )
    return None


def _as_pair(output):
    """A function's output as two floats, or None if it is not two numbers."""
    try:
        values = np.asarray(output, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return None
    return (float(values[0]), float(values[1])) if values.size == 2 else None


@exercise(
    "12.4",
    Number("your size in GiB"),
    solution=lambda: _scores_gib(),
    success=(
        "4 x 16 x 32,768 x 32,768 scores x 4 bytes = 256 GiB, more than three H100s hold, for one matrix the "
        "tiled kernel never builds."
    ),
)
def _scores_size(size, expected):
    if size.shape != ():
        return "give one number, in GiB."
    if matches(size, expected):
        return None
    mistakes = {
        _scores_gib(batch=1, heads=1): "that is one head of one sequence; the batch has 4 sequences of 16 heads each.",
        _scores_gib(heads=1): "that counts one head per sequence; each of the 4 sequences has 16 heads.",
        _scores_gib(batch=1): "that counts one sequence; the batch holds 4.",
        _scores_gib(bytes_per_number=2): "that counts 2 bytes per score; float32 takes 4.",
        2 * _scores_gib(): "that counts the scores and the weights; the question asks for the scores alone.",
        _scores_gib() * 2**30 / 1e9: "that is in GB (10**9 bytes); a GiB is 2**30 bytes.",
    }
    for wrong, hint in mistakes.items():
        if matches(size, wrong):
            return hint
    if matches(size, expected * 2**30, atol=1):
        return "that is the size in bytes; divide by 2**30 for GiB."
    return how_far(size, expected, "your size")


def _scores_gib(batch=BATCH, heads=HEADS, bytes_per_number=FLOAT32):
    return batch * heads * LONG * LONG * bytes_per_number / 2**30
