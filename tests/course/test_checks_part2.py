"""The self-checks of lessons 8 to 11 accept the right answers and name the common mistakes.

The sweep of wrong kinds of answer over every registered exercise is in test_exercises_hostile.py.
"""

import math

import numpy as np
import pytest
import torch

from attn import KVCache, TransformerBlock, apply_rotary
from attn.course.exercises import lesson11, verdict
from attn.course.exercises.lesson08 import rotary_score
from attn.course.exercises.lesson10 import decode_with_cache
from attn.course.exercises.lesson11 import single_repeat_sequence
from attn.models.induction import load_trained, make_repeat_data
from tests.notebooks import ROOT, code_cells, load
from tests.verdicts import correct, not_yet


def test_the_lessons_q_and_k_are_the_checks_q_and_k():
    source = "".join(next(cell["source"] for cell in code_cells(load(ROOT / "lessons" / "08_order.ipynb"))
                          if "def rotary_score" in "".join(cell["source"])))
    namespace = {"torch": torch, "apply_rotary": apply_rotary, "print": lambda *arguments, **options: None}
    exec(source, namespace)  # noqa: S102 - the lesson's own cell
    assert namespace["rotary_score"](20, 17) == rotary_score(20, 17)


def test_rotary_prediction():
    assert rotary_score(20, 17) == rotary_score(5, 2) or np.isclose(rotary_score(20, 17), rotary_score(5, 2), rtol=1e-12)
    assert "3 apart" in correct("8.1", rotary_score(5, 2))
    generator = torch.Generator().manual_seed(8)
    q, k = torch.randn(2, 1, 8, dtype=torch.float64, generator=generator)
    assert "without the rotation" in not_yet("8.1", (q @ k.T).item())
    assert "distance -3" in not_yet("8.1", rotary_score(17, 20))
    # Changed by issue 23: the score is not printed; the reply says what is wrong with it in words (issue 52: no measure).
    assert "has the wrong sign; work it through again" in not_yet("8.1", rotary_score(20, 2))
    assert "too large; work it through again" in not_yet("8.1", 1.1 * rotary_score(5, 2))
    assert "is it rounded? Use the unrounded value" in not_yet("8.1", 0.9256)  # cut, not rounded
    assert "looks rounded (to 3 decimals)" in not_yet("8.1", round(rotary_score(5, 2), 3))


def test_sinusoidal_period():
    period = 2 * math.pi * 1000  # pair 12 of E = 32: 2 pi * 10000^(24/32)
    assert "6,283.2 positions" in correct("8.2", period)
    assert "6,283.2" in correct("8.2", 6283.2)  # within 1 part in 100,000
    assert "looks rounded (to 4 significant digits)" in not_yet("8.2", 6283)
    assert "a whole turn is 2 pi radians" in not_yet("8.2", 1000)
    assert "i = 12 in the exponent" in not_yet("8.2", 2 * math.pi * 10000 ** (12 / 32))
    assert "already the feature index" in not_yet("8.2", 2 * math.pi * 10000 ** (48 / 32))
    assert "you used E = 16" in not_yet("8.2", 2 * math.pi * 10000 ** (24 / 16))  # issue 30: the lesson's E
    assert "angle the pair turns per position" in not_yet("8.2", 0.001)
    assert "a frequency" in not_yet("8.2", 1 / period)
    assert "divides 2 pi by" in not_yet("8.2", 2 * math.pi / 1000)
    for wrong in (7000, 5000, 62.8, 35_333):
        reply = not_yet("8.2", wrong)
        assert "6,28" not in reply and "6283" not in reply, "the check never tells the value"
    for hostile in (None, "6283", [6283, 1], float("nan"), torch.tensor([6283.0], requires_grad=True)):
        verdict("8.2", hostile)  # a sentence, never a traceback (a tensor of one number may be right)


