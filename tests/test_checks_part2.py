"""The self-checks of lessons 8, 9 and 10 accept the right answers and name the common mistakes.

The sweep of wrong kinds of answer over every registered exercise is in test_exercises_hostile.py.
"""

import numpy as np
import torch

from attn import KVCache, MultiHeadAttention, TransformerBlock, apply_rotary
from attn.exercises import lesson10, verdict
from attn.exercises.lesson08 import rotary_score
from attn.exercises.lesson09 import decode_with_cache
from attn.exercises.lesson10 import single_repeat_sequence
from attn.induction import load_trained, make_repeat_data
from tests.notebooks import ROOT, code_cells, load
from tests.verdicts import correct, not_yet


def test_the_lessons_q_and_k_are_the_checks_q_and_k():
    source = "".join(next(cell["source"] for cell in code_cells(load(ROOT / "lessons" / "08_order_and_blocks.ipynb"))
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
    assert "expected" in not_yet("8.1", rotary_score(20, 2))


def test_cross_attention_weights_shape():
    queries, keys = torch.randn(2, 3, 16), torch.randn(2, 11, 16)
    with torch.no_grad():
        _, weights = MultiHeadAttention(16, 4)(queries, keys, keys, need_weights=True)
    assert "(2, 4, 3, 11)" in correct("8.2", tuple(weights.shape))
    assert "rows are queries" in not_yet("8.2", (2, 4, 11, 3))
    assert "leaves out the heads" in not_yet("8.2", (2, 3, 11))
    assert "shape of the output" in not_yet("8.2", (2, 3, 16))
    assert "not square" in not_yet("8.2", (2, 4, 11, 11))


def test_block_parameters():
    count = sum(p.numel() for p in TransformerBlock(64, 8).parameters())
    assert count == 12 * 64**2 + 13 * 64 == 49_984
    assert "49,984" in correct("8.3", count)
    assert "weight matrices only" in not_yet("8.3", 12 * 64**2)
    assert "two LayerNorms" in not_yet("8.3", count - 4 * 64)
    assert "attention layer alone" in not_yet("8.3", 4 * 64**2 + 4 * 64)
    assert "leaves out the attention layer" in not_yet("8.3", count - 4 * 64**2 - 4 * 64)


def test_cache_size():
    gib = 2 * 24 * 4 * 128 * 32_768 * 2 / 2**30
    assert gib == 1.5 and "1.5 GiB" in correct("9.1", gib)
    assert "all 16 query heads" in not_yet("9.1", gib * 4)
    assert "keys alone" in not_yet("9.1", gib / 2)
    assert "float32" in not_yet("9.1", gib * 2)
    assert "in bytes" in not_yet("9.1", gib * 2**30)
    assert "in GB" in not_yet("9.1", gib * 2**30 / 1e9)
    assert "in MiB" in not_yet("9.1", gib * 1024)


def test_step_mask():
    right = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=4)
    correct("9.2", right)
    correct("9.2", right.numpy())
    assert "top-left" in not_yet("9.2", torch.ones(3, 7, dtype=torch.bool).tril())
    assert "(3, 7)" in not_yet("9.2", torch.ones(7, 7, dtype=torch.bool).tril())
    assert "two tokens after it" in not_yet("9.2", torch.ones(3, 7, dtype=torch.bool))
    assert "dtype=bool" in not_yet("9.2", right.int())
    one_off = right.clone()
    one_off[0, 5] = True  # new query 0 (position 4) would see position 5
    assert "differs in one of its 21 entries" in not_yet("9.2", one_off)


def test_decoding_by_hand():
    assert "every row of the full causal pass" in correct("9.3", decode_with_cache)

    def without_cache(layer, x):
        return torch.cat([layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True) for t in range(x.shape[1])], dim=1)

    def whole_sequence(layer, x):
        return layer(x, x, x)

    def last_step_only(layer, x):
        cache = KVCache()
        for t in range(x.shape[1]):
            output = layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], is_causal=True, cache=cache)
        return output

    def full_causal_pass(layer, x):  # not decoding, but the same numbers: accepted
        return layer(x, x, x, is_causal=True)

    assert "one KVCache before the loop" in not_yet("9.3", without_cache)
    assert "later ones too" in not_yet("9.3", whole_sequence)
    assert "last step only" in not_yet("9.3", last_step_only)
    correct("9.3", full_causal_pass)
    assert "decoding function" in not_yet("9.3", None)
    assert "raised TypeError" in not_yet("9.3", lambda layer: layer)


