"""Lesson 15's exercises: what latent attention caches against multi-head attention, the delta rule's write
written by the learner, and what plain linear attention returns for a key written twice.

Predict-first answers are told how far off they are in words; the write is checked on hidden calls.
A named mistake is recognised on cases where it differs from the answer; the expected value is never shown.
"""

import numpy as np

from attn.course.exercises.answers import Array, Function, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.registry import exercise

# Exercise 15.1: a model with 32 heads of 128, a latent of 512 and a shared rotary key of 64.
HEADS, HEAD_DIM, LATENT, ROPE = 32, 128, 512, 64
# Exercise 15.3: lesson 1's table, apple -> 9 written first, then apple -> 4, with a one-hot key.
FIRST_PRICE, SECOND_PRICE = 9.0, 4.0


def _cache_ratio(tensors=2, rope_per_head=False, with_rope=True):
    """How many times fewer numbers per token and layer latent attention caches than multi-head attention."""
    full = tensors * HEADS * HEAD_DIM
    latent = LATENT + (HEADS * ROPE if rope_per_head else ROPE if with_rope else 0)
    return full / latent


@exercise(
    "15.1",
    Number("your ratio"),
    solution=lambda: _cache_ratio(),
    success=(
        "multi-head attention caches a key and a value per head, 2 x 32 x 128 = 8,192 numbers per token and layer; "
        "latent attention caches one latent and one shared rotary key, 512 + 64 = 576, about 14 times fewer."
    ),
)
def _cache_ratio_check(ratio, expected):
    if ratio.shape != ():
        return "give one number: how many times fewer numbers latent attention caches per token."
    if compare(ratio, np.asarray(expected), "your ratio") is None:
        return None
    mistakes = {
        _cache_ratio(tensors=1): "that counts only the keys of multi-head attention; it caches a value per head too.",
        _cache_ratio(rope_per_head=True): (
            "that gives every head its own rotary key; latent attention caches one rotary key, shared by all heads."
        ),
        _cache_ratio(with_rope=False): "that leaves out the rotary key, which the cache holds beside the latent.",
        1 / _cache_ratio(): "that is the ratio the other way round: divide multi-head attention's count by the latent's.",
    }
    for wrong, hint in mistakes.items():
        if matches(ratio, wrong, atol=1e-9):
            return hint
    return direction_only(ratio, expected, "your ratio")


def delta_write(state, key, value, beta):
    """Exercise 15.2's solution: S + beta k (v - S^T k)^T for a state (d_k, d_v), key (d_k,), value (d_v,)."""
    return state + beta * np.outer(key, value - state.T @ key)


def _write_calls():
    """Hidden calls, all square (d_k = d_v), so that a transposed read or write gives numbers, not a shape error.

    Keys of length 1 and of other lengths, and beta up to 2: a write divided by |k|^2 or a beta clamped to 1 differ
    from the rule on these, as they would not on unit keys with beta <= 1.
    """
    generator = np.random.default_rng(15)
    square = generator.normal(size=(2, 2))  # not symmetric: S k and S^T k differ
    larger = generator.normal(size=(3, 3))
    # each call its own copy of the state: a right function that updates the state in place changes no later call
    return [
        ("on an empty 2 x 2 state with beta = 1", (np.zeros((2, 2)), np.array([1.0, 0.0]), np.array([2.0, -1.0]), 1.0)),
        ("on a full 2 x 2 state with beta = 1", (square.copy(), np.array([0.6, 0.8]), np.array([1.0, 3.0]), 1.0)),
        ("on a full 3 x 3 state with beta = 0.5", (larger.copy(), np.array([0.0, 0.6, 0.8]), np.array([-2.0, 0.5, 1.0]),
                                                   0.5)),
        ("on a full 2 x 2 state, a key of length 2, beta = 0.5", (square.copy(), np.array([1.2, 1.6]),
                                                                  np.array([0.5, -1.0]), 0.5)),
        ("on a full 3 x 3 state, a key of length 0.5, beta = 2", (larger.copy(), np.array([0.3, 0.0, 0.4]),
                                                                 np.array([1.0, 2.0, -1.0]), 2.0)),
    ]


WRITE_MISTAKES = {
    "adds beta k v^T without subtracting what the memory already returns for k: that is linear attention's write": (
        lambda s, k, v, b: s + b * np.outer(k, v)
    ),
    "reads the memory with S k; the memory is read with S^T k (k has d_k entries, S is d_k x d_v)": (
        lambda s, k, v, b: s + b * np.outer(k, v - s @ k)
    ),
    "clamps beta to at most 1; the rule uses beta as given (a model keeps it in [0, 1] with a sigmoid, but the "
    "formula does not)": lambda s, k, v, b: s + min(b, 1.0) * np.outer(k, v - s.T @ k),
    "leaves out beta: the error is scaled by beta before it is written": lambda s, k, v, b: s + np.outer(k, v - s.T @ k),
    "subtracts the write; the error is added, so the memory moves towards v": (
        lambda s, k, v, b: s - b * np.outer(k, v - s.T @ k)
    ),
    "divides the write by |k|^2 (the normalised rule); the delta rule as written takes beta k (v - S^T k)^T as it is, "
    "for keys of any length": lambda s, k, v, b: s + b * np.outer(k, v - s.T @ k) / (k @ k),
    "writes the outer product the other way round: k v^T has the shape (d_k, d_v) of the state": (
        lambda s, k, v, b: s + b * np.outer(v - s.T @ k, k)
    ),
}


@exercise(
    "15.2",
    Function("your write function", calls=_write_calls, returns=Array("the new state")),
    solution=lambda: delta_write,
    success="the delta rule writes only the error, v - S^T k: read the key back afterwards and you get the new value.",
)
def _delta_write(written, expected):
    for (label, arguments), output, target in zip(_write_calls(), written.outputs, expected.outputs, strict=True):
        if output.shape != target.shape:
            return f"called {label}, your function returned shape {output.shape}; the state keeps its shape {target.shape}."
        if matches(output, target):
            continue
        for mistake, wrong in WRITE_MISTAKES.items():
            candidate = wrong(*(a.copy() if isinstance(a, np.ndarray) else a for a in arguments))
            if candidate is not None and not matches(candidate, target) and matches(output, candidate):
                return f"called {label}, your function {mistake}."
        rows = np.argwhere(~np.isclose(output, target, rtol=1e-5, atol=1e-6))
        return f"called {label}, your new state differs from the delta rule's, first at entry {tuple(int(i) for i in rows[0])}."
    return None


@exercise(
    "15.3",
    Number("your price"),
    solution=lambda: FIRST_PRICE + SECOND_PRICE,
    success=(
        "plain linear attention adds every write: the key's slot holds 9 + 4 = 13, a blend that is neither price; "
        "the delta rule with beta = 1 would have replaced 9 by 4."
    ),
)
def _written_twice(price, expected):
    if price.shape != ():
        return "give one number: what the memory returns for apple."
    if compare(price, np.asarray(expected), "your price") is None:
        return None
    mistakes = {
        SECOND_PRICE: "that is what the delta rule returns (it overwrites); plain linear attention only ever adds.",
        FIRST_PRICE: "that is the first price alone; the second write went into the same slot.",
        (FIRST_PRICE + SECOND_PRICE) / 2: "that is the average; nothing in S = sum of k v^T divides by the number of writes.",
        0.0: "the key is one-hot and the query is the same key, so the read finds apple's slot: it is not empty.",
    }
    for wrong, hint in mistakes.items():
        if matches(price, wrong):
            return hint
    return direction_only(price, expected, "your price")
