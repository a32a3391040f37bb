"""Every registered exercise survives every kind of answer a learner can give.

For each exercise id in the register (new exercises are covered as soon as they register):
more than fifteen wrong kinds of answer, near-misses derived from its own solution (the
ones that truncate or round to the right answer included), and the solution itself in
other forms. Every call prints exactly one line; it starts with "Correct:" only for the
solution and its other forms, and with "Not yet:" for everything else. Nothing raises.
"""

import math
import sys
import types

import numpy as np
import pytest
import torch

from attn import check
from attn.course.exercises import EXERCISES, exercise_ids
from attn.course.exercises.answers import Array, Function, Number, Shape
from attn.course.exercises.registry import LONGEST_LINE

HUGE = 10**6  # entries in the huge arrays and texts: a verdict must quote a part of them, never all
LONG = 10**4  # entries in the long lists (each entry is looked at in Python, so fewer)


def _raises(*arguments):
    raise RuntimeError("a bug in the learner's function")


def _exits(*arguments):
    sys.exit(3)


def _exits_quietly(*arguments):
    sys.exit()


class _Learners:
    """A class a learner wrote, given where an answer was asked for."""

    def __init__(self, *arguments):
        self.arguments = arguments


# name -> a function making the answer (fresh each time: generators and tensors are used up or changed)
WRONG_KINDS = {
    "None": lambda: None,
    "Ellipsis": lambda: ...,
    "text": lambda: "banana",
    "numeric text": lambda: "7.5",
    "bytes": lambda: b"7.5",
    "True": lambda: True,
    "False": lambda: False,
    "list of ...": lambda: [..., ..., ...],
    "list with one ...": lambda: [1.0, ..., 0.0],
    "list with None": lambda: [1.0, None, 0.0],
    "ragged list": lambda: [[1.0, 2.0], [3.0]],
    "number beside a list": lambda: [1.0, [2.0, 3.0]],
    "dict": lambda: {"apple": 9, "banana": 6},
    "set": lambda: {1, 2},
    "NaN": lambda: math.nan,
    "inf": lambda: math.inf,
    "-inf": lambda: -math.inf,
    "NaN array": lambda: np.full(3, np.nan),
    "empty array": lambda: np.array([]),
    "empty list": lambda: [],
    "empty tuple": lambda: (),
    "complex number": lambda: 3 + 4j,
    "complex array": lambda: np.ones(3) * 1j,
    "huge integer": lambda: 10**30,
    "object array": lambda: np.array([1, None], dtype=object),
    "text array": lambda: np.array(["a", "b"]),
    "tensor that requires grad": lambda: torch.ones(3, requires_grad=True),
    "bfloat16 tensor": lambda: torch.ones(2, 2, dtype=torch.bfloat16),
    "meta tensor": lambda: torch.empty(3, device="meta"),
    "generator": lambda: (number for number in range(3)),
    "a class": lambda: int,
    "function that raises": lambda: _raises,
    "function returning None": lambda: lambda *arguments: None,
    "function returning text": lambda: lambda *arguments: "nine",
    "function returning a list": lambda: lambda *arguments: [1.0, 2.0],
    "function returning a dict": lambda: lambda *arguments: {"price": 9},
    "function returning NaN": lambda: lambda *arguments: math.nan,
    "function of no arguments": lambda: lambda: 1.0,
    "function calling sys.exit(3)": lambda: _exits,
    "function calling sys.exit()": lambda: _exits_quietly,
    "a class of the learner's": lambda: _Learners,
    "the class torch.Tensor": lambda: torch.Tensor,
    "masked array with a hidden entry": lambda: np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False]),
    "np.ma.masked": lambda: np.ma.masked,
    "list holding np.ma.masked": lambda: [1.0, np.ma.masked, 0.0],
    "huge array": lambda: np.full(HUGE, 7.5),
    "huge tensor": lambda: torch.full((1000, 1000), 7.5),
    "huge text": lambda: "7" * HUGE,
    "long list": lambda: [7.5] * LONG,
    "long mixed list": lambda: [True] + [7.5] * LONG,
    "long ragged list": lambda: [[1.0] * LONG, [2.0]],
    "function returning a masked array": lambda: lambda *arguments: np.ma.masked_array([1.0, 2.0], mask=[True, False]),
    "function returning a huge array": lambda: lambda *arguments: np.full(HUGE, 7.5),
    "function raising a huge message": lambda: _raises_huge,
}


