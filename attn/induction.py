"""Induction heads: a lookup that a small causal attention-only model finds by itself (lesson 11).

The task: random tokens in which a block of L tokens is immediately repeated. On the first copy
nothing beyond chance can be predicted; on the second, every next token can be looked up: find
where the current token occurred before and copy the token that followed it. A two-layer
attention-only model learns that lookup from next-token prediction alone (Elhage et al. 2021;
Olsson et al. 2022) with a *previous-token head* in layer 0 and an *induction head* in layer 1
(layers and heads are counted from 0 everywhere, in the code and in the lesson).

Where the learned position embeddings enter decides which circuit the model can find. Added to
the residual stream (``positions="residual"``), layer 0 can copy the *position* of an earlier
copy of the current token and layer 1 can attend one position further on: the "pointer
arithmetic" route Elhage et al. describe in GPT-2, which small models here find first. Added only
to the inputs of the queries and keys (``positions="query_key"``, the default, like the models
Elhage et al. study), positions never reach the values, so that route is closed and the model
has to build the previous-token head and the induction head.

Convention for every mask below: position t of a sequence predicts token t + 1, so masks over
predictions have T - 1 columns, aligned with ``tokens[:, 1:]`` and ``logits[:, :-1]``.
"""

import argparse
import contextlib
import json
import math
import numbers
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from attn.destinations import folder_problem
from attn.multihead import MultiHeadAttention

# The settings the lesson uses (chosen by the measurements reported with issue 15).
VOCAB_SIZE = 64
MAX_LENGTH = 32  # every training sequence is this long, so every position embedding is trained
TRAIN_BLOCK_LENGTHS = tuple(range(4, 13))  # L drawn from 4..12 in training
LONGER_BLOCK_LENGTHS = (13, 14, 15, 16)  # held out: repeats longer than any seen in training
EMBED_DIM = 64
NUM_HEADS = 2
STEPS = 3000
BATCH_SIZE = 64
LEARNING_RATE = 3e-3
SEED = 0


# ---------------------------------------------------------------------------------------------
# Validation helpers


