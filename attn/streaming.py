"""Sink tokens as StreamingLLM places them (lesson 16, after lesson 14's sinks): positions in the cache.

Lesson 14 keeps the sink tokens at their absolute positions: the query at position p scores sink s at
distance p - s, which grows without bound as the text goes on. StreamingLLM (Xiao et al. 2024) caches
the keys before rotary and gives each cached key its place in the cache as its position: the sinks
0 .. S - 1, the window's keys S, S + 1, ... in order, and the query the last place. A key of the window
keeps its distance p - j to the query; a sink is never further than S + W - 1 away.

Written from absolute positions: once the window has left the sinks behind (p - W + 1 > S), the cache
is S sinks and W recent keys, so every place is the absolute position minus shift(p) = p - W + 1 - S.
Rotary scores depend only on the distance, so a window key's score is the usual one, and a sink's is
the query's rotated at min(p, S + W - 1) against the sink's key rotated at s.
"""

import math

import torch

from attn.common.layer_checks import check_attention_shapes
from attn.common.validate import require_computable, type_name
from attn.masks import check_keep_mask
from attn.positions import apply_rotary
from attn.window import POSITION_CAP, check_window_arguments, window_keep_mask

SINK_POSITIONS = ("absolute", "cache")
MAX_LISTED_PLACES = 2**20  # cache_places builds Python lists: a million places is already far past an example


def check_sink_positions(sink_positions, window):
    """``sink_positions``: 'absolute' (lesson 14: keys rotated where they stand in the text) or 'cache'
    (StreamingLLM: keys rotated at their places in the cache), the second only with a window."""
    if not isinstance(sink_positions, str) or sink_positions not in SINK_POSITIONS:
        raise ValueError(f"sink_positions must be 'absolute' or 'cache', got {type_name(sink_positions)} {sink_positions!r}")
    if sink_positions == "cache" and window is None:
        raise ValueError("sink_positions='cache' needs a window: without one the cache keeps every key at its own position")
    return sink_positions


def cache_places(query_position, window, sink_tokens=0):
    """The definition, for one query at absolute position p (an int): (kept, places), two lists of ints.

    ``kept``: the absolute positions the cache holds once p is written (the sinks, then the last
    ``window`` positions, in order); ``places``: their positions in the cache, 0, 1, ..., len(kept) - 1.
    The query's own place is the last one.
    """
    window, sink_tokens = check_window_arguments(window, sink_tokens)
    if window is None:
        raise ValueError("window must be a positive int here, got None")
    if isinstance(query_position, bool) or not isinstance(query_position, int) or query_position < 0:
        raise ValueError(f"query_position must be an int >= 0, got {type_name(query_position)} {query_position!r}")
    sinks = min(sink_tokens, query_position + 1)
    first_recent = max(query_position - window + 1, sinks)  # the window's first position past the sinks
    size = sinks + query_position + 1 - first_recent
    if size > MAX_LISTED_PLACES:
        raise ValueError(f"the cache holds {size:,} places at position {query_position:,}; cache_places lists at most "
                         f"{MAX_LISTED_PLACES:,} (it is the definition, for small examples; cache_shift computes long ones)")
    kept = [*range(sinks), *range(first_recent, query_position + 1)]
    return kept, list(range(len(kept)))


def cache_shift(query_positions, window, sink_tokens):
    """How far each query's cache places sit below the absolute positions: max(0, p - W + 1 - S), (T_q,)."""
    _check_positions("query_positions", query_positions)
    window, sink_tokens = check_window_arguments(window, sink_tokens)
    if window is None:
        raise ValueError("window must be a positive int: without a window no key leaves the cache")
    return _shift(query_positions, window, sink_tokens)


def _shift(query_positions, window, sink_tokens):
    """cache_shift without its checks. A reach W + S - 1 past every int64 position is capped (the shift is 0)."""
    reach = min(window + sink_tokens - 1, torch.iinfo(torch.int64).max)
    return (query_positions - reach).clamp(min=0)


