"""The exercises' self-checks say in words what is wrong, and say Correct only when it is right.

Each exercise's right answer and common mistakes; every case reported in issue 10; the
normaliser that cleans every answer (attn.course.exercises.answers). The hostile-answer sweep over
every registered exercise is in test_exercises_hostile.py.
"""

import contextlib
import io
import subprocess
import sys

import numpy as np
import pytest
import torch

from attn import check
from attn.course import fruit
from attn.course.exercises import EXERCISES, exercise_ids, verdict
from attn.course.exercises.answers import AnswerError, Array, Function, Number, Shape, normalise
from attn.course.exercises.judging import compare, how_far
from attn.course.exercises.lesson02 import DURABLE_QUERY
from attn.course.exercises.lesson07 import hard_recall
from tests.notebooks import ROOT, code_cells, load, tags
from tests.verdicts import correct, not_yet

AGAIN = "work it through again"  # what a miss is told, with no measure of it (issue 52)


def printed(capsys, exercise_id, answer):
    check(exercise_id, answer)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.endswith("\n"), f"one line, got {out!r}"
    return out


PRICES = dict(fruit.PRICES)


# The register ------------------------------------------------------------------------------


def test_every_lesson_registers_its_exercises_in_order():
    # exercises per lesson
    counts = {**dict.fromkeys(range(1, 8), 3), 8: 2, 9: 2, 10: 3, 11: 3, 12: 4, 13: 3, 14: 4, 15: 3, 16: 4, 17: 4, 18: 3}
    counts.update({19: 3, 20: 3, 21: 4, 22: 4, 23: 4})
    lessons = [f"{lesson}.{number}" for lesson, count in counts.items() for number in range(1, count + 1)]
    primer = ["P.1", "P.2", "P.3", "P.4"]  # the PyTorch primer, read between lessons 5 and 6
    assert exercise_ids() == lessons[:15] + primer + lessons[15:]
    assert set(EXERCISES) == set(exercise_ids())


def test_import_attn_does_not_import_torch():
    code = "import sys, attn; attn.check('1.1', [0, 1, 0]); assert 'torch' not in sys.modules, 'torch was imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Correct:")


def test_unknown_exercise_prints_the_known_ones(capsys):
    # Changed by issue 10: an unknown id used to raise ValueError; now it is a sentence like any other verdict.
    out = printed(capsys, "10.9", None)
    assert out.startswith("Not yet: there is no exercise '10.9'; the exercises are 1.1, 1.2, 1.3, 2.1")
    assert out.endswith(f"{exercise_ids()[-1]}.\n")


@pytest.mark.parametrize("exercise_id", [1.1, 2.3, 11, None, ["1.1"], {"1.1": 1}, b"1.1", True])
def test_ids_of_the_wrong_kind_get_a_sentence(capsys, exercise_id):
    out = printed(capsys, exercise_id, [0.0, 1.0, 0.0])
    assert out.startswith("Not yet: ")


def test_a_number_as_id_is_told_to_use_quotes():
    assert 'write check("1.1", your_answer), with quotes' in not_yet(1.1, [0.0, 1.0, 0.0])


def test_id_with_spaces_and_missing_answer():
    assert correct(" 1.1 ", [0, 1, 0])
    assert "nothing yet for your weight vector" in not_yet("1.1", ...)
    assert verdict("1.1") == verdict("1.1", ...)


# Each exercise: the right answer and the common mistakes ----------------------------------


def test_one_hot_check(capsys):
    assert printed(capsys, "1.1", np.array([0.0, 1.0, 0.0])).startswith("Correct")
    assert "pick 'apple'" in printed(capsys, "1.1", np.array([1.0, 0.0, 0.0]))
    assert "shape" in printed(capsys, "1.1", np.array([0.0, 1.0]))


def test_weights_for_a_price_check(capsys):
    assert printed(capsys, "1.2", [1 / 3, 0.0, 2 / 3]).startswith("Correct")
    assert "the price; give the weights" in printed(capsys, "1.2", 5.0)
    assert "looks rounded (to 2 decimals)" in printed(capsys, "1.2", [0.33, 0.0, 0.67])
    assert "looks rounded (to 4 decimals)" in printed(capsys, "1.2", [0.3333, 0.0, 0.6667])
    assert "price 4.9998, not quite 5" in printed(capsys, "1.2", [0.3333, 0.0, 0.6667 - 1e-9])
    assert "wrong way round" in printed(capsys, "1.2", [2 / 3, 0.0, 1 / 3])
    assert "sum to 0.5556, not 1" in printed(capsys, "1.2", [5 / 9, 0.0, 0.0])
    assert "something on banana" in printed(capsys, "1.2", [0.0, 1 / 3, 2 / 3])
    assert "negative" in printed(capsys, "1.2", [-1.0, 0.0, 2.0])
    assert "price 6, not 5" in printed(capsys, "1.2", [0.5, 0.0, 0.5])