def _raises_huge(*arguments):
    raise ValueError("x" * HUGE)


def sharing_globals(wrapper, solution):
    """``wrapper`` as if written where ``solution`` was: exercise 1.3 reads key_array and values from there."""
    return types.FunctionType(wrapper.__code__, solution.__globals__, wrapper.__name__, None, wrapper.__closure__)


def _function_forms(solution, returns):
    # Local names, so that the wrappers find them after sharing_globals gives them the solution's globals.
    plain, asarray, as_tensor = _plain, np.asarray, torch.as_tensor

    def as_numpy(*arguments):
        return asarray(plain(solution(*arguments)))

    def as_list(*arguments):
        return asarray(plain(solution(*arguments))).tolist()

    def as_float(*arguments):
        return as_tensor(plain(solution(*arguments))).double()

    forms = {"the solution": solution, "outputs as NumPy": as_numpy, "outputs as lists": as_list, "outputs as floats": as_float}
    if returns.kind == "mask":  # a float mask is refused, as it is for an array answer
        del forms["outputs as floats"]
    return {name: sharing_globals(form, solution) if form is not solution else form for name, form in forms.items()}


def _function_misses(solution, returns):
    whole = returns.kind == "whole"
    plain, as_tensor = _plain, torch.as_tensor

    def off_by_most_of_one(*arguments):  # truncates to the right whole number
        return as_tensor(plain(solution(*arguments))).double() + 0.9

    def off_by_one(*arguments):
        return as_tensor(plain(solution(*arguments))).double() + 1

    def one_percent_off(*arguments):
        return as_tensor(plain(solution(*arguments))).double() * 1.01 + 0.01

    def as_text(*arguments):
        return str(plain(solution(*arguments)))

    def in_a_list(*arguments):
        return [plain(solution(*arguments))]

    def in_a_dict(*arguments):
        return {"answer": plain(solution(*arguments))}

    def returns_nothing(*arguments):
        solution(*arguments)

    def raises_after(*arguments):
        solution(*arguments)
        raise KeyError("oops")

    misses = {
        "off by 0.9": off_by_most_of_one,
        "off by one": off_by_one,
        "as text": as_text,
        "in a list": in_a_list,
        "in a dict": in_a_dict,
        "returns nothing": returns_nothing,
        "raises after": raises_after,
    }
    if not whole:
        misses["one percent off"] = one_percent_off
    return {name: sharing_globals(miss, solution) for name, miss in misses.items()}


def _plain(output):
    return output.detach().numpy() if isinstance(output, torch.Tensor) else output


def right_forms(exercise):
    """The solution, and the same answer in other forms a learner might give."""
    solution, expects = exercise.solution(), exercise.expects
    if isinstance(expects, Function):
        return _function_forms(solution, expects.returns)
    if isinstance(expects, Shape):
        return {"tuple": tuple(solution), "list": list(solution), "array": np.array(solution), "torch.Size": torch.Size(solution)}
    array = np.asarray(solution)
    forms = {"solution": solution, "list": array.tolist(), "tensor": torch.as_tensor(array.copy())}
    forms["masked array, nothing hidden"] = np.ma.masked_array(array, mask=False)
    if expects.kind == "mask":
        return forms
    forms["tensor that requires grad"] = torch.tensor(array, dtype=torch.float64, requires_grad=True)
    forms["float32"] = array.astype(np.float32)
    if isinstance(expects, Number):
        forms["Python number"] = array.item()
    if expects.kind == "whole":
        forms["as floats"] = array.astype(float)
    return forms


