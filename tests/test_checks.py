"""The exercises' self-checks say in words what is wrong, and say Correct when it is not."""

import numpy as np
import pytest

from attn import check
from attn.checks import describe_array_problem


def verdict(capsys, exercise_id, answer):
    check(exercise_id, answer)
    return capsys.readouterr().out


def test_describe_array_problem_names_what_is_wrong():
    assert "nothing yet" in describe_array_problem(..., [1.0], "x")
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


def test_lesson_2_to_4_checks_accept_the_right_answer_and_name_common_mistakes(capsys):
    from attn import fruit, softmax
    from attn.exercises import DURABLE_QUERY

    scores = fruit.KEYS @ DURABLE_QUERY
    assert verdict(capsys, "2.1", scores).startswith("Correct")
    assert "scaled by 1/sqrt(3)" in verdict(capsys, "2.1", scores / np.sqrt(3))
    assert "plain dot product" in verdict(capsys, "2.2", fruit.KEYS[1] @ fruit.QUERY)
    assert "one-hot weight vector" in verdict(capsys, "2.3", np.array([0.0, 0.0, 1.0]))
    assert verdict(capsys, "2.3", fruit.VALUES[2]).startswith("Correct")
    assert "unscaled" in verdict(capsys, "3.1", scores)
    assert "square root" in verdict(capsys, "3.1", scores / 3)
    assert "(3, 2)" in verdict(capsys, "3.2", np.zeros((3, 2)))
    assert verdict(capsys, "3.3", 16).startswith("Correct")
    assert "overflows" in verdict(capsys, "4.1", np.array([np.nan, np.nan, np.nan]))
    assert verdict(capsys, "4.1", softmax(np.array([0.0, 1.0, 2.0]))).startswith("Correct")
    assert "not scaled" in verdict(capsys, "4.2", softmax(scores) @ fruit.VALUES)
    fruit_scores = fruit.KEYS @ fruit.QUERY / np.sqrt(3)
    assert "divide the scores" in verdict(capsys, "4.3", softmax(fruit_scores * 0.5))
    assert verdict(capsys, "4.3", softmax(fruit_scores / 0.5)).startswith("Correct")


def test_lesson_5_checks(capsys):
    from attn import causal_mask, padding_mask

    assert verdict(capsys, "5.1", causal_mask(4)).startswith("Correct")
    assert "future" in verdict(capsys, "5.1", causal_mask(4).T)
    assert "dtype=bool" in verdict(capsys, "5.1", causal_mask(4).astype(int))
    keep = padding_mask([2, 4], 4)[:, 0, :]
    assert verdict(capsys, "5.2", ~keep).startswith("Correct")
    assert "True = blocked" in verdict(capsys, "5.2", keep)
    assert "drop the middle axis" in verdict(capsys, "5.2", ~padding_mask([2, 4], 4))
    assert verdict(capsys, "5.3", 4.0).startswith("Correct")
    assert "float64" in verdict(capsys, "5.3", 8.0)


def test_lesson_6_checks(capsys):
    assert verdict(capsys, "6.1", (2, 8, 10, 8)).startswith("Correct")
    assert "before transpose" in verdict(capsys, "6.1", (2, 10, 8, 8))
    assert "(B, H, T, d)" in verdict(capsys, "6.1", (2, 8, 10, 64))
    assert "tuple" in verdict(capsys, "6.1", 5)
    assert verdict(capsys, "6.2", 1_050_624).startswith("Correct")
    assert "biases" in verdict(capsys, "6.2", 4 * 512 * 512)
    expected = 4 * 4 * 16 * 4096**2 * 64 / 0.002 / 1e12
    assert verdict(capsys, "6.3", expected).startswith("Correct")
    assert "divide by 1e12" in verdict(capsys, "6.3", expected * 1e12)
    assert "4 in total" in verdict(capsys, "6.3", expected / 2)


def test_lesson_7_checks(capsys):
    assert verdict(capsys, "7.1", 1 / 16).startswith("Correct")

    def exact(keys, values, query):
        return ((keys == query[:, None]).long() * values).sum(dim=1)

    assert verdict(capsys, "7.2", exact).startswith("Correct")
    assert "lookups are wrong" in verdict(capsys, "7.2", lambda keys, values, query: values[:, 0])
    assert "shape" in verdict(capsys, "7.2", lambda keys, values, query: values)
    assert verdict(capsys, "7.3", 5776).startswith("Correct")
    assert "readout" in verdict(capsys, "7.3", 5776 - 528)


def test_checks_survive_answers_of_the_wrong_kind(capsys):
    for exercise_id in ("2.2", "4.1", "5.3", "6.2", "6.3", "7.3"):
        assert verdict(capsys, exercise_id, "not a number").startswith("Not yet")
