"""The exercises' self-checks say in words what is wrong, and say Correct when it is not."""

import numpy as np
import pytest

from attn import check
from attn.checks import describe_array_problem


def verdict(capsys, exercise_id, answer):
    check(exercise_id, answer)
    return capsys.readouterr().out


def test_describe_array_problem_names_what_is_wrong():
    assert "still empty" in describe_array_problem(..., [1.0], "x")
    assert "shape (2,), expected shape (3,)" in describe_array_problem([1, 2], [1, 2, 3], "x")
    assert "NaN or inf" in describe_array_problem([np.nan], [1.0], "x")
    assert "1 of 3 entries" in describe_array_problem([1, 2, 4], [1, 2, 3], "x")
    assert "should be numbers" in describe_array_problem("abc", [1.0], "x")
    assert describe_array_problem([1, 2, 3], [1, 2, 3], "x") is None


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(ValueError, match="1.1"):
        check("9.9", None)


def test_one_hot_check(capsys):
    assert verdict(capsys, "1.1", np.array([0.0, 1.0, 0.0])).startswith("Correct")
    assert "pick 'apple'" in verdict(capsys, "1.1", np.array([1.0, 0.0, 0.0]))
    assert "shape" in verdict(capsys, "1.1", np.array([0.0, 1.0]))


def test_blend_check(capsys):
    assert verdict(capsys, "1.2", 7.5).startswith("Correct")
    assert "add them up" in verdict(capsys, "1.2", np.array([4.5, 3.0, 0.0]))
    assert verdict(capsys, "1.2", 7.0).startswith("Not yet")


def test_lookup_function_check(capsys):
    prices = {"apple": 9, "banana": 6, "chair": 3}
    assert verdict(capsys, "1.3", prices.__getitem__).startswith("Correct")
    assert "returned 0" in verdict(capsys, "1.3", lambda name: prices.get(name, 0))
    assert "no brackets" in verdict(capsys, "1.3", 9)
    assert "expected 9" in verdict(capsys, "1.3", lambda name: 1)
