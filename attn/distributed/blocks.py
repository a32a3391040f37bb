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

from attn.distributed.layouts import position_runs

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

    Returns output (B, H, T_q, d_v), each row a softmax-weighted average of this block's values only;
    log-sum-exp (B, H, T_q) of this block's scores, -inf (and a zero output) where a row sees no key here;
    and the number of (query, key) score pairs computed, per batch entry and head.
    """
    output = query.new_zeros(*query.shape[:3], value.shape[-1])
    lse = query.new_full(query.shape[:3], NEG_INF)
    key, value = expand_heads(key, query.shape[1]), expand_heads(value, query.shape[1])
    scale, pairs = 1 / math.sqrt(query.shape[-1]), 0
    for rows, seen, keep in visible_keys(query_positions, key_positions, is_causal):
        scores = query[:, :, rows] @ key[:, :, seen].transpose(-1, -2) * scale  # (B, H, rows, seen)
        if keep is not None:
            scores = scores.masked_fill(~keep, NEG_INF)
        row_lse = torch.logsumexp(scores, dim=-1)  # every row here sees at least its run's first key
        weights = torch.exp(scores - row_lse[..., None])
        output[:, :, rows] = weights @ value[:, :, seen]
        lse[:, :, rows] = row_lse
        pairs += scores.shape[-2] * scores.shape[-1]
    return output, lse, pairs


def merge_partials(output_a, lse_a, output_b, lse_b):
    """Two partial results over disjoint keys -> the result over all of them (lesson 12's rescaling).

    Each output is weighted by its share of the combined softmax denominator, exp(lse_part - lse_both); a row
    that saw no key in either part stays zero with log-sum-exp -inf, never NaN.
    """
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
