"""attn.MultiHeadAttention against nn.MultiheadAttention, its two paths, its errors; on CPU and on CUDA where present."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from attn import MultiHeadAttention, multihead
from attn.common.device import describe_device, pick_device
from attn.flops import attention_flops
from attn.measure.bench import peak_bf16_tflops, run_benchmark, share_of_peak
from attn.multihead import explicit_attention, fused_attention, merge_heads, split_heads
from tests.attention_reference import full_keep_mask, reference_attention
from tests.devices import DEVICES


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
    assert describe_device(torch.device("meta")) == "meta"
    with pytest.raises(ValueError, match="'banana' is not a device PyTorch knows; use a name such as 'cpu', 'cuda' or 'mps'"):
        describe_device("banana")
    for bad in (None, 1.5, True, [0]):
        with pytest.raises(TypeError, match="describe_device needs a torch.device or a name such as 'cpu' or 'cuda', got "):
            describe_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_describe_device_without_cuda():
    with pytest.raises(ValueError, match="no CUDA device is available on this machine"):
        describe_device("cuda")


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


# ---- Part 2: key padding, causality, dropout, gradients, grouped-query attention, properties ----


@pytest.mark.parametrize("device", DEVICES)
def test_key_padding_mask_equals_torch_with_its_convention_inverted(device):
    reference, ours = pair(16, 4, device)
    query, memory = torch.randn(3, 4, 16, device=device), torch.randn(3, 6, 16, device=device)
    real = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [False] + [True] * 5], device=device)  # (B, T_k), ours
    with torch.no_grad():
        expected, expected_weights = reference(query, memory, memory, key_padding_mask=~real, average_attn_weights=False)
        fused = ours(query, memory, memory, key_padding_mask=real)
        explicit, weights = ours(query, memory, memory, key_padding_mask=real, need_weights=True)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t_q, t_k", [(5, 5), (2, 5), (1, 4)])
def test_is_causal_equals_torch_given_the_end_aligned_mask(device, t_q, t_k):
    reference, ours = pair(16, 2, device)
    query, memory = torch.randn(2, t_q, 16, device=device), torch.randn(2, t_k, 16, device=device)
    blocked = torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q).logical_not()  # True = blocked
    with torch.no_grad():
        expected, expected_weights = reference(query, memory, memory, attn_mask=blocked, average_attn_weights=False)
        fused = ours(query, memory, memory, is_causal=True)
        explicit, weights = ours(query, memory, memory, is_causal=True, need_weights=True)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


def test_is_causal_trap_torch_aligns_to_the_start_we_align_to_the_end():
    """With fewer queries than keys (the last queries of a sequence, keys cached), PyTorch's is_causal is wrong."""
    _, ours = pair(16, 2, "cpu")
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        full = ours(x, x, x, is_causal=True)  # (1, 6, 16): the whole sequence at once
        last_two = ours(x[:, 4:], x, x, is_causal=True)  # queries 4 and 5 against keys 0..5
        q = split_heads(ours.query_proj(x[:, 4:]), 2)
        k, v = split_heads(ours.key_proj(x), 2), split_heads(ours.value_proj(x), 2)
        top_left = ours.out_proj(merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)))
    torch.testing.assert_close(last_two, full[:, 4:], atol=1e-5, rtol=1e-5)
    assert (top_left - full[:, 4:]).abs().max() > 1e-2, "PyTorch's start-aligned causal mask lets query 4 see only keys 0..0"


def test_is_causal_with_equal_lengths_uses_the_fused_causal_kernel(monkeypatch):
    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    _, ours = pair(16, 2, "cpu")
    x = torch.randn(2, 5, 16)
    padding = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        ours(x, x, x, is_causal=True)
        ours(x[:, 3:], x, x, is_causal=True)  # T_q < T_k: our mask
        ours(x, x, x, is_causal=True, key_padding_mask=padding)  # another mask: combined with ours
    assert [call.get("is_causal", False) for call in calls] == [True, False, False]
    assert "attn_mask" not in calls[0] and calls[1]["attn_mask"].shape == (1, 1, 2, 5)


