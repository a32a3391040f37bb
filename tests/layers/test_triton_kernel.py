"""Lesson 12's Triton kernel against scaled_dot_product_attention: by the interpreter on a CPU, compiled on a GPU.

The kernel computes its tiles in float32; with float32 inputs its products are exact IEEE ones
(input_precision="ieee"), so it agrees with PyTorch to 2e-5; bfloat16 (GPU only) to 2e-2.
"""

import importlib.util

import pytest
import torch
from torch.nn import functional

from attn.multihead import fused_attention
from attn.triton_kernels import flash_forward, triton_status
from tests.devices import CUDA

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason=triton_status())

DEVICES = [
    pytest.param(
        "cpu",
        marks=pytest.mark.skipif(
            torch.cuda.is_available(), reason="with CUDA present this process compiles Triton for the GPU, not the CPU"
        ),
    ),
    CUDA,
]

# (B, H, T_q, T_k, d, is_causal, block): T not a multiple of the block, T_q != T_k both ways, d not a power of 2
SHAPES = [
    (1, 1, 16, 16, 16, False, 16),
    (2, 3, 37, 37, 16, True, 16),
    (1, 2, 20, 45, 24, True, 16),
    (2, 1, 45, 20, 64, True, 32),
    (1, 2, 70, 70, 8, False, 32),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[2]}x{s[3]}-d{s[4]}-{'causal' if s[5] else 'full'}" for s in SHAPES])
def test_kernel_equals_scaled_dot_product_attention(shape, device):
    batch, heads, t_q, t_k, head_dim, is_causal, block = shape
    generator = torch.Generator().manual_seed(t_q + t_k)
    query, key, value = (
        torch.randn(batch, heads, length, head_dim, generator=generator).to(device) for length in (t_q, t_k, t_k)
    )
    output = flash_forward(query, key, value, is_causal=is_causal, block_q=block, block_k=block)
    expected = fused_attention(query, key, value, is_causal=is_causal)  # end-aligned, empty rows zero
    assert output.shape == query.shape and output.dtype == query.dtype
    torch.testing.assert_close(output, expected, rtol=0, atol=2e-5)
    if t_q == t_k:  # PyTorch's own function, called directly
        direct = functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal)
        torch.testing.assert_close(output, direct, rtol=0, atol=2e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_takes_non_contiguous_inputs(device):
    query = torch.randn(1, 40, 2, 16).to(device).transpose(1, 2)  # (B, H, T, d) seen through a transpose
    output = flash_forward(query, query, query, is_causal=True, block_q=16, block_k=16)
    torch.testing.assert_close(output, fused_attention(query, query, query, is_causal=True), rtol=0, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_kernel_in_16_bits_on_cuda(dtype):
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 300, 64, device="cuda", dtype=dtype) for _ in range(3))
    output = flash_forward(query, key, value, is_causal=True, block_q=64, block_k=64)
    expected = functional.scaled_dot_product_attention(query.float(), key.float(), value.float(), is_causal=True)
    torch.testing.assert_close(output.float(), expected, rtol=0, atol=2e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where there is no CUDA")
def test_interpreter_runs_float16_and_refuses_bfloat16_with_a_sentence():
    torch.manual_seed(0)
    query = torch.randn(1, 1, 20, 16, dtype=torch.float16)
    output = flash_forward(query, query, query, block_q=16, block_k=16)
    torch.testing.assert_close(output.float(), fused_attention(*(query.float(),) * 3), rtol=0, atol=2e-3)
    with pytest.raises(TypeError, match="interpreter .* multiplies bfloat16 tiles wrongly"):
        flash_forward(*(query.bfloat16(),) * 3)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        ({"dtype": torch.float64}, TypeError, "takes float16, bfloat16 or float32, got torch.float64"),
        ({"block_q": 24}, ValueError, "block_q must be a power of 2 of at least 16"),
        ({"block_k": 8}, ValueError, "block_k must be a power of 2 of at least 16"),
        ({"block_q": 0}, ValueError, "block_q must be positive"),
        ({"is_causal": 1}, TypeError, "is_causal must be True or False"),
    ],
)
def test_kernel_bad_arguments_get_a_sentence(change, error, words):
    query = torch.randn(1, 1, 8, 4, dtype=change.pop("dtype", torch.float32))
    with pytest.raises(error) as raised:
        flash_forward(query, query, query, **change)
    assert words in str(raised.value)