def test_lookup_function_check(capsys):
    from attn.course.exercises.lesson01 import weighted_lookup

    assert printed(capsys, "1.3", weighted_lookup).startswith("Correct")
    assert "returned 0" in printed(capsys, "1.3", lambda name: PRICES.get(name, 0))
    assert "no brackets" in printed(capsys, "1.3", 9)
    # Changed by issue 30: no check shows the expected value ("expected 9" used to say the price).
    wrong_price = printed(capsys, "1.3", lambda name: 1)
    # Changed by issue 52: nor a factor, which is the price itself to an answer of 1.
    assert "the price your lookup gives for 'apple' is too small; work it through again" in wrong_price
    assert "9" not in wrong_price and "factor" not in wrong_price
    # Changed by issue 10: the dictionary's own lookup used to be Correct; the exercise asks for one-hot weights.
    assert "dictionary's own lookup" in printed(capsys, "1.3", PRICES.__getitem__)


def test_lesson_2_to_4_checks_accept_the_right_answer_and_name_common_mistakes(capsys):
    from attn import softmax

    scores = fruit.KEYS @ DURABLE_QUERY
    assert printed(capsys, "2.1", scores).startswith("Correct")
    assert "scaled by 1/sqrt(3)" in printed(capsys, "2.1", scores / np.sqrt(3))
    banana = fruit.KEYS[1]
    cosine = banana @ DURABLE_QUERY / (np.linalg.norm(banana) * np.linalg.norm(DURABLE_QUERY))
    assert printed(capsys, "2.2", cosine).startswith("Correct")
    assert "plain dot product" in printed(capsys, "2.2", banana @ DURABLE_QUERY)
    slip = banana @ DURABLE_QUERY / np.linalg.norm(banana) * np.linalg.norm(DURABLE_QUERY)  # issue 30: precedence
    assert "a @ b / (x * y)" in printed(capsys, "2.2", slip)
    assert "looks rounded (to 2 decimals)" in printed(capsys, "2.2", 0.33)  # the value the Correct message quotes
    fruit_cosine = banana @ fruit.QUERY / (np.linalg.norm(banana) * np.linalg.norm(fruit.QUERY))
    assert "the fruit query's cosine with banana" in printed(capsys, "2.2", fruit_cosine)
    assert "one-hot weight vector" in printed(capsys, "2.3", np.array([0.0, 0.0, 1.0]))
    assert printed(capsys, "2.3", fruit.VALUES[2]).startswith("Correct")
    assert "unscaled" in printed(capsys, "3.1", lambda query, keys: keys @ query)
    assert "square root" in printed(capsys, "3.1", lambda query, keys: keys @ query / keys.shape[1])
    assert "pass your scaled_scores function itself" in printed(capsys, "3.1", scores / np.sqrt(3))
    assert "(3, 2)" in printed(capsys, "3.2", np.zeros((3, 2)))
    assert printed(capsys, "3.2", np.stack([fruit.QUERY, DURABLE_QUERY]) @ fruit.KEYS.T / np.sqrt(3)).startswith("Correct")
    assert "overflows" in printed(capsys, "4.1", lambda scores: np.exp(scores) / np.exp(scores).sum())
    assert "divide them by their sum" in printed(capsys, "4.1", lambda scores: np.exp(scores - scores.max()))
    assert "not scaled" in printed(capsys, "4.2", softmax(scores) @ fruit.VALUES)
    fruit_scores = fruit.KEYS @ fruit.QUERY / np.sqrt(3)
    assert "weights at temperature 2" in printed(capsys, "4.3", softmax(fruit_scores * 0.5))
    assert "weights at temperature 2" in printed(capsys, "4.3", softmax(fruit_scores / 2))  # issue 30
    assert "you multiplied by the temperature" not in printed(capsys, "4.3", softmax(fruit_scores / 2))
    assert printed(capsys, "4.3", softmax(fruit_scores / 0.5)).startswith("Correct")


def test_predicted_variance_check_names_the_common_mistakes(capsys):
    assert printed(capsys, "3.3", 4).startswith("Correct")
    assert printed(capsys, "3.3", 128 / 32).startswith("Correct")
    assert "looks like a standard deviation, not a variance" in printed(capsys, "3.3", 2.0)
    assert "unit-variance entries" in printed(capsys, "3.3", 1.0)
    assert "variance of the unscaled q . k; dividing" in printed(capsys, "3.3", 128.0)
    assert "standard deviation of the unscaled" in printed(capsys, "3.3", np.sqrt(128))
    assert "divided the variance by sqrt(d_k)" in printed(capsys, "3.3", 128 / np.sqrt(32))
    assert "where its variance belongs, and left the score unscaled" in printed(capsys, "3.3", 64.0)
    assert "as a measurement would be" in printed(capsys, "3.3", 3.93)
    assert "cannot be negative" in printed(capsys, "3.3", -4.0)
    # Changed by issue 23: a wrong prediction used to be told "expected 4"; by issue 52 not how far off it is either.
    assert "your predicted variance is too large; work it through again" in printed(capsys, "3.3", 5.0)
    assert "your predicted variance is too small; work it through again" in printed(capsys, "3.3", 1.0 / 1.01)