def _check_int(name, value, minimum=None, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


SEEDS = (-(2**63), 2**64 - 1)  # the seeds torch.Generator.manual_seed takes


def _check_seed(value):
    value = _check_int("seed", value)
    if not SEEDS[0] <= value <= SEEDS[1]:
        raise ValueError(f"seed must lie between -2**63 and 2**64 - 1 (what PyTorch's generator takes), got {value}")
    return value


def _check_positive_float(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value}")
    return float(value)


def _check_block_lengths(block_lengths, length):
    lengths = (block_lengths,) if isinstance(block_lengths, numbers.Integral) else block_lengths
    try:
        lengths = tuple(lengths)
    except TypeError:
        raise TypeError(f"block_lengths must be an integer or a sequence of integers, got {block_lengths!r}") from None
    if not lengths:
        raise ValueError("block_lengths is empty: give at least one block length")
    for value in lengths:
        _check_int("every block length", value, minimum=2, maximum=length // 2)
    return tuple(int(value) for value in lengths)


def _check_tokens(tokens, vocab_size, max_length):
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must have shape (B, T) with B >= 1 and T >= 1, got {tuple(tokens.shape)}")
    if tokens.shape[1] > max_length:
        raise ValueError(f"sequence length T={tokens.shape[1]} is longer than max_length={max_length}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"token ids must lie in 0..{vocab_size - 1}, got values from {low} to {high}")
    return tokens.long()


def _check_weights(weights):
    if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
        raise TypeError(f"weights must be a floating-point torch.Tensor, got {type(weights).__name__}")
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2] or 0 in weights.shape:
        raise ValueError(f"weights must have shape (B, H, T, T), got {tuple(weights.shape)}")
    if not torch.isfinite(weights).all():
        raise ValueError("weights contain NaN or inf")
    return weights


def _check_model(model):
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")


def _check_data(data):
    if not isinstance(data, RepeatData):
        raise TypeError(f"data must be a RepeatData from make_repeat_data, got {type(data).__name__}")


# ---------------------------------------------------------------------------------------------
# The data


@dataclass
class RepeatData:
    """Sequences with one repeated block.

    tokens (N, T) token ids; block_start (N,) where the first copy starts; block_length (N,) its L.
    first_copy and second_copy (N, T - 1) bool: the predictions t -> t + 1 whose target is token
    1..L-1 of the first copy, and of the second copy (the same targets, once unpredictable and
    once predictable by lookup).
    """

    tokens: torch.Tensor
    block_start: torch.Tensor
    block_length: torch.Tensor
    first_copy: torch.Tensor = field(init=False)
    second_copy: torch.Tensor = field(init=False)

    def __post_init__(self):
        targets = torch.arange(1, self.tokens.shape[1])[None, :]  # (1, T - 1): position of each target
        start, length = self.block_start[:, None], self.block_length[:, None]  # (N, 1)
        self.first_copy = (targets > start) & (targets < start + length)  # (N, T - 1)
        self.second_copy = (targets > start + length) & (targets < start + 2 * length)  # (N, T - 1)

    def __len__(self):
        return len(self.tokens)


def _draw_repeat_data(generator, num_sequences, length, block_lengths, vocab_size, block_start):
    """The sampling behind ``make_repeat_data``, from an existing generator (used in training)."""
    choices = torch.tensor(block_lengths)
    block_length = choices[torch.randint(len(choices), (num_sequences,), generator=generator)]  # (N,)
    if block_start is None:
        room = length - 2 * block_length + 1  # (N,) number of possible starts for each sequence
        start = (torch.rand(num_sequences, generator=generator) * room).long()  # (N,) uniform in 0..room-1
    else:
        start = torch.full((num_sequences,), block_start)
    # distinct tokens everywhere, so each token's earlier occurrence (if any) is unique
    tokens = torch.rand(num_sequences, vocab_size, generator=generator).argsort(dim=1)[:, :length]  # (N, T)
    positions = torch.arange(length)[None, :]  # (1, T)
    in_second = (positions >= start[:, None] + block_length[:, None]) & (positions < start[:, None] + 2 * block_length[:, None])
    source = torch.where(in_second, positions - block_length[:, None], positions)  # (N, T): copy from L earlier
    tokens = tokens.gather(1, source)
    return RepeatData(tokens, start, block_length)


def make_repeat_data(num_sequences, length=MAX_LENGTH, block_lengths=TRAIN_BLOCK_LENGTHS, vocab_size=VOCAB_SIZE,
                     block_start=None, seed=0):
    """``num_sequences`` seeded sequences of ``length`` distinct random tokens with one block repeated.

    Each sequence draws its block length L from ``block_lengths`` (an int or a sequence of ints)
    and its first copy's start uniformly from 0..length - 2L (or uses ``block_start``); the L
    tokens after the first copy are the same block again, and all other tokens are distinct.
    Returns a ``RepeatData`` with tokens (N, T) and the masks of the two copies (N, T - 1).
    """
    num_sequences = _check_int("num_sequences", num_sequences, minimum=1)
    length = _check_int("length", length, minimum=4)
    vocab_size = _check_int("vocab_size", vocab_size, minimum=length)
    block_lengths = _check_block_lengths(block_lengths, length)
    if block_start is not None:
        block_start = _check_int("block_start", block_start, minimum=0, maximum=length - 2 * max(block_lengths))
    seed = _check_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    return _draw_repeat_data(generator, num_sequences, length, block_lengths, vocab_size, block_start)


# ---------------------------------------------------------------------------------------------
# The model


def causal_keep_mask(length, device=None):
    """(T, T) boolean keep-mask: position i may attend to positions 0..i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class AttentionOnlyTransformer(nn.Module):
    """Token and learned position embeddings, ``num_layers`` residual causal attention layers, an unembedding.

    Each layer adds its output to the residual stream x (B, T, E) under a causal mask. With
    positions="query_key", x starts as the token embeddings and each layer computes
    x = x + attention(query=x + P, key=x + P, value=x), P (T, E) the position embeddings; with
    positions="residual", x starts as tokens + P and x = x + attention(x, x, x). With
    ``layer_norm=True`` each layer reads norm(x) instead of x and a final norm precedes the
    unembedding (measured: it does not make the heads form more reliably).
    forward(tokens (B, T)) returns logits (B, T, V); with need_weights=True it returns
    (logits, weights), weights a list with one (B, H, T, T) tensor per layer.
    """

    def __init__(self, vocab_size=VOCAB_SIZE, embed_dim=EMBED_DIM, num_heads=NUM_HEADS, num_layers=2,
                 max_length=MAX_LENGTH, positions="query_key", layer_norm=False, seed=0):
        super().__init__()
        if positions not in ("query_key", "residual"):
            raise ValueError(f'positions must be "query_key" or "residual", got {positions!r}')
        self.positions = positions
        self.vocab_size = _check_int("vocab_size", vocab_size, minimum=2)
        self.embed_dim = _check_int("embed_dim", embed_dim, minimum=1)
        self.num_heads = _check_int("num_heads", num_heads, minimum=1)
        self.num_layers = _check_int("num_layers", num_layers, minimum=1)
        self.max_length = _check_int("max_length", max_length, minimum=1)
        seed = _check_seed(seed)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be a multiple of num_heads={num_heads}")
        with torch.random.fork_rng(devices=[]):  # seeded initial weights, global generator untouched
            torch.manual_seed(seed)
            self.token_embedding = nn.Embedding(vocab_size, embed_dim)
            self.position_embedding = nn.Embedding(max_length, embed_dim)
            self.layers = nn.ModuleList(MultiHeadAttention(embed_dim, num_heads) for _ in range(num_layers))
            self.norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(num_layers + 1)) if layer_norm else None
            self.unembedding = nn.Linear(embed_dim, vocab_size)

    def forward(self, tokens, need_weights=False):
        """tokens (B, T) -> logits (B, T, V); with need_weights, also
        a list of each layer's attention weights (B, H, T, T)."""
        tokens = _check_tokens(tokens, self.vocab_size, self.max_length)
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)  # (T,)
        where = self.position_embedding(positions)  # (T, E)
        x = self.token_embedding(tokens)  # (B, T, E): the residual stream
        if self.positions == "residual":
            x = x + where
        keep_mask = causal_keep_mask(length, tokens.device)  # (T, T)
        every_weights = []
        for index, layer in enumerate(self.layers):
            inputs = x if self.norms is None else self.norms[index](x)
            seen = inputs  # what the queries and keys are made from
            if self.positions == "query_key":
                seen = inputs + where  # positions reach queries, keys only
            out = layer(seen, seen, inputs, mask=keep_mask,
                        need_weights=need_weights)  # (B, T, E)
            if need_weights:
                out, weights = out
                every_weights.append(weights)  # (B, H, T, T)
            x = x + out  # each layer adds to the residual stream
        if self.norms is not None:
            x = self.norms[-1](x)
        logits = self.unembedding(x)  # (B, T, V)
        if need_weights:
            return logits, every_weights
        return logits


# ---------------------------------------------------------------------------------------------
# Training


@dataclass
class TrainingLog:
    """Per-step training losses (mean cross-entropy): on all predictions, on the first copy, on the second copy."""

    losses: list = field(default_factory=list)
    first_copy_losses: list = field(default_factory=list)
    second_copy_losses: list = field(default_factory=list)


def next_token_losses(logits, tokens):
    """logits (B, T, V), tokens (B, T) -> cross-entropy of each prediction t -> t + 1, (B, T - 1)."""
    predictions = logits[:, :-1]  # (B, T - 1, V)
    return functional.cross_entropy(predictions.transpose(1, 2), tokens[:, 1:], reduction="none")


def train(model, steps=STEPS, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE, seed=SEED, length=MAX_LENGTH,
          block_lengths=TRAIN_BLOCK_LENGTHS, on_step=None):
    """Adam on next-token cross-entropy over every position, fresh seeded data at each step.

    The model is never told where the repeat is: its loss covers all T - 1 predictions. Returns
    a ``TrainingLog`` of the loss of every step, overall and on each copy. ``on_step(step, model)``,
    if given, is called after each update (step counted from 1), for example to measure the heads
    as they form (``attn.induction_runs``); it must not change the model.
    """
    _check_model(model)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be a function of (step, model) or None, got {type(on_step).__name__}")
    steps = _check_int("steps", steps, minimum=1)
    batch_size = _check_int("batch_size", batch_size, minimum=1)
    learning_rate = _check_positive_float("learning_rate", learning_rate)
    seed = _check_seed(seed)
    length = _check_int("length", length, minimum=4, maximum=model.max_length)
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
    window = _check_int("window", window, minimum=1)
    try:
        losses = torch.as_tensor([float(value) for value in second_copy_losses], dtype=torch.float64)
    except (TypeError, ValueError):
        raise TypeError(f"second_copy_losses must be a sequence of numbers, got {second_copy_losses!r:.60}") from None
    if losses.dim() != 1 or len(losses) < window or not torch.isfinite(losses).all():
        raise ValueError(f"second_copy_losses must be at least {window} finite numbers")
    smoothed = losses.unfold(0, window, 1).mean(dim=1)  # (S - window + 1,): entry k covers steps k..k+window-1
    below = torch.nonzero(smoothed < smoothed[0] / 2).flatten()
    return None if len(below) == 0 else int(below[0]) + window - 1


def training_batches(steps=STEPS, batch_size=BATCH_SIZE, seed=SEED, length=MAX_LENGTH, block_lengths=TRAIN_BLOCK_LENGTHS,
                     vocab_size=VOCAB_SIZE):
    """The sequences ``train`` draws with these settings, in order: one ``RepeatData`` of (batch_size, length) per step.

    Used to ask what training saw (for example, whether a test block occurred in it) without training.
    """
    steps = _check_int("steps", steps, minimum=1)
    batch_size = _check_int("batch_size", batch_size, minimum=1)
    seed = _check_seed(seed)
    length = _check_int("length", length, minimum=4)
    vocab_size = _check_int("vocab_size", vocab_size, minimum=length)
    block_lengths = _check_block_lengths(block_lengths, length)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield _draw_repeat_data(generator, batch_size, length, block_lengths, vocab_size, None)


# ---------------------------------------------------------------------------------------------
# Measurements


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


def previous_occurrence(tokens):
    """tokens (B, T) -> (B, T) long: the most recent earlier position holding the same token, -1 if none."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() or tokens.is_complex():
        raise TypeError(f"tokens must be an integer tensor of shape (B, T), got {tokens!r:.60}")
    length = tokens.shape[1]
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


@contextlib.contextmanager
def ablate_head(model, layer, head):
    """Inside the ``with`` block, head ``head`` of layer ``layer`` contributes nothing to the residual stream.

    Zeroes that head's d = E / H input columns of the layer's ``out_proj.weight`` (the columns
    that read the head's output) and restores them on exit, even after an error.
    """
    _check_model(model)
    layer = _check_int("layer", layer, minimum=0, maximum=model.num_layers - 1)
    head = _check_int("head", head, minimum=0, maximum=model.num_heads - 1)
    head_dim = model.embed_dim // model.num_heads
    weight = model.layers[layer].out_proj.weight  # (E, E): out_features x in_features
    columns = slice(head * head_dim, (head + 1) * head_dim)
    saved = weight[:, columns].detach().clone()
    with torch.no_grad():
        weight[:, columns] = 0
    try:
        yield model
    finally:
        with torch.no_grad():
            weight[:, columns] = saved


PATH_INPUTS = ("query", "key", "value")


def _head_output(model, layer, head, inputs):
    """inputs (B, T, E), what layer ``layer`` reads -> (B, T, E): what head ``head`` adds to the residual stream.

    Measured as the layer's output minus its output with that head ablated (so the out_proj bias,
    which belongs to no head, cancels). For positions="query_key" models without layer norm.
    """
    attention = model.layers[layer]
    length = inputs.shape[1]
    seen = inputs + model.position_embedding.weight[:length]  # (B, T, E): positions reach queries, keys
    mask = causal_keep_mask(length, inputs.device)
    full = attention(seen, seen, inputs, mask=mask)
    with ablate_head(model, layer, head):
        without = attention(seen, seen, inputs, mask=mask)
    return full - without


def _check_path(model, source, target_layer, inputs):
    _check_model(model)
    if model.positions != "query_key" or model.norms is not None:
        raise ValueError('forward_without_path needs a model with positions="query_key" and no layer norm')
    if not isinstance(source, tuple | list) or len(source) != 2:
        raise TypeError(f"source must be a (layer, head) pair, got {source!r:.60}")
    layer = _check_int("the source layer", source[0], minimum=0, maximum=model.num_layers - 1)
    head = _check_int("the source head", source[1], minimum=0, maximum=model.num_heads - 1)
    if layer == model.num_layers - 1:
        raise ValueError(f"the source layer {layer} is the last layer: no later layer reads its heads")
    target_layer = _check_int("target_layer", target_layer, minimum=layer + 1, maximum=model.num_layers - 1)
    if isinstance(inputs, str) or not isinstance(inputs, tuple | list) or not set(inputs) <= set(PATH_INPUTS):
        raise ValueError(f"inputs must be a tuple of names among {PATH_INPUTS}, got {inputs!r:.60}")
    return (layer, head), target_layer, tuple(inputs)


@torch.no_grad()
def forward_without_path(model, tokens, source, target_layer, inputs):
    """The forward pass with head source = (layer, head) removed from
    some inputs ("query", "key", "value") of one later layer only.

    Every other reader of the residual stream still sees that head.
    Returns logits (B, T, V) and each layer's weights (B, H, T, T).
    """
    source, target_layer, inputs = _check_path(model, source, target_layer,
                                               inputs)
    tokens = _check_tokens(tokens, model.vocab_size, model.max_length)
    length = tokens.shape[1]
    where = model.position_embedding.weight[:length]  # (T, E)
    keep_mask = causal_keep_mask(length, tokens.device)  # (T, T)
    x = model.token_embedding(tokens)  # (B, T, E): the residual stream
    every_weights = []
    for index, layer in enumerate(model.layers):
        if index == source[0]:
            from_source = _head_output(model, *source, x)  # (B, T, E)
        read = {name: x for name in PATH_INPUTS}  # what each input reads
        if index == target_layer:
            for name in inputs:
                read[name] = x - from_source  # the stream without it
        out, weights = layer(read["query"] + where, read["key"] + where,
                             read["value"], mask=keep_mask,
                             need_weights=True)  # (B, T, E), (B, H, T, T)
        every_weights.append(weights)
        x = x + out  # the next layer and the readout see everything
    return model.unembedding(x), every_weights


def ablation_accuracies(model, data):
    """Second-copy accuracy with each head zeroed in turn: (num_layers, H)."""
    _check_model(model)
    _check_data(data)
    accuracies = torch.zeros(model.num_layers, model.num_heads)
    for layer in range(model.num_layers):
        for head in range(model.num_heads):
            with ablate_head(model, layer, head):
                accuracies[layer, head] = copy_metrics(model, data)["second_copy_accuracy"]
    return accuracies


# ---------------------------------------------------------------------------------------------
# Producing the lesson's trained models: python -m attn.induction --out lessons/models


SETTINGS = dict(vocab_size=VOCAB_SIZE, embed_dim=EMBED_DIM, num_heads=NUM_HEADS, max_length=MAX_LENGTH,
                block_lengths=list(TRAIN_BLOCK_LENGTHS), steps=STEPS, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE,
                seed=SEED, positions="query_key", layer_norm=False)
TEST_SEED = 1000  # the held-out sequences every reported accuracy is measured on
LOG_NAME = "induction_training.json"


def weights_path(folder, num_layers):
    return Path(folder) / f"induction_{num_layers}layer.pt"


def train_and_save(out, num_layers_options=(1, 2)):
    """Train the lesson's models (default settings, seed SEED); save their weights and a JSON log in ``out``.

    The log holds the settings, every step's losses, the phase-change step, the training time
    and the accuracies on ``make_repeat_data(2000, seed=TEST_SEED)``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"settings": SETTINGS, "torch": torch.__version__, "models": {}}
    for num_layers in num_layers_options:
        model = AttentionOnlyTransformer(num_layers=num_layers, seed=SEED)
        started = time.perf_counter()
        log = train(model)
        seconds = time.perf_counter() - started
        torch.save(model.state_dict(), weights_path(out, num_layers))
        record["models"][str(num_layers)] = {
            "train_seconds": round(seconds, 1),
            "phase_change_step": phase_change_step(log.second_copy_losses),
            "test_metrics": copy_metrics(model, make_repeat_data(2000, seed=TEST_SEED)),
            **{name: [round(value, 4) for value in values] for name, values in asdict(log).items()},
        }
    (out / LOG_NAME).write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_trained(folder, num_layers):
    """The model saved by ``train_and_save`` in ``folder``, in eval mode.

    Every problem (no such folder or file, a file that is not one of these models) is a
    FileNotFoundError, NotADirectoryError or ValueError saying which file was expected and how to make it.
    """
    num_layers = _check_int("num_layers", num_layers, minimum=1)
    path = _weights_file(folder, num_layers)
    remake = f"make it with python -m attn.induction --out {folder}"
    try:
        state = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - torch.load fails in many ways on a file that is not its own; its advice is unsafe
        raise ValueError(f"{path} is not a weights file saved by attn.induction (damaged, or something else); {remake}") from None
    model = AttentionOnlyTransformer(num_layers=num_layers)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError, KeyError):
        raise ValueError(f"{path} holds another model's weights, not the lesson's {num_layers}-layer one; {remake}") from None
    return model.eval()


