"""Attention that forgets (lesson 14): sliding windows, sink tokens and learned sink logits.

A sliding window lets the query at absolute position p see the keys p - window < j <= p: its last
``window`` keys, itself included (the convention of Mistral's, Gemma's and gpt-oss's code in Hugging
Face transformers). Sink tokens, the first ``sink_tokens`` positions, stay visible to every later
query (StreamingLLM). A learned sink logit (gpt-oss) is one more score per head in the softmax's
denominator: it takes weight and gives no value back.
"""

import math
import numbers

import torch

from attn.common.device import check_device
from attn.common.layer_checks import check_attention_shapes, check_scores_fit
from attn.common.validate import require_computable, require_finite, require_floating, require_tensor, type_name
from attn.ring_cache import RingKVCache

MAX_MASK_ENTRIES = 2**32  # 4 GiB of booleans: a larger mask is surely a mistake
POSITION_CAP = 2**62  # beyond every position a tensor can index, and far from int64's end


def check_window_arguments(window, sink_tokens):
    """``window`` (None or a positive int) and ``sink_tokens`` (an int >= 0, only with a window)."""
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, numbers.Integral):
            raise TypeError(f"window must be None or a positive int (keys each query sees), got {type_name(window)} {window!r}")
        if window < 1:
            raise ValueError(f"window must be at least 1 (a query sees at least itself), got {window}")
        window = int(window)
    if isinstance(sink_tokens, bool) or not isinstance(sink_tokens, numbers.Integral):
        raise TypeError(f"sink_tokens must be an int >= 0 (the first positions kept visible), got {type_name(sink_tokens)} "
                        f"{sink_tokens!r}")
    if sink_tokens < 0:
        raise ValueError(f"sink_tokens must be 0 or more, got {sink_tokens}")
    if sink_tokens and window is None:
        raise ValueError(f"sink_tokens={sink_tokens} needs a window: without one every key is visible already")
    return window, int(sink_tokens)


def _check_length(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type_name(value)} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, got {value}")
    return int(value)


def window_keep_mask(query_positions, key_positions, window, sink_tokens=0):
    """Keep-mask (T_q, T_k) from absolute positions: key j is kept for query p when
    j <= p and (p - window < j or j < sink_tokens).

    query_positions (T_q,), key_positions (T_k,): integer tensors on one device, in any order
    (a ring buffer stores its keys out of order).
    """
    window, sink_tokens = check_window_arguments(window, sink_tokens)
    if window is None:
        raise ValueError("window must be a positive int here, got None")
    for name, positions in (("query_positions", query_positions), ("key_positions", key_positions)):
        require_tensor(name, positions)
        if positions.dim() != 1 or positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise ValueError(f"{name} must be a 1-D integer tensor, got {positions.dtype} {tuple(positions.shape)}")
    if query_positions.device != key_positions.device:
        raise ValueError(f"query_positions are on {query_positions.device} but key_positions on {key_positions.device}; "
                         "move them to one device with .to(...)")
    # A window or a sink count beyond any position sees every key: capped, so that p - window cannot wrap in int64.
    window, sink_tokens = min(window, POSITION_CAP), min(sink_tokens, POSITION_CAP)
    query, key = query_positions[:, None], key_positions[None, :]  # (T_q, 1), (1, T_k)
    causal = key <= query
    recent = key > query - window
    sink = key < sink_tokens
    return causal & (recent | sink)  # (T_q, T_k)


def sliding_window_mask(t_q, t_k, window, sink_tokens=0, device=None):
    """Bool keep-mask (T_q, T_k), causal and end-aligned: query i sits at absolute position
    p = T_k - T_q + i and sees keys p - window < j <= p, plus keys j < sink_tokens."""
    t_q, t_k = _check_length("T_q", t_q), _check_length("T_k", t_k)
    check_window_arguments(window, sink_tokens)
    device = check_device("device", device)
    if t_q > t_k:
        raise ValueError(f"T_q={t_q} is more than T_k={t_k}: end-aligned, each query needs its own key among the keys")
    if t_q * t_k > MAX_MASK_ENTRIES:
        raise ValueError(f"a ({t_q}, {t_k}) mask would hold {t_q * t_k:,} entries, more than {MAX_MASK_ENTRIES:,}; "
                         "decode with an attn.RingKVCache instead of building the whole mask")
    key_positions = torch.arange(t_k, device=device)  # (T_k,)
    return window_keep_mask(key_positions[t_k - t_q:], key_positions, window, sink_tokens)


