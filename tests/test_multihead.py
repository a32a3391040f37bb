"""attn.MultiHeadAttention against nn.MultiheadAttention, its two paths, its errors; on CPU and on CUDA where present."""

import pytest
import torch
from torch import nn

from attn import MultiHeadAttention
from attn.bench import attention_flops, peak_bf16_tflops, run_benchmark, share_of_peak
from attn.device import describe_device, pick_device
from attn.multihead import merge_heads, split_heads

DEVICES = [
    pytest.param("cpu"),
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")),
]


def pair(embed_dim, num_heads, device, bias=True, seed=0):
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True).to(device).eval()
    return reference, MultiHeadAttention.from_torch(reference).eval()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("embed_dim, num_heads, t_q, t_k", [(8, 1, 5, 5), (16, 4, 7, 7), (32, 8, 6, 9), (64, 2, 3, 11)])
def test_equals_torch_self_and_cross_attention(device, embed_dim, num_heads, t_q, t_k):
    reference, ours = pair(embed_dim, num_heads, device)
    query = torch.randn(3, t_q, embed_dim, device=device)
    memory = torch.randn(3, t_k, embed_dim, device=device)
    with torch.no_grad():
        for key in (query, memory) if t_q == t_k else (memory,):
            expected, expected_weights = reference(query, key, key, average_attn_weights=False)
            output, weights = ours(query, key, key, need_weights=True)
            torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_equals_torch_with_masks_converted(device):
    reference, ours = pair(16, 4, device)
    x = torch.randn(2, 6, 16, device=device)
    keep_causal = torch.tril(torch.ones(6, 6, dtype=torch.bool, device=device))
    keep_padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2], device=device)  # (B, T_k)
    with torch.no_grad():
        expected, _ = reference(x, x, x, attn_mask=~keep_causal, key_padding_mask=~keep_padding, need_weights=False)
        combined = keep_causal[None, None] & keep_padding[:, None, None, :]  # (B, 1, T, T)
        for need_weights in (False, True):
            output = ours(x, x, x, mask=combined, need_weights=need_weights)
            output = output[0] if need_weights else output
            torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_and_explicit_paths_agree(device):
    _, ours = pair(32, 4, device, bias=False)
    x = torch.randn(2, 9, 32, device=device)
    mask = torch.rand(2, 9, 9, device=device) > 0.3
    with torch.no_grad():
        for keep_mask in (None, mask):
            fused = ours(x, x, x, mask=keep_mask)
            explicit, weights = ours(x, x, x, mask=keep_mask, need_weights=True)
            torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
            assert weights.shape == (2, 4, 9, 9)


@pytest.mark.parametrize("device", DEVICES)
def test_fully_masked_rows_give_zeros_on_both_paths_and_finite_gradients(device):
    _, ours = pair(16, 2, device, bias=False)
    x = torch.randn(1, 4, 16, device=device, requires_grad=True)
    keep = torch.ones(4, 4, dtype=torch.bool, device=device)
    keep[1] = False
    fused = ours(x, x, x, mask=keep)
    explicit, weights = ours(x, x, x, mask=keep, need_weights=True)
    assert torch.all(weights[:, :, 1] == 0)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    expected_row = ours.out_proj(torch.zeros(16, device=device))  # zero heads, then the output projection
    torch.testing.assert_close(fused[0, 1], expected_row)
    fused.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_parameter_count_matches_torch():
    for bias in (True, False):
        reference, ours = pair(64, 8, "cpu", bias=bias)
        count = sum(parameter.numel() for parameter in ours.parameters())
        assert count == sum(parameter.numel() for parameter in reference.parameters())
        assert count == 4 * 64 * 64 + (4 * 64 if bias else 0)


def test_bfloat16_runs_close_to_float32():
    reference, ours = pair(32, 4, "cpu")
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        full = ours(x, x, x)
        half = ours.to(torch.bfloat16)(x.bfloat16(), x.bfloat16(), x.bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), full, atol=5e-2, rtol=5e-2)


def test_split_and_merge_heads():
    x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    torch.testing.assert_close(heads[1, 2, 0], x[1, 0, 4:6])  # head 2 of token 0 holds features 4..5
    torch.testing.assert_close(merge_heads(heads), x)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="embed_dim=10 must be a positive multiple of num_heads=3"):
        MultiHeadAttention(10, 3)
    layer = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"query must have shape \(B, T, 8\), got \(2, 5, 6\)"):
        layer(torch.randn(2, 5, 6), x, x)
    with pytest.raises(ValueError, match=r"batch sizes differ: query \(2, 5, 8\), key \(3, 5, 8\)"):
        layer(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match="key and value lengths differ"):
        layer(x, x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast to \(B, H, T_q, T_k\) = \(2, 2, 5, 5\)"):
        layer(x, x, x, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        layer(x, x, x, mask=torch.ones(5, 5))
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="kdim/vdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4))


def test_device_helpers():
    device = pick_device()
    assert device.type in {"cuda", "mps", "cpu"}
    assert describe_device("cpu") == "cpu"


def test_benchmark_runs_and_records_provenance():
    result = run_benchmark("cpu", torch.float32, batch=1, heads=2, head_dims=(8,), lengths=(16,), repeats=2)
    assert {"device", "torch", "dtype", "date", "rows"} <= set(result)
    cases = {row["case"] for row in result["rows"]}
    assert cases == {"explicit", "fused", "layer (ours)", "layer (nn.MultiheadAttention)"}
    assert all(row["status"] == "ok" and row["seconds"] > 0 for row in result["rows"])
    assert attention_flops(1, 2, 16, 8) == 4 * 2 * 16 * 16 * 8


def test_peak_lookup():
    assert peak_bf16_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_bf16_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_bf16_tflops("NVIDIA H200") == 989.0
    assert peak_bf16_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert peak_bf16_tflops("NVIDIA GeForce RTX 4090") is None
    row = {"tflops": 494.5}
    assert share_of_peak({"peak_bf16_tflops": 989.0, "dtype": "bfloat16"}, row) == pytest.approx(0.5)
    assert share_of_peak({"peak_bf16_tflops": None, "dtype": "bfloat16"}, row) is None
