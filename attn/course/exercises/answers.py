"""Answers as learners give them, turned into one clean form per kind of answer, or into a sentence.

Every exercise declares the kind of answer it expects:

- ``Number``: one real number (``whole=True``: a count, compared exactly);
- ``Array``: real numbers of any shape (``kind="float"``), whole numbers (``"whole"``), or
  a 0/1 mask (``"mask"``, with ``meaning`` saying what True means);
- ``Shape``: a flat tuple of whole numbers;
- ``Function``: a function; it is called with the arguments the exercise states, and each
  output is cleaned as the kind given in ``returns``.

``normalise(answer, expects)`` returns the clean form (a NumPy array, float64 or int64 for
numbers and the answer's own dtype for masks; a tuple of ints; a ``Called`` holding the
function and its cleaned outputs) or raises ``AnswerError`` with a sentence naming what is
wrong: nothing yet (None or ``...``), text, a yes/no value, a dictionary, a ragged list, a
complex number, NaN or inf, an empty array, a number that is not whole, a function that
raises or returns None. Lists and tuples become arrays; PyTorch tensors (on any device,
with or without ``requires_grad``) are read as NumPy arrays. The shape is left to the checks,
which look for common mistakes first and then call ``compare``, whose sentence says which entry is
wrong, in which direction and roughly how far, and never shows the expected value.

Judging a clean answer against the expected one lives in ``judging``; the wording both use (how a
value, an error or a kind of thing is named in a sentence) in ``wording``.
"""

import contextlib
import io
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from attn.course.exercises.wording import after_colon, apart, brief, kind_of, show, with_article


class AnswerError(Exception):
    """The answer cannot be judged as it is; the message says why, as a sentence for the learner."""


@dataclass(frozen=True)
class Number:
    what: str  # the answer in a sentence, such as "your blended price"
    whole: bool = False
    if_not_finite: str = ""  # a hint added when the answer is NaN or inf

    @property
    def kind(self):
        return "whole" if self.whole else "float"

    @property
    def noun(self):
        return "one whole number" if self.whole else "one number"


@dataclass(frozen=True)
class Array:
    what: str
    kind: str = "float"  # "float", "whole" or "mask"
    meaning: str = ""  # for a mask: what True means, such as "True = may attend"
    if_not_finite: str = ""

    @property
    def noun(self):
        if self.kind == "mask":
            return f"a boolean mask ({self.meaning})"
        return "an array of whole numbers" if self.kind == "whole" else "an array of numbers"


@dataclass(frozen=True)
class Shape:
    what: str
    noun = "a tuple of whole numbers, such as (2, 3)"


class _Sizes(Array):
    """The sizes in a shape: whole numbers, described as a shape in sentences."""

    noun = Shape.noun


@dataclass(frozen=True)
class Function:
    what: str
    calls: Callable  # () -> [(label, arguments)], a label such as "with 'apple'"
    returns: Number | Array
    errors: tuple = ()  # (words in an exception's message, a hint added to the sentence), for known slips
    noun = "a function"


@dataclass(frozen=True)
class Called:
    """A function answer: the function itself and its cleaned output for each of the exercise's calls."""

    function: Callable
    outputs: list


def normalise(answer, expects):
    """The clean form of ``answer`` for the kind ``expects``, or ``AnswerError`` saying what is wrong."""
    if answer is None or answer is Ellipsis:
        replacement = {Function: "your function", Shape: "a tuple"}.get(type(expects), "your code")
        raise AnswerError(f"nothing yet for {expects.what}: replace the ... with {replacement}.")
    if isinstance(answer, type):
        raise AnswerError(_class_problem(answer, expects))
    if isinstance(expects, Function):
        return _called(answer, expects)
    if callable(answer):
        raise AnswerError(f"{expects.what} is a function, but it should be {expects.noun}: call it and give its result.")
    _check_not_a_pair_of_arrays(answer, expects)
    array = _as_array(answer, expects)
    if isinstance(expects, Shape):
        _check_not_the_array_itself(answer, array, expects)
        return _shape(array, expects)
    return _numbers(array, expects)


def _check_not_a_pair_of_arrays(answer, expects):
    """A tuple of arrays or tensors, such as the (output, weights) an attention function returns, is named."""
    if not isinstance(answer, tuple) or len(answer) < 2 or isinstance(expects, Shape):
        return
    if not all(isinstance(item, np.ndarray) or kind_of(item) == "tensor" for item in answer):
        return
    shapes = ", ".join(str(tuple(item.shape)) for item in answer)
    raise AnswerError(
        f"{expects.what} is a tuple of {len(answer)} arrays (shapes {shapes}), such as the (output, weights) pair an "
        "attention function returns: give only the one asked for (output, weights = ..., or [0]); if they are "
        "rows of one answer, stack them with np.stack."
    )


