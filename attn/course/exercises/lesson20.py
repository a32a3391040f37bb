"""Lesson 20's exercises: merging two devices' partial results, the causal mask of one device's ring steps under
zigzag shards, and the bytes one device sends in ring attention's forward pass.

Each names the mistakes the lesson warns of where they give another answer: partial outputs merged without their
log-sum-exps (averaged, weighted by block sizes, added, or the larger block kept), NaN for a query that sees no key;
the causal mask applied to a shard as if it were the whole sequence, the ring read the wrong way, the layout taken
for contiguous; N sends instead of N - 1, keys without values, query heads for key/value heads. The expected value
is never shown.
"""

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import matches, rounding_problem
from attn.course.exercises.registry import exercise

# Exercise 20.1: four queries' partial results against block A (4 keys) and block B (2 keys), d = 2. Query 2 may see
# no key of block A; query 3 no key of either block (the lesson's convention: output 0, log-sum-exp -inf).
OUTPUT_A = np.array([[0.2, 1.0], [0.6, -0.4], [0.0, 0.0], [0.0, 0.0]])
LSE_A = np.array([1.5, -0.5, -np.inf, -np.inf])
OUTPUT_B = np.array([[0.8, -0.2], [0.1, 0.9], [0.5, 0.3], [0.0, 0.0]])
LSE_B = np.array([0.3, 0.7, 0.4, -np.inf])
KEYS_A, KEYS_B = 4, 2
# Exercise 20.2: T = 16 positions on N = 4 devices, zigzag shards; the device asked about, and its ring steps.
LENGTH, DEVICES, RANK = 16, 4, 1
# Exercise 20.3: ring attention's forward pass: one layer, grouped-query heads, float32.
BATCH, HEADS, KV_HEADS, TOKENS, WORLD, HEAD_DIM, FLOAT32 = 1, 32, 8, 131_072, 8, 128, 4


def merge(output_a, lse_a, output_b, lse_b):
    """Two partial results of the same queries, (T_q, d) outputs and (T_q,) log-sum-exps, merged into one.

    A row with both log-sum-exps -inf (no allowed key in either block) stays 0, never NaN.
    """
    lse = np.logaddexp(lse_a, lse_b)  # (T_q,)
    shift = np.where(lse > -np.inf, lse, 0.0)  # both blocks empty: subtract 0, so exp(-inf) = 0 weighs both
    return np.exp(lse_a - shift)[:, None] * output_a + np.exp(lse_b - shift)[:, None] * output_b


def _merged():
    return merge(OUTPUT_A, LSE_A, OUTPUT_B, LSE_B)


def _merge_mistakes():
    """(wrong merged output, what it does wrong) for the mistakes exercise 20.1 names."""
    exp_a, exp_b = np.exp(LSE_A)[:, None], np.exp(LSE_B)[:, None]  # (4, 1); exp(-inf) = 0
    larger = np.where((LSE_A >= LSE_B)[:, None], OUTPUT_A, OUTPUT_B)
    top = np.maximum(LSE_A, LSE_B)
    top = np.where(top > -np.inf, top, 0.0)[:, None]
    lse = np.logaddexp(LSE_A, LSE_B)
    shift = np.where(lse > -np.inf, lse, 0.0)[:, None]
    return (
        ((OUTPUT_A + OUTPUT_B) / 2, "that averages the two outputs, half and half: a block's share is not 1/2, it is "
                                    "its part of the softmax's sum, which its log-sum-exp carries"),
        ((KEYS_A * OUTPUT_A + KEYS_B * OUTPUT_B) / (KEYS_A + KEYS_B),
         "that weighs each block by how many keys it held: a block's share is its part of the softmax's sum, "
         "exp(its log-sum-exp), not its number of keys (query 2 sees no key of block A at all)"),
        (OUTPUT_A + OUTPUT_B, "that adds the two outputs without renormalising: each is already an average over its "
                              "own block, so the two must be weighed by their shares, which add up to 1"),
        (exp_a * OUTPUT_A + exp_b * OUTPUT_B, "that weighs each block by exp(its log-sum-exp) but never divides by "
                                              "the total: the weights must add up to 1, so subtract the merged "
                                              "log-sum-exp, logaddexp of the two, before the exp"),
        (np.exp(LSE_A[:, None] - top) * OUTPUT_A + np.exp(LSE_B[:, None] - top) * OUTPUT_B,
         "that shifts by the larger log-sum-exp, max instead of logaddexp: the weights do not add up to 1; "
         "subtract the merged log-sum-exp, the log of the sum of both blocks' exps"),
        (larger, "that keeps the block with the larger log-sum-exp and drops the other: the max of the two is "
                 "not their log-sum-exp; both blocks' keys share one softmax"),
        (np.exp(LSE_B[:, None] - shift) * OUTPUT_A + np.exp(LSE_A[:, None] - shift) * OUTPUT_B,
         "the weights are swapped: block A's output takes exp(lse_a - lse), its own share"),
    )


