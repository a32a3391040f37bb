"""Which entries an evicting cache keeps (lesson 21): each rule's score, as loops and then vectorised.

Every rule gives each held entry (one position of one key/value head) a score, and the cache keeps the
``budget`` entries that score highest, its sink tokens and its most recent ``window`` positions always:

- ``"h2o"`` (Zhang et al. 2023, heavy hitters): the attention each entry has received so far, summed over every
  query and over the query heads that share its key/value head.
- ``"snapkv"`` (Li et al. 2024): the attention from the last ``window`` queries (the observation window),
  averaged over them, smoothed by an average over ``kernel_size`` neighbouring entries (zeros past the ends),
  averaged over the query heads of the group; the window's own entries are kept.
- ``"tova"`` (Oren et al. 2024): the attention from the newest query alone, averaged over all the layer's query
  heads, so every head keeps the same positions.
- ``"knorm"`` (Devoto et al. 2024): minus the key's length: keys with a small norm tend to draw much attention.
- ``"streaming"`` (StreamingLLM, lesson 14): the position itself: the most recent entries, besides the sinks.

These are the scores ``kvpress`` computes in its SnapKVPress, TOVAPress, KnormPress and StreamingLLMPress (whose
budgets count kept entries as this module does); the tests check each by its defining identity.
"""

import math
import numbers

import torch

from attn.common.validate import require_choice, require_computable, require_floating, type_name, whole_number

RULES = ("h2o", "snapkv", "tova", "knorm", "streaming")
NEEDS_ATTENTION = ("h2o", "snapkv", "tova")


def attention_rows(queries, keys, rows):
    """The attention weights (B, H, rows, S) of the last ``rows`` queries over ``keys``, as the layer's softmax has them.

    queries (B, H, T_q, d), the newest positions; keys (B, H_kv, S, d), H_kv dividing H, the last T_q of them the
    queries' own; causal and aligned to the end of the keys (query r sits at key S - rows + r). Computed in at
    least float32.
    """
    _check_attention_inputs(queries, keys, rows)
    return _attention_rows(queries, keys, rows)


def _attention_rows(queries, keys, rows):
    compute = torch.promote_types(queries.dtype, torch.float32)
    groups = queries.shape[1] // keys.shape[1]
    query = queries[:, :, -rows:].to(compute)  # (B, H, rows, d)
    key = keys.to(compute).repeat_interleave(groups, dim=1)  # (B, H, S, d)
    scores = query @ key.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (B, H, rows, S)
    length = keys.shape[2]
    allowed = torch.ones(rows, length, dtype=torch.bool, device=keys.device).tril(diagonal=length - rows)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


# Scores, vectorised ----------------------------------------------------------------------------------------------


def eviction_scores(rule, weights, keys, positions, window=0, kernel_size=5):
    """Each held entry's score under ``rule`` (higher: more worth keeping), (B, H_kv, S).

    weights (B, H, R, S): attention rows of the R newest queries (attention_rows), needed by 'h2o', 'snapkv' and
    'tova' (None for the others): 'h2o' sums them all (the cache adds this to what earlier steps gave), 'tova'
    reads the last row, 'snapkv' the last ``window`` rows. keys (B, H_kv, S, d) and positions (B, H_kv, S) are
    the entries held.
    """
    rule, window, kernel_size = _check_scores(rule, weights, keys, positions, window, kernel_size)
    return _scores(rule, weights, keys, positions, window, kernel_size)


def _scores(rule, weights, keys, positions, window=0, kernel_size=5):
    """``eviction_scores`` without its checks, for the cache, whose inputs are its own."""
    num_kv_heads = keys.shape[1]
    if rule == "knorm":
        return -torch.linalg.vector_norm(keys, dim=-1, dtype=torch.promote_types(keys.dtype, torch.float32))
    if rule == "streaming":
        return positions.to(torch.promote_types(keys.dtype, torch.float32))
    grouped = weights.unflatten(1, (num_kv_heads, -1))  # (B, H_kv, H / H_kv, R, S)
    if rule == "h2o":
        return grouped.sum(dim=(2, 3))
    if rule == "tova":
        return weights[:, :, -1].mean(dim=1, keepdim=True).expand(-1, num_kv_heads, -1)
    return _snapkv(weights[:, :, -window:], num_kv_heads, window, kernel_size)