def test_dropout_is_copied_and_only_acts_in_training():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(16, 4, dropout=0.5, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(reference)
    assert ours.dropout == 0.5 and not ours.training
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        expected, _ = reference(x, x, x)
        evaluated = ours(x, x, x)
        torch.testing.assert_close(evaluated, expected, atol=1e-5, rtol=1e-5)
        ours.train()
        for need_weights in (False, True):
            trained = ours(x, x, x, need_weights=need_weights)
            trained = trained[0] if need_weights else trained
            assert (trained - evaluated).abs().max() > 1e-3, "dropout changes the output in training mode"
        _, weights = ours(x, x, x, need_weights=True)
        _, evaluated_weights = ours.eval()(x, x, x, need_weights=True)
        kept = weights != 0
        assert 0 < kept.float().mean() < 1, "some weights are dropped, some kept"
        torch.testing.assert_close(weights[kept], 2 * evaluated_weights[kept], msg="kept weights are scaled by 1 / (1 - p)")
    no_dropout = MultiHeadAttention(16, 4)
    no_dropout.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert torch.equal(no_dropout.train()(x, x, x), no_dropout.eval()(x, x, x)), "p = 0 does nothing in training"


def test_gradients_equal_torch():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(16, 4, batch_first=True)
    ours = MultiHeadAttention.from_torch(reference)
    query = torch.randn(2, 5, 16, requires_grad=True)
    memory = torch.randn(2, 7, 16, requires_grad=True)
    keep = torch.rand(5, 7) > 0.3
    upstream = torch.randn(2, 5, 16)
    expected, _ = reference(query, memory, memory, attn_mask=~keep)
    (expected * upstream).sum().backward()
    expected_grads = query.grad.clone(), memory.grad.clone()
    query.grad = memory.grad = None
    for need_weights in (False, True):
        output = ours(query, memory, memory, mask=keep, need_weights=need_weights)
        output = output[0] if need_weights else output
        (output * upstream).sum().backward()
        torch.testing.assert_close((query.grad, memory.grad), expected_grads, atol=1e-5, rtol=1e-5)
        ours_in_proj = torch.cat([ours.query_proj.weight.grad, ours.key_proj.weight.grad, ours.value_proj.weight.grad])
        torch.testing.assert_close(ours_in_proj, reference.in_proj_weight.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.out_proj.bias.grad, reference.out_proj.bias.grad, atol=1e-5, rtol=1e-5)
        query.grad = memory.grad = None
        ours.zero_grad()


def test_float64_equals_torch_closely():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(24, 3, batch_first=True).double().eval()
    ours = MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    keep = torch.rand(2, 6) > 0.3
    keep[:, 0] = True
    with torch.no_grad():
        expected, expected_weights = reference(x, x, x, key_padding_mask=~keep, average_attn_weights=False)
        output, weights = ours(x, x, x, key_padding_mask=keep, need_weights=True)
        fused = ours(x, x, x, key_padding_mask=keep)
    assert output.dtype == torch.float64
    torch.testing.assert_close(output, expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(fused, expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-12)


def test_masks_of_every_rank_no_longer_crash_the_fused_path():
    """Before: a (T_k,) or 0-D mask passed validation, then the fused path raised IndexError inside open_empty_rows."""
    _, ours = pair(8, 2, "cpu")
    x = torch.randn(2, 3, 8)
    key_mask = torch.tensor([True, False, True])
    with torch.no_grad():
        for mask in (torch.tensor(True), key_mask, key_mask[None].expand(3, 3), torch.tensor(False)):
            fused = ours(x, x, x, mask=mask)
            explicit, weights = ours(x, x, x, mask=mask, need_weights=True)
            torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-6)
        assert torch.all(weights == 0), "a 0-D False mask blocks everything: zero weights"
        torch.testing.assert_close(fused, ours.out_proj.bias.expand(2, 3, 8))


# ---- grouped-query attention ----


def repeated_heads_twin(layer):
    """An ordinary multi-head layer whose key/value projections repeat each of ``layer``'s key/value heads."""
    group, head_dim = layer.num_heads // layer.num_kv_heads, layer.head_dim
    twin = MultiHeadAttention(layer.embed_dim, layer.num_heads)
    with torch.no_grad():
        for ours, theirs in ((layer.query_proj, twin.query_proj), (layer.out_proj, twin.out_proj)):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        for ours, theirs in ((layer.key_proj, twin.key_proj), (layer.value_proj, twin.value_proj)):
            weight = ours.weight.view(layer.num_kv_heads, head_dim, -1).repeat_interleave(group, dim=0)
            theirs.weight.copy_(weight.reshape(layer.embed_dim, -1))
            theirs.bias.copy_(ours.bias.view(layer.num_kv_heads, head_dim).repeat_interleave(group, dim=0).reshape(-1))
    return twin.eval()


@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 2), (6, 3), (4, 1), (4, 4)])
def test_grouped_query_attention_equals_repeated_key_value_heads(num_heads, num_kv_heads):
    torch.manual_seed(0)
    layer = MultiHeadAttention(8 * num_heads, num_heads, num_kv_heads=num_kv_heads).eval()
    twin = repeated_heads_twin(layer)
    query, memory = torch.randn(2, 5, 8 * num_heads), torch.randn(2, 7, 8 * num_heads)
    keep = torch.rand(2, 5, 7) > 0.4
    with torch.no_grad():
        for kwargs in ({}, {"mask": keep}, {"is_causal": True}):
            expected, expected_weights = twin(query, memory, memory, need_weights=True, **kwargs)
            output, weights = layer(query, memory, memory, need_weights=True, **kwargs)
            torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(layer(query, memory, memory, **kwargs), expected, atol=1e-5, rtol=1e-5)