def test_checks_leave_the_learners_random_numbers_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for exercise_id, answer in (("8.2", (2, 4, 3, 11)), ("8.3", 49_984), ("9.3", decode_with_cache), ("8.1", 0.0)):
        verdict(exercise_id, answer)
    assert torch.equal(torch.rand(3), expected)


LESSON_10 = ROOT / "lessons" / "10_induction_heads.ipynb"


def test_lesson_10_exercise_sequences_are_the_ones_the_checks_describe():
    data = make_repeat_data(1, seed=lesson10.SEQUENCE_SEED)
    start, length = data.block_start.item(), data.block_length.item()
    assert length == lesson10.BLOCK_LENGTH
    assert start + length < lesson10.QUERY < start + 2 * length, "exercise 10.1's query is in the second copy"
    single = single_repeat_sequence()[0].tolist()
    assert len(single) == 32 and len(set(single)) == 31
    assert single[lesson10.LATER] == single[lesson10.EARLIER]
    markdown = "".join("".join(cell["source"]) for cell in load(LESSON_10)["cells"] if cell["cell_type"] == "markdown")
    assert f"make_repeat_data(1, seed={lesson10.SEQUENCE_SEED})" in markdown
    assert f"take the query at position {lesson10.QUERY}" in markdown
    assert f"the token at position {lesson10.LATER} is the same as the one at position {lesson10.EARLIER}" in markdown


def test_the_shipped_model_does_what_the_lesson_10_answers_say():
    model = load_trained(ROOT / "lessons" / "models", 2)
    tokens = make_repeat_data(1, seed=lesson10.SEQUENCE_SEED).tokens  # (1, T)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)
        logits = model(single_repeat_sequence())
    strongest = [weights[0][0, 0, lesson10.QUERY].argmax().item(), weights[1][0, 1, lesson10.QUERY].argmax().item()]
    correct("10.1", strongest)
    correct("10.3", logits[0, lesson10.LATER].argmax().item())
    assert "falls to near 0" in correct("10.2", 3)


def test_where_the_two_heads_look():
    tokens = make_repeat_data(1, seed=lesson10.SEQUENCE_SEED).tokens[0].tolist()
    correct("10.1", [20, 14])
    correct("10.1", np.array([20, 14]))
    assert "other way round" in not_yet("10.1", [14, 20])
    assert "tokens at the two positions" in not_yet("10.1", [tokens[20], tokens[14]])
    assert "the query itself" in not_yet("10.1", [21, 14])
    assert "duplicate-token head" in not_yet("10.1", [20, 13])
    assert "causal mask hides it" in not_yet("10.1", [20, 25])
    assert "take the position after it" in not_yet("10.1", [20, 16])
    assert "just before the query" in not_yet("10.1", [19, 14])
    assert "two positions in a list" in not_yet("10.1", [20])
    assert "two positions in a list" in not_yet("10.1", 20)


def test_the_induction_head_without_its_partner():
    assert "own weights are unchanged" in correct("10.2", 3)
    assert "untouched" in not_yet("10.2", 1)
    assert "only head that writes" in not_yet("10.2", 2)
    assert "1, 2 or 3" in not_yet("10.2", 4)
    assert "1, 2 or 3" in not_yet("10.2", 0)
    correct("10.2", 3.0)
    not_yet("10.2", 2.5)


def test_a_single_earlier_occurrence():
    tokens = single_repeat_sequence()[0].tolist()
    correct("10.3", tokens[lesson10.EARLIER + 1])
    assert "current token itself" in not_yet("10.3", tokens[lesson10.LATER])
    assert "came before the earlier occurrence" in not_yet("10.3", tokens[lesson10.EARLIER - 1])
    assert "just before the query" in not_yet("10.3", tokens[lesson10.LATER - 1])
    assert "cannot see" in not_yet("10.3", tokens[lesson10.LATER + 1])
    assert "position of the answer" in not_yet("10.3", lesson10.EARLIER + 1)
    assert "between 0 and 63" in not_yet("10.3", 64)
    assert "between 0 and 63" in not_yet("10.3", -1)