def test_the_predicted_variance_is_what_random_vectors_give():
    from attn.course.exercises.lesson03 import TRIAL_D_K, TRIAL_KEY_STD, TRIAL_QUERY_STD, scaled_score_variance

    rng = np.random.default_rng(0)
    queries = TRIAL_QUERY_STD * rng.standard_normal((200_000, TRIAL_D_K))
    keys = TRIAL_KEY_STD * rng.standard_normal((200_000, TRIAL_D_K))
    scaled_scores = np.einsum("nd,nd->n", queries, keys) / np.sqrt(TRIAL_D_K)
    predicted = scaled_score_variance(TRIAL_D_K, TRIAL_QUERY_STD, TRIAL_KEY_STD)
    assert scaled_scores.var() == pytest.approx(predicted, rel=0.02)


def test_lesson_5_checks(capsys):
    from attn import causal_mask, padding_mask

    assert printed(capsys, "5.1", causal_mask(4)).startswith("Correct")
    assert "future" in printed(capsys, "5.1", causal_mask(4).T)
    assert "dtype=bool" in printed(capsys, "5.1", causal_mask(4).astype(int))
    keep = padding_mask([2, 4], 4)[:, 0, :]
    assert printed(capsys, "5.2", ~keep).startswith("Correct")
    assert "True = blocked" in printed(capsys, "5.2", keep)
    assert "drop the middle axis" in printed(capsys, "5.2", ~padding_mask([2, 4], 4))
    assert printed(capsys, "5.3", 4.0).startswith("Correct")
    assert "float64" in printed(capsys, "5.3", 8.0)
    assert "bytes" in printed(capsys, "5.3", 32768**2 * 4)
    assert "GB (10**9 bytes)" in printed(capsys, "5.3", 32768**2 * 4 / 1e9)


def test_lesson_6_checks(capsys):
    assert printed(capsys, "6.1", (2, 4, 10, 16)).startswith("Correct")
    assert printed(capsys, "6.1", torch.Size([2, 4, 10, 16])).startswith("Correct")
    assert "before transpose" in printed(capsys, "6.1", (2, 10, 4, 16))
    assert "swapped the number of heads and the head size" in printed(capsys, "6.1", (2, 16, 10, 4))  # issue 30
    assert "d = E / H" in printed(capsys, "6.1", (2, 4, 10, 64))
    assert "tuple" in printed(capsys, "6.1", 5)
    assert printed(capsys, "6.2", 1_050_624).startswith("Correct")
    assert "biases" in printed(capsys, "6.2", 4 * 512 * 512)
    expected = 4 * 4 * 16 * 4096**2 * 64 / 0.002 / 1e12
    assert printed(capsys, "6.3", expected).startswith("Correct")
    assert "divide by 1e12" in printed(capsys, "6.3", expected * 1e12)
    assert "4 in total" in printed(capsys, "6.3", expected / 2)
    # Issue 30: each named mistake, and a value rounded as the lesson prints it.
    assert "you left out the heads" in printed(capsys, "6.3", expected / 16)
    assert "T appears squared" in printed(capsys, "6.3", expected / 4096)
    assert "looks rounded" in printed(capsys, "6.3", round(expected, 1))
    assert how_far(expected / 16, expected, "x") == f"x is too small; {AGAIN}."  # issue 52: no factor


def test_lesson_7_checks(capsys):
    assert printed(capsys, "7.1", 1 / 16).startswith("Correct")
    assert "number of values" in printed(capsys, "7.1", 16)
    assert "percentage" in printed(capsys, "7.1", 6.25)

    def exact(keys, values, query):
        return ((keys == query[:, None]).long() * values).sum(dim=1)

    assert printed(capsys, "7.2", exact).startswith("Correct")
    assert printed(capsys, "7.2", lambda keys, values, query: exact(keys, values, query).float()).startswith("Correct")
    assert printed(capsys, "7.2", lambda keys, values, query: exact(keys, values, query).tolist()).startswith("Correct")
    assert "lookups are wrong" in printed(capsys, "7.2", lambda keys, values, query: values[:, 0])
    assert "shape" in printed(capsys, "7.2", lambda keys, values, query: values)
    assert "keys it looked up" in printed(capsys, "7.2", lambda keys, values, query: query)
    assert printed(capsys, "7.3", 5776).startswith("Correct")  # 8 heads: the same count as 1
    assert "share the four projections" in printed(capsys, "7.3", 5776 + 7 * 4224)
    assert "multiplies the whole model by 8" in printed(capsys, "7.3", 8 * 5776)
    assert "one head's slice" in printed(capsys, "7.3", 5776 - 4224 + 4 * (32 * 4 + 4))
    assert "attention layer alone" in printed(capsys, "7.3", 4224)
    assert "readout" in printed(capsys, "7.3", 5776 - 528)


def test_lesson_7_count_does_not_depend_on_the_heads():
    from attn.models.recall import RecallModel

    counts = {sum(p.numel() for p in RecallModel(num_heads=heads).parameters()) for heads in (1, 2, 4, 8, 16, 32)}
    assert counts == {EXERCISES["7.3"].solution()} == {5776}


