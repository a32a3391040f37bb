"""Hostile input to attn.MultiHeadAttention, attn.KVCache and from_torch: every mistake gets a sentence, never a traceback."""

import numpy as np
import pytest
import torch
from torch import nn

from attn import KVCache, MultiHeadAttention
from attn.multihead import explicit_attention, fused_attention


@pytest.fixture
def layer():
    torch.manual_seed(0)
    return MultiHeadAttention(8, 2).eval()


@pytest.fixture
def x():
    return torch.randn(2, 5, 8)


@pytest.mark.parametrize(
    "bad, expected",
    [
        (np.zeros((2, 5, 8), dtype=np.float32), r"must be a torch.Tensor, got numpy.ndarray; convert it with torch.as_tensor\("),
        ([[[0.0] * 8] * 5] * 2, r"must be a torch.Tensor, got list; convert it with torch.tensor\("),
        (None, "must be a torch.Tensor, got None"),
        ("the query", "must be a torch.Tensor, got str"),
    ],
)
@pytest.mark.parametrize("position", [0, 1, 2])
def test_non_tensors_are_named(layer, x, bad, expected, position):
    name = ("query", "key", "value")[position]
    inputs = [x, x, x]
    inputs[position] = bad
    with pytest.raises(TypeError, match=f"^{name} {expected}"):
        layer(*inputs)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_integer_bool_and_complex_inputs_are_refused(layer, x, dtype):
    with pytest.raises(TypeError, match=rf"query must hold floating-point numbers, got {dtype}; convert it with query.float\(\)"):
        layer(x.to(dtype), x, x)


def test_dtype_differing_from_the_layer_says_how_to_fix_it(layer, x):
    expected = r"key is torch.float64 but the layer's weights are torch.float32; .*layer.to\(torch.float64\)"
    with pytest.raises(TypeError, match=expected):
        layer(x, x.double(), x.double())
    with pytest.raises(TypeError, match=r"query is torch.float32 .* torch.float64; .*query.to\(torch.float64\)"):
        layer.double()(x, x, x)


def test_other_device_names_both_devices(layer, x):
    """The meta device stands in for a GPU: a second device on a CPU-only machine."""
    on_meta = torch.empty(2, 5, 8, device="meta")
    with pytest.raises(ValueError, match=r"value is on device meta but the layer is on device cpu"):
        layer(x, x, on_meta)
    with pytest.raises(ValueError, match="mask is on device meta but the query is on cpu"):
        layer(x, x, x, mask=torch.ones(5, 5, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="key_padding_mask is on device meta but the query is on cpu"):
        layer(x, x, x, key_padding_mask=torch.ones(2, 5, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"query is on device cpu but the layer is on device meta"):
        MultiHeadAttention(8, 2).to("meta")(x, x, x)


@pytest.mark.parametrize(
    "arguments, error, expected",
    [
        ((8.0, 2), TypeError, "embed_dim must be a positive int, got float 8.0"),
        ((True, 2), TypeError, "embed_dim must be a positive int, got bool True"),
        (("8", 2), TypeError, "embed_dim must be a positive int, got str '8'"),
        ((8, 0), ValueError, "num_heads must be positive, got 0"),
        ((-8, 2), ValueError, "embed_dim must be positive, got -8"),
        ((8, None), TypeError, "num_heads must be a positive int, got NoneType None"),
        ((10, 3), ValueError, "embed_dim=10 must be a positive multiple of num_heads=3"),
    ],
)
def test_bad_sizes_are_refused(arguments, error, expected):
    with pytest.raises(error, match=f"^{expected}$"):
        MultiHeadAttention(*arguments)


@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        ({"dropout": -0.1}, ValueError, r"dropout must be in \[0, 1\)"),
        ({"dropout": 1.0}, ValueError, r"dropout must be in \[0, 1\)"),
        ({"dropout": float("nan")}, ValueError, r"dropout must be in \[0, 1\)"),
        ({"dropout": "0.1"}, TypeError, r"dropout must be a number in \[0, 1\), got str"),
        ({"num_kv_heads": 3}, ValueError, "num_kv_heads=3 must divide num_heads=4"),
        ({"num_kv_heads": 0}, ValueError, "num_kv_heads must be positive, got 0"),
        ({"num_kv_heads": 2.0}, TypeError, "num_kv_heads must be a positive int, got float"),
        ({"bias": "yes"}, TypeError, "bias must be True or False, got str"),
    ],
)
def test_bad_options_are_refused(kwargs, error, expected):
    with pytest.raises(error, match=expected):
        MultiHeadAttention(16, 4, **kwargs)