def _snapkv(rows, num_kv_heads, window, kernel_size):
    """SnapKV's score from the observation window's rows (B, H, R, S): pooled means; the window's entries +inf."""
    length = rows.shape[-1]
    earlier = rows.mean(dim=2)[..., :max(length - window, 0)]  # (B, H, S - window)
    pooled = torch.nn.functional.avg_pool1d(earlier, kernel_size, stride=1, padding=kernel_size // 2) if earlier.shape[-1] \
        else earlier  # zeros past both ends count in each average (count_include_pad), as kvpress has it
    scores = pooled.unflatten(1, (num_kv_heads, -1)).mean(dim=2)  # (B, H_kv, S - window)
    kept = torch.full((*scores.shape[:2], length - scores.shape[-1]), math.inf, dtype=scores.dtype, device=scores.device)
    return torch.cat((scores, kept), dim=-1)


def keep_indices(scores, positions, budget, sink_tokens, window, seen):
    """Which entries stay: indices (B, H_kv, min(budget, S)) in increasing order (time order is kept).

    scores, positions (B, H_kv, S); an entry whose position is a sink (< sink_tokens) or recent (>= seen - window)
    always stays; the rest stay by decreasing score, the earlier entry first among equal scores.
    """
    budget, sink_tokens, window, seen = _check_keep(scores, positions, budget, sink_tokens, window, seen)
    return _keep_indices(scores, positions, budget, sink_tokens, window, seen)


def _keep_indices(scores, positions, budget, sink_tokens, window, seen):
    if scores.shape[-1] <= budget:
        return torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
    protected = (positions < sink_tokens) | (positions >= seen - window)
    ranked = torch.where(protected, math.inf, scores)
    chosen = torch.sort(ranked, dim=-1, descending=True, stable=True).indices[..., :budget]
    return chosen.sort(dim=-1).values


# Scores and choices, one entry at a time (the same numbers; the tests compare) -------------------------------------


def eviction_scores_loop(rule, weights, keys, positions, window=0, kernel_size=5):
    """``eviction_scores`` written as loops over sequences, heads and entries (Python floats; equal to rounding)."""
    rule, window, kernel_size = _check_scores(rule, weights, keys, positions, window, kernel_size)
    batch, num_kv_heads, length, _ = keys.shape
    scores = torch.zeros(batch, num_kv_heads, length, dtype=torch.float64)
    groups = 1 if weights is None else weights.shape[1] // num_kv_heads
    for b in range(batch):
        for h in range(num_kv_heads):
            heads = range(h * groups, (h + 1) * groups)  # the query heads that read key/value head h
            for j in range(length):
                if rule == "knorm":
                    scores[b, h, j] = -math.sqrt(sum(float(number) ** 2 for number in keys[b, h, j]))
                elif rule == "streaming":
                    scores[b, h, j] = float(positions[b, h, j])
                elif rule == "h2o":
                    scores[b, h, j] = sum(float(weights[b, q, r, j]) for q in heads for r in range(weights.shape[2]))
                elif rule == "tova":
                    scores[b, h, j] = sum(float(weights[b, q, -1, j]) for q in range(weights.shape[1])) / weights.shape[1]
                else:
                    scores[b, h, j] = _snapkv_one(weights[b, heads.start:heads.stop, -window:], j, window, kernel_size)
    return scores


def _snapkv_one(rows, j, window, kernel_size):
    """SnapKV's score of entry j from one group's rows (G, R, S)."""
    length = rows.shape[-1]
    if j >= length - window:
        return math.inf
    half, total = kernel_size // 2, 0.0
    for head in range(rows.shape[0]):
        neighbours = [i for i in range(j - half, j + half + 1) if 0 <= i < length - window]
        total += sum(sum(float(rows[head, r, i]) for r in range(rows.shape[1])) / rows.shape[1] for i in neighbours) / kernel_size
    return total / rows.shape[0]


def keep_indices_loop(scores, positions, budget, sink_tokens, window, seen):
    """``keep_indices`` as loops: per sequence and head, protected entries first, then by score (a stable sort)."""
    budget, sink_tokens, window, seen = _check_keep(scores, positions, budget, sink_tokens, window, seen)
    batch, heads, length = scores.shape
    kept = torch.zeros(batch, heads, min(budget, length), dtype=torch.long)
    for b in range(batch):
        for h in range(heads):
            def rank(j, b=b, h=h):
                position = int(positions[b, h, j])
                protected = position < sink_tokens or position >= seen - window
                return -math.inf if protected else -float(scores[b, h, j])

            chosen = sorted(range(length), key=rank)[:budget]  # Python's sort is stable: earlier first among equals
            kept[b, h] = torch.tensor(sorted(chosen))
    return kept


# Checks ------------------------------------------------------------------------------------------------------------


def _check_attention_inputs(queries, keys, rows):
    for name, tensor in (("queries", queries), ("keys", keys)):
        require_computable(name, tensor)
        require_floating(name, tensor)
        if tensor.dim() != 4:
            raise ValueError(f"{name} must have shape (B, heads, T, d), got {tuple(tensor.shape)}")
    (batch, heads, count, dim), (key_batch, kv_heads, length, key_dim) = queries.shape, keys.shape
    if batch != key_batch or dim != key_dim or kv_heads == 0 or heads % kv_heads or queries.dtype != keys.dtype:
        raise ValueError(f"queries {tuple(queries.shape)} {queries.dtype} and keys {tuple(keys.shape)} {keys.dtype} must share "
                         "batch, head size and dtype, with the key/value heads dividing the query heads")
    if queries.device != keys.device:
        raise ValueError(f"queries are on {queries.device}, keys on {keys.device}; put them on one device")
    whole_number("rows", rows, 1, min(count, length))
    for name, tensor in (("queries", queries), ("keys", keys)):
        if tensor.numel() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} contain NaN or inf; every attention weight would be NaN")


