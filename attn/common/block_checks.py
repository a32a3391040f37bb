"""Checks for lesson 18's block-sparse attention (attn.block_sparse): block sizes, self-attention inputs, block
keep-masks and gates, each wrong input one sentence, before any arithmetic."""

import math

import torch

from attn.common.layer_checks import check_attention_inputs, check_attention_shapes
from attn.common.sizes import check_allocation
from attn.common.validate import (
    positive_int,
    require_computable,
    require_finite,
    require_floating,
    require_tensor,
    type_name,
    whole_count,
    whole_number,
)


def check_block_size(block_size, length=None):
    """``block_size`` as a positive int: the positions each block holds. Given the sequence's ``length`` T, a block size
    beyond T + 1 comes back as T + 1, which changes nothing (one partial block that never ends inside the sequence)
    and keeps every position product inside int64."""
    block_size = positive_int("block_size", block_size)
    return block_size if length is None else min(block_size, whole_count("length", length) + 1)


def check_block_input(name, x):
    """``x`` (..., T, d) for block_means: a floating-point tensor with a time axis and a feature axis, finite."""
    require_computable(name, x)
    require_floating(name, x)
    if x.dim() < 2:
        raise ValueError(f"{name} must have shape (..., T, d), at least 2 axes, got {tuple(x.shape)}")
    require_finite(name, x, "its block means would carry it")


def check_self_attention(query, key, value):
    """query (B, H, T, d), key and value (B, H_kv, T, d) of one sequence attending to itself: the shapes, dtypes and
    finite values that ``explicit_attention`` needs, the same T for all three and at least one position; and the
    (B, H, T, T) tables the masked paths hold must fit in memory."""
    check_attention_shapes(query, key, value)
    if query.shape[2] != key.shape[2] or query.shape[2] == 0:
        raise ValueError(f"block-sparse attention here is causal self-attention over one sequence: query {tuple(query.shape)} "
                         f"and key {tuple(key.shape)} must share T >= 1 positions")
    check_attention_inputs(query, key, value, 0.0, False)
    batch, heads, length, _ = query.shape
    check_allocation(f"the (B, H, T, T) = {(batch, heads, length, length)} attention weights and masks",
                     batch * heads * length * length * (query.itemsize + 2), query.device, "use shorter sequences")


def check_block_keep(block_keep, batch, heads, length, block_size, device):
    """``block_keep`` must be a bool (B, heads, T, ceil(T / block_size)) tensor on ``device``: each query's chosen blocks."""
    if not isinstance(block_keep, torch.Tensor) or block_keep.dtype != torch.bool:
        raise TypeError(f"block_keep must be a bool tensor (True = the query reads that block), got {type_name(block_keep)}"
                        + (f" of {block_keep.dtype}" if isinstance(block_keep, torch.Tensor) else ""))
    batch, heads, length = whole_count("batch", batch), positive_int("heads", heads), whole_count("length", length)
    expected = (batch, heads, length, math.ceil(length / check_block_size(block_size)))
    if tuple(block_keep.shape) != expected:
        raise ValueError(f"block_keep must have shape (B, H_kv, T, n_blocks) = {expected} for these inputs, "
                         f"got {tuple(block_keep.shape)}")
    if block_keep.device != device:
        raise ValueError(f"block_keep is on {block_keep.device} but query is on {device}; "
                         "move it with block_keep.to(query.device)")


def check_gates(gates, query, branches):
    """``gates`` (B, H, T, branches): a finite floating-point tensor with the query's dtype and device."""
    require_computable("gates", gates)
    require_floating("gates", gates)
    require_tensor("query", query)
    if query.dim() != 4:
        raise ValueError(f"query must have shape (B, H, T, d), got {tuple(query.shape)}")
    branches = whole_number("branches", branches, 2, 3)
    expected = (*query.shape[:3], branches)
    if tuple(gates.shape) != expected:
        what = "compressed, selected, window" if branches == 3 else "compressed, selected (window=None: no window branch)"
        raise ValueError(f"gates must have shape (B, H, T, {branches}) = {expected}, one gate per branch ({what}), "
                         f"got {tuple(gates.shape)}")
    if gates.dtype != query.dtype or gates.device != query.device:
        raise TypeError(f"gates is {gates.dtype} on {gates.device} but query is {query.dtype} on {query.device}; "
                        "convert it with gates.to(query)")
    require_finite("gates", gates, "the output would carry it")


def check_block_count(name, count):
    """``count`` as a positive int: blocks each query reads (a query always has at least one to read)."""
    return positive_int(name, count)