def layer_keep_mask(keep_mask, t_q, t_k, window, sink_tokens, cache, device):
    """The keep-mask a windowed layer attends with: ``keep_mask`` (4-D or None) AND the window's
    mask (1, 1, T_q, T_k), from the ring cache's key positions when the keys came from one."""
    if keep_mask is not None and (not isinstance(keep_mask, torch.Tensor) or keep_mask.dtype != torch.bool
                                  or keep_mask.dim() != 4 or not _broadcasts(keep_mask.shape, (*keep_mask.shape[:2], t_q, t_k))):
        raise ValueError(f"keep_mask must be None or a 4-D bool tensor broadcastable to (B, H, {t_q}, {t_k})")
    if isinstance(cache, RingKVCache):
        key_positions = cache.key_positions.to(device)  # (T_k,): where each returned key sits
        window_mask = window_keep_mask(key_positions[-t_q:], key_positions, window, sink_tokens)
    else:
        window_mask = sliding_window_mask(t_q, t_k, window, sink_tokens, device)
    window_mask = window_mask[None, None]  # (1, 1, T_q, T_k)
    return window_mask if keep_mask is None else keep_mask & window_mask


def check_window_call(layer, mask, key_padding_mask, cache):
    """A ring cache only goes with a windowed layer of the same window and sinks, and no extra masks; an evicting
    cache (lesson 21) with a layer without a window, and no extra masks."""
    if getattr(cache, "evicts", False):
        if layer.window is not None:
            raise ValueError(f"{cache!r} chooses which keys to keep, and this layer has a window of its own "
                             f"({layer.window}): give a windowed layer an attn.RingKVCache instead")
        if mask is not None or key_padding_mask is not None:
            raise ValueError("mask and key_padding_mask cannot be used with an evicting cache: each head keeps its own "
                             "positions, so no mask over positions lines up with its keys")
    if not isinstance(cache, RingKVCache):
        return
    if layer.window is None:
        raise ValueError(f"{cache!r} forgets old positions, but this layer has no window (a global layer): "
                         "give it an attn.KVCache instead")
    if (cache.window, cache.sink_tokens) != (layer.window, layer.sink_tokens):
        raise ValueError(f"the ring cache keeps window={cache.window}, sink_tokens={cache.sink_tokens} but the layer "
                         f"attends with window={layer.window}, sink_tokens={layer.sink_tokens}; make them equal")
    if mask is not None or key_padding_mask is not None:
        raise ValueError("mask and key_padding_mask cannot be used with a ring cache (its keys are stored out of order); "
                         "the window's own mask is applied")


def sink_attention(query, key, value, sink_logits, keep_mask=None):
    """Attention with one learned sink logit per head (gpt-oss), written out.

    query (B, H, T_q, d); key, value (B, H_kv, T_k, d), H_kv dividing H; sink_logits (H,);
    keep_mask broadcastable to (B, H, T_q, T_k) or None. Each row's softmax runs over its scores
    and the sink logit; the sink's share is dropped, so a row's weights sum to less than 1.
    Returns output (B, H, T_q, d) and weights (B, H, T_q, T_k).
    """
    _check_sink_inputs(query, key, value, sink_logits, keep_mask)
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # (B, H, T_k, d)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (B, H, T_q, T_k)
    if keep_mask is not None:
        scores = scores.masked_fill(~keep_mask, float("-inf"))
    sink_column = sink_logits[None, :, None, None].expand(*scores.shape[:3], 1)  # (B, H, T_q, 1)
    weights = torch.softmax(torch.cat((scores, sink_column), dim=-1), dim=-1)[..., :-1]  # sink's share dropped
    return weights @ value, weights


