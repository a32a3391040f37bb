"""Argument checks shared by the induction modules: each wrong argument becomes one sentence.
"""

import math
import numbers

import torch

from attn.common.validate import require_computable


def check_int(name, value, minimum=None, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


SEEDS = (-(2**63), 2**64 - 1)  # the seeds torch.Generator.manual_seed takes


def check_seed(value):
    value = check_int("seed", value)
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
        check_int("every block length", value, minimum=2, maximum=length // 2)
    return tuple(int(value) for value in lengths)


def _check_tokens(tokens, vocab_size, max_length):
    require_computable("tokens", tokens)
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
    require_computable("weights", weights)
    if not torch.isfinite(weights).all():
        raise ValueError("weights contain NaN or inf")
    return weights
