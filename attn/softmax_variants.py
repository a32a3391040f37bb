"""Softmaxes whose rows may sum to less than 1 (lesson 22), in PyTorch: a sink logit, and softpick.

Softmax hands out a weight of exactly 1 on every row (lesson 4), so a head with nothing to read must
still read something; lesson 16 found real models parking that weight on the first token. Two ways to
let a row say "nothing here":

- a sink logit (gpt-oss; Miller's "off-by-one" softmax is the sink fixed at 0): one more logit joins
  the denominator and takes its share of the weight, but it has no value, so the keys' weights
  exp(s_j) / (exp(sink) + sum_k exp(s_k)) sum to less than 1;
- softpick (Zuhri et al. 2025): relu(e^s_j - 1) / sum_k |e^s_k - 1|; a key scoring at or below 0 gets
  nothing, and a row of such keys gets zero weights everywhere.

Both come twice: a loop over each row in plain Python floats (``*_loop``), and the vectorised form,
proven equal by the tests. The loops take the last axis; the vectorised forms any ``dim``.

Masked keys: a score of -inf is a key that is not there; it gets weight 0 and adds nothing to either
denominator. A row whose keys are all masked gets zero weights (never NaN).
"""

import math
import numbers

import torch

from attn.common.validate import require_computable, require_floating, type_name

__all__ = ["softmax_with_sink", "softmax_with_sink_loop", "softpick", "softpick_loop"]


