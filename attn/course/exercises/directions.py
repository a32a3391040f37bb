"""How far off a number is, in words that never give the answer away: too large or too small, and no factor.

A factor ("too small, by about a factor of 13") is itself the answer when the learner typed 1, and half of it
for 2; the predict-first exercises of lessons 13-15 say only the direction, after the course's rounding rule.
"""

import numpy as np

from attn.course.exercises.judging import AGAIN, rounding_problem


def direction_only(answer, expected, what):
    """ "your loss is too large" / "too small" / "has the wrong sign", or the rounding sentence; never a factor."""
    answer, expected = np.asarray(answer, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    rounded = rounding_problem(answer, expected, what)
    if rounded is not None:
        return rounded
    got, target = float(answer), float(expected)
    again = AGAIN
    if target != 0 and got != 0 and (got > 0) != (target > 0):
        return f"{what} has the wrong sign; {again}."
    if got == 0:
        return f"{what} is 0, but the answer is not; {again}."
    direction = "too large" if abs(got) > abs(target) else "too small"
    return f"{what} is {direction}; {again}."
