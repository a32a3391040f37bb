"""Scoring heads from their attention weights: previous-token, induction and duplicate-token heads.
"""

import math

import torch
from torch.nn import functional

from attn.common.sizes import check_allocation
from attn.common.validate import require_computable
from attn.models.induction.checks import _check_weights
from attn.models.induction.data import _check_data
from attn.models.induction.model import _check_model


def previous_occurrence(tokens):
    """tokens (B, T) -> (B, T) long: the most recent earlier position holding the same token, -1 if none."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() or tokens.is_complex():
        raise TypeError(f"tokens must be an integer tensor of shape (B, T), got {tokens!r:.60}")
    require_computable("tokens", tokens)
    batch, length = tokens.shape
    check_allocation(f"previous_occurrence on tokens of shape {tuple(tokens.shape)}, which compares every pair,",
                     10 * batch * length * length, tokens.device)  # (B, T, T) bools and positions
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T_query, T_key)
    earlier = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril(diagonal=-1)  # key < query
    positions = torch.arange(length, device=tokens.device)  # (T,)
    candidates = torch.where(same & earlier, positions, -1)  # (B, T, T)
    return candidates.max(dim=-1).values


def previous_token_scores(weights, positions=None):
    """weights (B, H, T, T) -> (H,): each head's mean weight on position i - 1, over queries i >= 1.

    positions: optional (B, T) bool, the queries to average over (intersected with i >= 1).
    """
    weights = _check_weights(weights)
    batch, _, length, _ = weights.shape
    if length < 2:
        raise ValueError("a previous-token score needs sequences of at least 2 positions")
    on_previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (B, H, T - 1): weight of query i on key i - 1
    chosen = torch.ones(batch, length - 1, dtype=torch.bool, device=weights.device)
    if positions is not None:
        chosen = chosen & _check_positions(positions, batch, length)[:, 1:]
    return _masked_head_mean(on_previous, chosen)


def induction_scores(weights, tokens, positions=None):
    """weights (B, H, T, T), tokens (B, T) -> (H,): each head's mean weight on the token after the
    previous occurrence of the current token, over queries whose token occurred before.

    positions: optional (B, T) bool, the queries to average over (intersected with those above).
    """
    return _weight_after_previous_occurrence(weights, tokens, positions, offset=1)


def duplicate_token_scores(weights, tokens, positions=None):
    """weights (B, H, T, T), tokens (B, T) -> (H,): each head's mean weight on the previous occurrence of the
    current token itself, over queries whose token occurred before.

    positions: optional (B, T) bool, the queries to average over (intersected with those above).
    """
    return _weight_after_previous_occurrence(weights, tokens, positions, offset=0)


def _weight_after_previous_occurrence(weights, tokens, positions, offset):
    """(H,): each head's mean weight on key j + offset, j the previous occurrence of the query's token."""
    weights = _check_weights(weights)
    batch, heads, length, _ = weights.shape
    if not isinstance(tokens, torch.Tensor) or tokens.shape != (batch, length):
        raise ValueError(f"tokens must be a tensor of shape (B, T) = {(batch, length)}")
    earlier = previous_occurrence(tokens).to(weights.device)  # (B, T): -1 where none
    chosen = earlier >= 0
    if positions is not None:
        chosen = chosen & _check_positions(positions, batch, length)
    target = (earlier + offset).clamp(0, length - 1)  # (B, T): the key the pattern predicts
    index = target[:, None, :, None].expand(-1, heads, -1, 1)  # (B, H, T, 1)
    on_target = weights.gather(-1, index)[..., 0]  # (B, H, T)
    return _masked_head_mean(on_target, chosen)


def weights_by_distance(weights, positions=None):
    """weights (B, H, T, T) -> (H, T): entry [h, k] is head h's mean weight on the key k positions back
    (key i - k for query i), over the queries i >= k.

    positions: optional (B, T) bool, the queries to average over. A distance that no chosen query
    reaches back to gets NaN.
    """
    weights = _check_weights(weights)
    batch, heads, length, _ = weights.shape
    chosen = torch.ones(batch, length, dtype=torch.bool, device=weights.device)
    if positions is not None:
        chosen = chosen & _check_positions(positions, batch, length)
    if not chosen.any():
        raise ValueError("no query position to average over")
    means = torch.full((heads, length), math.nan, dtype=weights.dtype, device=weights.device)
    for distance in range(length):
        on_key = weights.diagonal(offset=-distance, dim1=-2, dim2=-1)  # (B, H, T - k): query i on key i - k
        reaching = chosen[:, distance:]  # (B, T - k): the chosen queries i >= k
        if reaching.any():
            means[:, distance] = on_key.transpose(0, 1)[:, reaching].mean(dim=1)
    return means


def _check_positions(positions, batch, length):
    if not isinstance(positions, torch.Tensor) or positions.dtype != torch.bool or positions.shape != (batch, length):
        raise ValueError(f"positions must be a boolean tensor of shape (B, T) = {(batch, length)}")
    return positions


def _masked_head_mean(values, chosen):
    """values (B, H, T'), chosen (B, T') bool -> (H,) mean of each head's values where chosen."""
    if not chosen.any():
        raise ValueError("no query position to average over")
    picked = values.transpose(0, 1)[:, chosen]  # (H, number chosen)
    return picked.mean(dim=1)


@torch.no_grad()
def head_scores(model, data):
    """Previous-token and induction scores of every head, each (num_layers, H), on ``data``'s second copy.

    The previous-token score averages over every query i >= 1; the induction score over the
    second copy, where each token has exactly one earlier occurrence.
    """
    _check_model(model)
    _check_data(data)
    _, every_weights = model(data.tokens, need_weights=True)
    in_second = functional.pad(data.second_copy, (1, 0))  # (N, T): the query positions of the second copy
    previous = torch.stack([previous_token_scores(weights) for weights in every_weights])
    induction = torch.stack([induction_scores(weights, data.tokens, in_second) for weights in every_weights])
    return previous, induction