def test_layer_norm_by_hand():
    token = torch.tensor([1.0, 2.0, 3.0, 6.0])
    with torch.no_grad():
        expected = torch.nn.LayerNorm(4)(token)[-1].item()
    assert "variance (14 / 4" in correct("9.1", expected)
    assert "variance (14 / 4" in correct("9.1", 1.60357), "6 significant digits are enough"
    assert "looks rounded" in not_yet("9.1", 1.6036)  # issue 30: 5 digits look rounded, as the welcome page says
    assert "variance (14 / 4" in correct("9.1", 3 / 3.5**0.5), "eps may be left out by hand"
    assert "n - 1 = 3" in not_yet("9.1", 3 / (14 / 3) ** 0.5)  # torch.var's default
    assert "subtract the mean from it first" in not_yet("9.1", 6 / 3.5**0.5)
    assert "without subtracting the mean" in not_yet("9.1", 6 / 12.5**0.5)  # the root of the mean of the squares
    assert "its square root" in not_yet("9.1", 3 / 3.5)
    assert "did not divide by the standard deviation" in not_yet("9.1", 3.0)
    assert "the first entry's value" in not_yet("9.1", -2 / 3.5**0.5)
    assert "too large; work it through again" in not_yet("9.1", 1.7)
    for wrong in (1.7, 1.5, 3 / (14 / 3) ** 0.5, -expected, 1.6):
        assert "1.60" not in not_yet("9.1", wrong), "the check never tells the value"


def test_block_parameters():
    count = sum(p.numel() for p in TransformerBlock(64, 8).parameters())
    assert count == 12 * 64**2 + 13 * 64 == 49_984
    assert "49,984" in correct("9.2", count)
    assert "weight matrices only" in not_yet("9.2", 12 * 64**2)
    assert "two LayerNorms" in not_yet("9.2", count - 4 * 64)
    assert "attention layer alone" in not_yet("9.2", 4 * 64**2 + 4 * 64)
    assert "leaves out the attention layer" in not_yet("9.2", count - 4 * 64**2 - 4 * 64)


def test_cache_size():
    gib = 2 * 24 * 4 * 128 * 32_768 * 2 / 2**30
    assert gib == 1.5 and "1.5 GiB" in correct("10.1", gib)
    assert "all 16 query heads" in not_yet("10.1", gib * 4)
    assert "keys alone" in not_yet("10.1", gib / 2)
    assert "float32" in not_yet("10.1", gib * 2)
    assert "in bytes" in not_yet("10.1", gib * 2**30)
    assert "in GB" in not_yet("10.1", gib * 2**30 / 1e9)
    assert "in MiB" in not_yet("10.1", gib * 1024)


def test_step_mask():
    # Changed by issue 30: 4 new tokens after 6 cached, not the (3, 7) the lesson builds and prints above.
    right = torch.ones(4, 10, dtype=torch.bool).tril(diagonal=6)
    correct("10.2", right)
    correct("10.2", right.numpy())
    assert "top-left" in not_yet("10.2", torch.ones(4, 10, dtype=torch.bool).tril())
    assert "T_q = 4 queries" in not_yet("10.2", torch.ones(10, 10, dtype=torch.bool).tril())
    assert "the lesson" not in not_yet("10.2", torch.ones(3, 7, dtype=torch.bool).tril(diagonal=4))
    assert "3 tokens after it" in not_yet("10.2", torch.ones(4, 10, dtype=torch.bool))
    assert "dtype=bool" in not_yet("10.2", right.int())
    one_off = right.clone()
    one_off[0, 7] = True  # new query 0 (position 6) would see position 7
    assert "one of the 40 entries in your mask is wrong" in not_yet("10.2", one_off)
    assert "is the wrong way round" in not_yet("10.2", one_off)


def test_decoding_by_hand():
    assert "every row of the full causal pass" in correct("10.3", decode_with_cache)

    def without_cache(layer, x):
        return torch.cat([layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True) for t in range(x.shape[1])], dim=1)

    def whole_sequence(layer, x):
        return layer(x, x, x)

    def last_step_only(layer, x):
        cache = KVCache()
        for t in range(x.shape[1]):
            output = layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True, cache=cache)
        return output

    assert "one KVCache before the loop" in not_yet("10.3", without_cache)
    assert "later ones too" in not_yet("10.3", whole_sequence)
    assert "last step only" in not_yet("10.3", last_step_only)
    assert "decoding function" in not_yet("10.3", None)
    assert "raised TypeError" in not_yet("10.3", lambda layer: layer)


