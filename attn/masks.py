"""Keep-masks for the PyTorch layer: check what the caller passes, bring it to one 4-D shape, add causality.

Convention (the course's and ``scaled_dot_product_attention``'s): a boolean keep-mask, True = may attend.
Every mask is normalised once, here, to a tensor broadcastable to (B, H, T_q, T_k), so the explicit
and the fused paths always receive the same mask.
"""

import torch

from attn.common.device import check_device
from attn.common.sizes import check_allocation
from attn.common.validate import type_name, whole_count

MEANINGS = {"mask": "True = may attend", "keep_mask": "True = may attend", "key_padding_mask": "True = real token"}


def check_bool_mask(name, mask, device):
    """TypeError/ValueError unless ``mask`` is a boolean tensor on ``device``, saying how to convert it."""
    if name not in MEANINGS:
        raise ValueError(f"name must be one of {', '.join(MEANINGS)}, the masks this check knows, got {name!r:.40}")
    meaning = MEANINGS[name]
    if type(mask).__module__ == "numpy":
        raise TypeError(
            f"{name} is a NumPy array (dtype {mask.dtype}); convert it with torch.from_numpy({name}) "
            f"and make it boolean ({meaning})"
        )
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor ({meaning}), got {type_name(mask)}")
    if mask.dtype == torch.bool:
        pass
    elif mask.is_floating_point():
        raise TypeError(
            f"{name} must be boolean ({meaning}), got {mask.dtype}; an additive mask (0 = attend, -inf = blocked) "
            f"converts with {name} == 0"
        )
    elif mask.dtype.is_complex:
        raise TypeError(f"{name} must be boolean ({meaning}), got {mask.dtype}")
    else:
        raise TypeError(
            f"{name} must be boolean ({meaning}), got {mask.dtype}; if 1 means {meaning.split(' = ')[1]}, "
            f"convert it with {name}.bool()"
        )
    if mask.device != device:
        raise ValueError(f"{name} is on device {mask.device} but the query is on {device}; move it with {name}.to('{device}')")


def as_keep_mask(mask, target, device):
    """``mask`` of rank 0-4 as a 4-D keep-mask broadcastable to ``target`` = (B, H, T_q, T_k).

    Rank 4: as given; rank 3: (B, T_q, T_k), a head axis is inserted; rank 2: (T_q, T_k);
    rank 1: (T_k,), the same keys for every query; rank 0: one bool for everything.
    """
    check_bool_mask("mask", mask, device)
    keep_mask = mask.unsqueeze(1) if mask.dim() == 3 else mask  # (B, T_q, T_k) -> (B, 1, T_q, T_k)
    if keep_mask.dim() <= 4:
        keep_mask = keep_mask[(None,) * (4 - keep_mask.dim())]  # leading axes of size 1
    try:
        fits = torch.broadcast_shapes(keep_mask.shape, target) == target
    except RuntimeError:
        fits = False
    if mask.dim() > 4 or not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, T_q, T_k) = {target} "
            "(a 3-D mask is read as (B, T_q, T_k), 2-D as (T_q, T_k), 1-D as (T_k,); "
            "for padding pass key_padding_mask (B, T_k) instead)"
        )
    return keep_mask


def check_keep_mask(keep_mask, target, device):
    """explicit_attention's and fused_attention's keep_mask: None, or a boolean tensor of rank 0 to 4 on ``device``
    that broadcasts to ``target`` = (B, H, T_q, T_k)."""
    if keep_mask is None:
        return
    check_bool_mask("keep_mask", keep_mask, device)
    try:
        fits = keep_mask.dim() <= 4 and torch.broadcast_shapes(keep_mask.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"keep_mask of shape {tuple(keep_mask.shape)} does not broadcast to (B, H, T_q, T_k) = {target}")


