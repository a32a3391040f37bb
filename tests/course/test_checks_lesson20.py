"""Lesson 20's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away.
The expected answers are checked against attention itself: the merge against attention over both blocks' keys, the
masks against the whole sequence's causal mask read at each device's positions, the bytes against tensors' sizes."""

import math

import numpy as np
import pytest
import torch

import attn
from attn.course.exercises.lesson20 import (
    BATCH,
    DEVICES,
    FLOAT32,
    HEAD_DIM,
    KEYS_A,
    KEYS_B,
    KV_HEADS,
    LENGTH,
    LSE_A,
    LSE_B,
    OUTPUT_A,
    OUTPUT_B,
    RANK,
    TOKENS,
    WORLD,
    _merged,
    contiguous_positions,
    merge,
    ring_bytes,
    ring_masks,
    zigzag_positions,
)
from attn.course.exercises.registry import verdict
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {
    "20.1": ("0.339", "0.722", "0.216", "0.599", "0.3389", "0.7222"),
    "20.2": ("2, 3, 12, 13", "[[True", "[[1, 0"),
    "20.3": ("939", "896", "128 MiB", "64 MiB"),
}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


RIGHT_MASKS = ring_masks()


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("20.1", _merged()), ("20.1", torch.tensor(_merged())), ("20.1", _merged().tolist()),
    ("20.1", torch.tensor(_merged(), dtype=torch.float32)),
    ("20.2", RIGHT_MASKS), ("20.2", torch.tensor(RIGHT_MASKS)), ("20.2", RIGHT_MASKS.tolist()),
    ("20.3", 939_524_096), ("20.3", 939_524_096.0), ("20.3", torch.tensor(939_524_096)),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def _partial(query, keys, values, keep):
    """(output, log-sum-exp) of queries against one block of keys, with the course's empty-row convention."""
    output, _ = attn.scaled_dot_product_attention(query, keys, values, mask=keep)
    scores = query @ keys.T / math.sqrt(query.shape[-1])
    with np.errstate(divide="ignore"):
        return output, np.log(np.sum(np.exp(scores) * keep, axis=-1))


def test_the_merge_equals_attention_over_both_blocks():
    """Two blocks' partial results merged equal attention over all keys, a query with no key in one block or in
    either included; the exercise's data keep the same convention (an empty row: output 0, log-sum-exp -inf)."""
    generator = np.random.default_rng(20)
    query, keys, values = (generator.standard_normal(shape) for shape in ((5, 3), (7, 3), (7, 2)))
    keep = generator.random((5, 7)) < 0.6
    keep[1, :KEYS_A] = False  # no key in block A
    keep[4] = False  # no key at all
    output_a, lse_a = _partial(query, keys[:KEYS_A], values[:KEYS_A], keep[:, :KEYS_A])
    output_b, lse_b = _partial(query, keys[KEYS_A:], values[KEYS_A:], keep[:, KEYS_A:])
    whole, _ = attn.scaled_dot_product_attention(query, keys, values, mask=keep)
    merged = merge(output_a, lse_a, output_b, lse_b)
    assert np.isfinite(merged).all() and np.abs(merged - whole).max() < 1e-12
    assert not merged[4].any()
    for output, lse in ((OUTPUT_A, LSE_A), (OUTPUT_B, LSE_B)):
        assert not output[np.isneginf(lse)].any()
    assert KEYS_A != KEYS_B  # weighing by block sizes is a mistake that differs from averaging


def test_the_masks_are_the_whole_sequence_s_causal_mask_at_each_device_s_positions():
    chunks = torch.tensor_split(torch.arange(LENGTH), 2 * DEVICES)  # the lesson's zigzag layout
    for rank in range(DEVICES):
        held = torch.cat([chunks[rank], chunks[2 * DEVICES - 1 - rank]]).numpy()
        assert np.array_equal(zigzag_positions(rank), held)
        assert np.array_equal(contiguous_positions(rank), torch.tensor_split(torch.arange(LENGTH), DEVICES)[rank].numpy())
    held = list(range(DEVICES))  # the block each device holds, passed to the next device at each step
    causal = np.tril(np.ones((LENGTH, LENGTH), dtype=bool))
    for step in range(DEVICES):
        block = zigzag_positions(held[RANK])
        assert np.array_equal(RIGHT_MASKS[step], causal[np.ix_(zigzag_positions(RANK), block)])
        held = [held[(rank - 1) % DEVICES] for rank in range(DEVICES)]
    # Zigzag balances the work: the pairs each device computes, over all its steps, are equal.
    pairs = [sum(causal[np.ix_(zigzag_positions(rank), zigzag_positions(other))].sum() for other in range(DEVICES))
             for rank in range(DEVICES)]
    assert len(set(pairs)) == 1