def _weights_file(folder, num_layers):
    """The path of ``num_layers``' weights in ``folder``, after checking that the folder and the file are there."""
    if not isinstance(folder, str | os.PathLike) or str(folder) == "":
        raise TypeError(f"folder must be a path such as 'lessons/models' (text or a pathlib.Path), got {folder!r:.60}")
    folder, path = Path(folder), weights_path(folder, num_layers)
    remake = f"python -m attn.induction --out {folder} trains and saves the lesson's models there"
    if not folder.exists():
        raise FileNotFoundError(f"there is no folder {folder}, so no {path.name} in it; {remake}")
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder; give the folder that holds {path.name}")
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no {path.name} (the {num_layers}-layer model's weights); {remake}")
    return path


def _output_folder(text):
    """--out: a folder that is there, or can be made, and can be written in; checked before training starts."""
    problem = folder_problem(text)
    if problem is None:
        taken = [path for path in (*(weights_path(text, layers) for layers in (1, 2)), Path(text) / LOG_NAME) if path.is_dir()]
        problem = f"{taken[0]} is a folder, so the file of that name cannot be written; move it away" if taken else None
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attn.induction",
                                     description="Train lesson 11's one- and two-layer models and save them.")
    parser.add_argument("--out", required=True, type=_output_folder, help="folder for the weights and the training log")
    args = parser.parse_args(argv)  # --out is checked here, before three thousand steps of training
    record = train_and_save(args.out)
    for num_layers, result in record["models"].items():
        metrics = ", ".join(f"{name} {value:.3f}" for name, value in result["test_metrics"].items())
        step = result["phase_change_step"]
        print(f"{num_layers} layer(s): trained in {result['train_seconds']} s, phase change at step {step}; {metrics}")


if __name__ == "__main__":
    main()
