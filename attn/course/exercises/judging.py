"""Judging a clean answer against the expected one: which entries are wrong, which way, and whether it looks
rounded; never the expected value itself, nor a factor or a difference that would let it be computed."""


import numpy as np

# What a miss is told after which way it is off: no measure of how far (issue 52), and no "formula" that a lesson
# may not have.
AGAIN = "work it through again"


def matches(answer, candidate, atol=1e-6):
    """True when a clean answer equals ``candidate`` (a known mistake, or the right answer) in shape and value."""
    candidate = np.asarray(candidate)
    if answer.shape != candidate.shape:
        return False
    if answer.dtype == bool or candidate.dtype == bool:
        return bool(np.array_equal(answer, candidate))
    with np.errstate(all="ignore"):
        return bool(np.allclose(answer, candidate, rtol=1e-5, atol=atol))


def _first_wrong(answer, expected, atol):
    """(positions of every wrong entry, the first as a tuple, its index as shown), or None if all are right."""
    wrong = _wrong_entries(answer, expected, atol)
    if not wrong.any():
        return None
    positions = np.argwhere(wrong)
    first = tuple(int(i) for i in positions[0])
    return positions, first, first[0] if answer.ndim == 1 else first


def compare(answer, expected, what, atol=1e-6):
    """None when a clean answer equals the clean ``expected``, else a sentence saying how it differs.

    Floats may differ by ``atol`` plus 1e-5 of the expected value; whole numbers and masks must be equal.
    The sentence never shows the expected value, nor how far off an answer is: a single number is told which way
    it is off (``how_far``); an array, which entry is the first wrong one and which way.
    An answer that equals the expected value rounded (as the lessons print numbers) is told so.
    """
    if answer.shape != expected.shape:
        return _shape_problem(answer.shape, expected.shape, what)
    found = _first_wrong(answer, expected, atol)
    if found is None:
        return None
    rounded = rounding_problem(answer, expected, what)
    if rounded is not None:
        return rounded
    if answer.ndim == 0:
        return how_far(answer, expected, what)
    positions, first, index = found
    miss = _entry_miss(answer[first], expected[first])
    # The sentences name the entries, not ``what``, as their subject: "your tokens" and "your vector" both read right.
    if answer.size == 1:
        return f"the one number in {what} {miss}."
    if len(positions) == 1:
        return f"one of the {answer.size} entries in {what} is wrong: the one at index {index} {miss}."
    return f"{_how_many(positions, answer)} entries in {what} are wrong; the first wrong one, at index {index}, {miss}."


compare_without_answer = compare  # the name the predict-first checks used; every check now hides the answer


def rounding_problem(answer, expected, what, whole=False):
    """ "that looks rounded" when ``answer`` is ``expected`` rounded to a few decimals or digits, else None.

    The course's rule, stated on the welcome page: a value rounded as a lesson prints it is not the
    value, and the check says so rather than calling it wrong in some other way.
    An answer whose every entry is a float32 number (computed in float32, then rounded, as the lessons' tensors
    are) is judged at float32's precision. A whole-number ``expected`` (a count of bytes) is judged only when
    ``whole`` is set, and then only on significant digits: 939,520,000 for 939,524,096.
    """
    kinds = "fi" if whole else "f"
    if expected.dtype.kind not in kinds or answer.dtype.kind not in kinds:
        return None
    if np.array_equal(expected, np.round(expected)) and not whole:
        return None
    how = _rounded_how(answer.astype(np.float64), expected.astype(np.float64), decimals=not whole)
    if how is None:
        return None
    return (
        f"{what} looks rounded ({how}): use the unrounded value, the variable itself or a Python "
        "expression, not digits copied from a printout."
    )


def _rounded_how(answer, expected, decimals=True):
    """How ``answer`` looks rounded from ``expected`` ("to 2 decimals", "to 3 significant digits"), or None.

    Both float64 arrays; the answer is held to float32's precision when float32 holds all its entries, else to
    1e-9 (``_precision``), so a float32 tensor rounded with ``.round(decimals=3)`` is recognised."""
    rtol = _precision(answer)
    with np.errstate(all="ignore"):
        for places in range(1, 7) if decimals else ():
            target = np.round(expected, places)
            if np.any(target != 0) and np.allclose(answer, target, rtol=rtol, atol=1e-12):
                return f"to {places} decimal{'s' if places > 1 else ''}"
        for digits in range(2, 7):
            target = np.array([float(f"{value:.{digits}g}") for value in expected.ravel()]).reshape(expected.shape)
            if not np.array_equal(target, expected) and np.allclose(answer, target, rtol=rtol, atol=1e-12):
                return f"to {digits} significant digits"
    return None