def _checked_scores(scores, dim):
    """``scores`` checked (a floating tensor with no NaN or +inf; -inf is a masked key) and ``dim`` as an index."""
    require_computable("scores", scores)
    require_floating("scores", scores)
    if scores.dim() == 0:
        raise ValueError("scores needs at least one axis (the keys), got a single number")
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be a whole number (the keys' axis), got {type_name(dim)} {dim!r}")
    if not -scores.dim() <= dim < scores.dim():
        raise ValueError(f"dim={dim} does not exist in scores of shape {tuple(scores.shape)}")
    dim = int(dim) % scores.dim()
    if scores.shape[dim] == 0:
        raise ValueError(f"scores has no keys along dim {dim} (shape {tuple(scores.shape)}): there is nothing to weigh")
    if scores.numel():
        largest = scores.detach().amax()  # NaN if any entry is NaN
        if torch.isnan(largest) or largest == math.inf:
            raise ValueError(f"scores of shape {tuple(scores.shape)} holds NaN or +inf; only finite scores and -inf "
                             "(a masked key) have a meaning")
    return dim


def _checked_sink(sink_logit, scores, dim):
    """The sink logit as a tensor in the scores' compute dtype that broadcasts to the scores with ``dim`` of size 1."""
    compute = torch.promote_types(scores.dtype, torch.float32)
    if isinstance(sink_logit, bool) or not isinstance(sink_logit, numbers.Real | torch.Tensor):
        raise TypeError(f"sink_logit must be a number or a tensor of numbers, got {type_name(sink_logit)} {sink_logit!r}")
    if isinstance(sink_logit, torch.Tensor):
        require_computable("sink_logit", sink_logit)
        require_floating("sink_logit", sink_logit)
        if sink_logit.device != scores.device:
            raise ValueError(f"sink_logit is on {sink_logit.device} but scores is on {scores.device}")
    sink = torch.as_tensor(sink_logit, dtype=compute, device=scores.device)
    column = (*scores.shape[:dim], 1, *scores.shape[dim + 1:])  # one sink per row
    try:
        broadcast = torch.broadcast_shapes(sink.shape, column)
    except RuntimeError:
        broadcast = None
    if broadcast != column:
        raise ValueError(f"sink_logit of shape {tuple(sink.shape)} does not broadcast to one logit per row: scores "
                         f"{tuple(scores.shape)} need a shape that broadcasts to {column} (per head of (B, H, T_q, T_k) "
                         "scores: sinks.view(H, 1, 1))")
    if not bool(torch.isfinite(sink).all()):
        raise ValueError(f"sink_logit holds NaN or inf (in {compute}): a NaN sink makes every weight NaN, +inf takes "
                         "all of every row's weight and -inf is plain softmax; give a finite sink")
    return sink


def softmax_with_sink(scores, sink_logit, dim=-1):
    """The keys' weights of a softmax that also runs over one sink logit per row: same shape and dtype as ``scores``.

    weight_j = exp(s_j) / (exp(sink) + sum_k exp(s_k)), computed after subtracting max(sink, max_k s_k), so
    nothing overflows. The sink's own share, exp(sink) / (...), is left out: a row's weights sum to less
    than 1 and the rest is the share sent to nothing. ``sink_logit`` 0 is the off-by-one softmax.

    scores: floating tensor (..., T_k, ...) with the keys along ``dim``; -inf marks a masked key.
    sink_logit: a finite number, or a tensor that broadcasts to the scores' shape with ``dim`` of size 1
    (gpt-oss's per-head sinks (H,) for (B, H, T_q, T_k) scores: ``sinks.view(H, 1, 1)``).
    Computed in float32 at least, returned in the scores' dtype.
    """
    dim = _checked_scores(scores, dim)
    return sink_weights(scores, _checked_sink(sink_logit, scores, dim), dim)


def sink_weights(scores, sink, dim):
    """``softmax_with_sink`` without its checks, for layers that checked their inputs: sink a finite tensor that
    broadcasts to the scores with ``dim`` of size 1, dim a non-negative index or -1."""
    wide = scores.to(torch.promote_types(scores.dtype, torch.float32))
    sink = sink.to(wide.dtype)
    largest = torch.maximum(wide.amax(dim=dim, keepdim=True), sink)  # finite: the sink is
    exps = torch.exp(wide - largest)  # each at most 1; a masked key's is 0
    total = torch.exp(sink - largest) + exps.sum(dim=dim, keepdim=True)  # at least 1: the largest term is exp(0)
    return (exps / total).to(scores.dtype)


def softmax_with_sink_loop(scores, sink_logit):
    """``softmax_with_sink`` along the last axis, one row at a time in Python floats: the definition, written out.

    scores (..., T_k); sink_logit a finite number (the same sink for every row). Returns (..., T_k), scores' dtype.
    """
    _checked_scores(scores, -1)
    sink = _checked_sink(sink_logit, scores, scores.dim() - 1)
    if sink.numel() != 1:
        raise ValueError(f"softmax_with_sink_loop takes one sink for every row (a number), got a tensor of shape "
                         f"{tuple(sink.shape)}; softmax_with_sink takes a sink per row or per head")
    sink = float(sink.detach())
    rows = scores.reshape(-1, scores.shape[-1]).tolist()
    out = []
    for row in rows:
        largest = max([sink, *row])  # the sink counts in the maximum: it is one more logit
        exps = [math.exp(s - largest) for s in row]  # exp(-inf) = 0: a masked key
        total = math.exp(sink - largest) + sum(exps)
        out.append([e / total for e in exps])
    return torch.tensor(out, dtype=scores.dtype, device=scores.device).reshape(scores.shape)


def _shifted_exp_minus_one(scores, shift):
    """(e^s - 1) * e^-shift without overflow or cancellation; shift >= max(s, 0) per row, so every result is in [-1, 1].

    For s > 0: e^(s - shift) (1 - e^-s) = -e^(s - shift) expm1(-s); for s <= 0: e^-shift expm1(s). Masked keys
    (s = -inf) give 0, not -e^-shift: a key that is not there adds nothing to the denominator.
    """
    positive = scores > 0
    above = -torch.exp(scores - shift) * torch.expm1(-scores.clamp(min=0))
    below = torch.exp(-shift) * torch.expm1(scores.clamp(max=0))
    terms = torch.where(positive, above, below)
    return torch.where(scores == -math.inf, torch.zeros_like(terms), terms)


def softpick(scores, dim=-1):
    """Softpick: relu(e^s_j - 1) / sum_k |e^s_k - 1| along ``dim``; same shape and dtype as ``scores``.

    Weights are non-negative and a row's sum is at most 1 (the rectified numerators are part of the
    denominator); a key scoring at or below 0 gets weight 0, and a row with no key above 0 (or all keys
    masked with -inf) gets zeros. Computed stably: numerator and denominator are both multiplied by
    e^-max(s_max, 0), with expm1 for scores near 0, in float32 at least.
    """
    return softpick_weights(scores, _checked_scores(scores, dim))


def softpick_weights(scores, dim):
    """``softpick`` without its checks, for layers that checked their inputs (no NaN or +inf in scores)."""
    wide = scores.to(torch.promote_types(scores.dtype, torch.float32))
    shift = wide.amax(dim=dim, keepdim=True).clamp(min=0)  # a masked row's -inf becomes 0
    terms = _shifted_exp_minus_one(wide, shift)  # (e^s - 1) e^-shift, each in [-1, 1]
    total = terms.abs().sum(dim=dim, keepdim=True)
    total = torch.where(total > 0, total, torch.ones_like(total))  # a row of zeros stays zero, not 0 / 0
    return (terms.clamp(min=0) / total).to(scores.dtype)


def softpick_loop(scores):
    """``softpick`` along the last axis, one row at a time in Python floats. scores (..., T_k) -> (..., T_k)."""
    _checked_scores(scores, -1)
    out = []
    for row in scores.reshape(-1, scores.shape[-1]).tolist():
        shift = max(0.0, *row)
        terms = []
        for s in row:
            if s == -math.inf:
                terms.append(0.0)  # a masked key is not there
            elif s > 0:
                terms.append(-math.exp(s - shift) * math.expm1(-s))  # (e^s - 1) e^-shift, written so as not to overflow
            else:
                terms.append(math.exp(-shift) * math.expm1(s))
        total = sum(abs(t) for t in terms) or 1.0  # a row with nothing above 0 stays zero
        out.append([max(t, 0.0) / total for t in terms])
    return torch.tensor(out, dtype=scores.dtype, device=scores.device).reshape(scores.shape)