def _class_problem(kind, expects):
    """The sentence for a class (such as ``int`` or ``torch.Tensor``) given as the answer."""
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(expects, Function):
        return f"{expects.what} is the class {name}, not a function: pass the function you wrote with def, by its name."
    return f"{expects.what} is the class {name} itself, but it should be {expects.noun}: give a value, not a type."


def _as_array(answer, expects, depth=0):
    """``answer`` as a NumPy array of any dtype; what cannot be one is named."""
    what, nested = expects.what, depth > 0
    if depth > 32:  # NumPy allows 64 dimensions; no answer in the course needs more than a few
        raise AnswerError(f"{what} is lists inside lists {depth} levels deep; no answer here is nested like that.")
    answer = _from_torch(answer, what)
    if isinstance(answer, np.ma.MaskedArray):
        return _unmasked(answer, what)
    if isinstance(answer, np.ndarray):
        return answer
    if answer is None:  # inside a list: the whole answer being None is "nothing yet"
        raise AnswerError(f"{what} has None in it where a number should be.")
    if answer is Ellipsis:
        value = "True or False" if getattr(expects, "kind", "") == "mask" else "a number"
        raise AnswerError(f"{what} still has a ... in it: replace each ... with {value}.")
    if isinstance(answer, str | bytes):
        raise AnswerError(_text_problem(answer, expects, nested))
    if isinstance(answer, list | tuple):
        if depth == 0 and _more_entries_than(answer, LARGEST_LIST):
            raise AnswerError(
                f"{what} is a list of more than {LARGEST_LIST:,} numbers, far more than any answer here; "
                "check what your code builds (for a large array, give a NumPy array or a tensor)."
            )
        return _stack([_as_array(item, expects, depth + 1) for item in answer], expects)
    if isinstance(answer, numbers.Number | np.generic):
        return _scalar(answer)
    where = "has" if nested else "is"
    not_numbers = f"{what} {where} {with_article(kind_of(answer))}{' in it' if nested else ''}, but it should be {expects.noun}."
    if callable(answer) or isinstance(answer, dict):
        raise AnswerError(not_numbers)
    if isinstance(answer, set | frozenset) and expects.noun.startswith("an array"):  # a set has no order: a list
        raise AnswerError(not_numbers.replace("an array", "a list")[:-1] + ": a set has no order; list(...) makes one.")
    try:
        array = np.asarray(answer)  # objects that know how to become arrays
    except Exception:  # noqa: BLE001 - an object's own conversion code can raise anything
        array = None
    if array is None or array.dtype == object:
        raise AnswerError(not_numbers)
    return array


LARGEST_LIST = 100_000  # entries in a (nested) Python list: each is looked at in Python, so a larger one is refused


def _more_entries_than(answer, limit):
    """True if the nested lists and tuples of ``answer`` hold more than ``limit`` entries (counted up to limit + 1)."""
    count, stack, seen = 0, [(answer, 0)], set()
    while stack:
        items, depth = stack.pop()
        if id(items) in seen or depth > 32:  # a list inside itself, or nested past any answer: named elsewhere
            continue
        seen.add(id(items))
        count += len(items)
        if count > limit:
            return True
        stack.extend((item, depth + 1) for item in items if isinstance(item, list | tuple))
    return False


def _unmasked(answer, what):
    """A NumPy masked array as a plain array when nothing is hidden; with hidden entries, a sentence."""
    hidden = int(np.count_nonzero(np.ma.getmaskarray(answer)))
    if hidden:
        verb = "is" if hidden == 1 else "are"
        entries = "its one entry is" if answer.size == 1 else f"{hidden} of its {answer.size} entries {verb}"
        raise AnswerError(
            f"{what} is a NumPy masked array, and {entries} masked (hidden), so it cannot be judged: "
            "give a plain array, for example with .filled(value) or np.asarray(...)."
        )
    return np.asarray(np.ma.getdata(answer))