def test_primer_checks(capsys):
    from torch.nn import functional

    assert printed(capsys, "P.1", lambda x, weight, bias: x @ weight.T + bias).startswith("Correct")
    in_float64 = printed(capsys, "P.1", lambda x, weight, bias: functional.linear(x.double(), weight.double(), bias.double()))
    assert in_float64.startswith("Correct")
    assert printed(capsys, "P.1", lambda x, weight, bias: (x @ weight.T + bias).tolist()).startswith("Correct")
    assert "x @ weight.T" in printed(capsys, "P.1", lambda x, weight, bias: x @ weight + bias)
    assert "bias is missing" in printed(capsys, "P.1", lambda x, weight, bias: x @ weight.T)
    assert "(N, out)" in printed(capsys, "P.1", lambda x, weight, bias: (x @ weight.T + bias).T)
    twice_the_bias = printed(capsys, "P.1", lambda x, weight, bias: x @ weight.T + 2 * bias)
    assert "entries in what your function returned are wrong" in twice_the_bias
    assert "raised RuntimeError" in printed(capsys, "P.1", lambda x, weight, bias: weight @ x)

    def by_hand(logits, targets):
        return -logits.log_softmax(dim=-1)[torch.arange(len(targets)), targets].mean()

    assert printed(capsys, "P.2", by_hand).startswith("Correct")
    assert printed(capsys, "P.2", lambda logits, targets: by_hand(logits, targets).item()).startswith("Correct")
    # Changed by issue 30: the log of a softmax (or of exp over its sum) fails on logits in the hundreds.
    log_of_softmax = printed(
        capsys, "P.2", lambda logits, targets: -torch.log(torch.softmax(logits, dim=1)[range(len(targets)), targets]).mean()
    )
    assert "torch.log_softmax" in log_of_softmax
    unstable = printed(
        capsys,
        "P.2",
        lambda logits, targets: -torch.log(
            (logits.exp() / logits.exp().sum(-1, keepdim=True))[range(len(targets)), targets]
        ).mean(),
    )
    assert "torch.log_softmax" in unstable
    assert "minus sign" in printed(capsys, "P.2", lambda logits, targets: -by_hand(logits, targets))
    assert "sum over the examples" in printed(capsys, "P.2", lambda logits, targets: by_hand(logits, targets) * len(targets))
    assert "dim=-1" in printed(capsys, "P.2", lambda logits, targets: -logits.log_softmax(0)[range(len(targets)), targets].mean())
    assert "probability itself" in printed(
        capsys, "P.2", lambda logits, targets: -logits.softmax(-1)[range(len(targets)), targets].mean()
    )
    assert "every class" in printed(capsys, "P.2", lambda logits, targets: -logits.log_softmax(-1).mean())
    assert "log_softmax over the classes first" in printed(
        capsys, "P.2", lambda logits, targets: -logits[range(len(targets)), targets].mean()
    )
    assert ".mean()" in printed(capsys, "P.2", lambda logits, targets: -logits.log_softmax(-1)[range(len(targets)), targets])
    # Changed by issue 23: the loss is not printed; by issue 52 the reply says which way it is off, not how far.
    softmax_twice = printed(capsys, "P.2", lambda logits, targets: functional.cross_entropy(logits.softmax(-1), targets))
    assert "called with logits (4, 5) and targets (4,), the loss your function returned is too small" in softmax_twice
    assert "%" not in softmax_twice and "factor" not in softmax_twice


def test_cross_entropy_by_hand_must_not_call_cross_entropy(capsys):
    """Exercise P.2 says "without calling it": PyTorch's cross-entropy, by any of its names, is refused."""
    from torch.nn import functional
    from torch.nn.functional import cross_entropy as imported_alias

    def by_loss_module(logits, targets):
        return torch.nn.CrossEntropyLoss()(logits, targets)

    for name, function in {
        "functional.cross_entropy": functional.cross_entropy,
        "a wrapper": lambda logits, targets: functional.cross_entropy(logits, targets),
        "an imported alias": lambda logits, targets: imported_alias(logits, targets),
        "nn.CrossEntropyLoss": by_loss_module,
    }.items():
        line = printed(capsys, "P.2", function)
        assert line.startswith("Not yet") and "calls functional.cross_entropy" in line, f"{name}: {line}"
    assert functional.cross_entropy is imported_alias, "the watch is undone after the check"
    by_nll_loss = printed(capsys, "P.2", lambda logits, targets: functional.nll_loss(logits.log_softmax(-1), targets))
    assert by_nll_loss.startswith("Correct"), by_nll_loss


def test_primer_stack_shape_is_predicted_without_being_told(capsys):
    """P.3 (predict-first): cat's shapes and stack along another dim are named; the shape is never printed."""
    assert printed(capsys, "P.3", (2, 3, 5)).startswith("Correct")
    assert printed(capsys, "P.3", torch.Size([2, 3, 5])).startswith("Correct")
    assert printed(capsys, "P.3", [2, 3, 5]).startswith("Correct")
    for concatenated in ((2, 15), (6, 5)):
        assert "torch.cat would give" in printed(capsys, "P.3", concatenated)
    for other_dim in ((3, 2, 5), (2, 5, 3)):
        assert "stack along another dim" in printed(capsys, "P.3", other_dim)
    assert "adds one more" in printed(capsys, "P.3", (2, 3, 5, 1))
    for wrong in ((2, 15), (6, 5), (3, 2, 5), (2, 5, 3), (2, 3, 4), (3, 5), (2, 3, 5, 1)):
        reply = printed(capsys, "P.3", wrong)
        assert reply.startswith("Not yet") and "(2, 3, 5)" not in reply, reply
        assert "2, 3, 5" not in reply, reply