def near_misses(exercise):
    """Wrong answers close to the solution: a little off, off in one entry, the right numbers in the wrong form."""
    solution, expects = exercise.solution(), exercise.expects
    if isinstance(expects, Function):
        return _function_misses(solution, expects.returns)
    if isinstance(expects, Shape):
        shape = list(solution)
        return {
            "the array itself, not its shape": np.full(shape, 0.5),
            "first size 0.9 too large": tuple([shape[0] + 0.9, *shape[1:]]),
            "last size one too large": tuple([*shape[:-1], shape[-1] + 1]),
            "reversed": tuple(reversed(shape)),
            "one size missing": tuple(shape[:-1]),
            "one size too many": tuple([*shape, 1]),
            "with ... at the end": tuple([*shape, ...]),
            "as text": str(tuple(shape)),
            "nested": (tuple(shape),),
            "negative": tuple(-size for size in shape),
        }
    array = np.asarray(solution)
    if expects.kind == "mask":
        flipped = array.copy()
        flipped.flat[0] = not flipped.flat[0]
        return {
            "one entry flipped": flipped,
            "inverted": ~array,
            "as integers": array.astype(int),
            "as floats": array.astype(float),
            "as an additive float mask": np.where(array, 0.0, -np.inf),
            "with an extra axis": array[None],
            "as text": str(array.tolist()),
            "True/False with one entry as 0 or 1": with_first_leaf_as_int(array.tolist()),
            "masked, the flipped entry hidden": np.ma.masked_array(flipped, mask=first_entry(array)),
        }
    values = array.astype(float)
    one_entry_off = values.copy()
    one_entry_off.flat[0] += 0.5
    misses = {
        "one percent off": values * 1.01 + 0.01,
        "one entry off": one_entry_off,
        "negated": -values - 1,
        "as text": str(values.tolist()),
        "as complex numbers": values + 0j,
        "with an extra axis": values[None],
        "as booleans": values != 0,
        "with NaN": np.where(np.arange(values.size).reshape(values.shape) == 0, np.nan, values),
        "masked, the wrong entry hidden": np.ma.masked_array(one_entry_off, mask=first_entry(values)),
    }
    if values.ndim:
        misses["one entry missing"] = values.ravel()[:-1]
        misses["one entry too many"] = np.append(values.ravel(), 1.0)
    if isinstance(expects, Number):
        misses["in a list"] = [values.item()]
        misses["as numeric text"] = repr(values.item())
    if expects.kind == "whole":
        misses["0.9 too large (truncates to the answer)"] = values + 0.9
        misses["0.4 too large (rounds to the answer)"] = values + 0.4
        misses["one too many"] = values + 1
        misses["a hair below (shown with 6 digits, it is the answer)"] = values - 1e-7
    return misses


def first_entry(array):
    """A boolean array shaped like ``array``, True at its first entry only."""
    return np.arange(array.size).reshape(array.shape) == 0


def with_first_leaf_as_int(nested):
    """A copy of nested lists of booleans whose first boolean is written as the number 0 or 1."""
    if not isinstance(nested, list):
        return int(nested)
    return [with_first_leaf_as_int(nested[0]), *nested[1:]]


def verdicts(capsys, exercise_id, answers):
    """(name, printed line) for each answer; checks that each call printed exactly one line, of a readable length."""
    lines = []
    for name, answer in answers.items():
        check(exercise_id, answer)
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.endswith("\n"), f"{exercise_id} with {name}: printed {out[:300]!r}"
        assert len(out) <= LONGEST_LINE + 1, f"{exercise_id} with {name}: a line of {len(out)} characters"
        lines.append((name, out))
    return lines


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_wrong_kinds_of_answer_get_a_sentence(capsys, exercise_id):
    assert len(WRONG_KINDS) >= 15
    answers = {name: make() for name, make in WRONG_KINDS.items()}
    for name, line in verdicts(capsys, exercise_id, answers):
        assert line.startswith("Not yet: "), f"{exercise_id} with {name}: {line}"
        assert len(line.split()) >= 6, f"{exercise_id} with {name}: not a sentence: {line}"
        function_asked = isinstance(EXERCISES[exercise_id].expects, Function)
        applies = "class" in name or name.startswith("function") == function_asked  # else the verdict is "is a function"
        for kind, words in NAMED_KINDS.items():
            assert not (applies and kind in name) or any(word in line for word in words), f"{exercise_id} with {name}: {line}"