def test_grouped_query_attention_equals_torch_enable_gqa():
    torch.manual_seed(1)
    query = torch.randn(2, 6, 5, 4)  # (B, H, T_q, d)
    key, value = torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)  # (B, H_kv, T_k, d): 3 query heads per key/value head
    keep = torch.rand(2, 1, 5, 7) > 0.3
    keep[..., 0] = True
    expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=keep, enable_gqa=True)
    explicit, weights = explicit_attention(query, key, value, keep)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_attention(query, key, value, keep), expected, atol=1e-5, rtol=1e-5)
    assert weights.shape == (2, 6, 5, 7)
    torch.testing.assert_close(weights[:, 3], torch.softmax(
        (query[:, 3] @ key[:, 1].transpose(-2, -1) / 2).masked_fill(~keep[:, 0], float("-inf")), dim=-1
    ), msg="query head 3 uses key/value head 3 // 3 = 1")


def test_grouped_query_fallback_without_enable_gqa(monkeypatch):
    """Older PyTorch has no enable_gqa: the fused path repeats the key/value heads instead."""
    torch.manual_seed(2)
    query, key, value = torch.randn(1, 4, 3, 2), torch.randn(1, 2, 3, 2), torch.randn(1, 2, 3, 2)
    expected = fused_attention(query, key, value, is_causal=True)
    monkeypatch.setattr(multihead, "SDPA_SHARES_HEADS", False)
    torch.testing.assert_close(fused_attention(query, key, value, is_causal=True), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("num_kv_heads", [None, 4, 2, 1])
def test_parameter_count_with_num_kv_heads(bias, num_kv_heads):
    layer = MultiHeadAttention(64, 8, bias=bias, num_kv_heads=num_kv_heads)
    kv_features = (num_kv_heads or 8) * 8  # H_kv * d
    expected = 2 * 64 * 64 + 2 * 64 * kv_features + ((2 * 64 + 2 * kv_features) if bias else 0)
    assert sum(parameter.numel() for parameter in layer.parameters()) == expected


# ---- properties: the two paths agree with each other and with a slow reference, for every kind of mask ----

FLOAT_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


@st.composite
def attention_cases(draw):
    """A layer's sizes, inputs and masks: random shapes, masks of rank 0 to 4, padding, causality."""
    batch, num_kv_heads = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    num_heads, head_dim = num_kv_heads * draw(st.integers(1, 3)), draw(st.integers(1, 4))
    self_attention = draw(st.booleans())
    t_q = draw(st.integers(1, 5))
    t_k = t_q if self_attention else draw(st.integers(1, 6))
    rank = draw(st.sampled_from([None, 0, 1, 2, 3, 4]))
    full = {None: (), 0: (), 1: (t_k,), 2: (t_q, t_k), 3: (batch, t_q, t_k), 4: (batch, num_heads, t_q, t_k)}[rank]
    mask_shape = tuple(size if draw(st.booleans()) else 1 for size in full)
    return {
        "sizes": (batch, num_heads, num_kv_heads, head_dim, t_q, t_k),
        "self_attention": self_attention,
        "mask_shape": None if rank is None else mask_shape,
        "padding": draw(st.booleans()),
        "is_causal": draw(st.booleans()),
        "dtype": draw(st.sampled_from([torch.float32, torch.float64])),
        "seed": draw(st.integers(0, 2**16)),
    }


def build_case(case):
    batch, num_heads, num_kv_heads, head_dim, t_q, t_k = case["sizes"]
    generator = torch.Generator().manual_seed(case["seed"])
    torch.manual_seed(case["seed"])
    layer = MultiHeadAttention(num_heads * head_dim, num_heads, bias=False, num_kv_heads=num_kv_heads).to(case["dtype"]).eval()
    query = torch.randn(batch, t_q, num_heads * head_dim, generator=generator, dtype=case["dtype"])
    other_shape = (batch, t_k, num_heads * head_dim)
    key = query if case["self_attention"] else torch.randn(other_shape, generator=generator, dtype=case["dtype"])
    value = key if case["self_attention"] else torch.randn(other_shape, generator=generator, dtype=case["dtype"])
    mask = None if case["mask_shape"] is None else torch.rand(case["mask_shape"], generator=generator) > 0.3
    padding = torch.rand(batch, t_k, generator=generator) > 0.3 if case["padding"] else None
    arguments = {"mask": mask, "key_padding_mask": padding, "is_causal": case["is_causal"]}
    return layer, (query, key, value), arguments


@given(attention_cases())
def test_fused_equals_explicit_equals_reference(case):
    layer, inputs, arguments = build_case(case)
    batch, num_heads, _, _, t_q, t_k = case["sizes"]
    tolerance = FLOAT_TOLERANCE[case["dtype"]]
    keep = full_keep_mask(batch, num_heads, t_q, t_k, **arguments)
    with torch.no_grad():
        fused = layer(*inputs, **arguments)
        explicit, weights = layer(*inputs, **arguments, need_weights=True)
        expected, expected_weights = reference_attention(layer, *inputs, keep)
    torch.testing.assert_close(fused, explicit, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(explicit, expected, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(weights, expected_weights, atol=tolerance, rtol=tolerance)
    empty = ~keep.any(dim=-1)  # (B, H, T_q): rows with no allowed key
    assert torch.all(weights[empty] == 0)
    rows_empty_in_every_head = empty.all(dim=1)  # (B, T_q): with bias=False their output is exactly zero
    assert torch.all(fused[rows_empty_in_every_head] == 0) and torch.all(explicit[rows_empty_in_every_head] == 0)


NON_FINITE = st.sampled_from([float("nan"), float("inf"), -float("inf")])


@given(attention_cases(), st.sampled_from(["query", "key", "value"]), NON_FINITE, st.integers(0, 10**6))
def test_non_finite_input_raises_the_same_error_on_both_paths(case, name, bad, where):
    layer, inputs, arguments = build_case({**case, "self_attention": False})
    inputs = dict(zip(("query", "key", "value"), (tensor.clone() for tensor in inputs), strict=True))
    inputs[name].view(-1)[where % inputs[name].numel()] = bad
    for need_weights in (False, True):
        with pytest.raises(ValueError, match=f"^{name} contains NaN or inf"):
            layer(**inputs, **arguments, need_weights=need_weights)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-10), (torch.bfloat16, 3e-2)])
