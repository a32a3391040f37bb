"""The self-checks of lessons 8 and 9 accept the right answers and name the common mistakes.

The sweep of wrong kinds of answer over every registered exercise is in test_exercises_hostile.py.
"""

import numpy as np
import torch

from attn import KVCache, MultiHeadAttention, TransformerBlock, apply_rotary
from attn.exercises import verdict
from attn.exercises.lesson08 import rotary_score
from attn.exercises.lesson09 import decode_with_cache
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