def test_the_bytes_are_the_blocks_a_ring_passes_on():
    """Each device sends its key and value blocks to the next, and needs N - 1 other blocks: N - 1 sends."""
    block = torch.empty(BATCH, KV_HEADS, TOKENS // WORLD, HEAD_DIM, dtype=torch.float32, device="meta")
    assert block.element_size() == FLOAT32
    seen, sent = [{rank} for rank in range(WORLD)], [0] * WORLD
    held = list(range(WORLD))
    while any(len(blocks) < WORLD for blocks in seen):
        for rank in range(WORLD):
            sent[rank] += 2 * block.numel() * block.element_size()  # a key block and a value block
        held = [held[(rank - 1) % WORLD] for rank in range(WORLD)]
        for rank in range(WORLD):
            seen[rank].add(held[rank])
    assert sent == [ring_bytes()] * WORLD == [939_524_096] * WORLD


MERGED = _merged()


def _rows_changed(rows, value=0.25):
    changed = MERGED.copy()
    changed[list(rows)] = value
    return changed


@pytest.mark.parametrize(("answer", "words"), [
    ((OUTPUT_A + OUTPUT_B) / 2, "averages the two outputs"),
    ((KEYS_A * OUTPUT_A + KEYS_B * OUTPUT_B) / (KEYS_A + KEYS_B), "how many keys it held"),
    (OUTPUT_A + OUTPUT_B, "without renormalising"),
    (np.exp(LSE_A)[:, None] * OUTPUT_A + np.exp(LSE_B)[:, None] * OUTPUT_B, "never divides by the total"),
    (np.where((LSE_A >= LSE_B)[:, None], OUTPUT_A, OUTPUT_B), "drops the other"),
    (np.where(np.arange(4)[:, None] == 3, np.nan, MERGED), "must not become NaN"),
    (np.logaddexp(LSE_A, LSE_B), "not a log-sum-exp"),
    (_rows_changed([3]), "no key in either block"),
    (_rows_changed([2]), "no key of block A"),
    (_rows_changed([0, 1]), "rows 0, 1"),
    (MERGED[:3], "shape (4, 2)"),
    (MERGED[:, 0], "one number per query"),
])
def test_exercise_20_1_names_the_mistake(answer, words):
    not_yet("20.1", answer, words)


def test_exercise_20_1_names_the_nan_of_a_plain_merge():
    """The merge as lesson 19 wrote it, without the shift for a query that sees no key at all, gives NaN there."""
    with np.errstate(invalid="ignore"):
        lse = np.logaddexp(LSE_A, LSE_B)
        plain = np.exp(LSE_A - lse)[:, None] * OUTPUT_A + np.exp(LSE_B - lse)[:, None] * OUTPUT_B
    assert np.isnan(plain[3]).all() and np.allclose(plain[:3], MERGED[:3])
    not_yet("20.1", plain, "must not become NaN")


@pytest.mark.parametrize(("answer", "words"), [
    (ring_masks(local=True), "as if the shard were the whole sequence"),
    (ring_masks(positions=contiguous_positions), "contiguous shards"),
    (ring_masks(source=lambda rank, step: (rank + step) % DEVICES), "not (r + s) mod N"),
    (ring_masks(source=lambda rank, step: step), "not for the block of rank s"),
    (ring_masks(allowed=lambda key, query: key >= query), "transposed"),
    (ring_masks(allowed=lambda key, query: key < query), "misses its own key"),
    (~RIGHT_MASKS, "True and False are swapped"),
    (np.ones_like(RIGHT_MASKS), "without the causal mask"),
    (RIGHT_MASKS.astype(int), "dtype=bool"),
    (RIGHT_MASKS[0], "one step's mask"),
    (np.tril(np.ones((LENGTH, LENGTH), dtype=bool)), "the whole sequence"),
    (RIGHT_MASKS[:, :2], "shape (4, 4, 4)"),
    (np.concatenate([RIGHT_MASKS[:2], ~RIGHT_MASKS[2:3], RIGHT_MASKS[3:]]), "ring step 2 is"),
])
def test_exercise_20_2_names_the_mistake(answer, words):
    not_yet("20.2", answer, words)


RIGHT_BYTES = ring_bytes()


@pytest.mark.parametrize(("answer", "words"), [
    (ring_bytes(sends=WORLD), "N times"),
    (ring_bytes(tensors=1), "keys alone"),
    (ring_bytes(bytes_per_number=2), "bfloat16's 2 bytes"),  # the same number: the reply names both readings
    (ring_bytes(kv_heads=32), "32 query heads"),
    (ring_bytes(bytes_per_number=1), "count of numbers"),
    (ring_bytes(length=TOKENS), "whole sequence's length"),
    (ring_bytes(sends=1), "one step's send"),
    (ring_bytes() * 3, "queries too"),
    (2 * RIGHT_BYTES, "and what it receives"),
    # Several mistakes give the same number: the reply names every reading.
    (ring_bytes(bytes_per_number=8), "float64"), (ring_bytes(bytes_per_number=8), "and what it receives"),
    (RIGHT_BYTES * 8, "counts bits"), (RIGHT_BYTES * 8, "whole sequence's length"),
    (ring_bytes() // 2, "heads of d = 64"), (ring_bytes(kv_heads=4), "4 key/value heads"),
    (ring_bytes(kv_heads=4), "keys alone"), (ring_bytes(kv_heads=4), "bfloat16's 2 bytes"),
    (939_520_000, "looks rounded"), (9.395e8, "looks rounded"), (9.4e8, "looks rounded"),
    (RIGHT_BYTES / 2**20, "in MiB"),
    (RIGHT_BYTES / 2**30, "in GiB"),
    (RIGHT_BYTES / 1e9, "in GB"),
    (RIGHT_BYTES + 1, "too large"),
    (RIGHT_BYTES * 0.7, "too small"),
    ([RIGHT_BYTES, RIGHT_BYTES], "one number"),
])
def test_exercise_20_3_names_the_mistake(answer, words):
    not_yet("20.3", answer, words)


@pytest.mark.parametrize("exercise_id", ["20.1", "20.2", "20.3"])
@pytest.mark.parametrize("answer", [None, ..., "nine", float("nan"), [], {"a": 1}, -math.inf])
def test_any_input_gets_a_sentence(exercise_id, answer):
    reply = verdict(exercise_id, answer)
    assert reply.startswith("Not yet: ") and len(reply.split()) >= 6, reply
