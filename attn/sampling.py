"""Choosing the next token from a model's logits: greedy, temperature, top-k and top-p sampling (lesson 10).

``sample_next(logits, temperature=..., top_k=..., top_p=..., generator=...)`` is the version lesson 10
builds in the open on one logits vector: divide the logits by the temperature (lesson 4's), keep the
``top_k`` most likely tokens (Fan et al. 2018), keep the smallest set of most likely tokens whose
probabilities reach ``top_p`` (nucleus sampling, Holtzman et al. 2020), and draw one token from what
is kept, in proportion to its probability. ``temperature=0`` is the limit of a falling temperature:
greedy decoding, the most likely token, with no randomness.
"""

import math
import numbers

import torch

from attn.common.validate import is_whole_number, require_computable, type_name


def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, generator=None):
    """One token id per row of ``logits`` (..., V): a long tensor of shape (...,).

    temperature: a number >= 0 (0: greedy); top_k: None or an int >= 1, the number of tokens kept;
    top_p: None or a number in (0, 1], the probability the kept tokens must reach; generator: None
    or a torch.Generator, for draws that repeat. Ties are broken towards the lower token id.
    """
    check_sampling(logits, temperature, top_k, top_p, generator)
    logits = logits.detach().double()  # (..., V): float64, so that rounding never decides a rank
    if temperature == 0:
        return logits.argmax(dim=-1)  # (...,): greedy
    shifted = logits - logits.max(dim=-1, keepdim=True).values  # (..., V): highest 0, so no score overflows
    probabilities = _kept_probabilities(shifted / temperature, top_k, top_p)  # (..., V)
    rows = probabilities.reshape(-1, probabilities.shape[-1])  # (N, V)
    drawn = torch.multinomial(rows, 1, generator=generator)  # (N, 1): index i with probability rows[n, i]
    return drawn.reshape(probabilities.shape[:-1])  # (...,)


def kept_probabilities(scaled_logits, top_k=None, top_p=None):
    """softmax(scaled_logits) (..., V) with every token outside the top-k and the top-p set at 0, renormalised.

    top-k keeps the k highest ranks; top-p then keeps the smallest prefix of the ranking (highest first)
    whose probabilities, after top-k, sum to at least p. Ties are broken towards the lower token id.
    top_k: None or a whole number >= 1 (more than V keeps every token); top_p: None or a number in (0, 1].
    """
    check_logits(scaled_logits, "scaled_logits")
    check_top_k_top_p(top_k, top_p)
    return _kept_probabilities(scaled_logits, top_k, top_p)


def _kept_probabilities(scaled_logits, top_k, top_p):
    """``kept_probabilities`` without its checks (``sample_next`` has made them)."""
    order = scaled_logits.argsort(dim=-1, descending=True, stable=True)  # (..., V): token ids, most likely first
    ranks = order.argsort(dim=-1)  # (..., V): each token's place in that order, 0 = most likely
    keep = torch.ones_like(scaled_logits, dtype=torch.bool)  # (..., V)
    if top_k is not None:
        keep = ranks < min(int(top_k), ranks.shape[-1])  # exactly min(k, V) tokens, ties included
    probabilities = torch.softmax(scaled_logits.masked_fill(~keep, -math.inf), dim=-1)  # (..., V)
    if top_p is not None:  # ranked again, by probability (ties: the lower id first)
        order = probabilities.argsort(dim=-1, descending=True, stable=True)  # (..., V)
        by_rank = probabilities.gather(-1, order)  # (..., V): probabilities, highest first
        before = by_rank.cumsum(dim=-1) - by_rank  # (..., V): the mass of the tokens ranked above
        keep_by_rank = before < top_p  # the smallest prefix reaching top_p (the first token always)
        keep = keep & keep_by_rank.gather(-1, order.argsort(dim=-1))  # back from rank order to token order
        probabilities = probabilities.masked_fill(~keep, 0.0)
        probabilities = probabilities / probabilities.sum(dim=-1, keepdim=True)
    return probabilities


def check_sampling(logits, temperature, top_k, top_p, generator):
    """TypeError/ValueError, with one sentence, unless sample_next's arguments make sense together."""
    check_logits(logits)
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a number >= 0 (0: greedy), got {type_name(temperature)} {temperature!r}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    check_top_k_top_p(top_k, top_p)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type_name(generator)}")
    if generator is not None and generator.device != logits.device:
        raise ValueError(f"the generator is on {generator.device} but the logits are on {logits.device}; use one device")


def check_logits(logits, name="logits"):
    """``logits`` (..., V) must be a dense floating-point tensor with V >= 1, no NaN or +inf, and an allowed token per row."""
    require_computable(name, logits)
    if not logits.is_floating_point():
        raise TypeError(f"{name} must hold floating-point scores, got {logits.dtype}; convert them with {name}.float()")
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (..., V) with V >= 1 scores per row, got {tuple(logits.shape)}")
    if logits.numel() and torch.isnan(logits).any():
        raise ValueError(f"{name} contain NaN: no token can be ranked by a score that is not a number")
    if logits.numel() and torch.isinf(logits).any() and not (logits > -math.inf).any(dim=-1).all():
        raise ValueError(f"a row of {name} is -inf everywhere: no token is allowed, so none can be chosen")
    if logits.numel() and (logits == math.inf).any():
        raise ValueError(f"{name} contain +inf: softmax would give NaN; use finite scores (-inf to forbid a token)")


def check_top_k_top_p(top_k, top_p):
    """top_k: None or a whole number >= 1 (NumPy integers too); top_p: None or a probability in (0, 1]."""
    if top_k is not None:
        if not is_whole_number(top_k):
            raise TypeError(f"top_k must be None or a whole number >= 1, got {type_name(top_k)} {top_k!r}")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1 (keep the most likely token at least), got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real):
            raise TypeError(f"top_p must be None or a probability in (0, 1], got {type_name(top_p)} {top_p!r}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be a probability in (0, 1] (1 keeps every token), got {top_p!r}")
