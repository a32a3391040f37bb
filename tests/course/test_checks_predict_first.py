"""No self-check gives its answer away, and the common mistakes of issue 23 are named.

Every exercise whose answer is one number (and P.2, whose function returns one) is fed several wrong
numbers; its "Not yet" reply must say how far off they are without showing the expected value in any
of the ways the course prints numbers. New exercises are covered as soon as they register.
"""

import math
import re

import numpy as np
import pytest
import torch

from attn.course.exercises import EXERCISES, exercise_ids, verdict
from attn.course.exercises.answers import Array, Function, Number, normalise
from attn.course.exercises.judging import compare_without_answer, how_far
from attn.course.exercises.lesson11 import EARLIER, LATER, single_repeat_sequence
from attn.course.exercises.wording import number_text, show
from tests.verdicts import not_yet

# Multiple choice: the options are listed in the statement, so a reply may name them all ("1, 2 or 3").
OPTIONS_LISTED = {"11.2"}
NUMBER_EXERCISES = [
    exercise_id for exercise_id in exercise_ids()
    if isinstance(EXERCISES[exercise_id].expects, Number) and exercise_id not in OPTIONS_LISTED
]


def printed_forms(value):
    """Every way the course writes ``value`` in a sentence: 3 to 10 significant digits, with and without commas."""
    forms = {number_text(value, digits) for digits in range(3, 11)} | {show(float(value))}
    if float(value).is_integer():
        forms |= {str(int(value)), f"{int(value):,}"}
    return forms


def shows_value(reply, value):
    """True when ``reply`` contains ``value`` written out as a number of its own (not inside a longer one)."""
    return any(re.search(rf"(?<![\d.,]){re.escape(form)}(?![\d,]|\.\d)", reply) for form in printed_forms(value))


def wrong_numbers(expected, whole):
    """Plausible wrong predictions around ``expected``: 10% too large, half, three times, one more."""
    candidates = [expected * 1.1, expected * 0.5, expected * 3, expected + 1, expected * 0.9, -expected]
    if whole:
        candidates = [round(candidate) for candidate in candidates]
    return [candidate for candidate in candidates if candidate != expected]


def test_the_sweep_covers_every_number_exercise():
    assert {"2.2", "3.3", "5.3", "6.2", "6.3", "7.1", "7.3", "8.1", "8.2", "9.2", "10.1", "11.3", "12.2", "12.4"} <= set(
        NUMBER_EXERCISES
    )


@pytest.mark.parametrize("exercise_id", NUMBER_EXERCISES)
def test_a_wrong_number_is_not_told_the_answer(exercise_id):
    found = EXERCISES[exercise_id]
    expected = float(found.solution())
    for wrong in wrong_numbers(expected, found.expects.whole):
        reply = not_yet(exercise_id, wrong)
        assert not shows_value(reply, expected), f"{exercise_id} gives the answer away for {wrong}: {reply}"


def test_the_sweep_would_catch_a_reply_that_prints_the_value():
    assert shows_value("your count is 49,985, expected 49,984.", 49_984)
    assert shows_value("your score is 0.9, expected 0.9257.", 0.9256899557273826)
    assert shows_value("x is 5, expected 4.", 4.0)
    assert not shows_value("your size is too large, by about 10%.", 4.0)
    assert not shows_value("it is 14.3, not a whole number.", 4.0)


def cross_entropy(logits, targets):
    return -logits.log_softmax(dim=-1)[torch.arange(len(targets)), targets].mean()


@pytest.mark.parametrize("factor", [1.1, 0.5, 3.0, 0.9])
def test_a_wrong_loss_in_the_primers_exercise_2_is_not_told_the_loss(factor):
    from attn.course.exercises.primer import _loss_calls

    reply = not_yet("P.2", lambda logits, targets: factor * cross_entropy(logits, targets))
    assert reply.startswith("Not yet: called with logits (4, 5) and targets (4,), the loss your function returned is too")
    for _, arguments in _loss_calls():
        assert not shows_value(reply, cross_entropy(*arguments).item()), reply


