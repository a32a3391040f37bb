"""How the checks name things in a sentence: a value shortened to fit, an error in one line, a kind of answer
with its article, how far apart two numbers are."""

import numbers

import numpy as np


def show(value, limit=60):
    """A short text for any value, for a sentence."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, complex):
        text = f"({number_text(value.real, 6)}{value.imag:+.6g}j)"
    else:
        text = number_text(value, 6) if isinstance(value, float) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def brief(error):
    """The first line of an exception's message, shortened."""
    lines = str(error).strip().splitlines()
    return show_text(lines[0]) if lines else ""


def show_text(text, limit=120):
    return text if len(text) <= limit else text[: limit - 3] + "..."


def after_colon(error):
    message = brief(error)
    return f": {message}" if message else ""


def number_text(value, digits):
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
    return f"{value:.{digits}g}"


def apart(value, other):
    """Both numbers in the general format, with the fewest digits (6 at least) that tell them apart."""
    for digits in range(6, 18):
        shown = f"{value:.{digits}g}", f"{other:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


def kind_of(value):
    names = {
        str: "text", bytes: "text", bool: "True/False value", np.bool_: "True/False value", dict: "dictionary",
        set: "set", frozenset: "set", complex: "complex number", np.ndarray: "NumPy array", list: "list", tuple: "tuple",
    }
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    if callable(value):
        return "function"
    if type(value).__name__ in ("Tensor", "Parameter"):
        return "tensor"
    if isinstance(value, numbers.Number | np.generic):
        return "number"
    return type(value).__name__


def with_article(noun):
    if noun == "text":
        return "text"
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"