def _from_torch(answer, what):
    """A PyTorch tensor as a NumPy array; torch is only looked at if the learner has imported it."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(answer, torch.Tensor):
        return answer
    tensor = answer.detach()  # the check only reads the numbers, so requires_grad does not matter
    try:
        if tensor.layout != torch.strided:
            tensor = tensor.to_dense()
        if tensor.is_floating_point() and tensor.dtype not in (torch.float16, torch.float32, torch.float64):
            tensor = tensor.double()  # bfloat16 and smaller floats have no NumPy dtype
        return tensor.cpu().resolve_conj().resolve_neg().numpy()
    except (RuntimeError, NotImplementedError, TypeError) as error:
        raise AnswerError(f"{what} is a tensor whose numbers cannot be read ({brief(error)}).") from None


def _text_problem(text, expects, nested):
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    try:
        number = float(text)
    except ValueError:
        number = None
    quoted = show(text)
    if number is not None and not nested:
        return f"{expects.what} is the text {quoted}, not the number {show(number)}: give the number itself, not text."
    if nested:
        return f"{expects.what} has the text {quoted} in it, but it should be {expects.noun}: give numbers, not text."
    return f"{expects.what} is the text {quoted}, but it should be {expects.noun}."


def _scalar(number):
    array = np.asarray(number)
    if array.dtype == object:  # a Python int too large for int64, a Fraction, a Decimal
        with contextlib.suppress(OverflowError, TypeError, ValueError):
            array = np.asarray(complex(number) if isinstance(number, complex) else float(number))
    return array


def _stack(items, expects):
    """One array from the items of a list, which must all have the same shape and kind."""
    what = expects.what
    if not items:
        return np.zeros((0,))
    shapes = list(dict.fromkeys(item.shape for item in items))
    if len(shapes) > 1:
        first, second = (("a single number" if shape == () else f"of shape {shape}") for shape in shapes[:2])
        raise AnswerError(
            f"{what} is a ragged list: one of its items is {first} and another {second}, "
            f"so together they do not make an array; give every row the same length."
        )
    if len({item.dtype == bool for item in items}) > 1:
        if getattr(expects, "kind", "") == "mask":
            meaning = expects.meaning
            raise AnswerError(f"{what} mixes True/False values with numbers; write every entry as True or False ({meaning}).")
        raise AnswerError(f"{what} mixes True/False values with numbers; give numbers only.")
    return np.stack(items)


def _numbers(array, expects):
    """A clean array for a Number or an Array: float64, int64 (whole) or the mask's own dtype."""
    what, kind = expects.what, expects.kind
    single = array.ndim == 0
    if array.dtype.kind in "US":
        raise AnswerError(f"{what} holds text, but it should be {expects.noun}: give numbers, not text.")
    if array.dtype == object:
        raise AnswerError(
            f"{what} is an array of Python objects (dtype object), not of numbers: is it ragged, "
            f"or does it hold None or text? It should be {expects.noun}."
        )
    if not np.issubdtype(array.dtype, np.number) and array.dtype != bool:
        raise AnswerError(f"{what} holds {array.dtype} values, but it should be {expects.noun}.")
    if array.dtype.kind == "c":
        example = show(array.flat[0])
        start = f"is the complex number {example}" if single else f"holds complex numbers, such as {example}"
        raise AnswerError(f"{what} {start}; the answer is real, with no imaginary part.")
    if array.size == 0:
        raise AnswerError(f"{what} is empty (shape {array.shape}), but it should be {expects.noun}.")
    if kind == "mask":
        return _mask(array, expects)
    if array.dtype == bool:
        if single:
            raise AnswerError(f"{what} is {bool(array)}, a yes/no value, but it should be {expects.noun}.")
        convert = ".long() on a tensor, .astype(int) on a NumPy array" if kind == "whole" else \
            ".float() on a tensor, .astype(float) on a NumPy array"
        raise AnswerError(f"{what} holds True/False values, but it should be {expects.noun} (convert with {convert}).")
    values = array.astype(np.float64)
    _check_finite(values, expects, single)
    if kind == "whole":
        return _whole(values, expects, single)
    return values


def _check_finite(values, expects, single):
    hint = f": {expects.if_not_finite}" if expects.if_not_finite else ""
    if np.isnan(values).any():
        start = "is NaN" if single else "contains NaN"
        raise AnswerError(f"{expects.what} {start} (not a number){hint}.")
    if np.isinf(values).any():
        start = "is infinite" if single else "contains inf"
        default = "; it should be a finite number" if single else "; every entry should be a finite number"
        raise AnswerError(f"{expects.what} {start}{hint or default}.")


def _whole(values, expects, single):
    fractional = values != np.round(values)
    if fractional.any():
        value = values[fractional][0]
        example, nearest = apart(value, np.round(value))  # enough digits to tell it from the whole number
        start = f"should be a whole number, but it is {example}" if single else f"should hold whole numbers, but it has {example}"
        nearly = abs(value - np.round(value)) < 1e-6
        hint = f", not quite {nearest}: if rounding error made it so, round it with round()" if nearly else ""
        raise AnswerError(f"{expects.what} {start}{hint}.")
    if (np.abs(values) >= 2.0**62).any():
        raise AnswerError(f"{expects.what} is far too large to be the answer.")
    return values.astype(np.int64)