def test_every_dtype_runs_on_both_paths(dtype, tolerance):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, num_kv_heads=2).to(dtype).eval()
    x = torch.randn(2, 6, 16, dtype=dtype)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    with torch.no_grad():
        fused = layer(x, x, x, key_padding_mask=padding, is_causal=True)
        explicit, weights = layer(x, x, x, key_padding_mask=padding, is_causal=True, need_weights=True)
    assert fused.dtype == explicit.dtype == weights.dtype == dtype
    torch.testing.assert_close(fused, explicit, atol=tolerance, rtol=tolerance)


def test_weights_that_cannot_fit_are_refused_before_any_work():
    layer = MultiHeadAttention(8, 2)
    x = torch.randn(1, 2**20, 8)  # (B, T, E): 32 MB; its weights (1, 2, T, T) would be 8.8 TB
    for call in (lambda: layer(x, x, x, need_weights=True), lambda: layer(x, x, x, None, None, False, True)):
        with pytest.raises(ValueError, match=r"the attention weights \(B, H, T_q, T_k\) = \(1, 2, 1048576, 1048576\) "
                                             r"that need_weights=True returns would need .*need_weights=False"):
            call()
    small = torch.randn(2, 5, 8)
    assert layer(small, small, small, need_weights=True)[1].shape == (2, 2, 5, 5)
