"""One process's share of the work (lesson 20): its queries against one block of keys, and the merges.

A block of keys may come from any process, so every mask is written in global positions: under a causal
mask the query at position i may read the key at position j when j <= i. ``block_attention`` returns a
partial result, the queries' output over that block's keys alone with each row's log-sum-exp (lesson 12);
``merge_partials`` combines two of them into the output over both blocks. Runs of consecutive positions
(one per process in the contiguous layout, two in zigzag) let a whole run of keys that a run of queries
cannot see be skipped rather than masked. ``block_gradients`` is lesson 12's backward for one block.
Shapes: query (B, H, T_q, d_k), key (B, H_kv, T_k, d_k), value (B, H_kv, T_k, d_v), H_kv dividing H.
"""

import math

import torch

from attn.common.validate import has_only_finite, require_finite, require_floating, require_tensor, type_name
from attn.distributed.layouts import position_runs

__all__ = ["block_attention", "merge_partials"]

NEG_INF = float("-inf")


def causal_keep(query_positions, key_positions):
    """(T_q, T_k) bool: True where the key's global position is at or before the query's."""
    return key_positions[None, :] <= query_positions[:, None]


def visible_keys(query_positions, key_positions, is_causal):
    """For each run of consecutive queries: (query slice, key indices it can see, mask or None if all visible)."""
    plan = []
    for start, stop in position_runs(query_positions):
        if not is_causal:
            plan.append((slice(start, stop), torch.arange(len(key_positions)), None))
            continue
        last = query_positions[stop - 1]  # the run's latest query sees every key up to it
        seen = (key_positions <= last).nonzero().flatten()
        if len(seen) == 0:
            continue  # the whole block lies after this run: skipped, not masked
        keep = causal_keep(query_positions[start:stop], key_positions[seen])
        plan.append((slice(start, stop), seen, None if bool(keep.all()) else keep))
    return plan


