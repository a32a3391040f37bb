"""Lesson 8's exercises: a rotary score predicted from the distance, and the period of a sinusoidal clock.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

import math

from attn.course.exercises.answers import Number
from attn.course.exercises.judging import compare_without_answer, matches
from attn.course.exercises.registry import exercise

HEAD_DIM, SEED = 8, 8  # the lesson's q and k: torch.randn(2, 1, 8, float64) from a generator seeded with 8
ASKED = (20, 17)  # exercise 8.1: (query position, key position); the lesson prints the score at (5, 2)
PERIOD_EMBED, PERIOD_PAIR = 32, 12  # exercise 8.2: pair i = 12 (features 24, 25) of E = 32


def _rotary_vectors():
    """The lesson's q and k, each (1, d) float64."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    return torch.randn(2, 1, HEAD_DIM, dtype=torch.float64, generator=generator)


def rotary_score(q_position, k_position):
    """q . k after rotating q to ``q_position`` and k to ``k_position``, as in the lesson."""
    import torch

    from attn.positions import apply_rotary

    q, k = _rotary_vectors()
    rotated_q = apply_rotary(q, positions=torch.tensor([q_position]))
    rotated_k = apply_rotary(k, positions=torch.tensor([k_position]))
    return (rotated_q @ rotated_k.T).item()


def _plain_score():
    q, k = _rotary_vectors()
    return (q @ k.T).item()


@exercise(
    "8.1",
    Number("your score"),
    solution=lambda: rotary_score(*ASKED),
    success="positions 20 and 17 are 3 apart, like 5 and 2, so after the rotary embedding the score is the same.",
)
def _rotary_prediction(score, expected):
    if matches(score, _plain_score()):
        return "that is q . k without the rotation; both vectors are rotated by their positions first."
    if matches(score, rotary_score(ASKED[1], ASKED[0])):
        return "that puts q at 17 and k at 20 (distance -3); here q is at 20 and k at 17 (distance 3)."
    return compare_without_answer(score, expected, "your score")


def _period(pair=PERIOD_PAIR, exponent_index=None, full_turn=2 * math.pi):
    """Positions per turn of sinusoidal pair ``pair``: full_turn * 10000^(exponent_index / E), exponent_index = 2i."""
    exponent_index = 2 * pair if exponent_index is None else exponent_index
    return full_turn * 10000 ** (exponent_index / PERIOD_EMBED)


@exercise(
    "8.2",
    Number("your period"),
    solution=_period,
    success=(
        "pair 12 turns by 1 / 10000^(24/32) = 1/1000 of a radian per position, "
        "so one turn takes 2 pi x 1000 = 6,283.2 positions."
    ),
)
def _sinusoidal_period(period, expected):
    if matches(period, _period(full_turn=1)):
        return "that is 10000^(2i/E) alone, the positions per radian; a whole turn is 2 pi radians."
    if matches(period, _period(exponent_index=PERIOD_PAIR)):
        return "you put i = 12 in the exponent where the formula has 2i = 24 (the first feature of the pair)."
    if matches(period, _period(exponent_index=4 * PERIOD_PAIR)):
        return (
            "your exponent is 48 / 32, the same as 24 / 16: either you put 2 x 24 where 24 is already the feature "
            "index 2i, or you used E = 16 where this exercise has E = 32. The exponent is 2i / E = 24 / 32."
        )
    if matches(period, 1 / _period(full_turn=1)):
        return (
            "that is the angle the pair turns per position, theta_i; "
            "the period is the positions for a whole turn, 2 pi / theta_i."
        )
    if matches(period, 1 / _period()):
        return "that is turns per position, a frequency; the period is its inverse, positions per turn."
    if matches(period, 2 * math.pi / _period(full_turn=1)):
        return (
            "that divides 2 pi by 10000^(2i/E); the angle per position is 1 / 10000^(2i/E), "
            "so a turn takes 2 pi x 10000^(2i/E) positions."
        )
    return compare_without_answer(period, expected, "your period")