def test_primer_stack_shape_survives_hostile_answers(capsys):
    hostile = [
        (None, "nothing yet"),
        (..., "nothing yet"),
        ("(2, 3, 5)", "is the text"),
        ((2, 3.5, 5), "whole"),
        ((2, float("nan"), 5), "NaN"),
        (((2, 3), (5,)), "ragged"),
        (torch.zeros(2, 3, 5), "give its .shape"),
        (torch.zeros(2, 3, 5, requires_grad=True), "give its .shape"),
        (np.zeros((2, 3, 5)), "give its .shape"),
        (lambda: (2, 3, 5), "is a function"),
        (True, "Not yet"),
        ({"shape": (2, 3, 5)}, "dictionary"),
    ]
    for answer, words in hostile:
        reply = printed(capsys, "P.3", answer)
        assert reply.startswith("Not yet") and words in reply, f"{answer!r}: {reply}"
        assert "Traceback" not in reply


def _causal_keep_mask(real):
    length = real.shape[1]
    return torch.ones(length, length, dtype=torch.bool).tril() & real[:, None, :]


def test_primer_causal_mask_names_each_common_mistake(capsys):
    """P.4: an inverted mask, a diagonal off by one either way, triu, and padding on the wrong axis are named."""

    def triangle(real, diagonal=0):
        return torch.ones(real.shape[1], real.shape[1], dtype=torch.bool).tril(diagonal)

    assert printed(capsys, "P.4", _causal_keep_mask).startswith("Correct")
    assert printed(capsys, "P.4", lambda real: _causal_keep_mask(real).numpy()).startswith("Correct")
    assert printed(capsys, "P.4", lambda real: _causal_keep_mask(real).tolist()).startswith("Correct")
    mistakes = {
        "True and False swapped": lambda real: ~_causal_keep_mask(real),
        "nn.MultiheadAttention": lambda real: ~triangle(real) | ~real[:, None, :],  # PyTorch's convention
        "one too high": lambda real: triangle(real, 1) & real[:, None, :],
        "one too low": lambda real: triangle(real, -1) & real[:, None, :],
        "torch.triu keeps the upper": lambda real: triangle(real).T & real[:, None, :],
        "the padding is missing": lambda real: triangle(real).expand(len(real), -1, -1),
        "instead of the padded keys": lambda real: triangle(real) & real[:, :, None],
        "also hides the padded queries": lambda real: triangle(real) & real[:, :, None] & real[:, None, :],
        "the causal part is missing": lambda real: real[:, None, :].expand(-1, real.shape[1], -1),
        "padding is at the end, but not": lambda real: triangle(real)
        & (torch.arange(real.shape[1]) < real.sum(dim=1, keepdim=True))[:, None, :],
        "one (T, T) mask for the whole batch": triangle,
        "want dtype=bool": lambda real: _causal_keep_mask(real).float(),
        "holds 0 and -inf": lambda real: torch.zeros(len(real), real.shape[1], real.shape[1]).masked_fill(
            ~_causal_keep_mask(real), float("-inf")
        ),
    }
    for words, function in mistakes.items():
        reply = printed(capsys, "P.4", function)
        assert reply.startswith("Not yet") and words in reply, f"{words}: {reply}"


def test_primer_causal_mask_survives_hostile_answers(capsys):
    def changes_its_argument(real):
        real.fill_(True)  # the check's inputs are fresh for every call, so this spoils only this answer
        return _causal_keep_mask(real)

    hostile = {
        "nothing yet": None,
        "function itself": _causal_keep_mask(torch.ones(2, 5, dtype=torch.bool)),
        "raised ZeroDivisionError": lambda real: 1 / 0,
        "returned None": lambda real: None,
        "is the text": lambda real: "mask",
        "contains NaN": lambda real: _causal_keep_mask(real).float() * float("nan"),
        "ragged": lambda real: [[True, False], [True]],
        "the padding is missing": changes_its_argument,
        "want dtype=bool": lambda real: _causal_keep_mask(real).float().requires_grad_(),
        "should be (B, T, T)": lambda real: _causal_keep_mask(real)[:, :, :-1],
        "called sys.exit()": lambda real: sys.exit(1),
    }
    for words, answer in hostile.items():
        reply = printed(capsys, "P.4", answer)
        assert reply.startswith("Not yet") and words in reply, f"{words}: {reply}"
    assert printed(capsys, "P.4", _causal_keep_mask).startswith("Correct"), "a changed argument spoils nothing later"


def test_checks_survive_answers_of_the_wrong_kind(capsys):
    for exercise_id in ("2.2", "4.1", "5.3", "P.1", "P.2", "P.3", "P.4", "6.2", "6.3", "7.3"):
        assert printed(capsys, exercise_id, "not a number").startswith("Not yet")


# Every case reported in issue 10, each on its own ------------------------------------------


def test_issue_text_as_an_answer():
    assert "is the text 'banana', but it should be an array of numbers" in not_yet("1.1", "banana")


