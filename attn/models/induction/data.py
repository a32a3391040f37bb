"""The task: random tokens in which a block is immediately repeated, and the lesson's settings.
"""

from dataclasses import dataclass, field

import torch

from attn.common.sizes import check_allocation
from attn.common.validate import require_computable
from attn.models.induction.checks import _check_block_lengths, check_int, check_seed

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
        _check_repeats(self.tokens, self.block_start, self.block_length)
        targets = torch.arange(1, self.tokens.shape[1])[None, :]  # (1, T - 1): position of each target
        start, length = self.block_start[:, None], self.block_length[:, None]  # (N, 1)
        self.first_copy = (targets > start) & (targets < start + length)  # (N, T - 1)
        self.second_copy = (targets > start + length) & (targets < start + 2 * length)  # (N, T - 1)

    def __len__(self):
        return len(self.tokens)


def _check_repeats(tokens, block_start, block_length):
    """A RepeatData made by hand must describe real repeats: tokens (N, T) ids, block_start and block_length (N,)
    whole numbers with L >= 2 and both copies inside the sequence (else a copy has no prediction to score)."""
    require_computable("tokens", tokens)
    if tokens.dim() != 2 or 0 in tokens.shape or tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be integer token ids of shape (N, T), got {tokens.dtype} {tuple(tokens.shape)}")
    for name, values in (("block_start", block_start), ("block_length", block_length)):
        require_computable(name, values)
        if values.shape != tokens.shape[:1] or values.is_floating_point() or values.dtype == torch.bool:
            raise TypeError(f"{name} must be whole numbers of shape (N,) = ({tokens.shape[0]},), "
                            f"got {values.dtype} {tuple(values.shape)}")
    if (block_length < 2).any() or (block_start < 0).any() or (block_start + 2 * block_length > tokens.shape[1]).any():
        raise ValueError(f"every block needs length L >= 2, a start >= 0 and both copies within T = {tokens.shape[1]} "
                         "(start + 2 L <= T): otherwise a copy has no prediction to score")


def _check_data(data):
    if not isinstance(data, RepeatData):
        raise TypeError(f"data must be a RepeatData from make_repeat_data, got {type(data).__name__}")


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
    num_sequences = check_int("num_sequences", num_sequences, minimum=1)
    length = check_int("length", length, minimum=4)
    vocab_size = check_int("vocab_size", vocab_size, minimum=length)
    block_lengths = _check_block_lengths(block_lengths, length)
    if block_start is not None:
        block_start = check_int("block_start", block_start, minimum=0, maximum=length - 2 * max(block_lengths))
    seed = check_seed(seed)
    largest = max((num_sequences, "num_sequences"), (vocab_size, "vocab_size"), (length, "length"))[1]
    check_allocation(f"make_repeat_data(num_sequences={num_sequences}, length={length}, vocab_size={vocab_size})",
                     num_sequences * (16 * vocab_size + 40 * length),  # random keys and their order, tokens and masks
                     advice=f"use a smaller {largest}")
    generator = torch.Generator().manual_seed(seed)
    return _draw_repeat_data(generator, num_sequences, length, block_lengths, vocab_size, block_start)


def training_batches(steps=STEPS, batch_size=BATCH_SIZE, seed=SEED, length=MAX_LENGTH, block_lengths=TRAIN_BLOCK_LENGTHS,
                     vocab_size=VOCAB_SIZE):
    """The sequences ``train`` draws with these settings, in order: one ``RepeatData`` of (batch_size, length) per step.

    Used to ask what training saw (for example, whether a test block occurred in it) without training.
    """
    steps = check_int("steps", steps, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_seed(seed)
    length = check_int("length", length, minimum=4)
    vocab_size = check_int("vocab_size", vocab_size, minimum=length)
    block_lengths = _check_block_lengths(block_lengths, length)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield _draw_repeat_data(generator, batch_size, length, block_lengths, vocab_size, None)