def _not_finite():
    return ("every entry of the merged output is a finite number (give the output, not a log-sum-exp, "
            "which is -inf for an empty row). A query with no allowed key in either block (the "
            "last row) must not become NaN, even though exp(lse_a - lse) is then exp(-inf + inf): its output stays 0, "
            "as the lesson's convention says; subtract 0 where the merged log-sum-exp is -inf")


@exercise(
    "20.1",
    Array("your merged output", if_not_finite=_not_finite()),
    solution=_merged,
    success="each block's output is an average over its own keys; exp(lse_block - lse) is that block's share of the "
            "softmax over both, so the shares add up to 1. A block with no allowed key has share exp(-inf) = 0, and "
            "a query that sees no key in either block keeps the output 0.",
)
def _merged_output(merged, expected):
    if merged.shape != expected.shape:
        if merged.shape == expected.shape[:1]:
            return "that is one number per query, like a log-sum-exp; give the merged output, 4 rows of 2 numbers."
        return f"give the merged output as 4 rows (the queries) of 2 numbers, shape (4, 2), not {merged.shape}."
    if matches(merged, expected):
        return None
    rounded = rounding_problem(merged, expected, "your merged output")
    if rounded is not None:
        return rounded
    for mistake, hint in _merge_mistakes():
        if matches(merged, mistake):
            return hint + "."
    wrong = [row for row in range(len(expected)) if not matches(merged[row], expected[row])]
    if wrong == [len(expected) - 1]:
        return "the last query sees no key in either block, so it gets no output: nothing is averaged for it."
    if wrong == [2]:
        return ("query 2 is off: it sees no key of block A, whose log-sum-exp is -inf, so block A's weight for it is "
                "exp(-inf) = 0.")
    rows = ", ".join(str(row) for row in wrong)
    return (f"your merged output is off in row{'s' if len(wrong) > 1 else ''} {rows}: weigh each block's output by its "
            "share of the softmax over both blocks, exp(lse_block - lse) with lse = logaddexp(lse_a, lse_b).")


def zigzag_positions(rank, devices=DEVICES, length=LENGTH):
    """The global positions device ``rank`` holds: chunk ``rank`` and chunk 2N - 1 - rank of 2N (tensor_split's)."""
    chunks = np.array_split(np.arange(length), 2 * devices)
    return np.concatenate([chunks[rank], chunks[2 * devices - 1 - rank]])


def contiguous_positions(rank, devices=DEVICES, length=LENGTH):
    """The global positions device ``rank`` holds when each holds one run of consecutive positions."""
    return np.array_split(np.arange(length), devices)[rank]


def ring_masks(positions=zigzag_positions, source=lambda rank, step: (rank - step) % DEVICES,
               allowed=lambda key, query: key <= query, local=False):
    """(N, T/N, T/N) bool: for each ring step s, RANK's queries x the keys of the block it holds at step s.

    Mistakes: ``positions`` of the other layout, ``source`` the wrong rank, ``allowed`` another comparison, or
    ``local`` positions (the causal mask of a shard as if it were the whole sequence).
    """
    masks = []
    for step in range(DEVICES):
        query, key = positions(RANK), positions(source(RANK, step))
        if local:
            query, key = np.arange(len(query)), np.arange(len(key))
        masks.append(allowed(key[None, :], query[:, None]))
    return np.stack(masks)


