"""A slow reference for the layer tests: attention written with loops, one (batch, head) at a time."""

import math

import torch


def full_keep_mask(batch, num_heads, t_q, t_k, mask=None, key_padding_mask=None, is_causal=False):
    """The (B, H, T_q, T_k) keep-mask the layer's arguments describe, spelled out element by element."""
    keep = torch.ones(batch, num_heads, t_q, t_k, dtype=torch.bool)
    if mask is not None:
        rank = mask.dim()
        shaped = mask[:, None] if rank == 3 else mask.reshape((1,) * (4 - rank) + tuple(mask.shape))
        keep &= shaped.expand(batch, num_heads, t_q, t_k).cpu()
    for i in range(t_q):
        for j in range(t_k):
            if is_causal and j > t_k - t_q + i:  # query i is position t_k - t_q + i
                keep[:, :, i, j] = False
            if key_padding_mask is not None:
                keep[:, :, i, j] &= key_padding_mask[:, j].cpu()[:, None]
    return keep


def reference_attention(layer, query, key, value, keep):
    """The layer's output (B, T_q, E) and weights (B, H, T_q, T_k), row by row with repeated key/value heads."""
    batch, t_q, embed_dim = query.shape
    t_k = key.shape[1]
    num_heads, num_kv_heads, head_dim = layer.num_heads, layer.num_kv_heads, layer.head_dim
    group = num_heads // num_kv_heads
    q = layer.query_proj(query).reshape(batch, t_q, num_heads, head_dim)
    k = layer.key_proj(key).reshape(batch, t_k, num_kv_heads, head_dim)
    v = layer.value_proj(value).reshape(batch, t_k, num_kv_heads, head_dim)
    heads = torch.zeros(batch, t_q, num_heads, head_dim, dtype=query.dtype)
    weights = torch.zeros(batch, num_heads, t_q, t_k, dtype=query.dtype)
    for b in range(batch):
        for h in range(num_heads):
            allowed = keep[b, h]  # (T_q, T_k)
            scores = q[b, :, h] @ k[b, :, h // group].T / math.sqrt(head_dim)  # (T_q, T_k): key/value head h // group
            rows = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            rows = torch.where(allowed.any(dim=-1, keepdim=True), rows, 0.0)  # nothing to attend to: zero weights
            weights[b, h] = rows
            heads[b, :, h] = rows @ v[b, :, h // group]
    return layer.out_proj(heads.reshape(batch, t_q, embed_dim)), weights