def test_numpy_sizes_are_accepted():
    layer = MultiHeadAttention(np.int64(8), np.int64(2), num_kv_heads=np.int32(1), dropout=np.float64(0.1))
    assert (layer.embed_dim, layer.num_heads, layer.num_kv_heads, layer.dropout) == (8, 2, 1, 0.1)


def test_wrong_ranks_and_sizes_keep_their_messages(layer, x):
    with pytest.raises(ValueError, match=r"^query must have shape \(B, T, 8\), got \(5, 8\)$"):
        layer(x[0], x, x)
    with pytest.raises(ValueError, match=r"^value must have shape \(B, T, 8\), got \(2, 5, 8, 1\)$"):
        layer(x, x, x[..., None])
    with pytest.raises(ValueError, match=r"batch sizes differ: query \(2, 5, 8\), key \(1, 5, 8\), value \(1, 5, 8\)"):
        layer(x, x[:1], x[:1])
    with pytest.raises(ValueError, match=r"key and value lengths differ: key \(2, 5, 8\), value \(2, 3, 8\)"):
        layer(x, x, x[:, :3])


@pytest.mark.parametrize(
    "mask, error, expected",
    [
        (np.ones((5, 5), dtype=bool), TypeError, r"mask is a NumPy array \(dtype bool\); .*torch.from_numpy\(mask\)"),
        (torch.ones(5, 5, dtype=torch.int64), TypeError, r"boolean \(True = may attend\), got torch.int64; .*mask.bool\(\)"),
        (torch.zeros(5, 5).masked_fill(torch.eye(5, dtype=torch.bool), float("-inf")), TypeError,
         r"mask must be boolean \(True = may attend\), got torch.float32; an additive mask .* converts with mask == 0"),
        ([[True] * 5] * 5, TypeError, r"mask must be a boolean torch.Tensor \(True = may attend\), got list"),
        ("causal", TypeError, r"mask must be a boolean torch.Tensor \(True = may attend\), got str"),
        (torch.ones(1, 1, 1, 5, 5, dtype=torch.bool), ValueError, r"mask of shape \(1, 1, 1, 5, 5\) does not broadcast"),
        (torch.ones(3, 5, 5, dtype=torch.bool), ValueError, r"mask of shape \(3, 5, 5\) .*3-D mask is read as \(B"),
        (torch.ones(4, dtype=torch.bool), ValueError, r"mask of shape \(4,\) does not broadcast"),
    ],
)
def test_bad_masks_say_how_to_convert(layer, x, mask, error, expected):
    for need_weights in (False, True):
        with pytest.raises(error, match=expected):
            layer(x, x, x, mask=mask, need_weights=need_weights)


@pytest.mark.parametrize(
    "padding, error, expected",
    [
        (torch.ones(5, 2, dtype=torch.bool), ValueError,
         r"key_padding_mask must have shape \(B, T_k\) = \(2, 5\), got \(5, 2\); True marks a real token"),
        (torch.ones(2, 1, 5, dtype=torch.bool), ValueError, r"key_padding_mask must have shape \(B, T_k\)"),
        (torch.ones(2, 5), TypeError, r"key_padding_mask must be boolean \(True = real token\), got torch.float32"),
        (torch.ones(2, 5, dtype=torch.uint8), TypeError, r"if 1 means real token, convert it with key_padding_mask.bool\(\)"),
        (np.ones((2, 5), dtype=bool), TypeError, "key_padding_mask is a NumPy array"),
    ],
)
def test_bad_key_padding_masks(layer, x, padding, error, expected):
    with pytest.raises(error, match=expected):
        layer(x, x, x, key_padding_mask=padding)


@pytest.mark.parametrize("is_causal", [1, "yes", None, np.bool_(True), torch.tensor(True)])
def test_is_causal_must_be_a_bool(layer, x, is_causal):
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        layer(x, x, x, is_causal=is_causal)


