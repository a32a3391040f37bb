"""attn.common.stats: paired intervals over seeds, as lessons 14 and 15 print them."""

import math

import pytest

from attn.common.stats import describe, paired_interval


def test_the_interval_is_students_t_on_the_differences():
    mean, low, high = paired_interval([0.9, 0.8, 0.7], [0.5, 0.6, 0.4])  # differences 0.4, 0.2, 0.3
    spread = math.sqrt(((0.1) ** 2 + 0 + (0.1) ** 2) / 2)  # 0.1
    assert mean == pytest.approx(0.3) and high - mean == pytest.approx(4.303 * spread / math.sqrt(3))
    assert low == pytest.approx(2 * mean - high)
    assert describe(mean, low, high) == "the first ahead"


def test_words_follow_the_interval():
    assert describe(*paired_interval([0.1, 0.2, 0.15], [0.3, 0.35, 0.33])) == "the second ahead"
    assert describe(*paired_interval([0.9, 0.5, 0.8, 0.6], [0.7, 0.7, 0.7, 0.7])).startswith("not shown")
    # paired, not two samples: a steady small gain over very different seeds is shown
    assert describe(*paired_interval([0.51, 0.91, 0.31], [0.50, 0.90, 0.30])) == "the first ahead"


@pytest.mark.parametrize(("a", "b", "error"), [
    ([1.0], [0.5], ValueError), ([1.0, 2.0], [1.0], ValueError), ("12", [1.0, 2.0], TypeError),
    ([1.0, float("nan")], [1.0, 2.0], TypeError), ([True, False], [1.0, 2.0], TypeError)])
def test_bad_input_gets_a_sentence(a, b, error):
    with pytest.raises(error, match="seeds|numbers"):
        paired_interval(a, b)


def test_describe_refuses_what_is_not_an_interval():
    for values, error, words in (
        ((None, 0.0, 1.0), TypeError, "mean must be a number"),
        ((0.5, "0", 1.0), TypeError, "low must be a number"),
        ((0.5, 0.0, math.nan), ValueError, "high must be a finite number"),
        ((2.0, 0.0, 1.0), ValueError, "low <= mean <= high"),
    ):
        with pytest.raises(error, match=words):
            describe(*values)