def test_how_far_says_which_way_a_miss_goes_never_how_far():
    """Issue 52: "too small, by about a factor of 4" to an answer of 1 is the answer, 4; so is 25% to an answer of 3."""
    again = "work it through again"
    assert how_far(5.0, 4.0, "x") == f"x is too large; {again}."
    assert how_far(3.0, 4.0, "x") == f"x is too small; {again}."
    assert how_far(12.0, 4.0, "x") == how_far(5.0, 4.0, "x")
    assert how_far(1.0, 4.0, "x") == how_far(2.0, 4.0, "x") == how_far(3.0, 4.0, "x")
    close = "x is close, but a little too large: is it rounded? Use the unrounded value, not printed digits."
    assert how_far(4.001, 4.0, "x") == close
    assert how_far(49_856, 49_984, "x") == "x is a little too small; count again."
    assert how_far(-4.0, 4.0, "x") == "x has the right magnitude, but the wrong sign."
    assert how_far(-8.0, 4.0, "x") == f"x has the wrong sign; {again}."
    assert how_far(-1.0, -2.0, "x") == f"x has the right sign, but its magnitude is too small; {again}."
    assert how_far(0.0, 4.0, "x").startswith("x is 0, but the answer is not")
    assert how_far(4 * 2**30, 4.0, "x") == "x is far too large: check the units."


def test_compare_without_answer_names_the_wrong_entry_but_not_its_value():
    def clean(value):
        return normalise(value, Number("x") if np.ndim(value) == 0 else EXERCISES["2.1"].expects)

    assert compare_without_answer(clean([1.0, 2.0]), clean([1.0, 2.0 + 1e-9]), "x") is None
    again = "work it through again"  # issue 52: which way, never how far
    assert compare_without_answer(clean([1.0, 2.0, 4.0]), clean([1.0, 2.0, 3.0]), "x") == (
        f"one of the 3 entries in x is wrong: the one at index 2 is too large; {again}."
    )
    assert compare_without_answer(clean([[1.0, 1.0]]), clean([[2.0, 2.0]]), "x") == (
        f"all 2 entries in x are wrong; the first wrong one, at index (0, 0), is too small; {again}."
    )
    assert compare_without_answer(clean([7.0]), clean([7.5]), "x") == f"the one number in x is too small; {again}."
    assert compare_without_answer(clean(7.0), clean(7.5), "x") == f"x is too small; {again}."
    assert "should have shape (3,)" in compare_without_answer(clean([1.0, 2.0]), clean([1.0, 2.0, 3.0]), "x")


# The common mistakes issue 23 names ------------------------------------------------------------


def test_the_primers_exercise_2_names_whole_columns_picked_by_colon_targets():
    def whole_columns(logits, targets):
        return -logits.log_softmax(dim=-1)[:, targets].mean()

    def whole_columns_not_averaged(logits, targets):
        return -logits.log_softmax(dim=-1)[:, targets]

    for function in (whole_columns, whole_columns_not_averaged):
        reply = not_yet("P.2", function)
        assert "[:, targets] picks a whole column for every target" in reply
        assert "log_probabilities[torch.arange(N), targets]" in reply


def test_exercise_9_2_names_a_mask_inverted_by_tilde():
    right = torch.ones(4, 10, dtype=torch.bool).tril(diagonal=6)
    for inverted in (~right, (~right).int(), ~right.numpy()):
        reply = not_yet("10.2", inverted)
        assert "True and False swapped" in reply and "True = may attend: drop the ~" in reply


@pytest.mark.parametrize(
    ("diagonal", "words"),
    [(5, "each new query misses its own key, so the diagonal is one too low"),
     (7, "each new query also sees the token after it, so the diagonal is one too high")],
)
def test_exercise_9_2_names_a_diagonal_off_by_one(diagonal, words):
    assert words in not_yet("10.2", torch.ones(4, 10, dtype=torch.bool).tril(diagonal=diagonal))


def test_exercise_10_3_names_positions_counted_from_1():
    tokens = single_repeat_sequence()[0].tolist()
    counted_from_1 = tokens[EARLIER + 1 - 1]  # "the token after position 7", read as the 8th token
    reply = not_yet("11.3", counted_from_1)
    assert "positions count from 0, as printed above the tokens, and counted from 1" in reply
    assert "one too far" in not_yet("11.3", tokens[EARLIER + 2])
    assert "if it is a position counted from 1" in not_yet("11.3", EARLIER + 2)
    assert "find the earlier position that holds the same token as position 22" in not_yet("11.3", 39)
    for wrong in (counted_from_1, tokens[EARLIER + 2], EARLIER + 2, 39):
        assert not shows_value(not_yet("11.3", wrong), tokens[EARLIER + 1]), wrong
    assert tokens[LATER] == counted_from_1, "the sequence this test assumes"


def test_exercise_8_3_names_a_forgotten_layernorm_shift():
    embed = 64
    reply = not_yet("9.2", 12 * embed**2 + 13 * embed - 2 * embed)
    assert "each LayerNorm's scale but not its shift" in reply