def test_tensors_that_require_grad_work_and_get_gradients(layer, x):
    x = x.clone().requires_grad_(True)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    layer(x, x, x, mask=mask).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_a_cache_that_does_not_fit_is_refused_and_left_unchanged(layer, x):
    cache = KVCache()
    with torch.no_grad():
        layer(x, x, x, cache=cache)
    keys = cache.keys.clone()
    with pytest.raises(ValueError, match=r"this cache does not fit: batch size 2 in the cache, 1 now"):
        layer(x[:1], x[:1], x[:1], cache=cache)
    with pytest.raises(ValueError, match="key/value heads 2 in the cache, 1 now, head size 4 in the cache, 8 now"):
        MultiHeadAttention(8, 1).eval()(x, x, x, cache=cache)
    with pytest.raises(ValueError, match="key/value heads 2 in the cache, 1 now$|key/value heads 2 in the cache, 1 now "):
        MultiHeadAttention(8, 2, num_kv_heads=1).eval()(x, x, x, cache=cache)
    with pytest.raises(TypeError, match="the cache holds torch.float32 keys, the new ones are torch.float64"):
        MultiHeadAttention(8, 2).double()(x.double(), x.double(), x.double(), cache=cache)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 5\) does not broadcast to \(B, H, T_q, T_k\) = \(2, 2, 5, 10\)"):
        layer(x, x, x, mask=torch.ones(5, 5, dtype=torch.bool), cache=cache)
    with pytest.raises(TypeError, match="cache must be an attn.KVCache or None, got dict"):
        layer(x, x, x, cache={})
    assert len(cache) == 5 and torch.equal(cache.keys, keys), "a refused call leaves the cache as it was"


def test_a_cache_on_another_device_is_refused(layer, x):
    cache = KVCache()
    cache.append(torch.empty(2, 2, 3, 4, device="meta"), torch.empty(2, 2, 3, 4, device="meta"))
    with pytest.raises(ValueError, match="the cache is on device meta, the new keys on cpu"):
        layer(x, x, x, cache=cache)


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match=r"batch_first=False, so it reads inputs as \(T, B, E\).*batch_first=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2))
    for module in (nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True),
                   nn.MultiheadAttention(8, 2, add_zero_attn=True, batch_first=True),
                   nn.MultiheadAttention(8, 2, kdim=4, vdim=4, batch_first=True)):
        with pytest.raises(ValueError, match="without kdim/vdim, add_bias_kv or add_zero_attn"):
            MultiHeadAttention.from_torch(module)
    for thing in (None, "attention", 3, nn.Linear(2, 2), MultiHeadAttention(8, 2)):
        with pytest.raises(TypeError, match="^from_torch needs an nn.MultiheadAttention, got "):
            MultiHeadAttention.from_torch(thing)


def test_from_torch_copies_dtype_and_training_mode():
    reference = nn.MultiheadAttention(8, 2, bias=False, dropout=0.25, batch_first=True).double()
    ours = MultiHeadAttention.from_torch(reference)
    assert ours.training and ours.dropout == 0.25 and ours.query_proj.weight.dtype == torch.float64
    assert ours.query_proj.bias is None
    assert not MultiHeadAttention.from_torch(reference.eval()).training


def test_attention_functions_check_their_shapes():
    query = torch.randn(1, 4, 3, 2)
    with pytest.raises(ValueError, match=r"key/value heads \(3\) must divide query heads \(4\)"):
        explicit_attention(query, torch.randn(1, 3, 3, 2), torch.randn(1, 3, 3, 2))
    with pytest.raises(ValueError, match=r"key and value must both be \(B, H_kv, T_k, d\) = \(1, H_kv, T_k, 2\)"):
        fused_attention(query, torch.randn(1, 4, 3, 2), torch.randn(1, 4, 5, 2))
    with pytest.raises(ValueError, match=r"query must have shape \(B, H, T, d\), got \(4, 3, 2\)"):
        fused_attention(query[0], query, query)
    with pytest.raises(TypeError, match="key must be a torch.Tensor, got list"):
        explicit_attention(query, [1, 2], query)