def as_padding_keep_mask(key_padding_mask, batch, length, device):
    """``key_padding_mask`` (B, T_k), True = real token, as a keep-mask (B, 1, 1, T_k)."""
    check_bool_mask("key_padding_mask", key_padding_mask, device)
    if tuple(key_padding_mask.shape) != (batch, length):
        raise ValueError(
            f"key_padding_mask must have shape (B, T_k) = ({batch}, {length}), got {tuple(key_padding_mask.shape)}; "
            "True marks a real token (nn.MultiheadAttention's key_padding_mask is the opposite: pass ~their_mask)"
        )
    return key_padding_mask[:, None, None, :]


def build_keep_mask(mask, key_padding_mask, query, key, cache=None):
    """One keep-mask broadcastable to (B, H, T_q, T_k) from ``mask`` and ``key_padding_mask``, or None if both are None.

    query (B, H, T_q, d), key (B, H_kv, T_new, d); with a ``cache``, T_k = len(cache) + T_new, the keys
    attended to once this step's keys are appended. Causality is added by the attention functions.
    """
    for name, tensor in (("query", query), ("key", key)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4:
            raise TypeError(f"{name} must be a tensor (B, H, T, d), got {type_name(tensor)}")
    if cache is not None and not callable(getattr(cache, "__len__", None)):
        raise TypeError(f"cache must be an attn.KVCache or None, got {type_name(cache)}")
    batch, num_heads, t_q = query.shape[:3]
    t_k = key.shape[2] + (len(cache) if cache is not None else 0)
    keep_mask = None if mask is None else as_keep_mask(mask, (batch, num_heads, t_q, t_k), query.device)
    if key_padding_mask is not None:
        padding = as_padding_keep_mask(key_padding_mask, batch, t_k, query.device)  # (B, 1, 1, T_k)
        keep_mask = padding if keep_mask is None else keep_mask & padding
    return keep_mask


def causal_keep_mask(t_q, t_k, device=None):
    """(1, 1, T_q, T_k) causal keep-mask aligned to the END of the keys.

    Query i sits at position T_k - T_q + i and may attend to keys 0 .. T_k - T_q + i. With T_q == T_k this
    is the usual lower triangle; with T_q < T_k (new queries after cached keys) it is what decoding needs.
    PyTorch's ``is_causal=True`` is documented as aligned to the start (top-left), which does not fit new
    queries after cached keys; PyTorch's end-aligned mask is ``torch.nn.attention.bias.causal_lower_right``,
    equal to this one (tests/layers/test_masks.py checks it).
    """
    t_q, t_k = whole_count("t_q", t_q), whole_count("t_k", t_k)
    device = check_device("device", device)
    check_allocation(f"a causal mask of {t_q} x {t_k} bools", t_q * t_k, device)
    return _causal_keep_mask(t_q, t_k, device)


def _causal_keep_mask(t_q, t_k, device):
    """``causal_keep_mask`` without its checks, for the layers, whose query and key lengths are known good."""
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)[None, None]


def add_causal(keep_mask, is_causal, t_q, t_k, device):
    """``keep_mask`` AND the end-aligned causal mask when ``is_causal``; otherwise ``keep_mask`` unchanged."""
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)}")
    if not is_causal:
        return keep_mask
    causal = _causal_keep_mask(t_q, t_k, device)
    return causal if keep_mask is None else keep_mask & causal


def open_empty_rows(keep_mask):
    """Rows of a keep-mask that allow no key are opened fully, so no kernel ever sees 0/0.

    ``keep_mask``: 4-D, broadcastable to (B, H, T_q, T_k). Returns the opened mask and ``has_any``
    (True where the row allowed some key, shaped (B|1, H|1, T_q|1, 1)), which the caller multiplies
    into the result to give those rows zeros.
    """
    if not isinstance(keep_mask, torch.Tensor) or keep_mask.dtype != torch.bool or keep_mask.dim() == 0:
        raise TypeError(f"keep_mask must be a bool tensor (True = may attend), got {type_name(keep_mask)}")
    has_any = keep_mask.any(dim=-1, keepdim=True)
    return keep_mask | ~has_any, has_any
