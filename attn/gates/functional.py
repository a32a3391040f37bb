"""Forgetting and differential attention as functions (lesson 22): each a loop over tokens and a vectorised form.

Causal self-attention over heads: query (B, H, T, d), key and value (B, H_kv, T, d), H_kv dividing H.
See ``attn.gates`` for what each design does.
"""

import math
import numbers

import torch
from torch.nn import functional

from attn.common.layer_checks import check_attention_inputs
from attn.common.validate import has_only_finite, require_computable, require_finite, require_floating, type_name

__all__ = [
    "differential_attention", "differential_attention_loop", "forgetting_attention", "forgetting_attention_loop",
    "stick_breaking_attention", "stick_breaking_attention_loop",
]


# ------------------------------------------------------------------------------------------------ shared pieces


def _causal_scores(query, key, scale):
    """Scaled scores (B, H, T, T) of query (B, H, T, d) on key (B, H_kv, T, d), -inf above the diagonal."""
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # (B, H, T, d): each key head serves H / H_kv
    scores = query @ key.transpose(-2, -1) * scale
    length = query.shape[2]
    keep = torch.ones(length, length, dtype=torch.bool, device=query.device).tril()
    return scores.masked_fill(~keep, -math.inf)


def _read(weights, value):
    """weights (B, H, T, T) times value (B, H_kv, T, d_v) -> (B, H, T, d_v)."""
    return weights @ value.repeat_interleave(weights.shape[1] // value.shape[1], dim=1)


def _check_self_attention(query, key, value):
    """query (B, H, T, d), key and value (B, H_kv, T, d): shapes, dtypes, devices, finite; T the same for all."""
    check_attention_inputs(query, key, value, 0.0, True)
    if key.shape[2] != query.shape[2] or query.shape[2] == 0:
        raise ValueError(f"this is causal self-attention: query {tuple(query.shape)} and key {tuple(key.shape)} must "
                         "have the same, non-zero number of positions T (axis 2)")


def _finite(output):
    """``output``, or a sentence if finite inputs overflowed inside (a large ``scale`` times large scores)."""
    if not has_only_finite(output):
        raise ValueError(f"the inputs are finite, but the scores overflowed {output.dtype} (scale times q . k passed its "
                         "largest number) and the output holds inf or NaN; scale the inputs or the scale down")
    return output


def _checked_scale(scale, head_dim):
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be None or a positive number, got {type_name(scale)} {scale!r}")
    if not (math.isfinite(scale) and 0 < scale <= 1e3):
        raise ValueError(f"scale must be a positive number up to 1e3 (1 / sqrt(d) is usual), got {scale!r}")
    return float(scale)


# ------------------------------------------------------------------------------------------ forgetting attention


def _checked_log_forget(log_forget, query):
    """log_forget (B, H, T): the log of each token's forget gate, finite and at most 0 (a gate in (0, 1])."""
    require_computable("log_forget", log_forget)
    require_floating("log_forget", log_forget)
    if tuple(log_forget.shape) != tuple(query.shape[:3]):
        raise ValueError(f"log_forget must be (B, H, T) = {tuple(query.shape[:3])}, one gate per token and query head, "
                         f"got {tuple(log_forget.shape)}")
    if log_forget.dtype != query.dtype or log_forget.device != query.device:
        raise TypeError(f"log_forget is {log_forget.dtype} on {log_forget.device} but query is {query.dtype} on "
                        f"{query.device}; convert it with log_forget.to(query)")
    require_finite("log_forget", log_forget, "a gate of exactly 0 is log 0 = -inf: use a large negative number")
    largest = float(log_forget.detach().amax())
    if largest > 0:
        raise ValueError(f"log_forget holds {largest:.3g} > 0: a forget gate above 1, which would make old keys louder "
                         "than new ones at every step; a forget gate is in (0, 1], its log at most 0 (logsigmoid gives one)")
    if not math.isfinite(float(log_forget.detach().sum(dim=-1).amin())):  # the most negative cumulative sum, F_T
        raise ValueError(f"log_forget is finite, but its running sum overflows {log_forget.dtype} to -inf (F_i - F_j would "
                         "be NaN); gates that close this hard forget everything anyway: clamp log_forget at, say, -1e4")


def forgetting_attention(query, key, value, log_forget, scale=None):
    """Causal attention with the Forgetting Transformer's bias: score_ij + F_i - F_j, F = cumsum(log_forget).

    query (B, H, T, d); key, value (B, H_kv, T, d); log_forget (B, H, T), the log of each token's forget gate
    (at most 0; ``functional.logsigmoid`` of a learned logit). F_i - F_j = sum of log_forget over j < l <= i:
    the key at j fades by every gate after it. scale: default 1 / sqrt(d). Returns (B, H, T, d).
    """
    _check_self_attention(query, key, value)
    _checked_log_forget(log_forget, query)
    return _finite(_forgetting_attention(query, key, value, log_forget, _checked_scale(scale, query.shape[-1])))


def _forgetting_attention(query, key, value, log_forget, scale):
    cumulative = log_forget.cumsum(dim=-1)  # (B, H, T): F_t
    bias = cumulative[..., :, None] - cumulative[..., None, :]  # (B, H, T, T): F_i - F_j (+inf above the diagonal is
    weights = torch.softmax(_causal_scores(query, key, scale) + bias, dim=-1)  # impossible: those scores are -inf)
    return _read(weights, value)


def forgetting_attention_loop(query, key, value, log_forget, scale=None):
    """``forgetting_attention`` written out: for each query i, walk back over the keys, multiplying in the forget gate
    of every token passed (adding its log). Same arguments and result."""
    _check_self_attention(query, key, value)
    _checked_log_forget(log_forget, query)
    scale = _checked_scale(scale, query.shape[-1])
    batch, heads, length, _ = query.shape
    groups = heads // key.shape[1]
    output = torch.zeros(batch, heads, length, value.shape[-1], dtype=query.dtype, device=query.device)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                scores, decay = [], 0.0  # decay: log of the product of the gates after key j, up to i
                for j in range(i, -1, -1):
                    scores.append(query[b, h, i] @ key[b, h // groups, j] * scale + decay)
                    decay = decay + log_forget[b, h, j]  # passing token j: its gate now lies between i and key j - 1
                weights = torch.softmax(torch.stack(scores[::-1]), dim=0)  # keys 0 .. i
                output[b, h, i] = weights @ value[b, h // groups, : i + 1]
    return output


# ---------------------------------------------------------------------------------------- differential attention


def _checked_lambda(lam):
    """lambda, finite and below 1 (at 1 or above the second map can outweigh the first on every key): a float, or the
    one-number tensor given (kept, so that a learned lambda gets its gradient)."""
    value = lam
    if isinstance(lam, torch.Tensor) and lam.numel() == 1 and lam.dtype.is_floating_point:
        require_computable("lam", lam)
        value = float(lam.detach())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"lam must be a number (lambda, below 1), got {type_name(lam)} {lam!r:.60}")
    if not math.isfinite(value):
        raise ValueError(f"lam must be a finite number, got {value!r}")
    if value >= 1:
        raise ValueError(f"lam = {value:.4g} is 1 or more: each row's weights A1 - lam A2 then sum to 1 - lam <= 0, and "
                         "where the second map is as spread as the first every weight is negative, so the head outputs "
                         "minus an average; the paper keeps lambda between 0.2 and 0.8")
    return lam.reshape(()) if isinstance(lam, torch.Tensor) else float(value)


def _check_differential(query, key, value):
    _check_self_attention(query, key, value)
    if query.shape[-1] % 2:
        raise ValueError(f"query and key hold two maps' features side by side, so their last axis must be even, got "
                         f"{query.shape[-1]}")


def differential_attention(query, key, value, lam, scale=None):
    """Differential attention: (softmax(Q1 K1^T s) - lam softmax(Q2 K2^T s)) V, causal.

    query (B, H, T, 2d) holds each head's two queries side by side, [Q1, Q2]; key (B, H_kv, T, 2d) the two keys
    [K1, K2]; value (B, H_kv, T, d_v) (2d in the paper and DiffLlama). lam: lambda, a finite number below 1.
    scale: default 1 / sqrt(d), d half the query's width. Returns (B, H, T, d_v): each row's weights sum to 1 - lam.
    """
    _check_differential(query, key, value)
    lam = _checked_lambda(lam)
    return _finite(_read(_differential_weights(query, key, lam, _checked_scale(scale, query.shape[-1] // 2)), value))


def _differential_weights(query, key, lam, scale):
    q1, q2 = query.chunk(2, dim=-1)
    k1, k2 = key.chunk(2, dim=-1)
    first = torch.softmax(_causal_scores(q1, k1, scale), dim=-1)
    second = torch.softmax(_causal_scores(q2, k2, scale), dim=-1)
    return first - lam * second  # (B, H, T, T)


def differential_attention_loop(query, key, value, lam, scale=None):
    """``differential_attention`` written out, one query at a time: two softmaxes over the keys it sees, subtracted."""
    _check_differential(query, key, value)
    lam = _checked_lambda(lam)
    half = query.shape[-1] // 2
    scale = _checked_scale(scale, half)
    batch, heads, length, _ = query.shape
    groups = heads // key.shape[1]
    output = torch.zeros(batch, heads, length, value.shape[-1], dtype=query.dtype, device=query.device)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                seen = key[b, h // groups, : i + 1]  # (i + 1, 2d): the keys query i may read
                first = torch.softmax(seen[:, :half] @ query[b, h, i, :half] * scale, dim=0)
                second = torch.softmax(seen[:, half:] @ query[b, h, i, half:] * scale, dim=0)
                output[b, h, i] = (first - lam * second) @ value[b, h // groups, : i + 1]
    return output


# -------------------------------------------------------------------------------------- stick-breaking attention


def _check_flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type_name(value)} {value!r:.60}")
    return value


def stick_breaking_attention(query, key, value, attend_current=False, scale=None):
    """Stick-breaking attention (Tan et al. 2024): each query breaks a stick of length 1, nearest key first.

    beta_ij = sigmoid(q_i . k_j s); key j gets beta_ij times what is left after the keys between j and i took
    their shares: A_ij = beta_ij prod_{j < l < i} (1 - beta_il) (l <= i with ``attend_current``, which also lets a
    query read its own key; without it, keys j < i only). No softmax: a query whose keys all score low keeps most
    of the stick and reads almost nothing. Computed in log space (logsigmoid), so no product underflows.
    query (B, H, T, d); key, value (B, H_kv, T, d). Returns the output (B, H, T, d) and the stick left over,
    1 - sum_j A_ij, (B, H, T).
    """
    _check_self_attention(query, key, value)
    attend_current = _check_flag("attend_current", attend_current)
    scale = _checked_scale(scale, query.shape[-1])
    length = query.shape[2]
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    logits = query @ key.transpose(-2, -1) * scale  # (B, H, T, T)
    seen = torch.ones(length, length, dtype=torch.bool, device=query.device).tril(0 if attend_current else -1)
    log_keep = functional.logsigmoid(-logits).masked_fill(~seen, 0.0)  # log(1 - beta), 0 where the key is not seen
    after = log_keep.flip(-1).cumsum(-1).flip(-1) - log_keep  # sum of log(1 - beta_il) over the seen keys l > j
    log_weights = (functional.logsigmoid(logits) + after).masked_fill(~seen, -math.inf)
    weights = log_weights.exp()
    left = log_keep.sum(-1).exp()  # the product of every (1 - beta): what no key took
    return _finite(_read(weights, value)), left


def stick_breaking_attention_loop(query, key, value, attend_current=False, scale=None):
    """``stick_breaking_attention`` written out: each query walks back from its nearest key, each key taking its
    share beta of the stick still left. Same arguments and results."""
    _check_self_attention(query, key, value)
    attend_current = _check_flag("attend_current", attend_current)
    scale = _checked_scale(scale, query.shape[-1])
    batch, heads, length, _ = query.shape
    groups = heads // key.shape[1]
    output = torch.zeros(batch, heads, length, value.shape[-1], dtype=query.dtype, device=query.device)
    left = torch.ones(batch, heads, length, dtype=query.dtype, device=query.device)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                stick = torch.ones((), dtype=query.dtype)
                nearest = i if attend_current else i - 1
                for j in range(nearest, -1, -1):
                    beta = torch.sigmoid(query[b, h, i] @ key[b, h // groups, j] * scale)
                    output[b, h, i] = output[b, h, i] + beta * stick * value[b, h // groups, j]
                    stick = stick * (1 - beta)
                left[b, h, i] = stick
    return output, left

