"""Multi-head attention in PyTorch: the course's layer, checked against nn.MultiheadAttention."""

import math

import torch
from torch import nn
from torch.nn import functional


def split_heads(x, num_heads):
    """(B, T, E) -> (B, H, T, E / H): each head sees its own slice of the features."""
    batch, length, embed_dim = x.shape
    return x.view(batch, length, num_heads, embed_dim // num_heads).transpose(1, 2)


def merge_heads(x):
    """(B, H, T, d) -> (B, T, H * d): the inverse of ``split_heads``."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


def open_empty_rows(keep_mask):
    """Rows of a keep-mask that allow no key are opened fully, so no kernel ever sees 0/0.

    Returns the opened mask and ``has_any`` (True where the row allowed some key, shaped
    (..., T_q, 1)), which the caller multiplies into the result to give those rows zeros.
    """
    has_any = keep_mask.any(dim=-1, keepdim=True)
    return keep_mask | ~has_any, has_any


def explicit_attention(query, key, value, keep_mask=None):
    """softmax(Q K^T / sqrt(d)) V written out, keeping the weights.

    query (B, H, T_q, d), key (B, H, T_k, d), value (B, H, T_k, d), keep_mask broadcastable
    to (B, H, T_q, T_k). Returns output (B, H, T_q, d) and weights (B, H, T_q, T_k).
    """
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (B, H, T_q, T_k)
    has_any = None
    if keep_mask is not None:
        keep_mask, has_any = open_empty_rows(keep_mask)
        scores = scores.masked_fill(~keep_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if has_any is not None:
        weights = weights * has_any  # rows with nothing to attend to: zero weights
    return weights @ value, weights


def fused_attention(query, key, value, keep_mask=None):
    """The same output from PyTorch's fused kernel, which never stores the weights."""
    if keep_mask is None:
        return functional.scaled_dot_product_attention(query, key, value)
    keep_mask, has_any = open_empty_rows(keep_mask)
    output = functional.scaled_dot_product_attention(query, key, value, attn_mask=keep_mask)
    return output * has_any


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first.

    embed_dim E must be divisible by num_heads H; each head works on d = E / H features.
    forward(query (B, T_q, E), key (B, T_k, E), value (B, T_k, E), mask=None, need_weights=False)
    returns output (B, T_q, E), or (output, weights (B, H, T_q, T_k)) with need_weights=True.
    mask: boolean keep-mask (True = may attend) of shape (T_q, T_k), (B, T_q, T_k) or
    broadcastable to (B, H, T_q, T_k).
    """

    def __init__(self, embed_dim, num_heads, bias=True):
        super().__init__()
        if num_heads <= 0 or embed_dim <= 0 or embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be a positive multiple of num_heads={num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.query_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.key_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.value_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key, value, mask=None, need_weights=False):
        self._check_inputs(query, key, value)
        keep_mask = None if mask is None else self._check_mask(mask, query, key)
        q = split_heads(self.query_proj(query), self.num_heads)  # (B, H, T_q, d)
        k = split_heads(self.key_proj(key), self.num_heads)  # (B, H, T_k, d)
        v = split_heads(self.value_proj(value), self.num_heads)  # (B, H, T_k, d)
        if need_weights:
            heads, weights = explicit_attention(q, k, v, keep_mask)
        else:
            heads, weights = fused_attention(q, k, v, keep_mask), None
        output = self.out_proj(merge_heads(heads))  # (B, T_q, E)
        return (output, weights) if need_weights else output

    def _check_inputs(self, query, key, value):
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            if tensor.dim() != 3 or tensor.shape[-1] != self.embed_dim:
                raise ValueError(f"{name} must have shape (B, T, {self.embed_dim}), got {tuple(tensor.shape)}")
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"batch sizes differ: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value lengths differ: key {tuple(key.shape)}, value {tuple(value.shape)}")

    def _check_mask(self, mask, query, key):
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = may attend), got {mask.dtype}")
        target = (query.shape[0], self.num_heads, query.shape[1], key.shape[1])  # (B, H, T_q, T_k)
        keep_mask = mask.unsqueeze(1) if mask.dim() == 3 else mask  # (B, T_q, T_k) -> (B, 1, T_q, T_k)
        try:
            fits = torch.broadcast_shapes(keep_mask.shape, target) == target
        except RuntimeError:
            fits = False
        if mask.dim() > 4 or not fits:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, T_q, T_k) = {target}")
        return keep_mask

    @classmethod
    def from_torch(cls, module):
        """A layer with the weights of an ``nn.MultiheadAttention`` (whose in_proj_weight stacks q, k, v)."""
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"from_torch needs an nn.MultiheadAttention, got {type(module).__name__}")
        if not module._qkv_same_embed_dim or module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch supports nn.MultiheadAttention without kdim/vdim, add_bias_kv or add_zero_attn")
        bias = module.in_proj_bias is not None
        layer = cls(module.embed_dim, module.num_heads, bias=bias)
        layer.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        with torch.no_grad():
            weights = module.in_proj_weight.chunk(3)  # each (E, E): query, key, value
            for projection, weight in zip((layer.query_proj, layer.key_proj, layer.value_proj), weights, strict=True):
                projection.weight.copy_(weight)
            layer.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                for projection, part in zip(
                    (layer.query_proj, layer.key_proj, layer.value_proj), module.in_proj_bias.chunk(3), strict=True
                ):
                    projection.bias.copy_(part)
                layer.out_proj.bias.copy_(module.out_proj.bias)
        return layer
