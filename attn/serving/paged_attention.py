"""Attention over a paged KV cache (lesson 19), vectorised: each sequence's pages gathered through its block table.

``paged_attention`` reads one layer's pool (N, P, H_kv, d) through a (S, M) block table: one gather brings every
sequence's M pages side by side, (S, M * P) positions, and a mask keeps the positions each sequence has (and,
with a window, those its queries can see). The lesson's loop version walks one block table page by page and
gives the same numbers.

Chunked prefill splits a step's attention in two, as lesson 12 splits a row of keys into tiles: the part over the
pages already cached (``paged_attention``) and the part over this step's own tokens (``chunk_attention``, causal),
each with its row log-sum-exp, then ``merge_attention`` weighs the two outputs by exp(lse - max) and renormalises:
exactly softmax attention over the union of the two sets of keys.
"""

import math

import torch

from attn.common.validate import require_computable, require_tensor, type_name, whole_number
from attn.window import POSITION_CAP

__all__ = ["paged_attention"]  # attend, gather_pages and chunk_attention: the step's parts, unchecked (merge_attention
# checks what it is given; the runner merges its own parts through _merge_attention)

NEG_INF = float("-inf")


def attend(query, key, value, keep):
    """Softmax attention with its log-sum-exp, written out.

    query (S, H, C, d); key, value (S, H_kv, K, d), H_kv dividing H; keep: bool broadcastable to (S, 1, C, K).
    Returns output (S, H, C, d) and logsumexp (S, H, C); a row with no key kept gives zeros and -inf."""
    batch, heads, length, head_dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, length, head_dim)  # (S, H_kv, G, C, d)
    scores = grouped @ key.unsqueeze(2).transpose(-2, -1) / math.sqrt(head_dim)  # (S, H_kv, G, C, K)
    scores = scores.reshape(batch, heads, length, keys).masked_fill(~keep, NEG_INF)  # (S, H, C, K)
    logsumexp = torch.logsumexp(scores, dim=-1)  # (S, H, C): -inf for an empty row
    shift = torch.where(torch.isinf(logsumexp), 0.0, logsumexp)[..., None]  # an empty row: exp(-inf - 0) = 0
    weights = torch.exp(scores - shift).reshape(batch, kv_heads, heads // kv_heads, length, keys)
    output = weights @ value.unsqueeze(2)  # (S, H_kv, G, C, d)
    return output.reshape(batch, heads, length, value.shape[-1]), logsumexp


def gather_pages(pages, block_tables):
    """One layer's pool (N, P, H_kv, d) read through block tables (S, M): (S, H_kv, M * P, d), position-ordered.

    A table entry -1 (no page) reads page 0; the caller's mask must hide those positions."""
    batch, width = block_tables.shape
    _, page_size, kv_heads, head_dim = pages.shape
    gathered = pages[block_tables.clamp(min=0)]  # (S, M, P, H_kv, d)
    return gathered.reshape(batch, width * page_size, kv_heads, head_dim).transpose(1, 2)


def paged_attention(query, key_pages, value_pages, block_tables, lengths, query_positions=None, window=None):
    """Attention of C queries per sequence over the cached positions 0 .. lengths[s] - 1 of their pages.

    query (S, H, C, d); key_pages, value_pages (N, P, H_kv, d): one layer's pool (PagedKVCache.key_pages[layer]);
    block_tables (S, M) int64 page ids (-1: none, or freed by a window); lengths (S,): positions cached.
    window (None or an int W): the query at position p sees keys p - W < j <= p only; query_positions (S, C)
    says where each query sits (default lengths[s] - 1: decoding, the newest key appended before it attends).
    Returns output (S, H, C, d) and logsumexp (S, H, C)."""
    _check_paged_inputs(query, key_pages, value_pages, block_tables, lengths)
    window, query_positions = _check_window(window, query_positions, query)
    keys, values = gather_pages(key_pages, block_tables), gather_pages(value_pages, block_tables)  # (S, H_kv, K, d)
    page_size = key_pages.shape[1]
    positions = torch.arange(keys.shape[2])  # (K,): position j of each gathered key
    has_page = (block_tables >= 0).repeat_interleave(page_size, dim=1)  # (S, K)
    keep = (positions[None] < lengths[:, None]) & has_page  # (S, K)
    keep = keep[:, None, None, :]  # (S, 1, 1, K)
    if window is not None:
        if query_positions is None:
            query_positions = (lengths - 1)[:, None].expand(-1, query.shape[2])  # (S, C)
        keep = keep & (positions > query_positions[..., None] - window)[:, None]  # (S, 1, C, K)
    return attend(query, keys, values, keep)


def chunk_attention(query, key, value, chunk_lengths):
    """Causal attention of each sequence's new tokens among themselves: query (S, H, C, d), key and value
    (S, H_kv, C, d), chunk_lengths (S,) real tokens per row (the rest is padding). Returns output (S, H, C, d)
    and logsumexp (S, H, C)."""
    length = query.shape[2]
    position = torch.arange(length)
    causal = position[None, :] <= position[:, None]  # (C, C): key j <= query i
    real = position[None, :] < chunk_lengths[:, None]  # (S, C): real keys
    return attend(query, key, value, causal[None, None] & real[:, None, None, :])


def merge_attention(output_a, logsumexp_a, output_b, logsumexp_b):
    """Two attentions of the same queries over two disjoint sets of keys, (S, H, C, d) and (S, H, C) each, as one:
    each output weighed by its share of the total exp(lse), which is softmax over the union of the keys.
    Returns output (S, H, C, d) and logsumexp (S, H, C)."""
    _check_merge_inputs(output_a, logsumexp_a, output_b, logsumexp_b)
    return _merge_attention(output_a, logsumexp_a, output_b, logsumexp_b)


def _merge_attention(output_a, logsumexp_a, output_b, logsumexp_b):
    """``merge_attention`` without its checks: the runner merges its own two parts at every layer of every step."""
    total = torch.logaddexp(logsumexp_a, logsumexp_b)  # (S, H, C)
    shift = torch.where(torch.isinf(total), 0.0, total)
    share_a = torch.exp(logsumexp_a - shift)[..., None]  # (S, H, C, 1): 0 where a had no key
    share_b = torch.exp(logsumexp_b - shift)[..., None]
    return share_a * output_a + share_b * output_b, total


def _check_paged_inputs(query, key_pages, value_pages, block_tables, lengths):
    for name, tensor in (("query", query), ("key_pages", key_pages), ("value_pages", value_pages),
                         ("block_tables", block_tables), ("lengths", lengths)):
        require_tensor(name, tensor)
        if tensor.device.type != "cpu" and tensor.device != query.device:
            raise ValueError(f"{name} is on {tensor.device} and query on {query.device}: put them on one device")
    if query.dim() != 4 or key_pages.dim() != 4 or key_pages.shape != value_pages.shape:
        raise ValueError(f"query must be (S, H, C, d) and key_pages, value_pages one pool (N, P, H_kv, d), got "
                         f"{tuple(query.shape)}, {tuple(key_pages.shape)}, {tuple(value_pages.shape)}")
    batch, heads, _, head_dim = query.shape
    kv_heads = key_pages.shape[2]
    if key_pages.shape[3] != head_dim or heads % kv_heads:
        raise ValueError(f"the pool's heads ({kv_heads}) must divide the query's ({heads}) and its head size "
                         f"({key_pages.shape[3]}) equal the query's ({head_dim})")
    if not query.is_floating_point() or query.dtype != key_pages.dtype or query.dtype != value_pages.dtype:
        raise TypeError(f"query and the pool must share one floating dtype, got {query.dtype}, {key_pages.dtype}, "
                        f"{value_pages.dtype}")
    if block_tables.dtype != torch.int64 or block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be int64 (S, M) = ({batch}, M), got {block_tables.dtype} "
                         f"{tuple(block_tables.shape)}")
    if lengths.dtype != torch.int64 or lengths.shape != (batch,):
        raise ValueError(f"lengths must be int64 (S,) = ({batch},), got {lengths.dtype} {tuple(lengths.shape)}")
    if block_tables.numel() and not (int(block_tables.min()) >= -1 and int(block_tables.max()) < key_pages.shape[0]):
        raise ValueError(f"block_tables must hold page ids 0 .. {key_pages.shape[0] - 1} (or -1 for none)")
    if lengths.numel() and not (int(lengths.min()) >= 0 and int(lengths.max()) <= block_tables.shape[1] * key_pages.shape[1]):
        raise ValueError(f"lengths must be 0 .. M * P = {block_tables.shape[1] * key_pages.shape[1]} (the pages listed)")
    if not torch.isfinite(query).all():
        raise ValueError(f"query holds NaN or inf ({type_name(query)}): every output would spread it")


