"""QK-clip (Kimi K2's MuonClip, lesson 22): each head's largest logit, and the in-place rescaling of the heads
that passed a threshold. See ``attn.gates``."""

import math
import numbers

import torch

from attn.common.layer_checks import check_sequence
from attn.common.validate import require_computable, require_finite, require_floating, type_name
from attn.gates.functional import _causal_scores
from attn.gates.layers import GatedAttention
from attn.multihead import MultiHeadAttention, split_heads

__all__ = ["largest_logits", "qk_clip_"]


def _query_key_rows(layer):
    """(query rows per head (H, d), key rows per key head (H_kv, d)) of the layer's projections, or a sentence."""
    if isinstance(layer, GatedAttention):
        if layer.qk_norm:
            raise ValueError("this GatedAttention normalises its queries and keys (qk_norm=True), which would undo a "
                             "rescaled projection; QK-clip is for layers without QK-norm")
        width = layer.head_dim * (2 if layer.gate else 1)
        query = torch.arange(layer.num_heads)[:, None] * width + torch.arange(layer.head_dim)
    elif isinstance(layer, MultiHeadAttention):
        query = torch.arange(layer.num_heads * layer.head_dim).view(layer.num_heads, layer.head_dim)
    else:
        raise TypeError(f"layer must be an attn.MultiHeadAttention or an attn.gates.GatedAttention, got {type_name(layer)}")
    key = torch.arange(layer.num_kv_heads * layer.head_dim).view(layer.num_kv_heads, layer.head_dim)
    return query, key


def largest_logits(layer, x):
    """Each head's largest causal logit q . k / sqrt(d) on x (B, T, E) (self-attention), over the batch: (H,).

    layer: an attn.MultiHeadAttention (its rotary included, keys turned where they stand; a window, if it has one, is
    not applied: every causal pair counts) or an attn.gates.GatedAttention. What QK-clip reads.
    """
    if isinstance(layer, GatedAttention):
        with torch.no_grad():
            largest = layer.logits(x).amax(dim=(0, 2, 3))
    elif isinstance(layer, MultiHeadAttention):
        check_sequence("x", x, layer.embed_dim, layer.query_proj.weight)
        require_finite("x", x)
        if x.shape[1] == 0:
            raise ValueError(f"x holds no positions (shape {tuple(x.shape)}); give at least one token")
        with torch.no_grad():
            q = split_heads(layer.query_proj(x), layer.num_heads)
            k = split_heads(layer.key_proj(x), layer.num_kv_heads)
            q, k = layer._rotate(q, k, None)
            largest = _causal_scores(q, k, 1.0 / math.sqrt(layer.head_dim)).amax(dim=(0, 2, 3))
    else:
        raise TypeError(f"layer must be an attn.MultiHeadAttention or an attn.gates.GatedAttention, got {type_name(layer)}")
    if not bool(torch.isfinite(largest).all()):
        raise ValueError(f"x is finite, but the layer's logits overflowed {largest.dtype} on it; scale x down, or use float64")
    return largest


def qk_clip_(layer, max_logits, threshold):
    """QK-clip, in place: heads whose largest logit passed ``threshold`` get their logits scaled by threshold / S_max.

    layer: an attn.MultiHeadAttention, or a GatedAttention without QK-norm. max_logits (H,): each head's largest
    logit, as ``largest_logits`` measures it (in training: during the step just taken). threshold tau > 0.
    For a head with S_max > tau, gamma = tau / S_max: with one key head per query head, the head's query and key
    rows (weights and biases) are each multiplied by sqrt(gamma), as Kimi K2 does; with shared key heads
    (grouped-query attention), only the query rows, by gamma, so that the other heads reading the same keys keep
    their logits. Heads at or under tau are untouched. Returns gamma per head (H,), 1 where nothing changed.
    """
    query_rows, key_rows = _query_key_rows(layer)
    require_computable("max_logits", max_logits)
    require_floating("max_logits", max_logits)
    if tuple(max_logits.shape) != (layer.num_heads,):
        raise ValueError(f"max_logits must hold one number per head, shape ({layer.num_heads},), got "
                         f"{tuple(max_logits.shape)}")
    require_finite("max_logits", max_logits, "a head's largest logit is a finite number (largest_logits measures it)")
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"threshold must be a positive number (Kimi K2 used 100), got {type_name(threshold)} {threshold!r}")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a finite number above 0, got {threshold!r}: at 0 every head with a positive "
                         "logit would have its query and key weights scaled to 0, and could never attend again")
    weight = layer.query_proj.weight
    over = max_logits.detach().to(dtype=torch.float64, device="cpu") > threshold
    gamma = torch.where(over, threshold / max_logits.detach().to(torch.float64).cpu(), torch.ones(layer.num_heads,
                                                                                                 dtype=torch.float64))
    shared = layer.num_kv_heads != layer.num_heads
    query_factor = gamma if shared else gamma.sqrt()
    with torch.no_grad():
        for head in torch.nonzero(over).flatten().tolist():
            _scale_rows(layer.query_proj, query_rows[head], float(query_factor[head]))
            if not shared:
                _scale_rows(layer.key_proj, key_rows[head], float(query_factor[head]))
    return gamma.to(dtype=weight.dtype, device=weight.device)


def _scale_rows(linear, rows, factor):
    linear.weight[rows] *= factor
    if linear.bias is not None:
        linear.bias[rows] *= factor