def test_decoding_by_hand_must_decode_as_the_exercise_asks():
    """The right numbers are not enough: T calls of one token each, all through one KVCache made inside the function."""

    def full_causal_pass(layer, x):
        return layer(x, x, x, is_causal=True)

    def growing_prefix(layer, x):  # re-feeds the whole prefix at every step, keeping the last row
        return torch.cat([layer(x[:, :t + 1], x[:, :t + 1], x[:, :t + 1], is_causal=True)[:, -1:] for t in range(x.shape[1])], 1)

    def warm_up_first(layer, x):  # one extra call with a cache of its own, then the right loop
        layer(x[:, :1], x[:, :1], x[:, :1], cache=KVCache())
        return decode_with_cache(layer, x)

    def prefill_then_steps(layer, x):
        cache = KVCache()
        first = layer(x[:, :2], x[:, :2], x[:, :2], is_causal=True, cache=cache)
        rest = [layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True, cache=cache) for t in range(2, x.shape[1])]
        return torch.cat([first, *rest], dim=1)

    outside = KVCache()

    def cache_made_outside(layer, x):
        outputs = [layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True, cache=outside) for t in range(x.shape[1])]
        return torch.cat(outputs, dim=1)

    def positional_cache(layer, x):  # the cache passed as the eighth positional argument of forward: allowed
        cache = KVCache()
        outputs = [layer.forward(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], None, None, True, False, cache) for t in range(6)]
        return torch.cat(outputs, dim=1)

    without = "called without a cache; the exercise asks for 6 calls of one token each"
    assert without in not_yet("10.3", full_causal_pass)
    assert without in not_yet("10.3", growing_prefix)
    assert "your calls used 2 different caches" in not_yet("10.3", warm_up_first)
    assert "your calls fed 2, 1, 1, 1, 1 tokens" in not_yet("10.3", prefill_then_steps)
    assert "already held 6 positions when your function started" in not_yet("10.3", cache_made_outside)
    assert "already held" in not_yet("10.3", cache_made_outside), "a second check of the same function: still the hint"
    correct("10.3", positional_cache)


def test_checks_leave_the_learners_random_numbers_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for exercise_id, answer in (("9.1", 1.6), ("9.2", 49_984), ("10.3", decode_with_cache), ("8.1", 0.0)):
        verdict(exercise_id, answer)
    assert torch.equal(torch.rand(3), expected)


LESSON_11 = ROOT / "lessons" / "11_induction_heads.ipynb"


def test_lesson_11_exercise_sequences_are_the_ones_the_checks_describe():
    data = make_repeat_data(1, seed=lesson11.SEQUENCE_SEED)
    start, length = data.block_start.item(), data.block_length.item()
    assert length == lesson11.BLOCK_LENGTH
    assert start + length < lesson11.QUERY < start + 2 * length, "exercise 11.1's query is in the second copy"
    single = single_repeat_sequence()[0].tolist()
    assert len(single) == 32 and len(set(single)) == 31
    assert single[lesson11.LATER] == single[lesson11.EARLIER]
    markdown = "".join("".join(cell["source"]) for cell in load(LESSON_11)["cells"] if cell["cell_type"] == "markdown")
    assert f"make_repeat_data(1, seed={lesson11.SEQUENCE_SEED})" in markdown
    assert f"take the query at position {lesson11.QUERY}" in markdown
    assert f"the token at position {lesson11.LATER} is the same as the one at position {lesson11.EARLIER}" in markdown


def test_the_shipped_model_does_what_the_lesson_11_answers_say():
    model = load_trained(ROOT / "lessons" / "weights", 2)
    tokens = make_repeat_data(1, seed=lesson11.SEQUENCE_SEED).tokens  # (1, T)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)
        logits = model(single_repeat_sequence())
    strongest = [weights[0][0, 0, lesson11.QUERY].argmax().item(), weights[1][0, 1, lesson11.QUERY].argmax().item()]
    correct("11.1", strongest)
    correct("11.3", logits[0, lesson11.LATER].argmax().item())
    assert "falls to near 0" in correct("11.2", 3)