def test_exercise_8_3_names_a_forgotten_out_proj():
    embed = 64
    reply = not_yet("9.2", 12 * embed**2 + 13 * embed - (embed**2 + embed))
    assert "you left out the output projection, out_proj" in reply and "four projections, not three" in reply


# Issue 30: array answers are covered too, and every named mistake is planted ---------------------------

ARRAY_EXERCISES = [
    exercise_id for exercise_id in exercise_ids()
    if isinstance(EXERCISES[exercise_id].expects, Array) and EXERCISES[exercise_id].expects.kind != "mask"
]
ARRAY_FUNCTIONS = [
    exercise_id for exercise_id in exercise_ids()
    if isinstance(EXERCISES[exercise_id].expects, Function) and EXERCISES[exercise_id].expects.returns.kind == "float"
]


def telling_entries(values):
    """The entries of an expected array a reply could give away: not small whole numbers, which sentences use
    for other things ("index 2", "one of its 3 entries")."""
    flat = np.asarray(values, dtype=float).ravel()[:50]
    return [value for value in flat if not (float(value).is_integer() and abs(value) < 10)]


def test_the_array_sweep_covers_the_array_exercises():
    assert {"1.1", "1.2", "2.1", "2.3", "3.2", "4.2", "4.3", "12.1"} <= set(ARRAY_EXERCISES)
    assert {"1.3", "3.1", "4.1", "10.3", "P.1", "P.2"} <= set(ARRAY_FUNCTIONS) | {"1.3", "P.2"}


@pytest.mark.parametrize("exercise_id", ARRAY_EXERCISES)
def test_a_wrong_array_is_not_told_the_answer(exercise_id):
    found = EXERCISES[exercise_id]
    expected = normalise(found.solution(), found.expects).astype(float)
    one_off = expected.copy()
    one_off.flat[-1] = one_off.flat[-1] * 0.93 + 0.01
    for wrong in (expected * 1.1 + 0.01, expected * 0.5 + 0.01, one_off, -expected - 1, expected[::-1] + 0.2):
        reply = not_yet(exercise_id, wrong)
        for value in telling_entries(expected):
            assert not shows_value(reply, value), f"{exercise_id} gives an entry away for {wrong}: {reply}"


@pytest.mark.parametrize("exercise_id", ARRAY_FUNCTIONS)
def test_a_wrong_array_from_a_function_is_not_told_the_answer(exercise_id):
    found = EXERCISES[exercise_id]
    solution = found.solution()

    def scaled(*arguments):
        output = solution(*arguments)
        return 1.1 * (output.detach().double() if isinstance(output, torch.Tensor) else np.asarray(output)) + 0.01

    reply = not_yet(exercise_id, scaled)
    for _, arguments in found.expects.calls():
        output = solution(*arguments)
        values = output.detach().numpy() if isinstance(output, torch.Tensor) else output
        for value in telling_entries(values):
            assert not shows_value(reply, value), f"{exercise_id} gives an entry away: {reply}"


@pytest.mark.parametrize("exercise_id", [i for i in NUMBER_EXERCISES + ARRAY_EXERCISES if i not in ("11.1",)])
def test_a_value_rounded_as_printed_is_told_it_looks_rounded(exercise_id):
    """One rule (welcome page): a value rounded to 2 decimals is Correct or told it looks rounded, never more."""
    found = EXERCISES[exercise_id]
    expected = normalise(found.solution(), found.expects)
    if getattr(found.expects, "kind", "") == "whole" or np.array_equal(expected, np.round(expected)):
        return
    rounded = np.round(expected, 2)
    reply = verdict(exercise_id, rounded if rounded.ndim else float(rounded))
    assert reply.startswith("Correct") or "looks rounded (to " in reply, f"{exercise_id}: {reply}"


def _fruit(name):
    from attn.course import fruit

    return getattr(fruit, name)


def test_exercise_3_1_names_dividing_by_the_number_of_keys_and_the_fruits_d_k():
    reply = not_yet("3.1", lambda query, keys: keys @ query / np.sqrt(len(keys)))
    assert "square root of the number of keys, T_k" in reply
    assert "keys.shape[1]" in not_yet("3.1", lambda query, keys: keys @ query / np.sqrt(3))
    # the fruit table alone could not tell them apart: on it, both agree with the answer
    keys, query = _fruit("KEYS"), np.array([0.1, 0.9, 0.2])
    assert np.allclose(keys @ query / np.sqrt(len(keys)), keys @ query / np.sqrt(keys.shape[1]))
    assert verdict("3.1", lambda query, keys: keys @ query / np.sqrt(keys.shape[1])).startswith("Correct")