def _precision(answer):
    """The relative tolerance a rounded answer is held to: float32's when every entry is a float32 number, else 1e-9.

    A float32 value rounded to 3 decimals is the float32 nearest to the rounded number, within half of float32's
    epsilon (6e-8) of it: a float64 tolerance of 1e-9 would miss it."""
    finite = answer[np.isfinite(answer)]
    if finite.size and np.array_equal(finite, finite.astype(np.float32).astype(np.float64)):
        return float(np.finfo(np.float32).eps)
    return 1e-9


def how_far(answer, expected, what):
    """Which way one number is from the right one, in words, never showing the right one, nor how far.

    "your count is too large; work it through again ...", "your score has the wrong sign; ...",
    "your score is close, but a little too large: is it rounded? Use the unrounded value, not printed digits".
    No factor and no percentage: "too small, by about a factor of 160" gives 160 away to an answer of 1.
    """
    rounded = rounding_problem(np.asarray(answer, dtype=np.float64), np.asarray(expected, dtype=np.float64), what)
    return rounded or f"{what} {_miss(float(answer), float(expected))}."


def _wrong_entries(answer, expected, atol):
    """True where a clean answer differs from the clean ``expected``: exactly for whole numbers and masks."""
    exact = expected.dtype == bool or np.issubdtype(expected.dtype, np.integer)
    with np.errstate(all="ignore"):
        return answer != expected if exact else ~np.isclose(answer, expected, rtol=1e-5, atol=atol)


def _how_many(positions, answer):
    return f"all {answer.size}" if len(positions) == answer.size else f"{len(positions)} of the {answer.size}"


def _entry_miss(got, expected):
    """What is wrong with one entry of an array, as a verb phrase, without its expected value."""
    if isinstance(got, np.bool_ | bool) or isinstance(expected, np.bool_ | bool):
        return "is the wrong way round"
    return _miss(float(got), float(expected))


def _miss(answer, expected):
    """The verb phrase of ``how_far``: "is too large; work it through again ...", "has the wrong sign; ..."."""
    again = AGAIN
    if expected == 0:
        return f"is wrong; {again}"
    if answer == 0:
        return f"is 0, but the answer is not; {again}"
    if (answer > 0) != (expected > 0):
        if np.isclose(abs(answer), abs(expected), rtol=1e-5, atol=0):
            return "has the right magnitude, but the wrong sign"
        return f"has the wrong sign; {again}"
    if expected < 0:  # "too large" would be unclear for a negative number
        return f"has the right sign, but its magnitude {_size_of_miss(-answer, -expected)}"
    return _size_of_miss(answer, expected)


def _size_of_miss(answer, expected):
    """ "is too large; work it through again ...", for two different positive numbers: the direction only.

    Close misses (within 0.5%) are told they may be rounded; misses of a thousand times or more that the units may be
    wrong. Nothing in between says how far: a factor or a percentage would let the answer be computed from it."""
    ratio = answer / expected
    direction = "too large" if ratio > 1 else "too small"
    if abs(ratio - 1) < 5e-3:
        if answer.is_integer() and expected.is_integer():
            return f"is a little {direction}; count again"
        return f"is close, but a little {direction}: is it rounded? Use the unrounded value, not printed digits"
    if max(ratio, 1 / ratio) >= 1000:
        return f"is far {direction}: check the units"
    return f"is {direction}; {AGAIN}"


def _shape_problem(got, expected, what):
    if expected == () and np.prod(got) == 1:
        return f"{what} is an array holding one number (shape {got}); give the number itself (for example with .item())."
    if expected == ():
        return f"{what} should be one number, but it is an array of shape {got}."
    if got == ():
        return f"{what} should be an array of shape {expected}, but it is a single value."
    return f"{what} has shape {got}, but it should have shape {expected}."
