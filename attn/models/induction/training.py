"""Training by next-token prediction, and what a trained model gets right on each copy of a block.
"""

from dataclasses import dataclass, field

import torch
from torch.nn import functional

from attn.common.validate import require_computable, require_floating, require_token_ids
from attn.models.induction.checks import _check_block_lengths, _check_positive_float, check_int, check_seed
from attn.models.induction.data import (
    BATCH_SIZE,
    LEARNING_RATE,
    MAX_LENGTH,
    SEED,
    STEPS,
    TRAIN_BLOCK_LENGTHS,
    _check_data,
    _draw_repeat_data,
)
from attn.models.induction.model import _check_model


@dataclass
class TrainingLog:
    """Per-step training losses (mean cross-entropy): on all predictions, on the first copy, on the second copy."""

    losses: list = field(default_factory=list)
    first_copy_losses: list = field(default_factory=list)
    second_copy_losses: list = field(default_factory=list)


def next_token_losses(logits, tokens):
    """logits (B, T, V), tokens (B, T) -> cross-entropy of each prediction t -> t + 1, (B, T - 1)."""
    require_computable("logits", logits)
    require_floating("logits", logits)
    require_token_ids("tokens", tokens, 2)
    if logits.dim() != 3 or logits.shape[:2] != tokens.shape or tokens.shape[1] < 2:
        raise ValueError(f"logits must be (B, T, V) and tokens (B, T) with T >= 2, got {tuple(logits.shape)}, "
                         f"{tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= logits.shape[-1]):
        raise ValueError(f"tokens must be ids from 0 to {logits.shape[-1] - 1}, the logits' vocabulary")
    predictions = logits[:, :-1]  # (B, T - 1, V)
    return functional.cross_entropy(predictions.transpose(1, 2), tokens[:, 1:], reduction="none")


def train(model, steps=STEPS, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE, seed=SEED, length=MAX_LENGTH,
          block_lengths=TRAIN_BLOCK_LENGTHS, on_step=None):
    """Adam on next-token cross-entropy over every position, fresh seeded data at each step.

    The model is never told where the repeat is: its loss covers all T - 1 predictions. Returns
    a ``TrainingLog`` of the loss of every step, overall and on each copy. ``on_step(step, model)``,
    if given, is called after each update (step counted from 1), for example to measure the heads
    as they form (``attn.experiments.induction_runs``); it must not change the model.
    """
    _check_model(model)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a function of (step, model) or None, got {type(on_step).__name__}")
    steps = check_int("steps", steps, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    learning_rate = _check_positive_float("learning_rate", learning_rate)
    seed = check_seed(seed)
    length = check_int("length", length, minimum=4, maximum=model.max_length)
    if model.vocab_size < length:
        raise ValueError(f"the model's vocab_size={model.vocab_size} is smaller than length={length}")
    block_lengths = _check_block_lengths(block_lengths, length)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    log = TrainingLog()
    model.train()
    for step in range(1, steps + 1):
        data = _draw_repeat_data(generator, batch_size, length, block_lengths, model.vocab_size, None)
        losses = next_token_losses(model(data.tokens), data.tokens)  # (B, T - 1)
        loss = losses.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log.losses.append(loss.item())
        log.first_copy_losses.append(losses[data.first_copy].mean().item())
        log.second_copy_losses.append(losses[data.second_copy].mean().item())
        if on_step is not None:
            on_step(step, model)
    model.eval()
    return log


def phase_change_step(second_copy_losses, window=50):
    """The first step at which the second-copy loss, averaged over the last ``window`` steps,
    is below half its average over the first ``window`` steps; None if it never gets there."""
    window = check_int("window", window, minimum=1)
    try:
        losses = torch.as_tensor([float(value) for value in second_copy_losses], dtype=torch.float64)
    except (TypeError, ValueError):
        raise TypeError(f"second_copy_losses must be a sequence of numbers, got {second_copy_losses!r:.60}") from None
    if losses.dim() != 1 or len(losses) < window or not torch.isfinite(losses).all():
        raise ValueError(f"second_copy_losses must be at least {window} finite numbers")
    smoothed = losses.unfold(0, window, 1).mean(dim=1)  # (S - window + 1,): entry k covers steps k..k+window-1
    below = torch.nonzero(smoothed < smoothed[0] / 2).flatten()
    return None if len(below) == 0 else int(below[0]) + window - 1


@torch.no_grad()
def copy_metrics(model, data):
    """Mean loss and accuracy of the next-token predictions on the first and on the second copy."""
    _check_model(model)
    _check_data(data)
    logits = model(data.tokens)  # (N, T, V)
    losses = next_token_losses(logits, data.tokens)  # (N, T - 1)
    correct = (logits[:, :-1].argmax(dim=-1) == data.tokens[:, 1:]).float()  # (N, T - 1)
    return {
        "first_copy_loss": losses[data.first_copy].mean().item(),
        "second_copy_loss": losses[data.second_copy].mean().item(),
        "first_copy_accuracy": correct[data.first_copy].mean().item(),
        "second_copy_accuracy": correct[data.second_copy].mean().item(),
    }


@torch.no_grad()
def loss_per_position(model, tokens):
    """tokens (B, T) -> mean loss and accuracy over the batch of each prediction t -> t + 1, both (T - 1,)."""
    _check_model(model)
    logits = model(tokens)  # (B, T, V)
    tokens = tokens.long()
    losses = next_token_losses(logits, tokens)  # (B, T - 1)
    correct = (logits[:, :-1].argmax(dim=-1) == tokens[:, 1:]).float()  # (B, T - 1)
    return losses.mean(dim=0), correct.mean(dim=0)