def test_exercise_4_1_names_subtracting_the_minimum_and_calling_a_helper():
    from attn.softmax import softmax

    reply = not_yet("4.1", lambda scores: np.exp(scores - scores.min()) / np.exp(scores - scores.min()).sum())
    assert "wide spread" in reply and "subtracting the smallest score" in reply
    assert "Correct" not in reply

    def calls_softmax(scores):
        return softmax(scores)

    assert "calls softmax" in not_yet("4.1", calls_softmax)


def test_exercise_6_1_names_heads_and_head_size_swapped():
    assert "swapped the number of heads and the head size" in not_yet("6.1", (2, 16, 10, 4))


def test_exercise_12_3_names_nan_after_an_all_masked_first_block_and_a_swapped_return():
    def without_shift(row_max, row_sum, block):  # the solution published before issue 30
        new_max = max(row_max, block.max())
        return new_max, row_sum * math.exp(row_max - new_max) + np.exp(block - new_max).sum()

    reply = not_yet("12.3", without_shift)
    assert "all-masked" in reply and "shift" in reply

    def swapped(row_max, row_sum, block):
        from attn.course.exercises.lesson12 import update_statistics

        return update_statistics(row_max, row_sum, block)[::-1]

    assert "the other way round" in not_yet("12.3", swapped)


def test_exercise_5_1_names_the_inverted_mask():
    from attn import causal_mask

    assert "True and False swapped" in not_yet("5.1", ~causal_mask(4))


def test_exercise_4_2_names_the_output_and_weights_pair():
    from attn.attention import scaled_dot_product_attention

    pair = scaled_dot_product_attention(np.array([[0.1, 0.9, 0.2]]), _fruit("KEYS"), _fruit("VALUES"))
    reply = not_yet("4.2", pair)
    assert "(output, weights)" in reply and "(2, 1, 3)" not in reply


def test_exercise_7_2_refuses_a_function_that_asks_the_trained_model():
    from attn.models.recall import RecallModel

    model = RecallModel()

    def by_the_model(keys, values, query):
        with torch.no_grad():
            return model(keys, values, query)[0].argmax(dim=-1)

    assert "far beyond the trained model's 16" in not_yet("7.2", by_the_model)


def test_the_hints_that_named_the_wrong_mistake_now_name_the_right_one():
    from attn.course.exercises.lesson06 import _tflops

    assert "values to get" in not_yet("2.3", np.array([0.0, 0.0, 1.0])) and "VALUES" not in not_yet("2.3", [0, 0, 1.0])
    assert "keys.T" in not_yet("3.2", np.zeros((3, 2))) and "KEYS" not in not_yet("3.2", np.zeros((3, 2)))
    assert "too small" in how_far(_tflops() / 16, _tflops(), "x")  # issue 52: no factor (16 would be the heads)


def test_no_hint_or_success_answers_its_own_question():
    assert "2**2 * 1**2" not in " ".join(not_yet("3.3", wrong) for wrong in (2.0, 1.0, 128.0, 64.0))
    assert "10" not in EXERCISES["1.2"].success and "above" not in EXERCISES["1.2"].success


def test_exercise_1_1_says_why_a_blend_that_prices_banana_is_not_it():
    for blend in ([0.5, 0.0, 0.5], [1 / 3, 1 / 3, 1 / 3]):  # (9 + 3) / 2 = 6, and the mean of 9, 6, 3 is 6
        reply = not_yet("1.1", blend)
        assert "do give banana's price" in reply and "one-hot" in reply


def test_values_rounded_as_lessons_4_and_7_print_them_are_told_so():
    from attn.course import fruit
    from attn.softmax import softmax

    cold = softmax(fruit.KEYS @ fruit.QUERY / np.sqrt(3) / 0.5)
    assert "looks rounded (to 3 decimals)" in not_yet("4.3", cold.round(3))  # lesson 4 prints .round(3)
    assert "looks rounded (to 2 decimals)" in not_yet("7.1", 0.06)


def test_the_welcome_page_states_the_rounding_rule_the_checks_apply():
    from pathlib import Path

    welcome = (Path(__file__).resolve().parents[2] / "book" / "welcome.md").read_text()
    reply = not_yet("2.2", 0.33)
    assert "looks rounded" in reply and "use the unrounded value" in reply
    assert "looks rounded: use the unrounded value" in welcome and "never shows the expected value" in welcome