def _mask(array, expects):
    """A mask keeps its dtype, so that a check can say whether it should have been bool."""
    what, meaning = expects.what, expects.meaning
    if array.dtype == bool:
        return array
    values = array.astype(np.float64)
    if np.isnan(values).any():
        raise AnswerError(f"{what} contains NaN, but a mask holds only True and False ({meaning}).")
    zero_or_one = np.isin(values, (0.0, 1.0))
    if zero_or_one.all():
        return array
    if np.isin(values, (0.0, -np.inf)).all():
        held = "0 and -inf" if (values == 0).any() else ("-inf" if values.ndim == 0 else "only -inf")
        verb = "is" if values.ndim == 0 else "holds"
        raise AnswerError(
            f"{what} {verb} {held}: that is how an additive float mask is written (0 to keep, -inf to block), added to "
            f"the scores; this exercise asks for a boolean mask ({meaning}): build it with dtype=bool."
        )
    raise AnswerError(f"{what} holds {show(values[~zero_or_one][0])}, but a mask holds only True and False ({meaning}).")


def _check_not_the_array_itself(answer, array, expects):
    """An array or tensor of numbers where its shape is asked: suggest ``.shape``."""
    if not (isinstance(answer, np.ndarray) or kind_of(answer) == "tensor") or array.dtype.kind not in "biuf":
        return
    with np.errstate(all="ignore"):
        not_sizes = array.ndim > 1 or array.dtype == bool or not np.array_equal(array, np.round(array))
    if not_sizes:
        raise AnswerError(
            f"{expects.what} is {with_article(kind_of(answer))} of shape {tuple(array.shape)}, "
            "but the question asks for a shape: "
            "give its .shape (a tuple), not the array itself."
        )


def _shape(array, expects):
    what = expects.what
    if array.ndim == 0:
        raise AnswerError(f"{what} is a single number, but it should be {expects.noun}.")
    if array.ndim > 1:
        raise AnswerError(f"{what} is nested, but a shape is a flat tuple of whole numbers, such as (2, 3).")
    if array.size == 0:
        return ()
    if array.dtype == bool:
        raise AnswerError(f"{what} holds True/False values, but it should be {expects.noun}.")
    sizes = _numbers(array, _Sizes(what, kind="whole"))
    if (sizes < 0).any():
        raise AnswerError(f"{what} has the size {sizes[sizes < 0][0]}, but sizes are 0 or more.")
    return tuple(int(size) for size in sizes)


def attempt(function, *arguments):
    """Call a learner's function: ``(output, None)``, or ``(None, the exception it raised)``.

    Whatever it prints is kept out of the check's one-line verdict; ``sys.exit()`` (SystemExit) is
    reported like any error, so that it never stops the check or the kernel.
    """
    quiet = np.errstate(all="ignore")  # an overflow becomes inf or NaN in the output, which the check names
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), quiet:
        try:
            return function(*arguments), None
        except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever a learner's function raises is reported
            return None, error


def call(function, label, arguments, returns, errors=()):
    """Call ``function(*arguments)`` and clean its output as ``returns``; AnswerError says what went wrong.

    ``label`` says how it was called, for the sentence: "with 'apple'".
    """
    output, error = attempt(function, *arguments)
    if isinstance(error, SystemExit):
        stops = "which stops the program: return a value instead"
        raise AnswerError(f"called {label}, your function called sys.exit() (or exit()), {stops}.")
    if error is not None:
        hints = [hint for words, hint in errors if words in str(error)]
        hint = f" {hints[0]}" if hints else ""
        raise AnswerError(f"called {label}, your function raised {type(error).__name__}{after_colon(error)}.{hint}")
    if output is None:
        raise AnswerError(f"called {label}, your function returned None: does it end with a return statement?")
    if output is Ellipsis:
        raise AnswerError("your function still returns ...: replace the ... with your code.")
    return normalise(output, replace(returns, what=f"what your function returned when called {label}"))


def _called(function, expects):
    if not callable(function):
        raise AnswerError(f"pass {expects.what} itself (its name, no brackets), not {with_article(kind_of(function))}.")
    outputs = [call(function, label, arguments, expects.returns, expects.errors) for label, arguments in expects.calls()]
    return Called(function, outputs)
