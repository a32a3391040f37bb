"""Copying PyTorch's own modules into the course's layers, so the two can be compared number for number.

``MultiHeadAttention.from_torch`` and ``TransformerBlock.from_torch`` call these: ``*_arguments`` checks the
module and returns the constructor arguments, ``copy_*`` copies the weights into the new layer.
"""

import torch
from torch import nn
from torch.nn import functional

from attn.common.validate import type_name


def attention_arguments(module):
    """Constructor arguments of MultiHeadAttention for an ``nn.MultiheadAttention``, after checking it can be copied."""
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(f"from_torch needs an nn.MultiheadAttention, got {type_name(module)}")
    if module.kdim != module.embed_dim or module.vdim != module.embed_dim or module.bias_k is not None or module.add_zero_attn:
        raise ValueError("from_torch supports nn.MultiheadAttention without kdim/vdim, add_bias_kv or add_zero_attn")
    if not module.batch_first:
        raise ValueError(
            "this nn.MultiheadAttention has batch_first=False, so it reads inputs as (T, B, E); attn.MultiHeadAttention "
            "reads (B, T, E). Build it with nn.MultiheadAttention(..., batch_first=True) (the weights are the same) "
            "and pass batch-first tensors to both"
        )
    return {
        "embed_dim": module.embed_dim,
        "num_heads": module.num_heads,
        "bias": module.in_proj_bias is not None,
        "dropout": module.dropout,
    }


def copy_attention(module, layer):
    """Copy an ``nn.MultiheadAttention``'s weights (its in_proj_weight stacks query, key, value) into ``layer``."""
    layer.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
    projections = (layer.query_proj, layer.key_proj, layer.value_proj)
    with torch.no_grad():
        for projection, weight in zip(projections, module.in_proj_weight.chunk(3), strict=True):  # each (E, E)
            projection.weight.copy_(weight)
        layer.out_proj.weight.copy_(module.out_proj.weight)
        if module.in_proj_bias is not None:
            for projection, bias in zip(projections, module.in_proj_bias.chunk(3), strict=True):  # each (E,)
                projection.bias.copy_(bias)
            layer.out_proj.bias.copy_(module.out_proj.bias)
    return layer.train(module.training)


def activation_name(activation):
    """'relu' or 'gelu' for the activation of an ``nn.TransformerEncoderLayer``, or None for anything else."""
    if activation is functional.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is functional.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    return None


def block_arguments(layer):
    """Constructor arguments of TransformerBlock for an ``nn.TransformerEncoderLayer``, after checking it can be copied."""
    if not isinstance(layer, nn.TransformerEncoderLayer):
        raise TypeError(f"from_torch needs an nn.TransformerEncoderLayer, got {type_name(layer)}")
    if not layer.norm_first:
        raise ValueError(
            "this nn.TransformerEncoderLayer has norm_first=False (post-norm: it normalises after each residual "
            "addition); attn.TransformerBlock is pre-norm. Build it with norm_first=True to compare the two"
        )
    if not layer.self_attn.batch_first:
        raise ValueError(
            "this nn.TransformerEncoderLayer has batch_first=False, so it reads inputs as (T, B, E); attn.TransformerBlock "
            "reads (B, T, E). Build it with batch_first=True (the weights are the same)"
        )
    without_affine = [name for name in ("norm1", "norm2") if getattr(layer, name).weight is None]
    if without_affine:
        raise ValueError(
            f"this layer's {' and '.join(without_affine)} has no learned scale and shift (elementwise_affine=False); "
            "attn.TransformerBlock's LayerNorms have both, so from_torch copies only LayerNorms built with the default "
            "elementwise_affine=True"
        )
    if layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError("from_torch copies nn.TransformerEncoderLayer built with bias=True (the default)")
    activation = activation_name(layer.activation)
    if activation is None:
        raise ValueError(f"from_torch copies the activations 'relu' and 'gelu', got {layer.activation!r}")
    dropouts = {layer.dropout.p, layer.dropout1.p, layer.dropout2.p, layer.self_attn.dropout}
    if len(dropouts) != 1:
        raise ValueError(f"attn.TransformerBlock uses one dropout probability everywhere, this layer has {sorted(dropouts)}")
    embed_dim = layer.self_attn.embed_dim
    return {
        "embed_dim": embed_dim,
        "num_heads": layer.self_attn.num_heads,
        "mlp_ratio": layer.linear1.out_features / embed_dim,
        "dropout": dropouts.pop(),
        "activation": activation,
    }


def copy_block(layer, block):
    """Copy an ``nn.TransformerEncoderLayer``'s weights, layer-norm eps and training mode into ``block``."""
    block.to(device=layer.linear1.weight.device, dtype=layer.linear1.weight.dtype)
    copy_attention(layer.self_attn, block.attention)
    pairs = ((layer.norm1, block.norm1), (layer.norm2, block.norm2), (layer.linear1, block.mlp[0]), (layer.linear2, block.mlp[3]))
    with torch.no_grad():
        for theirs, ours in pairs:
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
    block.norm1.eps, block.norm2.eps = layer.norm1.eps, layer.norm2.eps
    return block.train(layer.training)