def sink_rescale(output, logsumexp, sink_logits):
    """The log-sum-exp form of the learned sink: plain attention's output (B, H, T_q, d) and its row
    log-sum-exp (B, H, T_q), rescaled by sigmoid(logsumexp - sink), the share the keys keep."""
    require_tensor("output", output)
    require_tensor("logsumexp", logsumexp)
    require_tensor("sink_logits", sink_logits)
    if output.dim() != 4 or logsumexp.shape != output.shape[:3] or sink_logits.shape != (output.shape[1],):
        raise ValueError(f"expected output (B, H, T_q, d), logsumexp (B, H, T_q) and sink_logits (H,), got "
                         f"{tuple(output.shape)}, {tuple(logsumexp.shape)}, {tuple(sink_logits.shape)}")
    for name, tensor in (("output", output), ("logsumexp", logsumexp), ("sink_logits", sink_logits)):
        require_computable(name, tensor)
        require_floating(name, tensor)
        if tensor.dtype != output.dtype or tensor.device != output.device:
            raise TypeError(f"{name} is {tensor.dtype} on {tensor.device} but output is {output.dtype} on {output.device}")
    require_finite("output", output)
    require_finite("sink_logits", sink_logits, "a NaN or infinite sink would take all of every row's weight, or NaN")
    if torch.isnan(logsumexp).any() or (logsumexp == float("inf")).any():
        raise ValueError("logsumexp holds NaN or +inf; a row's log-sum-exp is finite, or -inf for a row that sees no key")
    keep_share = torch.sigmoid(logsumexp - sink_logits[None, :, None])  # (B, H, T_q)
    return output * keep_share[..., None]


def _check_sink_inputs(query, key, value, sink_logits, keep_mask=None):
    check_attention_shapes(query, key, value)
    require_tensor("sink_logits", sink_logits)
    if sink_logits.shape != (query.shape[1],):
        raise ValueError(f"sink_logits must have one logit per query head, shape ({query.shape[1]},), "
                         f"got {tuple(sink_logits.shape)}")
    if sink_logits.dtype != query.dtype or sink_logits.device != query.device:
        raise TypeError(f"sink_logits is {sink_logits.dtype} on {sink_logits.device} but query is {query.dtype} on "
                        f"{query.device}; convert it with sink_logits.to(query)")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_finite(name, tensor)
    require_finite("sink_logits", sink_logits, "a NaN or infinite sink would take all of every row's weight, or NaN")
    check_scores_fit(query, key, query.dtype)
    if keep_mask is not None:
        require_tensor("keep_mask", keep_mask)
        scores_shape = (*query.shape[:3], key.shape[2])
        if keep_mask.dtype != torch.bool or keep_mask.dim() > 4 or not _broadcasts(keep_mask.shape, scores_shape):
            raise ValueError(f"keep_mask must be a bool tensor broadcastable to the scores (B, H, T_q, T_k) = {scores_shape}, "
                             f"got {keep_mask.dtype} {tuple(keep_mask.shape)}")
        if keep_mask.device != query.device:
            raise ValueError(f"keep_mask is on {keep_mask.device} but query is on {query.device}; "
                             "move it with keep_mask.to(query.device)")


def _broadcasts(shape, target):
    """True if ``shape`` broadcasts to ``target`` without changing it."""
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


# Checking against the models that use windows --------------------------------------------------


def rotary_pairing(head_dim):
    """The order (d,) that takes a query or key in the rotate_half layout (feature i pairs with i + d/2,
    as Hugging Face's Mistral, Gemma and gpt-oss code pairs them) to the course's layout (2i pairs with 2i + 1)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, numbers.Integral) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be an even whole number of 2 or more (rotary turns pairs), got {head_dim!r:.40}")
    if head_dim > 2**20:
        raise ValueError(f"head_dim={head_dim} is more features than any head has (at most 2**20)")
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half) + half), dim=1).flatten()  # (d,)
