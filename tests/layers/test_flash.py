"""Lesson 12's package: the online softmax, tiled attention, its recomputing backward, measured against PyTorch.

Tolerances (largest absolute difference from the reference): float64 1e-12, float32 2e-5, bfloat16
(computed in float32, rounded once at the end) 2e-2 against a float32 reference, float16 2e-3.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional

from attn import softmax
from attn.flash import Tiling, flash_attention, online_softmax, tiled_attention, tiles_read
from attn.masks import causal_keep_mask
from attn.multihead import explicit_attention, fused_attention

TOLERANCE = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


# The online softmax ------------------------------------------------------------------------


@st.composite
def score_rows(draw):
    """(rows, n) scores with some -inf entries, and some rows entirely -inf."""
    rows, length = draw(st.integers(1, 4)), draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**31))
    generator = np.random.default_rng(seed)
    scores = generator.normal(scale=draw(st.sampled_from([1.0, 30.0])), size=(rows, length))
    scores[generator.random((rows, length)) < draw(st.sampled_from([0.0, 0.3, 0.9]))] = -np.inf
    if draw(st.booleans()):
        scores[generator.integers(rows)] = -np.inf
    return scores


@given(scores=score_rows(), block_size=st.integers(1, 40))
def test_online_softmax_equals_the_stable_softmax(scores, block_size):
    """Any block size (dividing the row or not, larger than it or 1), -inf entries, all -inf rows."""
    weights = online_softmax(scores, block_size)
    np.testing.assert_allclose(weights, softmax(scores), rtol=0, atol=1e-12)
    empty = np.isneginf(scores).all(axis=-1)
    assert (weights[empty] == 0).all()
    np.testing.assert_allclose(weights[~empty].sum(axis=-1), 1.0, atol=1e-12)


def test_online_softmax_keeps_float32_and_survives_large_scores():
    scores = np.array([[1000.0, 999.0, -1000.0, 1001.0]], dtype=np.float32)
    weights = online_softmax(scores, 1)
    assert weights.dtype == np.float32
    np.testing.assert_allclose(weights, softmax(scores), atol=1e-6)


# Tiled attention against PyTorch -------------------------------------------------------------


@st.composite
def attention_case(draw):
    """Random shapes and blocks (dividing T or not), causal or not, T_q != T_k, padding with empty rows."""
    batch, heads, head_dim = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 12))
    t_q, t_k = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    query, key, value = (
        torch.randn(batch, heads, length, head_dim, generator=generator, dtype=torch.float64)
        for length in (t_q, t_k, t_k)
    )
    padding = None
    if draw(st.booleans()):
        padding = torch.rand(batch, t_k, generator=generator) < 0.7
        padding[0] = draw(st.booleans()) and padding[0]  # sometimes a sequence that is all padding
    case = {"is_causal": draw(st.booleans()), "key_padding_mask": padding}
    blocks = {"block_q": draw(st.integers(1, 30)), "block_k": draw(st.integers(1, 30))}
    return (query, key, value), case, blocks


def reference(query, key, value, is_causal=False, key_padding_mask=None):
    """The course's explicit path: the weights written out, empty rows zero."""
    keep = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    return explicit_attention(query, key, value, keep_mask=keep, is_causal=is_causal)[0]


def masked_scores(query, key, is_causal=False, key_padding_mask=None):
    """(B, H, T_q, T_k) scores with -inf where a key may not be seen."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    keep = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if is_causal:
        keep = causal_keep_mask(*scores.shape[-2:])[0, 0]
    keep = keep if key_padding_mask is None else keep & key_padding_mask[:, None, None, :]
    return scores.masked_fill(~keep, -math.inf)


@settings(max_examples=120)
@given(attention_case())
def test_tiled_attention_equals_explicit_and_fused(example):
    inputs, case, blocks = example
    output, logsumexp = tiled_attention(*inputs, **case, **blocks)
    expected = reference(*inputs, **case)
    assert output.shape == expected.shape and logsumexp.shape == expected.shape[:3]
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(output, fused_attention(*inputs, **_fused(case, inputs)), rtol=0, atol=1e-12)
    torch.testing.assert_close(logsumexp, torch.logsumexp(masked_scores(*inputs[:2], **case), dim=-1), rtol=0, atol=1e-12)


def _fused(case, inputs):
    """The same masks as arguments of the course's wrapper around scaled_dot_product_attention."""
    padding = case["key_padding_mask"]
    keep = None if padding is None else padding[:, None, None, :]
    return {"keep_mask": keep, "is_causal": case["is_causal"]}