def test_issue_ellipsis_inside_a_shape():
    assert "your shape still has a ... in it" in not_yet("6.1", (2, 8, 10, ...))


def test_issue_list_of_ellipses():
    assert "your score vector still has a ... in it" in not_yet("2.1", [..., ..., ...])


@pytest.mark.parametrize("exercise_id", ["1.1", "1.2", "2.1", "2.2", "3.2", "5.1", "5.2", "6.1", "6.2", "7.1"])
def test_issue_ragged_lists(exercise_id):
    line = not_yet(exercise_id, [[1.0, 0.0], [1.0]])
    assert "ragged" in line


def test_issue_lookup_returning_text():
    line = not_yet("1.3", lambda name: "nine")
    assert "what your function returned when called with 'apple' is the text 'nine', but it should be one number" in line


def test_issue_lookup_returning_a_list_or_a_dict():
    assert "an array holding one number" in not_yet("1.3", lambda name: [PRICES[name]])
    assert "is a dictionary" in not_yet("1.3", lambda name: {name: PRICES[name]})


@pytest.mark.parametrize("exercise_id", ["1.1", "2.1", "3.2", "4.2"])
def test_issue_tensors_that_require_grad_are_read(exercise_id):
    right = np.asarray(EXERCISES[exercise_id].solution(), dtype=float)
    assert correct(exercise_id, torch.tensor(right, requires_grad=True))
    assert not_yet(exercise_id, torch.tensor(right + 1, requires_grad=True))


def test_issue_numeric_text_is_not_a_number():
    assert "is the text '7.5', not the number 7.5: give the number itself, not text" in not_yet("3.3", "7.5")


def test_issue_shape_with_fractions_is_not_truncated():
    assert "your shape should hold whole numbers, but it has 10.9" in not_yet("6.1", (2, 8, 10.9, 8.7))


def test_issue_recall_outputs_that_truncate_to_the_answer():
    line = not_yet("7.2", lambda keys, values, query: hard_recall(keys, values, query) + 0.9)
    assert "should hold whole numbers" in line


def test_issue_dictionary_lookup_is_not_weights():
    assert "check cannot find the key_array and values" in not_yet("1.3", lambda query: PRICES[query])


def lesson_1_namespace():
    """Run lesson 1's code cells before its exercises, as a learner's notebook would have them."""
    namespace = {}
    notebook = load(ROOT / "lessons" / "01_lookup_table.ipynb")
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "## Exercises" in source:
            break
        if cell["cell_type"] != "code" or "raises-exception" in tags(cell) or "plt" in source:
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, "lesson01", "exec"), namespace)  # noqa: S102
    return namespace


def test_issue_dictionary_lookup_in_the_lesson_notebook():
    namespace = lesson_1_namespace()
    exec("def dictionary_lookup(query):\n    return prices[query]\n", namespace)  # noqa: S102
    exec(  # the notebook's own solution
        next(
            "".join(cell["source"])
            for cell in code_cells(load(ROOT / "lessons" / "01_lookup_table.ipynb"))
            if "def weighted_lookup" in "".join(cell["source"]) and "return ..." not in "".join(cell["source"])
        ).replace('check("1.3", weighted_lookup)', ""),
        namespace,
    )
    line = not_yet("1.3", namespace["dictionary_lookup"])
    assert "not from key_array and values" in line and "pear 4, plum 5, stool 1" in line
    assert "one_hot_weights(query, key_array) @ values" in line
    assert correct("1.3", namespace["weighted_lookup"])
    assert namespace["values"].tolist() == [9.0, 6.0, 3.0] and namespace["key_array"].tolist() == list(fruit.NAMES)


def test_issue_causal_mask_judges_the_numbers_before_the_dtype():
    from attn import causal_mask

    wrong_numbers = not_yet("5.1", np.ones((4, 4)))
    assert "6 of the 16 entries in your mask are wrong" in wrong_numbers and "boolean" not in wrong_numbers
    right_numbers = not_yet("5.1", causal_mask(4).astype(float))
    assert "the pattern is right" in right_numbers and "dtype=bool" in right_numbers


def test_issue_integer_key_padding_mask_is_refused():
    from attn import padding_mask

    line = not_yet("5.2", (~padding_mask([2, 4], 4)[:, 0, :]).astype(int))
    assert "nn.MultiheadAttention refuses" in line and "dtype=bool" in line
    assert "adds a float64 key_padding_mask" in not_yet("5.2", (~padding_mask([2, 4], 4)[:, 0, :]).astype(float))


def test_issue_additive_float_mask_gets_told_booleans_are_expected():
    from attn import causal_mask, padding_mask

    additive = np.where(causal_mask(4), 0.0, -np.inf)
    line = not_yet("5.1", additive)
    assert "additive float mask" in line and "boolean mask (True = may attend)" in line
    assert "finite" not in line
    padding = np.where(padding_mask([2, 4], 4)[:, 0, :], 0.0, -np.inf)
    assert "boolean mask (True = padding, which is blocked)" in not_yet("5.2", padding)


def test_issue_positions_are_told_apart_from_wrong_weights():
    line = not_yet("7.2", lambda keys, values, query: (keys == query[:, None]).long().argmax(dim=1))
    assert "positions" in line and "not values" in line and "weights should be 1" not in line


