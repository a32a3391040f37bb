"""Self-checks for the exercises: say in words what is wrong, or that it is right."""

import numpy as np


def describe_array_problem(answer, expected, what, atol=1e-6):
    """Return a sentence about how ``answer`` differs from ``expected``, or None if it matches."""
    if answer is None or answer is Ellipsis:
        return f"nothing yet for {what}: replace the ... with your code."
    try:
        got = np.asarray(answer, dtype=float)
    except (TypeError, ValueError):
        return f"{what} should be numbers, but it is a {type(answer).__name__}."
    expected = np.asarray(expected, dtype=float)
    if got.shape != expected.shape:
        return f"{what} has shape {got.shape}, expected shape {expected.shape}."
    if not np.isfinite(got).all():
        return f"{what} contains NaN or inf; every entry should be a finite number."
    wrong = ~np.isclose(got, expected, atol=atol, rtol=1e-5)
    if wrong.any():
        first = tuple(int(i) for i in np.argwhere(wrong)[0])
        where = f" at index {first}" if got.ndim else ""
        return (
            f"{what} differs in {int(wrong.sum())} of {got.size} entries; "
            f"the first{where} is {got[first]:.4g}, expected {expected[first]:.4g}."
        )
    return None


def report(problem, success):
    """Print the verdict of a self-check: ``problem`` is None when the answer is right."""
    if problem is None:
        print(f"Correct: {success}")
    else:
        print(f"Not yet: {problem}")