def test_where_the_two_heads_look():
    tokens = make_repeat_data(1, seed=lesson11.SEQUENCE_SEED).tokens[0].tolist()
    correct("11.1", [20, 14])
    correct("11.1", np.array([20, 14]))
    assert "other way round" in not_yet("11.1", [14, 20])
    assert "tokens at the two positions" in not_yet("11.1", [tokens[20], tokens[14]])
    assert "the query itself" in not_yet("11.1", [21, 14])
    assert "duplicate-token head" in not_yet("11.1", [20, 13])
    assert "causal mask hides it" in not_yet("11.1", [20, 25])
    assert "take the position after it" in not_yet("11.1", [20, 16])
    assert "just before the query" in not_yet("11.1", [19, 14])
    assert "two positions in a list" in not_yet("11.1", [20])
    assert "two positions in a list" in not_yet("11.1", 20)


def test_the_induction_head_without_its_partner():
    assert "own weights are unchanged" in correct("11.2", 3)
    assert "untouched" in not_yet("11.2", 1)
    assert "only head that writes" in not_yet("11.2", 2)
    assert "1, 2 or 3" in not_yet("11.2", 4)
    assert "1, 2 or 3" in not_yet("11.2", 0)
    correct("11.2", 3.0)
    not_yet("11.2", 2.5)


def test_a_single_earlier_occurrence():
    tokens = single_repeat_sequence()[0].tolist()
    correct("11.3", tokens[lesson11.EARLIER + 1])
    assert "repeated token itself" in not_yet("11.3", tokens[lesson11.LATER])
    assert "came before the earlier occurrence" in not_yet("11.3", tokens[lesson11.EARLIER - 1])
    assert "just before the query" in not_yet("11.3", tokens[lesson11.LATER - 1])
    assert "cannot see" in not_yet("11.3", tokens[lesson11.LATER + 1])
    assert "position of the answer" in not_yet("11.3", lesson11.EARLIER + 1)
    assert "between 0 and 63" in not_yet("11.3", 64)
    assert "between 0 and 63" in not_yet("11.3", -1)


@pytest.fixture
def fresh_measurement():
    """Exercise 11.2's measurement is cached: start and end each test without it."""
    lesson11._induction_score_without_previous_token_head.cache_clear()
    yield
    lesson11._induction_score_without_previous_token_head.cache_clear()


@pytest.mark.usefixtures("fresh_measurement")
def test_a_lesson_11_check_without_the_models_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(lesson11, "MODEL_FOLDERS", (tmp_path / "models",))
    monkeypatch.chdir(tmp_path)
    line = not_yet("11.2", 3)
    assert "induction_2layer.pt" in line and str(tmp_path / "models") in line
    assert "python -m attn.models.induction --out lessons/weights" in line
    assert "nothing yet" in not_yet("11.2", ...), "the learner's answer is read first"


@pytest.mark.usefixtures("fresh_measurement")
def test_a_lesson_11_check_names_a_damaged_model(monkeypatch, tmp_path):
    (tmp_path / "induction_2layer.pt").write_bytes(b"not a model")
    monkeypatch.setattr(lesson11, "MODEL_FOLDERS", (tmp_path,))
    line = not_yet("11.2", 3)
    assert "cannot be loaded" in line and "not a weights file" in line and "weights_only" not in line


@pytest.mark.usefixtures("fresh_measurement")
def test_an_installed_package_finds_the_models_from_the_lessons_folder(monkeypatch, tmp_path):
    """Installed (not editable), the package has no lessons/ beside it: the check looks under the current folder."""
    beside_the_package = tmp_path / "site-packages" / "lessons" / "weights"
    monkeypatch.setattr(lesson11, "MODEL_FOLDERS", (beside_the_package, *lesson11.MODEL_FOLDERS[1:]))
    monkeypatch.chdir(ROOT / "lessons")  # where the lesson runs: models/ is right there
    correct("11.2", 3)
    lesson11._induction_score_without_previous_token_head.cache_clear()
    monkeypatch.chdir(ROOT)  # from the course's folder: lessons/records/
    correct("11.2", 3)