def test_issue_grammar():
    assert "one of the 3 entries in your score vector is wrong" in not_yet("2.1", fruit.KEYS @ DURABLE_QUERY + [0, 0, 1])
    assert "your predicted variance is too large; work it through again" in not_yet("3.3", 7.0)
    assert "holding one number" in not_yet("3.3", np.array([[7.0]]))
    for exercise_id in exercise_ids():
        for answer in ([0.0], [[0.0]], 0.0, (0,), 123):
            line = verdict(exercise_id, answer)
            assert " 1 of 1 " not in line and "scores differs" not in line and " a int" not in line, line
            # the shared sentences read right whatever the label's number ("your tokens", "your vector")
            assert " differs" not in line and "is not it" not in line and "lesson's formula" not in line, line


def test_one_hot_weights_in_the_package_agree_with_lesson_1():
    from attn.course.exercises import lesson01

    namespace = lesson_1_namespace()
    for query in ("apple", "banana", "chair", "fruit"):
        np.testing.assert_array_equal(
            lesson01.one_hot_weights(query, lesson01.key_array), namespace["one_hot_weights"](query, namespace["key_array"])
        )


def test_the_second_shop_is_always_put_back():
    from attn.course.exercises import lesson01

    before = lesson01.key_array.copy(), lesson01.values.copy()
    for answer in (lesson01.weighted_lookup, lambda query: PRICES[query]):
        verdict("1.3", answer)
    assert lesson01.key_array.tolist() == before[0].tolist() and lesson01.values.tolist() == before[1].tolist()


def test_what_a_learners_function_prints_stays_out_of_the_verdict(capsys):
    from attn.course.exercises.lesson01 import weighted_lookup

    def chatty(name):
        print("looking up", name, "\nsecond line")
        return weighted_lookup(name)

    noisy = type(weighted_lookup)(chatty.__code__, weighted_lookup.__globals__, "chatty", None, chatty.__closure__)
    assert printed(capsys, "1.3", noisy).startswith("Correct")


# The normaliser ---------------------------------------------------------------------------

NUMBER = Number("your number")
COUNT = Number("your count", whole=True)
ARRAY = Array("your array")
MASK = Array("your mask", kind="mask", meaning="True = may attend")
SHAPE = Shape("your shape")


def problem(answer, expects):
    with pytest.raises(AnswerError) as error:
        normalise(answer, expects)
    return str(error.value)


def test_numbers_in_every_form_become_float64_arrays():
    for answer in (7.5, np.float32(7.5), np.array(7.5), torch.tensor(7.5, requires_grad=True), torch.tensor(7.5).bfloat16()):
        clean = normalise(answer, NUMBER)
        assert clean.dtype == np.float64 and clean.shape == () and clean == 7.5
    assert normalise(10**30, NUMBER) == 1e30
    assert normalise([7.5], NUMBER).shape == (1,)  # the shape is left to the check, which names it


def test_counts_must_be_whole():
    assert normalise(5776.0, COUNT).dtype == np.int64
    assert "should be a whole number, but it is 5776.5" in problem(5776.5, COUNT)
    assert "far too large" in problem(1e300, COUNT)


@pytest.mark.parametrize(
    "answer, words",
    [
        (None, "nothing yet for your number: replace the ... with your code."),
        (..., "nothing yet for your number"),
        ("7.5", "is the text '7.5', not the number 7.5"),
        (b"7.5", "is the text '7.5'"),
        ("seven", "is the text 'seven', but it should be one number."),
        (True, "is True, a yes/no value"),
        (np.False_, "is False, a yes/no value"),
        ({"a": 1}, "is a dictionary"),
        ({1, 2}, "is a set"),
        (float("nan"), "is NaN (not a number)"),
        (float("-inf"), "is infinite"),
        (1 + 2j, "is the complex number (1+2j)"),
        (7.5 + 0j, "is the complex number (7.5+0j)"),
        (np.array([]), "is empty (shape (0,))"),
        ([], "is empty"),
        (print, "is a function"),
        (int, "is the class int itself"),
        ((i for i in range(3)), "is a generator"),
        (np.array(["a"]), "holds text"),
        (np.array([1, None], dtype=object), "dtype object"),
        (np.array(["2024-01-01"], dtype="datetime64[D]"), "datetime64"),
        (torch.empty(2, device="meta"), "tensor whose numbers cannot be read"),
    ],
)
def test_answers_that_are_not_numbers_are_named(answer, words):
    assert words in problem(answer, NUMBER)


