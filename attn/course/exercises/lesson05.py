"""Lesson 5's exercises: a causal mask, PyTorch's padding mask, and the size of the attention matrix."""

import numpy as np

from attn.attention import causal_mask, padding_mask
from attn.course.exercises.answers import Array, Number
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.registry import exercise

LONG = 32_768  # T of exercise 5.3


@exercise(
    "5.1",
    Array("your mask", kind="mask", meaning="True = may attend"),
    solution=lambda: causal_mask(4),
    success="position i may attend to positions 0..i: ones on and below the diagonal.",
)
def _causal_four(mask, expected):
    pattern = mask.astype(bool)
    if matches(pattern, expected.T):
        return "this mask lets each position see the future, not the past: rows are queries, so keep the lower triangle."
    if matches(pattern, ~expected):
        return (
            "that is the right triangle with True and False swapped, as if True meant blocked (the convention of "
            "nn.MultiheadAttention's attn_mask); the course's masks, like scaled_dot_product_attention's, mean "
            "True = may attend: drop the ~ (or the == False)."
        )
    problem = compare(pattern, expected, "your mask")
    if problem is None and np.issubdtype(mask.dtype, np.integer):
        return (
            f"the pattern is right, but your mask holds {mask.dtype} numbers, not booleans, and attention functions "
            f"(attn's and PyTorch's) refuse integer masks; use dtype=bool (True = may attend)."
        )
    if problem is None and mask.dtype != bool:
        return (
            f"the pattern is right, but your mask holds {mask.dtype} numbers, not booleans: PyTorch adds a float mask "
            f"to the scores, so 1.0 blocks nothing, and attn refuses it; use dtype=bool (True = may attend)."
        )
    return problem


@exercise(
    "5.2",
    Array("your key_padding_mask", kind="mask", meaning="True = padding, which is blocked"),
    solution=lambda: ~padding_mask([2, 4], 4)[:, 0, :],  # (B, T_k) = (2, 4)
    success="nn.MultiheadAttention's key_padding_mask marks the padding with True: the opposite of a keep-mask.",
)
def _padding_for_torch(mask, expected):
    pattern = mask.astype(bool)
    if pattern.shape == (2, 1, 4):
        return "key_padding_mask has shape (B, T_k) = (2, 4): drop the middle axis."
    if matches(pattern, ~expected):
        return "that is the course's keep-mask (True = may attend); PyTorch's key_padding_mask wants True = blocked."
    problem = compare(pattern, expected, "your key_padding_mask")
    if problem is None and np.issubdtype(mask.dtype, np.integer):
        return (
            f"the pattern is right, but nn.MultiheadAttention refuses a key_padding_mask of {mask.dtype} numbers "
            f"(it takes only bool or float): use dtype=bool."
        )
    if problem is None and mask.dtype != bool:
        return (
            f"the pattern is right, but nn.MultiheadAttention adds a {mask.dtype} key_padding_mask to the scores, "
            f"so 1.0 would only nudge the padding instead of blocking it: use dtype=bool."
        )
    return problem


def _gib(n_bytes):
    return n_bytes / 2**30


@exercise(
    "5.3",
    Number("your size in GiB"),
    solution=lambda: _gib(LONG**2 * np.dtype(np.float32).itemsize),
    success="a float32 T x T matrix at T = 32,768 takes 32768**2 * 4 bytes = 4 GiB, for one head of one sequence.",
)
def _memory_32k(size, expected):
    n_bytes = expected * 2**30
    if matches(size, expected * 2):
        return "that counts 8 bytes per number (float64); float32 uses 4."
    if matches(size, n_bytes):
        return "that is the size in bytes; divide by 2**30 for GiB."
    if matches(size, n_bytes / 1e9):
        return "that is in GB (10**9 bytes); a GiB is 2**30 bytes."
    return compare_without_answer(size, expected, "your size in GiB")