# Words the verdict on some kinds of answer must contain (it names the real problem, not a later symptom).
NAMED_KINDS = {
    "sys.exit": ("sys.exit()",),
    "class": ("the class",),
    "masked": ("masked",),
}


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_near_misses_are_not_correct(capsys, exercise_id):
    misses = near_misses(EXERCISES[exercise_id])
    assert len(misses) >= 6
    for name, line in verdicts(capsys, exercise_id, misses):
        assert line.startswith("Not yet: "), f"{exercise_id} with {name}: {line}"


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_the_right_answer_is_correct_in_every_form(capsys, exercise_id):
    exercise = EXERCISES[exercise_id]
    for name, line in verdicts(capsys, exercise_id, right_forms(exercise)):
        assert line == f"Correct: {exercise.success}\n", f"{exercise_id} as {name}: {line}"


def test_every_exercise_declares_a_kind_of_answer():
    for exercise in EXERCISES.values():
        assert isinstance(exercise.expects, Number | Array | Shape | Function), exercise.exercise_id
        assert exercise.success.endswith("."), exercise.exercise_id


def _ids_expecting(kind, mask=False):
    expects = {exercise_id: EXERCISES[exercise_id].expects for exercise_id in exercise_ids()}
    return [key for key, value in expects.items() if isinstance(value, kind) and (getattr(value, "kind", "") == "mask") == mask]


@pytest.mark.parametrize("exercise_id", _ids_expecting(Shape))
def test_an_array_where_a_shape_is_asked_gets_shape_suggested(capsys, exercise_id):
    shape = tuple(EXERCISES[exercise_id].solution())
    answers = {"array": np.full(shape, 0.5), "tensor": torch.full(shape, 0.5), "boolean array": np.ones(shape, dtype=bool)}
    for name, line in verdicts(capsys, exercise_id, answers):
        assert line.startswith("Not yet: ") and "give its .shape" in line, f"{exercise_id} with {name}: {line}"


@pytest.mark.parametrize("exercise_id", _ids_expecting(Array, mask=True))
def test_mask_answers_are_described_as_masks(capsys, exercise_id):
    array = np.asarray(EXERCISES[exercise_id].solution())
    answers = {"mixed": with_first_leaf_as_int(array.tolist()), "-inf": -math.inf, "all -inf": np.full(array.shape, -np.inf)}
    lines = dict(verdicts(capsys, exercise_id, answers))
    assert "write every entry as True or False" in lines["mixed"] and "numbers only" not in lines["mixed"], lines["mixed"]
    assert "is -inf: " in lines["-inf"] and "0 and" not in lines["-inf"], lines["-inf"]
    assert "holds only -inf" in lines["all -inf"], lines["all -inf"]


@pytest.mark.parametrize("exercise_id", [i for i in exercise_ids() if getattr(EXERCISES[i].expects, "kind", "") == "whole"])
def test_a_nearly_whole_number_is_shown_with_the_digits_that_make_it_not_whole(capsys, exercise_id):
    solution = np.asarray(EXERCISES[exercise_id].solution())
    nearly = solution.astype(float) - 1e-7
    (_, line), = verdicts(capsys, exercise_id, {"nearly": nearly})
    shown = f"{nearly.flat[0]:.12g}"
    assert line.startswith("Not yet: ") and shown[:8] in line and "round it" in line, line
