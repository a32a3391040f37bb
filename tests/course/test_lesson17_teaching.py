"""Lesson 17's teaching versions (the frequency loops written out in the lesson) equal attn.positions.rotary_frequencies."""

import numpy as np
import pytest

from attn.positions import ntk_aware_base, rotary_frequencies
from tests.notebooks import ROOT, teaching_namespace

TRAINED = (64, 256, 4096)
FACTORS = (1.5, 2.0, 4.0, 8.0, 40.0)


@pytest.fixture(scope="module")
def lesson17():
    return teaching_namespace(ROOT / "lessons" / "17_attention_at_length.ipynb")


def same(loop, package):
    np.testing.assert_allclose(np.array(loop), package, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dim", [4, 8, 32, 64, 128])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_the_loops_equal_the_package(lesson17, dim, base):
    for factor in FACTORS:
        same(lesson17["plain_frequencies"](dim, base), rotary_frequencies(dim, base))
        same(lesson17["interpolated_frequencies"](dim, base, factor),
             rotary_frequencies(dim, base, {"rope_type": "linear", "factor": factor}))
        same(lesson17["ntk_frequencies"](dim, base, factor), rotary_frequencies(dim, ntk_aware_base(dim, base, factor)))
        for trained in TRAINED:
            scaled = {"factor": factor, "original_max_position_embeddings": trained}
            same(lesson17["yarn_frequencies"](dim, base, factor, trained),
                 rotary_frequencies(dim, base, {"rope_type": "yarn", **scaled}))
            same(lesson17["llama3_frequencies"](dim, base, factor, trained),
                 rotary_frequencies(dim, base, {"rope_type": "llama3", **scaled, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0}))
            for length in (1, trained - 1, trained, trained + 1, 3 * trained, int(factor * trained) + 7):
                same(lesson17["dynamic_ntk_frequencies"](dim, base, factor, trained, length),
                     rotary_frequencies(dim, base, {"rope_type": "dynamic", **scaled}, length))


def test_yarn_loop_with_other_bounds(lesson17):
    """The loop's beta_fast and beta_slow arguments are the dict's, DeepSeek's 16 and 2 included."""
    for fast, slow in ((32, 1), (16, 2), (64, 0.5)):
        scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": fast,
                   "beta_slow": slow}
        same(lesson17["yarn_frequencies"](64, 10000.0, 4.0, 256, fast, slow), rotary_frequencies(64, 10000.0, scaling))