def _check_scores(rule, weights, keys, positions, window, kernel_size):
    rule = require_choice("rule", rule, RULES)
    require_computable("keys", keys)
    require_floating("keys", keys)
    if keys.dim() != 4 or 0 in keys.shape[:2]:
        raise ValueError(f"keys must have shape (B, H_kv, S, d) with B, H_kv >= 1, got {tuple(keys.shape)}")
    require_computable("positions", positions)
    if positions.is_floating_point() or positions.dtype == torch.bool or positions.shape != keys.shape[:3]:
        raise ValueError(f"positions must be whole numbers of shape {tuple(keys.shape[:3])} (B, H_kv, S), got "
                         f"{positions.dtype} of shape {tuple(positions.shape)}")
    window = whole_number("window", window, 0, 2**40)
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, numbers.Integral) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be an odd whole number >= 1 (the pooling is centred), got {kernel_size!r:.40}")
    if rule in NEEDS_ATTENTION:
        require_computable("weights", weights)
        require_floating("weights", weights)
        if weights.dim() != 4 or weights.shape[0] != keys.shape[0] or weights.shape[-1] != keys.shape[2] \
                or weights.shape[1] % keys.shape[1] or weights.shape[2] == 0:
            raise ValueError(f"rule {rule!r} reads attention weights (B, H, R, S) matching keys {tuple(keys.shape)}, got "
                             f"{type_name(weights) if not hasattr(weights, 'shape') else tuple(weights.shape)}")
        if rule == "snapkv" and window < 1:
            raise ValueError("rule 'snapkv' needs an observation window of at least 1 query (window >= 1)")
        if not bool(torch.isfinite(weights).all()):
            raise ValueError("weights contain NaN or inf; attention weights are finite numbers from 0 to 1")
    for name, tensor in (("keys", keys),):
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} contain NaN or inf; no score could rank them")
    return rule, window, int(kernel_size)


def _check_keep(scores, positions, budget, sink_tokens, window, seen):
    require_computable("scores", scores)
    require_floating("scores", scores)
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape (B, H_kv, S), got {tuple(scores.shape)}")
    require_computable("positions", positions)
    if positions.is_floating_point() or positions.dtype == torch.bool or positions.shape != scores.shape:
        raise ValueError(f"positions must be whole numbers shaped as scores {tuple(scores.shape)}, got {positions.dtype} "
                         f"{tuple(positions.shape)}")
    if bool(torch.isnan(scores).any()):
        raise ValueError("scores contain NaN; no order could rank them")
    budget = whole_number("budget", budget, 1, 2**40)
    sink_tokens, window = whole_number("sink_tokens", sink_tokens, 0, 2**40), whole_number("window", window, 0, 2**40)
    seen = whole_number("seen", seen, 0, 2**40)
    if sink_tokens + window > budget:
        raise ValueError(f"a budget of {budget} entries cannot hold {sink_tokens} sink tokens and a window of {window}")
    return budget, sink_tokens, window, seen
