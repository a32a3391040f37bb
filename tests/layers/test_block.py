"""attn.TransformerBlock against nn.TransformerEncoderLayer(norm_first=True, batch_first=True), and its errors."""

import numpy as np
import pytest
import torch
from torch import nn

from attn import TransformerBlock
from tests.devices import DEVICES


def torch_layer(activation="gelu", dtype=torch.float32, dropout=0.0, eps=1e-5, seed=0, device="cpu", **kwargs):
    torch.manual_seed(seed)
    options = {"dim_feedforward": 40, "dropout": dropout, "activation": activation, "layer_norm_eps": eps}
    options.update({"norm_first": True, "batch_first": True, **kwargs})
    return nn.TransformerEncoderLayer(16, 4, **options).to(device, dtype).eval()


PADDING = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [False] + [True] * 5])  # ours: True = real token


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("activation", ["relu", "gelu", nn.GELU(), nn.functional.relu])
def test_equals_torch_encoder_layer_with_a_padding_mask(dtype, tolerance, activation, device):
    reference = torch_layer(activation, dtype, eps=1e-6, device=device)
    ours = TransformerBlock.from_torch(reference)
    assert not ours.training and ours.norm1.eps == 1e-6 and ours.mlp[0].out_features == 40
    x = torch.randn(3, 6, 16, dtype=dtype, device=device)
    padding = PADDING.to(device)
    # With gradients enabled PyTorch takes its ordinary path, so every position, padded ones included, is compared.
    expected = reference(x, src_key_padding_mask=~padding)
    output = ours(x, key_padding_mask=padding)
    assert output.dtype == dtype
    torch.testing.assert_close(output, expected, atol=tolerance, rtol=tolerance)
    # Under no_grad in eval mode PyTorch may take its fused "fast path", which need not compute padded
    # positions the same way (inside nn.TransformerEncoder it returns zeros there): compare real positions only.
    # On CUDA that path fuses GELU into the first matrix product (cuBLASLt's epilogue), which computes the tanh
    # approximation, not the exact GELU its ordinary path uses: seen on an H100 as differences near 1e-4. Its
    # constants are not float64's either (1.5e-10 from PyTorch's own tanh GELU in float64), so float64 gets 1e-9.
    fast_tolerance = tolerance
    if device == "cuda" and isinstance(ours.mlp[1], nn.GELU):
        ours.mlp[1] = nn.GELU(approximate="tanh")
        fast_tolerance = max(tolerance, 1e-9)
    with torch.no_grad():
        fast = reference(x, src_key_padding_mask=~padding)
        output = ours(x, key_padding_mask=padding)
    torch.testing.assert_close(output[padding], fast[padding], atol=fast_tolerance, rtol=fast_tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_is_causal_equals_torch_with_a_causal_mask(device):
    reference = torch_layer("relu", device=device)
    ours = TransformerBlock.from_torch(reference)
    x = torch.randn(2, 6, 16, device=device)
    blocked = torch.ones(6, 6, dtype=torch.bool, device=device).triu(diagonal=1)  # theirs: True = may not attend
    expected = reference(x, src_mask=blocked, is_causal=True)
    torch.testing.assert_close(ours(x, is_causal=True), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours(x, mask=~blocked), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_equal_torch(device):
    reference = torch_layer("gelu", device=device).train()
    ours = TransformerBlock.from_torch(reference)
    assert ours.training
    x = torch.randn(2, 5, 16, requires_grad=True, device=device)
    upstream = torch.randn(2, 5, 16, device=device)
    (reference(x) * upstream).sum().backward()
    expected = x.grad.clone()
    x.grad = None
    (ours(x) * upstream).sum().backward()
    torch.testing.assert_close(x.grad, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.mlp[0].weight.grad, reference.linear1.weight.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.norm1.weight.grad, reference.norm1.weight.grad, atol=1e-5, rtol=1e-5)


def test_parameter_count_equals_torch():
    reference = torch_layer()
    ours = TransformerBlock(16, 4, mlp_ratio=2.5)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    assert sum(p.numel() for p in TransformerBlock(16, 4, num_kv_heads=1).parameters()) < sum(
        p.numel() for p in TransformerBlock(16, 4).parameters()
    )


def test_dropout_is_copied_and_only_acts_in_training():
    reference = torch_layer(dropout=0.3)
    ours = TransformerBlock.from_torch(reference)
    assert ours.attention.dropout == 0.3 and ours.residual_dropout.p == 0.3 and ours.mlp[2].p == 0.3
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        evaluated = ours(x)
        torch.testing.assert_close(evaluated, reference(x), atol=1e-5, rtol=1e-5)
        assert (ours.train()(x) - evaluated).abs().max() > 1e-3
        plain = TransformerBlock(16, 4, mlp_ratio=2.5).train()
        assert torch.equal(plain(x), plain.eval()(x)), "dropout 0 does nothing in training"


def test_residual_paths_carry_the_input_through():
    block = TransformerBlock(8, 2).eval()
    with torch.no_grad():
        for linear in (block.attention.out_proj, block.mlp[3]):
            linear.weight.zero_()
            linear.bias.zero_()
        x = torch.randn(2, 3, 8)
        torch.testing.assert_close(block(x), x, msg="with both branches silenced, the block is the identity")


def test_from_torch_refuses_what_it_cannot_copy():
    cases = [
        (torch_layer(norm_first=False), "norm_first=False .* Build it with norm_first=True"),
        (nn.TransformerEncoderLayer(16, 4, norm_first=True), r"batch_first=False, so it reads inputs as \(T, B, E\)"),
        (torch_layer(bias=False), "built with bias=True"),
        (torch_layer(nn.Tanh()), "from_torch copies the activations 'relu' and 'gelu', got Tanh()"),
        (torch_layer(nn.GELU(approximate="tanh")), "from_torch copies the activations 'relu' and 'gelu'"),
    ]
    for layer, expected in cases:
        with pytest.raises(ValueError, match=expected):
            TransformerBlock.from_torch(layer)
    uneven = torch_layer(dropout=0.1)
    uneven.dropout2.p = 0.2
    with pytest.raises(ValueError, match=r"one dropout probability everywhere, this layer has \[0.1, 0.2\]"):
        TransformerBlock.from_torch(uneven)
    for thing in (None, nn.MultiheadAttention(16, 4, batch_first=True), TransformerBlock(16, 4)):
        with pytest.raises(TypeError, match="^from_torch needs an nn.TransformerEncoderLayer, got "):
            TransformerBlock.from_torch(thing)


@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        ({"activation": "tanh"}, ValueError, "activation must be 'gelu' or 'relu', got 'tanh'"),
        ({"activation": nn.GELU()}, TypeError, "activation must be the string 'gelu' or 'relu', got torch.nn.modules"),
        ({"mlp_ratio": 0}, ValueError, "mlp_ratio \\* embed_dim must be a positive whole number"),
        ({"mlp_ratio": 1.3}, ValueError, "mlp_ratio \\* embed_dim must be a positive whole number of features, got 1.3 \\* 16"),
        ({"mlp_ratio": "4"}, TypeError, "mlp_ratio must be a positive number, got str"),
        ({"mlp_ratio": True}, TypeError, "mlp_ratio must be a positive number, got bool"),
        ({"dropout": 1.5}, ValueError, r"dropout must be in \[0, 1\)"),
        ({"num_kv_heads": 3}, ValueError, "num_kv_heads=3 must divide num_heads=4"),
        ({"embed_dim": "16"}, TypeError, "embed_dim must be a positive int, got str"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, expected):
    arguments = {"embed_dim": 16, "num_heads": 4, **kwargs}
    with pytest.raises(error, match=expected):
        TransformerBlock(**arguments)


def test_bad_input_names_x():
    block = TransformerBlock(8, 2).eval()
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got numpy.ndarray; convert it with torch.as_tensor\(x\)"):
        block(np.zeros((2, 3, 8), dtype=np.float32))
    with pytest.raises(TypeError, match=r"x is torch.float64 but the layer's weights are torch.float32"):
        block(x.double())
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 8\), got \(2, 3, 4\)"):
        block(x[..., :4])
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        block(x.masked_fill(x > 1, float("nan")))
    with pytest.raises(TypeError, match="x must hold floating-point numbers, got torch.int64"):
        block(x.long())
    with pytest.raises(ValueError, match="x is on device meta but the layer is on device cpu"):
        block(torch.empty(2, 3, 8, device="meta"))
    with pytest.raises(TypeError, match=r"key_padding_mask must be boolean \(True = real token\)"):
        block(x, key_padding_mask=torch.ones(2, 3))


def test_without_lesson_10s_arguments_the_block_is_the_two_lines_of_its_formula():
    """Lesson 9 prints the class and tells the reader to ignore num_kv_heads and cache: left at None,
    forward is x + attention(LN1(x)), then x + MLP(LN2(x)), with the lesson's own LayerNorm."""
    torch.manual_seed(3)
    block = TransformerBlock(16, 4, dropout=0.1).eval()
    x = torch.randn(2, 5, 16, dtype=torch.float32)

    def layer_norm(h, norm):
        mean = h.mean(dim=-1, keepdim=True)
        variance = ((h - mean) ** 2).mean(dim=-1, keepdim=True)
        return (h - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias

    with torch.no_grad():
        normed = layer_norm(x, block.norm1)
        h = x + block.attention(normed, normed, normed)
        by_hand = h + block.mlp[3](block.mlp[1](block.mlp[0](layer_norm(h, block.norm2))))
        torch.testing.assert_close(block(x), by_hand, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(block(x, cache=None), block(x), rtol=0, atol=0)
    assert TransformerBlock(16, 4, num_kv_heads=None).attention.num_kv_heads == 4


def test_the_printed_class_says_its_cache_arguments_are_lesson_10s():
    import inspect

    source = inspect.getsource(TransformerBlock)
    docstring = TransformerBlock.__doc__
    assert "cache" in source and "num_kv_heads" in source
    assert "num_kv_heads and cache belong to lesson 10" in " ".join(docstring.split())