def test_containers_are_checked_item_by_item():
    assert "has None in it" in problem([1.0, None], ARRAY)
    assert "still has a ... in it" in problem([1.0, ...], ARRAY)
    assert "has the text '2' in it" in problem([1.0, "2"], ARRAY)
    assert "has a dictionary in it" in problem([1.0, {}], ARRAY)
    assert "ragged list: one of its items is of shape (2,) and another of shape (1,)" in problem([[1, 2], [3]], ARRAY)
    assert "one of its items is a single number and another of shape (2,)" in problem([1, [2, 3]], ARRAY)
    assert "mixes True/False values with numbers" in problem([True, 0.0], ARRAY)
    assert "holds True/False values" in problem([True, False], ARRAY)
    assert "convert with .float() on a tensor, .astype(float) on a NumPy array" in problem([True, False], ARRAY)
    assert "contains NaN" in problem([1.0, np.nan], ARRAY)
    assert "contains inf" in problem([1.0, np.inf], ARRAY)
    assert "holds complex numbers, such as (1+1j)" in problem([1 + 1j, 2], ARRAY)
    assert "is empty (shape (2, 0))" in problem([[], []], ARRAY)
    clean = normalise([torch.tensor(1.0, requires_grad=True), np.float32(2.0), 3], ARRAY)
    np.testing.assert_array_equal(clean, [1.0, 2.0, 3.0])


def test_masks_keep_their_dtype_and_must_be_zero_or_one():
    assert normalise([[True, False]], MASK).dtype == bool
    assert normalise(np.eye(2, dtype=int), MASK).dtype == np.int64
    assert normalise(torch.eye(2), MASK).dtype == np.float32
    assert "additive float mask" in problem(np.array([0.0, -np.inf]), MASK)
    assert "holds 0.5, but a mask holds only True and False (True = may attend)" in problem([0.5, 1.0], MASK)
    assert "contains NaN" in problem([np.nan, 1.0], MASK)


def test_shapes():
    assert normalise(torch.Size([2, 8]), SHAPE) == (2, 8)
    assert normalise(np.array([2, 8]), SHAPE) == (2, 8)
    assert normalise([2.0, 8.0], SHAPE) == (2, 8)
    assert normalise((), SHAPE) == ()
    assert "is a single number" in problem(5, SHAPE)
    assert "is nested" in problem(((2, 8), (10, 8)), SHAPE)
    assert "size -2, but sizes are 0 or more" in problem((-2, 8), SHAPE)
    assert "holds True/False values" in problem((True, True), SHAPE)
    assert "should hold whole numbers, but it has 10.9" in problem((2, 8, 10.9, 8.7), SHAPE)
    assert "nothing yet for your shape: replace the ... with a tuple." in problem(..., SHAPE)


def test_functions_are_called_and_their_outputs_cleaned():
    lookup = Function("your lookup", calls=lambda: [("with 'apple'", ("apple",))], returns=Number("the price"))
    assert normalise(lambda name: 9, lookup).outputs[0] == 9.0
    assert "pass your lookup itself (its name, no brackets), not a number." in problem(9, lookup)
    assert "nothing yet for your lookup: replace the ... with your function." in problem(..., lookup)

    def broken(name):
        raise ValueError("line one\nline two")

    assert "called with 'apple', your function raised ValueError: line one." in problem(broken, lookup)
    assert "returned None: does it end with a return statement?" in problem(lambda name: None, lookup)
    assert "what your function returned when called with 'apple' is a function" in problem(lambda name: broken, lookup)
    assert "raised TypeError" in problem(lambda: 9, lookup)


def test_compare_says_how_answers_differ():
    def clean(value, expects=ARRAY):
        return normalise(value, expects)

    assert compare(clean([1.0, 2.0]), clean([1.0, 2.0 + 1e-9]), "x") is None
    # Changed by issue 30: compare never shows the expected value; by issue 52, only which entry and which way.
    assert compare(clean(7.0, NUMBER), clean(7.5, NUMBER), "x") == f"x is too small; {AGAIN}."
    assert compare(clean(0.12, NUMBER), clean(0.123456, NUMBER), "x") == (
        "x looks rounded (to 2 decimals): use the unrounded value, the variable itself or a Python expression, "
        "not digits copied from a printout."
    )
    assert compare(clean([7.0]), clean([7.5]), "x") == f"the one number in x is too small; {AGAIN}."
    assert compare(clean([1.0, 2.0, 4.0]), clean([1.0, 2.0, 3.0]), "x") == (
        f"one of the 3 entries in x is wrong: the one at index 2 is too large; {AGAIN}."
    )
    all_wrong = compare(clean([[1, 1]]), clean([[2, 2]]), "x")
    assert "all 2 entries in x are wrong; the first wrong one, at index (0, 0), is too small" in all_wrong
    assert compare(clean([1.0, 2.0]), clean([1.0, 2.0, 3.0]), "x") == "x has shape (2,), but it should have shape (3,)."
    assert "should be one number, but it is an array of shape (3,)" in compare(clean([1, 2, 3]), clean(1.0, NUMBER), "x")
    assert "should be an array of shape (3,), but it is a single value" in compare(clean(1.0, NUMBER), clean([1, 2, 3]), "x")
    assert compare(clean(1_050_630, COUNT), clean(1_050_624, COUNT), "x") == "x is a little too large; count again."


def test_lists_nested_too_deeply_or_in_themselves_are_named():
    looped = []
    looped.append(looped)
    assert "levels deep" in problem(looped, ARRAY)
    deep = 1.0
    for _ in range(40):
        deep = [deep]
    assert "levels deep" in problem(deep, ARRAY)


def test_checks_leave_the_learners_random_numbers_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    for exercise_id in exercise_ids():
        verdict(exercise_id, EXERCISES[exercise_id].solution())
    assert torch.equal(torch.rand(3), expected)