def expand_heads(tensor, num_heads):
    """(B, H_kv, T, d) -> (B, H, T, d): each key/value head serves H / H_kv query heads (grouped-query)."""
    return tensor.repeat_interleave(num_heads // tensor.shape[1], dim=1)


def fold_heads(gradient, num_kv_heads):
    """(B, H, T, d) -> (B, H_kv, T, d): the gradient of ``expand_heads`` sums each group's heads."""
    batch, heads, length, width = gradient.shape
    return gradient.view(batch, num_kv_heads, heads // num_kv_heads, length, width).sum(2)


def block_attention(query, key, value, query_positions, key_positions, is_causal):
    """Partial attention of the queries over one block of keys.

    query_positions (T_q,) and key_positions (T_k,): global positions, increasing. Returns output
    (B, H, T_q, d_v), each row a softmax-weighted average of this block's values only; log-sum-exp
    (B, H, T_q) of this block's scores, -inf (and a zero output) where a row sees no key here; and the number
    of (query, key) score pairs computed, per batch entry and head.
    """
    check_block(query, key, value, query_positions, key_positions, is_causal)
    return _block_attention(query, key, value, query_positions, key_positions, is_causal)


def _block_attention(query, key, value, query_positions, key_positions, is_causal):
    output = query.new_zeros(*query.shape[:3], value.shape[-1])
    lse = query.new_full(query.shape[:3], NEG_INF)
    key, value = expand_heads(key, query.shape[1]), expand_heads(value, query.shape[1])
    scale, pairs = 1 / math.sqrt(query.shape[-1]), 0
    for rows, seen, keep in visible_keys(query_positions, key_positions, is_causal):
        scores = query[:, :, rows] @ key[:, :, seen].transpose(-1, -2) * scale  # (B, H, rows, seen)
        if keep is not None:
            scores = scores.masked_fill(~keep, NEG_INF)
        row_lse = torch.logsumexp(scores, dim=-1)  # -inf for a row that sees no key of this block
        weights = torch.exp(scores - torch.where(torch.isinf(row_lse), 0.0, row_lse)[..., None])  # such a row: 0
        output[:, :, rows] = weights @ value[:, :, seen]
        lse[:, :, rows] = row_lse
        pairs += scores.shape[-2] * scores.shape[-1]
    return output, lse, pairs


def merge_partials(output_a, lse_a, output_b, lse_b):
    """Two partial results over disjoint keys -> the result over all of them (lesson 12's rescaling).

    Each output is weighted by its share of the combined softmax denominator, exp(lse_part - lse_both); a row
    that saw no key in either part stays zero with log-sum-exp -inf, never NaN. Outputs (..., T_q, d_v),
    log-sum-exps (..., T_q).
    """
    _check_partials(output_a, lse_a, output_b, lse_b)
    return _merge_partials(output_a, lse_a, output_b, lse_b)


def _merge_partials(output_a, lse_a, output_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), 0.0, lse)  # both parts empty: avoid -inf - -inf
    share_a = torch.exp(lse_a - safe)[..., None]  # (B, H, T_q, 1)
    share_b = torch.exp(lse_b - safe)[..., None]
    return share_a * output_a + share_b * output_b, lse


def block_gradients(saved, key, value, key_positions, is_causal):
    """Lesson 12's backward for one block: (dQ contribution, dK of the block, dV of the block).

    saved = (query, query_positions, output, lse, grad_output, delta) for this process's queries, with the
    final output and log-sum-exp over every block, and delta = rowsum(grad_output * output) (B, H, T_q, 1).
    The weights are recomputed: P = exp(scores - lse).
    """
    query, query_positions, _, lse, grad_output, delta = saved
    heads = query.shape[1]
    key_full, value_full = expand_heads(key, heads), expand_heads(value, heads)
    grad_query = torch.zeros_like(query)
    grad_key, grad_value = torch.zeros_like(key_full), torch.zeros_like(value_full)
    scale = 1 / math.sqrt(query.shape[-1])
    for rows, seen, keep in visible_keys(query_positions, key_positions, is_causal):
        q_rows, k_seen = query[:, :, rows], key_full[:, :, seen]
        scores = q_rows @ k_seen.transpose(-1, -2) * scale
        if keep is not None:
            scores = scores.masked_fill(~keep, NEG_INF)
        weights = torch.exp(scores - lse[:, :, rows, None])  # (B, H, rows, seen)
        grad_output_rows = grad_output[:, :, rows]
        grad_value[:, :, seen] += weights.transpose(-1, -2) @ grad_output_rows
        grad_weights = grad_output_rows @ value_full[:, :, seen].transpose(-1, -2)
        grad_scores = weights * (grad_weights - delta[:, :, rows]) * scale
        grad_query[:, :, rows] += grad_scores @ k_seen
        grad_key[:, :, seen] += grad_scores.transpose(-1, -2) @ q_rows
    return grad_query, fold_heads(grad_key, key.shape[1]), fold_heads(grad_value, key.shape[1])


def check_block(query, key, value, query_positions, key_positions, is_causal):
    """The inputs of ``block_attention``: shapes as its docstring says, positions increasing and distinct."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_tensor(name, tensor)
        require_floating(name, tensor)
        if tensor.dim() != 4 or 0 in tensor.shape:
            raise ValueError(f"{name} must be (B, H, T, d) with no size 0, got {tuple(tensor.shape)}")
        require_finite(name, tensor)
    if (key.shape[:3] != value.shape[:3] or key.shape[0] != query.shape[0] or key.shape[3] != query.shape[3]
            or query.shape[1] % key.shape[1] or {key.dtype, value.dtype} != {query.dtype}):
        raise ValueError(f"query {tuple(query.shape)} {query.dtype}, key {tuple(key.shape)} {key.dtype} and value "
                         f"{tuple(value.shape)} {value.dtype} do not fit: key and value share (B, H_kv, T_k), key has "
                         "query's d_k, H_kv divides H, one dtype")
    for name, positions, length in (("query_positions", query_positions, query.shape[2]),
                                    ("key_positions", key_positions, key.shape[2])):
        require_tensor(name, positions)
        if positions.dtype != torch.int64 or positions.shape != (length,):
            raise ValueError(f"{name} must be an int64 tensor of {length} positions, got {positions.dtype} "
                             f"{tuple(positions.shape)}")
        if length > 1 and not bool((positions[1:] > positions[:-1]).all()):
            raise ValueError(f"{name} must increase (each position once, in order)")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)}")


def _check_partials(output_a, lse_a, output_b, lse_b):
    for name, tensor in (("output_a", output_a), ("lse_a", lse_a), ("output_b", output_b), ("lse_b", lse_b)):
        require_tensor(name, tensor)
        require_floating(name, tensor)
        if torch.isnan(tensor).any() or (name.startswith("output") and not has_only_finite(tensor)):
            raise ValueError(f"{name} holds NaN{' or inf' if name.startswith('output') else ''}: a partial result "
                             "has finite outputs and log-sum-exps that are finite or -inf (no key)")
        if name.startswith("lse") and bool((tensor == float("inf")).any()):
            raise ValueError(f"{name} holds +inf: a log-sum-exp is finite, or -inf for a row with no key")
    if output_a.shape != output_b.shape or lse_a.shape != lse_b.shape or output_a.shape[:-1] != lse_a.shape:
        raise ValueError(f"the partial results must be outputs (..., T_q, d_v) and log-sum-exps (..., T_q) of one "
                         f"shape each, got {tuple(output_a.shape)}, {tuple(lse_a.shape)}, {tuple(output_b.shape)}, "
                         f"{tuple(lse_b.shape)}")
