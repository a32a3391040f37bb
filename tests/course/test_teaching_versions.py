"""The lessons' teaching versions (loops, then vectors) agree with the attn package."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attn import scaled_dot_product_attention, softmax
from attn.course import fruit
from tests.notebooks import ROOT, teaching_namespace

vectors = arrays(np.float64, 4, elements=st.floats(-10, 10))


@pytest.fixture(scope="module")
def lesson2():
    return teaching_namespace(ROOT / "lessons" / "02_matching_vectors.ipynb")


@pytest.fixture(scope="module")
def lesson3():
    return teaching_namespace(ROOT / "lessons" / "03_scaled_dot_products.ipynb")


@pytest.fixture(scope="module")
def lesson4():
    return teaching_namespace(ROOT / "lessons" / "04_softmax_first_output.ipynb")


def test_dot_product_loop(lesson2):
    rng = np.random.default_rng(0)
    keys, query = rng.standard_normal((6, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(lesson2["match_scores_loop"](query, keys), keys @ query)


def test_score_matrix_loop_and_vectorised(lesson3):
    rng = np.random.default_rng(1)
    queries, keys = rng.standard_normal((5, 8)), rng.standard_normal((7, 8))
    looped = lesson3["score_matrix_loop"](queries, keys)
    np.testing.assert_allclose(looped, lesson3["score_matrix"](queries, keys))
    _, weights = scaled_dot_product_attention(queries, keys, np.eye(7))
    np.testing.assert_allclose(softmax(looped), weights)


@given(vectors)
def test_softmax_versions_agree(lesson4, scores):
    np.testing.assert_allclose(lesson4["softmax_loop"](scores), softmax(scores), rtol=1e-10)
    np.testing.assert_allclose(lesson4["softmax_stable"](scores), softmax(scores), rtol=1e-10)


def test_one_query_loop_matches_package(lesson4):
    output, weights = lesson4["attend_one_query_loop"](fruit.QUERY, fruit.KEYS, fruit.VALUES)
    expected_output, expected_weights = scaled_dot_product_attention(fruit.QUERY[None], fruit.KEYS, fruit.VALUES)
    np.testing.assert_allclose(output, expected_output[0])
    np.testing.assert_allclose(weights, expected_weights[0])


def test_self_attention_steps_match_package_and_torch():
    import torch
    from torch.nn import functional

    steps = teaching_namespace(ROOT / "lessons" / "05_attention_matrix.ipynb")["self_attention_steps"]
    rng = np.random.default_rng(3)
    x, w_query, w_key, w_value = rng.standard_normal((7, 8)), *rng.standard_normal((3, 8, 4))
    output, weights = steps(x, w_query, w_key, w_value)
    expected, expected_weights = scaled_dot_product_attention(x @ w_query, x @ w_key, x @ w_value)
    np.testing.assert_allclose(output, expected)
    np.testing.assert_allclose(weights, expected_weights)
    tensors = [torch.from_numpy(array) for array in (x @ w_query, x @ w_key, x @ w_value)]
    np.testing.assert_allclose(output, functional.scaled_dot_product_attention(*tensors).numpy(), atol=1e-12)