def streaming_attention(query, key, value, window, sink_tokens=0, rotary_base=None, query_positions=None,
                        key_positions=None, keep_mask=None):
    """Windowed attention with sinks, every key scored at its place in the cache (StreamingLLM).

    query (B, H, T_q, d), key and value (B, H_kv, T_k, d), H_kv dividing H: queries and keys NOT yet
    rotated. key_positions (T_k,): the absolute position of each key, in any order (a ring cache's
    slots), default arange(T_k); query_positions (T_q,): default the last T_q key positions (end-aligned).
    rotary_base: lesson 8's rotary (None: no positions, and then this is lesson 14's windowed attention).
    keep_mask: an extra boolean keep-mask broadcastable to (B, H, T_q, T_k), or None.
    Returns output (B, H, T_q, d) and weights (B, H, T_q, T_k).
    """
    query_positions, key_positions = _check_streaming_inputs(query, key, value, query_positions, key_positions)
    window, sink_tokens = check_window_arguments(window, sink_tokens)
    if window is None:
        raise ValueError("window must be a positive int: StreamingLLM's cache is a window plus sinks")
    # A window or a sink count beyond every position changes nothing: capped, so that int64 tensors can compare with them.
    window, sink_tokens = min(window, POSITION_CAP), min(sink_tokens, POSITION_CAP)
    check_keep_mask(keep_mask, (*query.shape[:3], key.shape[2]), query.device)
    visible = window_keep_mask(query_positions, key_positions, window, sink_tokens)  # (T_q, T_k)
    if keep_mask is not None:
        visible = visible & keep_mask
    if not visible.any(dim=-1).all():
        raise ValueError("a query sees no key: every query's own position must be among key_positions")
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # (B, H, T_k, d)
    scale = 1 / math.sqrt(query.shape[-1])
    if rotary_base is None:
        scores = query @ key.transpose(-2, -1) * scale  # (B, H, T_q, T_k)
    else:
        rotated_key = apply_rotary(key, key_positions, rotary_base)  # (B, H, T_k, d)
        scores = apply_rotary(query, query_positions, rotary_base) @ rotated_key.transpose(-2, -1) * scale  # (B, H, T_q, T_k)
        is_sink = key_positions < sink_tokens  # (T_k,)
        if is_sink.any():  # the sinks' columns again, the queries rotated at their places in the cache
            capped = query_positions - _shift(query_positions, window, sink_tokens)  # (T_q,): at most S + W - 1
            sink_keys = rotated_key[:, :, is_sink].transpose(-2, -1)  # (B, H, d, S)
            scores[..., is_sink] = apply_rotary(query, capped, rotary_base) @ sink_keys * scale
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return weights @ value, weights


def _check_streaming_inputs(query, key, value, query_positions, key_positions):
    check_attention_shapes(query, key, value)
    if key_positions is None:
        key_positions = torch.arange(key.shape[2], device=key.device)
    if query_positions is None:
        if query.shape[2] > key.shape[2]:
            raise ValueError(f"T_q={query.shape[2]} is more than T_k={key.shape[2]}: give query_positions")
        query_positions = key_positions[key.shape[2] - query.shape[2]:]
    for name, positions, length in (("query_positions", query_positions, query.shape[2]),
                                    ("key_positions", key_positions, key.shape[2])):
        _check_positions(name, positions)
        if len(positions) != length:
            raise ValueError(f"{name} holds {len(positions)} positions for {length} vectors")
    return query_positions.to(query.device), key_positions.to(key.device)


def _check_positions(name, positions):
    """``positions``: a 1-D integer tensor of positions 0 or more, on a real device."""
    require_computable(name, positions)
    if positions.dim() != 1 or positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D integer tensor, got {positions.dtype} {tuple(positions.shape)}")
    if len(positions) and positions.min() < 0:
        raise ValueError(f"{name} must be 0 or more, got {positions.min().item()}")