@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_attention_equals_scaled_dot_product_attention_itself(is_causal):
    """PyTorch's own function, called directly (square, so its top-left causal flag is the same triangle)."""
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 3, 50, 16) for _ in range(3))
    output, _ = tiled_attention(query, key, value, is_causal=is_causal, block_q=16, block_k=12)
    expected = functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal)
    torch.testing.assert_close(output, expected, rtol=0, atol=TOLERANCE[torch.float32])


def test_end_aligned_causal_equals_pytorch_lower_right_bias():
    """T_q < T_k: the course's alignment is PyTorch's causal_lower_right, not its is_causal flag."""
    from torch.nn.attention.bias import causal_lower_right

    torch.manual_seed(1)
    query, key, value = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 19, 8), torch.randn(1, 2, 19, 8)
    output, _ = tiled_attention(query, key, value, is_causal=True, block_q=2, block_k=4)
    expected = functional.scaled_dot_product_attention(query, key, value, attn_mask=causal_lower_right(5, 19))
    torch.testing.assert_close(output, expected, rtol=0, atol=TOLERANCE[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tiled_attention_in_lower_precision(dtype):
    torch.manual_seed(2)
    query, key, value = (torch.randn(2, 2, 33, 16) for _ in range(3))
    output, logsumexp = tiled_attention(*(t.to(dtype) for t in (query, key, value)), is_causal=True, block_q=8, block_k=16)
    expected = reference(*(t.to(dtype).double() for t in (query, key, value)), is_causal=True)
    assert output.dtype == dtype and logsumexp.dtype == torch.float32
    torch.testing.assert_close(output.double(), expected, rtol=0, atol=TOLERANCE[dtype])


def test_rows_with_no_allowed_key_give_zero_output_and_minus_infinity():
    query, key, value = torch.randn(1, 1, 6, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    output, logsumexp = tiled_attention(query, key, value, is_causal=True, block_q=2, block_k=2)  # T_q > T_k
    assert (output[0, 0, :3] == 0).all() and torch.isneginf(logsumexp[0, 0, :3]).all()
    assert torch.isfinite(output).all() and torch.isfinite(logsumexp[0, 0, 3:]).all()


@pytest.mark.parametrize(
    ("t_q", "t_k", "block_q", "block_k", "is_causal"),
    [(4096, 4096, 128, 128, True), (100, 100, 16, 16, True), (7, 30, 3, 4, True), (64, 64, 16, 16, False)],
)
def test_tiles_read_counts_what_the_masks_allow(t_q, t_k, block_q, block_k, is_causal):
    """A tile is read exactly when some query in it may see some key in it."""
    keep = causal_keep_mask(t_q, t_k)[0, 0] if is_causal else torch.ones(t_q, t_k, dtype=torch.bool)
    blocks = keep.new_zeros(-(-t_q // block_q), -(-t_k // block_k))
    for i in range(blocks.shape[0]):
        for j in range(blocks.shape[1]):
            blocks[i, j] = keep[i * block_q:(i + 1) * block_q, j * block_k:(j + 1) * block_k].any()
    assert tiles_read(t_q, t_k, block_q, block_k, is_causal) == int(blocks.sum())


# The backward pass ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t_q", "t_k", "is_causal", "padded"),
    [(7, 7, False, False), (7, 7, True, False), (4, 9, True, False), (9, 4, True, False), (6, 8, False, True)],
)
def test_flash_attention_gradients_pass_gradcheck(t_q, t_k, is_causal, padded):
    generator = torch.Generator().manual_seed(t_q * 10 + t_k)
    inputs = [
        torch.randn(2, 1, length, 3, dtype=torch.float64, generator=generator, requires_grad=True)
        for length in (t_q, t_k, t_k)
    ]
    padding = None
    if padded:
        padding = torch.ones(2, t_k, dtype=torch.bool)
        padding[1, t_k // 2:] = False

    def attend(query, key, value):
        return flash_attention(query, key, value, is_causal=is_causal, key_padding_mask=padding, block_q=3, block_k=2)

    assert torch.autograd.gradcheck(attend, inputs)


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_attention_gradients_equal_autograd_of_the_explicit_path_in_float32(is_causal):
    torch.manual_seed(3)
    inputs = [torch.randn(2, 2, 45, 16, requires_grad=True) for _ in range(3)]
    grad_output = torch.randn(2, 2, 45, 16)
    ours = torch.autograd.grad(flash_attention(*inputs, is_causal=is_causal, block_q=16, block_k=8), inputs, grad_output)
    expected = torch.autograd.grad(reference(*inputs, is_causal=is_causal), inputs, grad_output)
    for got, want in zip(ours, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def test_empty_rows_get_zero_gradients():
    inputs = [torch.randn(1, 1, length, 4, requires_grad=True) for length in (5, 2, 2)]
    output = flash_attention(*inputs, is_causal=True, block_q=2, block_k=2)  # queries 0-2 see no key
    output.sum().backward()
    assert (output[0, 0, :3] == 0).all()
    assert all(torch.isfinite(tensor.grad).all() for tensor in inputs)
    assert (inputs[0].grad[0, 0, :3] == 0).all()


# Hostile input -------------------------------------------------------------------------------


def good():
    return [torch.randn(1, 2, 5, 4) for _ in range(3)]


def nan_query():
    query, key, value = good()
    query[0, 0, 0, 0] = math.nan
    return [query, key, value]


BAD_CALLS = {
    "None query": (lambda: [None, *good()[1:]], {}, TypeError, "query must be a torch.Tensor"),
    "text": (lambda: ["abc", *good()[1:]], {}, TypeError, "query must be a torch.Tensor"),
    "ragged list": (lambda: [[[1.0, 2.0], [3.0]], *good()[1:]], {}, TypeError, "query must be a torch.Tensor"),
    "numpy": (lambda: [np.ones((1, 2, 5, 4)), *good()[1:]], {}, TypeError, "torch.as_tensor"),
    "integers": (lambda: [torch.ones(1, 2, 5, 4, dtype=torch.int64), *good()[1:]], {}, TypeError, "floating-point"),
    "complex": (lambda: [torch.ones(1, 2, 5, 4, dtype=torch.complex64), *good()[1:]], {}, TypeError, "floating-point"),
    "rank 3": (lambda: [torch.randn(2, 5, 4), *good()[1:]], {}, ValueError, "(B, H, T, d)"),
    "empty": (lambda: [torch.randn(1, 2, 0, 4), *good()[1:]], {}, ValueError, "no size 0"),
    "d differs": (lambda: [torch.randn(1, 2, 5, 3), *good()[1:]], {}, ValueError, "must agree in B, H and d"),
    "dtype differs": (lambda: [good()[0].double(), *good()[1:]], {}, TypeError, "convert it with key.to(query)"),
    "meta": (lambda: [t.to("meta") for t in good()], {}, ValueError, "meta device"),
    "NaN": (nan_query, {}, ValueError, "query contains NaN or inf"),
    "block 0": (good, {"block_q": 0}, ValueError, "block_q must be positive"),
    "block -3": (good, {"block_k": -3}, ValueError, "block_k must be positive"),
    "block 2.5": (good, {"block_q": 2.5}, TypeError, "block_q must be a positive int"),
    "block True": (good, {"block_k": True}, TypeError, "block_k must be a positive int"),
    "is_causal text": (good, {"is_causal": "yes"}, TypeError, "is_causal must be True or False"),
    "padding shape": (good, {"key_padding_mask": torch.ones(5, dtype=torch.bool)}, ValueError, "(B, T_k) = (1, 5)"),
    "padding int": (good, {"key_padding_mask": torch.ones(1, 5, dtype=torch.int64)}, TypeError, ".bool()"),
}


@pytest.mark.parametrize("function", [tiled_attention, flash_attention], ids=["tiled_attention", "flash_attention"])
@pytest.mark.parametrize("case", BAD_CALLS, ids=list(BAD_CALLS))
def test_bad_input_gets_one_sentence_from_the_package(function, case):
    make_inputs, keywords, error, words = BAD_CALLS[case]
    with pytest.raises(error, match=None) as raised:
        function(*make_inputs(), **keywords)
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)
    assert "attn" in raised.traceback[-1].path.parts, "raised by the package's own checks, not inside PyTorch"


def test_inputs_that_require_grad_are_fine_for_tiled_attention():
    inputs = [tensor.requires_grad_() for tensor in good()]
    output, _ = tiled_attention(*inputs)
    output.sum().backward()
    assert inputs[0].grad is not None


BAD_SOFTMAX = {
    "None": (None, 2, TypeError, "scores must hold numbers"),
    "text": ("abc", 2, TypeError, "scores must hold numbers"),
    "ragged": ([[1.0, 2.0], [3.0]], 2, ValueError, "not a rectangular array"),
    "NaN": ([1.0, math.nan], 2, ValueError, "contains NaN"),
    "+inf": ([1.0, math.inf], 2, ValueError, "contains +inf"),
    "scalar": (3.0, 2, ValueError, "got a scalar"),
    "block 0": ([1.0, 2.0], 0, ValueError, "block_size must be positive"),
    "block 1.5": ([1.0, 2.0], 1.5, TypeError, "block_size must be a positive int"),
    "block None": ([1.0, 2.0], None, TypeError, "block_size must be a positive int"),
}


@pytest.mark.parametrize("case", BAD_SOFTMAX, ids=list(BAD_SOFTMAX))
def test_online_softmax_bad_input(case):
    scores, block_size, error, words = BAD_SOFTMAX[case]
    with pytest.raises(error) as raised:
        online_softmax(scores, block_size)
    assert words in str(raised.value)


def test_without_triton_the_kernel_says_so_in_a_sentence(monkeypatch):
    """macOS and Windows have no Triton build: the status says so, and the launcher raises that sentence."""
    import importlib.util

    from attn import triton_kernels

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real_find_spec(name, *a))
    assert not triton_kernels.triton_available()
    assert triton_kernels.triton_status() == "No Triton here (it ships for Linux only): the rest of lesson 12 runs without it"
    with pytest.raises(RuntimeError, match="No Triton here"):
        triton_kernels.flash_forward(*good())
    assert "def flash_forward_kernel(" in triton_kernels.kernel_source()  # reading it needs no Triton


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ((64, 64, 0, 16, True), ValueError, "block_q must be positive"),
        ((None, 64, 16, 16, True), TypeError, "t_q must be a positive int"),
        ((64, 64, 2.5, 16, False), TypeError, "block_q must be a positive int"),
        ((64, 64, 16, 16, "yes"), TypeError, "is_causal must be True or False"),
    ],
)
def test_tiles_read_refuses_what_it_cannot_count(arguments, error, words):
    with pytest.raises(error, match=words):
        tiles_read(*arguments)


def test_tiling_mask_refuses_tiles_it_was_not_made_for():
    tiling = Tiling(4, 6, 2, 3, is_causal=True)
    scores = torch.randn(1, 2, 2, 3)  # (B, H, rows, cols)
    hidden = tiling.mask(scores, slice(0, 2), slice(3, 6)).isinf()  # queries 0 and 1 stand at keys 2 and 3
    assert hidden[0, 0].tolist() == [[True, True, True], [False, True, True]]
    for tile_scores, rows, cols, error, words in (
        (scores, None, slice(0, 3), TypeError, "rows must be a slice start:stop of whole numbers"),
        (scores, slice(0, 2), 1.5, TypeError, "cols must be a slice"),
        (scores, slice(True, 2), slice(0, 3), TypeError, "rows must be a slice"),
        (scores, slice(0, 2, 2), slice(0, 3), TypeError, "rows must be a slice"),
        (scores, slice(-1, 2), slice(0, 3), ValueError, "0 <= start < stop <= 4"),
        (scores, slice(0, 2), slice(3, 9), ValueError, "0 <= start < stop <= 6"),
        (scores, slice(0, 2), slice(0, 2), ValueError, r"\(B, H, 2, 2\)"),
        (torch.randn(3), slice(0, 2), slice(0, 3), ValueError, r"\(B, H, 2, 3\)"),
        (scores.long(), slice(0, 2), slice(0, 3), TypeError, "floating-point"),
        (torch.empty(1, 2, 2, 3, device="meta"), slice(0, 2), slice(0, 3), ValueError, "meta device"),
    ):
        with pytest.raises(error, match=words):
            tiling.mask(tile_scores, rows, cols)
    padded = Tiling(4, 6, 2, 3, padding=torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="the tiling's padding is"):
        padded.mask(scores, slice(0, 2), slice(0, 3))