def _mask_mistakes():
    """(wrong masks, what they do wrong) for the mistakes exercise 20.2 names."""
    return (
        (ring_masks(local=True), "that is the causal mask of a shard applied as if the shard were the whole "
                                 "sequence, the same triangle at every step: compare global positions, the ones "
                                 "each device's tokens have in the sequence"),
        (ring_masks(positions=contiguous_positions), "those are the masks of contiguous shards: with zigzag shards "
                                                     "device 1 holds chunks 1 and 6 of 8, not one run of 4"),
        (ring_masks(source=lambda rank, step: (rank + step) % DEVICES),
         "the ring runs the other way: each device sends to the next one, so at step s the block came from rank "
         "(r - s) mod N, not (r + s) mod N"),
        (ring_masks(source=lambda rank, step: step), "mask[s] is for the block held at ring step s, which came from "
                                                     "rank (r - s) mod N, not for the block of rank s"),
        (ring_masks(allowed=lambda key, query: key >= query), "the mask is transposed: a query may attend a key at "
                                                              "its own position or earlier, never later"),
        (ring_masks(allowed=lambda key, query: key < query), "each query misses its own key: causal attention "
                                                             "includes the key at the query's own position, j <= i"),
        (ring_masks(allowed=lambda key, query: key > query), "True and False are swapped: the course's masks mean "
                                                             "True = may attend"),
        (np.ones((DEVICES, LENGTH // DEVICES, LENGTH // DEVICES), dtype=bool),
         "every entry is True: that is attention without the causal mask; a query may not see later positions"),
    )


@exercise(
    "20.2",
    Array("your masks", kind="mask", meaning="True = may attend"),
    solution=ring_masks,
    success="device 1 holds positions 2, 3, 12 and 13. At each step it compares the global positions of its "
            "queries with those of the block it holds: its own block is a triangle, rank 0's block (positions 0, 1, "
            "14, 15) shows its first half to every query, and the blocks of ranks 3 and 2 are wholly visible to its "
            "late queries and hidden from its early ones: every device gets early and late work alike.",
)
def _ring_masks(masks, expected):
    pattern = masks.astype(bool)
    per_device = LENGTH // DEVICES
    if pattern.shape != expected.shape:
        if pattern.shape == expected.shape[1:]:
            return f"that is one step's mask; give all {DEVICES} ring steps, one after the other: shape {expected.shape}."
        if pattern.shape == (LENGTH, LENGTH):
            return (f"that is the mask of the whole sequence; give device {RANK}'s part, one ({per_device}, "
                    f"{per_device}) mask per ring step: shape {expected.shape}.")
        return f"give one ({per_device}, {per_device}) mask per ring step, {DEVICES} in all: shape {expected.shape}."
    if matches(pattern, expected):
        if masks.dtype != bool:
            return f"the pattern is right, but your masks hold {masks.dtype} numbers; attention functions want dtype=bool."
        return None
    for mistake, hint in _mask_mistakes():
        if matches(pattern, mistake):
            return hint + "."
    wrong = [step for step in range(DEVICES) if not matches(pattern[step], expected[step])]
    steps = ", ".join(str(step) for step in wrong)
    return (f"your mask for ring step{'s' if len(wrong) > 1 else ''} {steps} is not right: list the global positions "
            "of device 1's queries and of the block it holds at that step, which came from rank (1 - s) mod 4, and "
            "allow a key when its position is at most the query's.")


def ring_bytes(sends=WORLD - 1, kv_heads=KV_HEADS, length=TOKENS // WORLD, tensors=2, bytes_per_number=FLOAT32):
    """The bytes one device sends in ring attention's forward pass: its key and value blocks, passed on N - 1 times."""
    return sends * BATCH * kv_heads * length * tensors * HEAD_DIM * bytes_per_number


def _bytes_mistakes():
    right = ring_bytes()
    return (
        (ring_bytes(sends=WORLD), "that passes the blocks on N times: after N - 1 steps every device has seen every "
                                  "block, and an N-th send would only bring each block back to its owner"),
        # Several mistakes give each of the next numbers: the reply names every reading.
        (ring_bytes(tensors=1), "that counts the keys alone, or keys and values in bfloat16's 2 bytes a number, or "
                                "heads of d = 64, or 4 key/value heads: the values travel with the keys, a second "
                                "block of the same size, this layer runs in float32, 4 bytes a number, and its 8 "
                                "key/value heads have d = 128"),
        (ring_bytes(kv_heads=HEADS), "that counts the 32 query heads: with grouped-query attention only the 8 "
                                     "key/value heads' keys and values travel"),
        (ring_bytes(bytes_per_number=1), "that is a count of numbers; the question asks for bytes, 4 to a float32"),
        (ring_bytes(length=TOKENS), "that sends blocks of the whole sequence's length, or counts bits: each device "
                                    "holds and passes on T / N positions at a time, and the question asks for bytes, "
                                    "8 bits each"),
        (ring_bytes(sends=1), "that is one step's send: the blocks go round N - 1 steps"),
        (ring_bytes(sends=WORLD - 1) * (HEADS + 2 * KV_HEADS) // (2 * KV_HEADS),
         "that sends the queries too: in ring attention the queries stay home and only keys and values travel"),
        (2 * right, "that counts what the device sends and what it receives, or 8 bytes a number (float64): the "
                    "question asks for what it sends, and this layer runs in float32, 4 bytes a number"),
        (right / 2**20, "that is in MiB; give the number of bytes"),
        (right / 2**30, "that is in GiB; give the number of bytes"),
        (right / 1e6, "that is in MB; give the number of bytes"),
        (right / 1e9, "that is in GB; give the number of bytes"),
    )


@exercise(
    "20.3",
    Number("your number of bytes"),
    solution=lambda: ring_bytes(),
    success="each step a device passes on a key block and a value block of 1 x 8 x 16,384 x 128 float32 numbers, "
            "64 MiB each, and after 7 steps it has seen every other device's block: 7 x 128 MiB = 896 MiB "
            "(939,524,096 bytes) a layer, whatever the 32 query heads.",
)
def _ring_bytes(sent, expected):
    if sent.shape != ():
        return "give one number: the bytes one device sends in one layer's forward pass."
    if abs(float(sent) - float(expected)) < 0.5:  # exact: matches() would allow 1e-5 of 939,524,096 bytes
        return None
    for mistake, hint in _bytes_mistakes():
        if matches(sent, np.asarray(mistake, dtype=np.float64)):
            return hint + "."
    rounded = rounding_problem(sent, expected, "your number of bytes", whole=True)  # 939,520,000 or 9.395e8
    return rounded or direction_only(sent, expected, "your number of bytes")
