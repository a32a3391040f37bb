"""Lesson 6's exercises: shapes after splitting heads, parameter count, achieved throughput.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

from attn.course.exercises.answers import Number, Shape
from attn.course.exercises.judging import compare_without_answer, matches
from attn.course.exercises.registry import exercise

SPLIT_EMBED, SPLIT_HEADS = 64, 4  # exercise 6.1: H = 4 heads of d = 16, so that H and d differ
EMBED_DIM, NUM_HEADS = 512, 8  # exercise 6.2's layer
BATCH, HEADS, LENGTH, HEAD_DIM, SECONDS = 4, 16, 4096, 64, 0.002  # exercise 6.3's kernel run


def _split_shape():
    import torch

    from attn.multihead import split_heads

    return tuple(split_heads(torch.zeros(2, 10, SPLIT_EMBED), SPLIT_HEADS).shape)


def _parameter_count():
    import torch

    from attn.multihead import MultiHeadAttention

    with torch.device("meta"):  # shapes only: no memory, and the learner's random numbers are left alone
        layer = MultiHeadAttention(EMBED_DIM, NUM_HEADS)
    return sum(parameter.numel() for parameter in layer.parameters())


def _tflops():
    from attn.flops import attention_flops

    return attention_flops(BATCH, HEADS, LENGTH, HEAD_DIM) / SECONDS / 1e12


@exercise(
    "6.1",
    Shape("your shape"),
    solution=_split_shape,
    success="(B, T, E) = (2, 10, 64) split into 4 heads is (B, H, T, d) = (2, 4, 10, 16).",
)
def _split(shape, expected):
    batch, heads, length, head_dim = expected
    if shape == (batch, length, heads, head_dim):
        return "that is the shape after view, before transpose: the heads axis must come before the tokens."
    if shape == (batch, head_dim, length, heads):
        return "you swapped the number of heads and the head size: the heads axis (H = 4) comes second, d = E / H last."
    if shape == (batch, length, head_dim, heads):
        return "that puts the head size before the number of heads, and the tokens before both: the order is (B, H, T, d)."
    if len(shape) == 4 and shape[3] != head_dim and shape[1] == heads:
        return "the last axis is the size of each head, d = E / H."
    if shape != expected:
        return f"{shape} is the wrong shape: the order is (B, H, T, d), and d = E / H."
    return None


@exercise(
    "6.2",
    Number("your count", whole=True),
    solution=_parameter_count,
    success="4 E^2 weights and 4 E biases: 1,050,624 parameters at E = 512, whatever the number of heads.",
)
def _parameters(count, expected):
    if matches(count, 4 * EMBED_DIM**2):
        return "that counts the weights only; each of the four projections also has E biases."
    return compare_without_answer(count, expected, "your count")


@exercise(
    "6.3",
    Number("your TFLOP/s"),
    solution=_tflops,
    success="4 * B * H * T^2 * d / t = 4 * 4 * 16 * 4096^2 * 64 / 0.002 s is about 137 TFLOP/s.",
)
def _throughput(tflops, expected):
    if matches(tflops, expected * 1e12):
        return "that is in FLOP/s; divide by 1e12 for TFLOP/s."
    if matches(tflops, expected / 2):
        return "each of Q K^T and A V takes 2 * B * H * T^2 * d operations (a multiply and an add): 4 in total."
    if matches(tflops, expected / HEADS):
        return f"you left out the heads: every one of the H = {HEADS} heads does its own Q K^T and A V."
    if matches(tflops, expected / BATCH):
        return f"you left out the batch: each of the B = {BATCH} sequences has its own attention."
    if matches(tflops, expected / LENGTH):
        return "T appears squared: every one of the T queries is scored against every one of the T keys."
    if matches(tflops, expected * 1e3) or matches(tflops, expected * 1e-3):
        return "check the units: the time is 0.002 seconds (2 ms), and a TFLOP/s is 10**12 operations per second."
    return compare_without_answer(tflops, expected, "your TFLOP/s")