def _check_window(window, query_positions, query):
    """window: None or a whole number >= 1 (capped past every position); query_positions: None or int64 (S, C)."""
    if window is not None:
        window = min(whole_number("window", window, minimum=1), POSITION_CAP)
    if query_positions is not None:
        require_tensor("query_positions", query_positions)
        if query_positions.dtype != torch.int64 or query_positions.shape != query.shape[::2]:
            raise ValueError(f"query_positions must be int64 (S, C) = {tuple(query.shape[::2])}, one position a query, "
                             f"got {query_positions.dtype} {tuple(query_positions.shape)}")
        if query_positions.device != query.device or (query_positions.numel() and int(query_positions.min()) < 0):
            raise ValueError(f"query_positions must be positions 0 or more on the query's device ({query.device})")
    return window, query_positions


def _check_merge_inputs(output_a, logsumexp_a, output_b, logsumexp_b):
    """Two partial results of the same queries: outputs of one shape (S, H, C, d), log-sum-exps (S, H, C) that are
    finite or -inf (a row with no key), all of one floating dtype and device."""
    tensors = (("output_a", output_a), ("logsumexp_a", logsumexp_a), ("output_b", output_b), ("logsumexp_b", logsumexp_b))
    for name, tensor in tensors:
        require_computable(name, tensor)
        if not tensor.is_floating_point() or tensor.dtype != output_a.dtype or tensor.device != output_a.device:
            raise TypeError(f"{name} is {tensor.dtype} on {tensor.device}; the two partial results must share one "
                            f"floating dtype and device ({output_a.dtype} on {output_a.device})")
    if output_a.dim() != 4 or output_b.shape != output_a.shape:
        raise ValueError(f"output_a and output_b must be the same queries' results, one shape (S, H, C, d), got "
                         f"{tuple(output_a.shape)} and {tuple(output_b.shape)}")
    for name, tensor in (("logsumexp_a", logsumexp_a), ("logsumexp_b", logsumexp_b)):
        if tensor.shape != output_a.shape[:3]:
            raise ValueError(f"{name} must have the outputs' (S, H, C) = {tuple(output_a.shape[:3])}, got "
                             f"{tuple(tensor.shape)}")
        if bool(torch.isnan(tensor).any()) or bool((tensor == float("inf")).any()):
            raise ValueError(f"{name} holds NaN or +inf; a row's log-sum-exp is finite, or -inf where it saw no key")
