"""Lesson 12, inside the fused kernel: the online softmax, attention in tiles, and a backward that recomputes.

``online_softmax`` (NumPy) reads each row in blocks, keeping a running maximum and sum. ``tiled_attention``
(PyTorch) is FlashAttention's forward written with Python loops over tiles of queries and keys: it never
holds more than one block_q x block_k tile of scores, and returns each row's log-sum-exp beside the
output. ``flash_attention`` is the same forward with a backward pass that recomputes each tile's weights
from that log-sum-exp instead of storing them. ``attn.triton_kernels.flash_forward`` is the forward as a
GPU kernel. Causal alignment, the padding convention and empty rows are as in ``MultiHeadAttention``.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from attn.common.layer_checks import check_flash_inputs, check_flash_tensors
from attn.common.validate import positive_int, require_computable, require_floating, require_tensor, type_name
from attn.masks import as_padding_keep_mask
from attn.softmax import checked_scores

NEG_INF = float("-inf")


# The online softmax (NumPy) ---------------------------------------------------------------


def online_softmax(scores, block_size):
    """Softmax along the last axis, reading each row block by block: equal to ``attn.softmax(scores)``.

    scores (..., n) -> weights (..., n). One pass over the blocks keeps each row's running maximum and
    running sum of exps, rescaling the sum whenever a block raises the maximum; a second pass writes
    the weights. -inf entries get weight 0; a row that is all -inf gets zeros. The sums are kept in
    float32 at least (as kernels do): a float16 sum of 70,000 ones would overflow.
    """
    scores, _ = checked_scores(scores, -1, "scores")
    block_size = positive_int("block_size", block_size)
    running_max = np.full(scores.shape[:-1] + (1,), -np.inf, dtype=scores.dtype)  # (..., 1)
    running_sum = np.zeros_like(running_max, dtype=np.promote_types(scores.dtype, np.float32))  # (..., 1)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start:start + block_size]  # (..., <= block_size)
        new_max = np.maximum(running_max, block.max(axis=-1, keepdims=True))
        shift = _finite_shift(new_max)
        with np.errstate(over="ignore"):  # float16: a gap past 65,504 becomes -inf, whose exp is 0, as it should be
            rescale = np.exp(running_max - shift)  # exp(m_old - m_new): the old sum in the new units
            running_sum = running_sum * rescale + np.exp(block - shift).sum(axis=-1, keepdims=True)
        running_max = new_max
    total = np.where(running_sum > 0, running_sum, 1.0)  # an all -inf row: 0 / 1, not 0 / 0
    with np.errstate(over="ignore"):
        return (np.exp(scores - _finite_shift(running_max)) / total).astype(scores.dtype, copy=False)


def _finite_shift(row_max):
    """The maximum to subtract from a row, or 0 where the row has no finite score yet (NumPy or torch)."""
    if isinstance(row_max, np.ndarray):
        return np.where(np.isneginf(row_max), 0.0, row_max).astype(row_max.dtype)
    return row_max.masked_fill(row_max == NEG_INF, 0.0)


# Tiles of queries and keys (PyTorch) ------------------------------------------------------


@dataclass(frozen=True)
class Tiling:
    """How T_q x T_k attention is cut into tiles, and which keys each query may see.

    padding: (B, 1, 1, T_k) keep-mask or None. With is_causal, query i stands at key position
    T_k - T_q + i (aligned to the end of the keys, as in MultiHeadAttention).
    """

    t_q: int
    t_k: int
    block_q: int
    block_k: int
    is_causal: bool = False
    padding: torch.Tensor | None = None

    def __post_init__(self):
        for name in ("t_q", "t_k", "block_q", "block_k"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))  # NumPy ints become ints
        if not isinstance(self.is_causal, bool):
            raise TypeError(f"is_causal must be True or False, got {type(self.is_causal).__name__} {self.is_causal!r}")
        if self.padding is not None:
            require_tensor("padding", self.padding)
            if self.padding.dtype != torch.bool or self.padding.dim() != 4 or self.padding.shape[1:] != (1, 1, self.t_k):
                raise TypeError(
                    f"padding must be a bool keep-mask of shape (B, 1, 1, t_k) = (B, 1, 1, {self.t_k}), True = real "
                    f"token, got {self.padding.dtype} {tuple(self.padding.shape)}; build it with "
                    "attn.masks.as_padding_keep_mask"
                )

    def tile_steps(self):
        """How many (query tile, key tile) steps the loops take: ``tiles_read`` of this tiling."""
        return tiles_read(self.t_q, self.t_k, self.block_q, self.block_k, self.is_causal)

    def query_tiles(self):
        """Row slices 0:block_q, block_q:2 * block_q, ...; the last may be shorter."""
        return _slices(0, self.t_q, self.block_q)

    def key_tiles(self, rows):
        """The key slices query tile ``rows`` reads.

        Causal: tiles wholly after the tile's last query are skipped.
        """
        end = self.t_k
        if self.is_causal:  # query i stands at key position t_k - t_q + i
            end = min(self.t_k, self.t_k - self.t_q + rows.stop)
        return _slices(0, end, self.block_k)

    def mask(self, scores, rows, cols):
        """``scores`` (B, H, rows, cols), -inf for padding and future keys."""
        check_tile(self, scores, rows, cols)
        keep = None if self.padding is None else self.padding[..., cols]
        offset = self.t_k - self.t_q
        crosses = cols.stop - 1 > offset + rows.start  # the diagonal
        if self.is_causal and crosses:
            device = scores.device
            query_at = torch.arange(rows.start, rows.stop, device=device)
            query_at = query_at + offset
            key_at = torch.arange(cols.start, cols.stop, device=device)
            causal = key_at[None, :] <= query_at[:, None]  # (rows, cols)
            keep = causal if keep is None else keep & causal
        return scores if keep is None else scores.masked_fill(~keep, NEG_INF)


def check_tile(tiling, scores, rows, cols):
    """The arguments of ``Tiling.mask``: ``rows`` and ``cols`` slices of the tiling's queries and keys (as
    query_tiles and key_tiles give them), and ``scores`` (B, H, rows, cols) floating-point, with the padding's batch
    and device."""
    if not isinstance(tiling, Tiling):
        raise TypeError(f"tiling must be an attn.flash.Tiling, got {type_name(tiling)}")
    require_computable("scores", scores)
    require_floating("scores", scores)
    sizes = [_tile_size(name, tile, length) for name, tile, length in (("rows", rows, tiling.t_q), ("cols", cols, tiling.t_k))]
    if scores.dim() != 4 or list(scores.shape[2:]) != sizes:
        raise ValueError(f"scores must have shape (B, H, rows, cols) = (B, H, {sizes[0]}, {sizes[1]}), got {tuple(scores.shape)}")
    padding = tiling.padding
    if padding is not None and (padding.shape[0] != scores.shape[0] or padding.device != scores.device):
        raise ValueError(f"the tiling's padding is {tuple(padding.shape)} on {padding.device}, but scores are "
                         f"{tuple(scores.shape)} on {scores.device}")


def _tile_size(name, tile, length):
    """The size of ``tile``, a slice start:stop with 0 <= start < stop <= length and no step."""
    ends = (tile.start, tile.stop) if isinstance(tile, slice) and tile.step is None else (None, None)
    if not all(isinstance(end, int) and not isinstance(end, bool) for end in ends):
        raise TypeError(f"{name} must be a slice start:stop of whole numbers, as Tiling.query_tiles and key_tiles "
                        f"give, got {type_name(tile)} {tile!r:.60}")
    if not 0 <= tile.start < tile.stop <= length:
        raise ValueError(f"{name} must be a slice start:stop with 0 <= start < stop <= {length}, got {tile!r}")
    return tile.stop - tile.start


def _slices(start, stop, step):
    return [slice(first, min(first + step, stop)) for first in range(start, stop, step)]


def compute_dtype(dtype):
    """Tiles are computed in float32 at least (as GPU kernels do for 16-bit inputs); float64 stays."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, such as torch.float16, got {dtype!r:.40}")
    return torch.promote_types(dtype, torch.float32)


def tiled_attention(query, key, value, is_causal=False, key_padding_mask=None, block_q=64, block_k=64):
    """FlashAttention's forward: softmax(Q K^T / sqrt(d)) V one tile of queries and keys at a time.

    query (B, H, T_q, d); key, value (B, H, T_k, d); key_padding_mask (B, T_k), True = real token;
    is_causal: query i sees keys up to T_k - T_q + i. Returns output (B, H, T_q, d), in the query's
    dtype, and logsumexp (B, H, T_q), log sum_j exp(score_ij) over the allowed keys, in float32 or
    float64. A row with no allowed key gives a zero output and logsumexp -inf. At most one
    block_q x block_k tile of scores exists at a time.
    """
    tiling = _tiling(query, key, value, is_causal, key_padding_mask, block_q, block_k)
    return forward_tiles(query, key, value, tiling)


# Python runs one loop step per tile: about 10 microseconds each at the least, so more than this
# many steps would keep a learner waiting for minutes without a word.
MAX_TILE_STEPS = 2**16


def _tiling(query, key, value, is_causal, key_padding_mask, block_q, block_k):
    """Check what tiled_attention and flash_attention need to make their Tiling, and return it.

    The tensors' numbers (finite, no overflowing score) are checked once, by forward_tiles.
    """
    check_flash_tensors(query, key, value)
    padding = None
    if key_padding_mask is not None:  # (B, T_k) -> (B, 1, 1, T_k)
        padding = as_padding_keep_mask(key_padding_mask, key.shape[0], key.shape[2], key.device)
    tiling = Tiling(query.shape[2], key.shape[2], block_q, block_k, is_causal, padding)
    check_tile_steps(tiling)
    return tiling


def check_tile_steps(tiling):
    """ValueError if the Python loops over ``tiling`` would take more than MAX_TILE_STEPS steps."""
    if not isinstance(tiling, Tiling):
        raise TypeError(f"tiling must be an attn.flash.Tiling, got {type(tiling).__name__}")
    steps = tiling.tile_steps()
    if steps > MAX_TILE_STEPS:
        raise ValueError(
            f"T_q={tiling.t_q}, T_k={tiling.t_k} in {tiling.block_q} x {tiling.block_k} tiles is {steps:,} tiles, each a "
            f"step of a Python loop: more than {MAX_TILE_STEPS:,}, which would take minutes; use larger blocks"
        )


def check_tiles(query, key, value, tiling):
    """The arguments of ``forward_tiles``: those of tiled attention (check_flash_inputs), and a Tiling made for
    these tensors (its t_q and t_k their lengths, its padding their batch) with a number of tiles Python can loop over."""
    if not isinstance(tiling, Tiling):
        raise TypeError(f"tiling must be an attn.flash.Tiling, got {type_name(tiling)}")
    check_flash_inputs(query, key, value, tiling.is_causal, tiling.block_q, tiling.block_k)
    if (tiling.t_q, tiling.t_k) != (query.shape[2], key.shape[2]):
        raise ValueError(
            f"the tiling is for T_q={tiling.t_q}, T_k={tiling.t_k} but query and key have T_q={query.shape[2]}, "
            f"T_k={key.shape[2]}; make it with Tiling({query.shape[2]}, {key.shape[2]}, block_q, block_k)"
        )
    if tiling.padding is not None and (tiling.padding.shape[0] != query.shape[0] or tiling.padding.device != query.device):
        raise ValueError(f"the tiling's padding is {tuple(tiling.padding.shape)} on {tiling.padding.device}, but the "
                         f"batch is {query.shape[0]} on {query.device}")
    check_tile_steps(tiling)


def forward_tiles(query, key, value, tiling):
    """The loops of ``tiled_attention``.

    Returns output (B, H, T_q, d) and logsumexp (B, H, T_q).
    """
    check_tiles(query, key, value, tiling)
    dtype = compute_dtype(query.dtype)
    scale = 1 / math.sqrt(query.shape[-1])
    output = torch.empty_like(query)  # (B, H, T_q, d), written tile by tile
    logsumexp = query.new_empty(query.shape[:3], dtype=dtype)  # (B, H, T_q)
    for rows in tiling.query_tiles():
        q_tile = query[:, :, rows].to(dtype) * scale  # (B, H, bq, d)
        row_max = q_tile.new_full(q_tile.shape[:-1] + (1,), NEG_INF)
        row_sum = torch.zeros_like(row_max)  # (B, H, bq, 1)
        accumulated = torch.zeros_like(q_tile)  # (B, H, bq, d)
        for cols in tiling.key_tiles(rows):
            k_tile = key[:, :, cols].to(dtype)  # (B, H, bk, d)
            scores = q_tile @ k_tile.transpose(-2, -1)  # (B, H, bq, bk)
            scores = tiling.mask(scores, rows, cols)
            new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
            shift = _finite_shift(new_max)
            rescale = torch.exp(row_max - shift)  # old sums, new units
            weights = torch.exp(scores - shift)  # (B, H, bq, bk)
            row_sum = row_sum * rescale + weights.sum(-1, keepdim=True)
            v_tile = value[:, :, cols].to(dtype)  # (B, H, bk, d)
            accumulated = accumulated * rescale + weights @ v_tile
            row_max = new_max
        tiny = torch.finfo(dtype).tiny  # a row with no key: 0 / tiny = 0
        output[:, :, rows] = accumulated / row_sum.clamp_min(tiny)
        row_lse = _finite_shift(row_max) + row_sum.log()  # log 0 = -inf
        logsumexp[:, :, rows] = row_lse.squeeze(-1)
    return output, logsumexp


# The backward pass that recomputes --------------------------------------------------------


def backward_tiles(saved, grad_output, tiling):
    """Gradients for query, key and value.

    saved = (query, key, value, output, logsumexp). Each tile's weights P
    are recomputed as exp(scores - logsumexp). With dO the output's gradient:
    dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)),
    dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d) (Dao et al. 2022, algorithm 4).
    """
    check_backward(saved, grad_output, tiling)
    dtype = compute_dtype(saved[0].dtype)

    q, k, v, o, grad_o = (t.to(dtype) for t in (*saved[:4], grad_output))
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (grad_o * o).sum(-1, keepdim=True)  # (B, H, T_q, 1)
    lse = saved[4].to(dtype)[..., None]  # (B, H, T_q, 1)
    lse = lse.masked_fill(lse == NEG_INF, float("inf"))  # empty rows: P = 0
    grad_q, grad_k, grad_v = (torch.zeros_like(t) for t in (q, k, v))
    for rows in tiling.query_tiles():
        for cols in tiling.key_tiles(rows):
            q_tile, k_tile = q[:, :, rows], k[:, :, cols]  # (B, H, bq/bk, d)
            scores = q_tile @ k_tile.transpose(-2, -1) * scale
            scores = tiling.mask(scores, rows, cols)  # (B, H, bq, bk)
            weights = torch.exp(scores - lse[:, :, rows])  # recomputed
            grad_o_tile = grad_o[:, :, rows]  # (B, H, bq, d)
            grad_v[:, :, cols] += weights.transpose(-2, -1) @ grad_o_tile
            grad_weights = grad_o_tile @ v[:, :, cols].transpose(-2, -1)
            grad_scores = weights * (grad_weights - delta[:, :, rows]) * scale
            grad_q[:, :, rows] += grad_scores @ k_tile
            grad_k[:, :, cols] += grad_scores.transpose(-2, -1) @ q_tile
    return tuple(grad.to(saved[0].dtype) for grad in (grad_q, grad_k, grad_v))


def check_backward(saved, grad_output, tiling):
    """saved = (query, key, value, output, logsumexp) as forward_tiles left them; grad_output like the output."""
    if not isinstance(saved, tuple | list) or len(saved) != 5:
        raise TypeError(f"saved must be the five tensors (query, key, value, output, logsumexp), got {type_name(saved)}")
    query, key, value, output, logsumexp = saved
    check_tiles(query, key, value, tiling)
    for name, tensor, shape in (("output", output, query.shape), ("grad_output", grad_output, query.shape),
                                ("logsumexp", logsumexp, query.shape[:3])):
        require_tensor(name, tensor)
        if tensor.shape != shape or not tensor.is_floating_point():
            raise ValueError(f"{name} must be floating point of shape {tuple(shape)}, got {tensor.dtype} {tuple(tensor.shape)}")


class _FlashAttention(torch.autograd.Function):
    """Saves Q, K, V, the output and the log-sum-exp: O(T d) numbers,
    never the T x T weights."""

    @staticmethod
    def forward(ctx, query, key, value, tiling):
        output, logsumexp = forward_tiles(query, key, value, tiling)
        # ctx carries what backward needs from forward to backward
        ctx.save_for_backward(query, key, value, output, logsumexp)
        ctx.tiling = tiling
        return output

    @staticmethod
    def backward(ctx, grad_output):
        refuse_second_derivatives()  # create_graph=True
        grads = backward_tiles(ctx.saved_tensors, grad_output, ctx.tiling)
        return (*grads, None)  # one per forward input; tiling has none


def refuse_second_derivatives():
    """ValueError when autograd records the backward itself (create_graph=True): it could not be differentiated."""
    if torch.is_grad_enabled():
        raise ValueError(
            "flash_attention's backward is not itself differentiable (it recomputes the weights from the saved "
            "log-sum-exp, which autograd cannot see through), so create_graph=True would give wrong second "
            "derivatives; for those use attn.multihead.explicit_attention"
        )


def flash_attention(query, key, value, is_causal=False, key_padding_mask=None, block_q=64, block_k=64):
    """``tiled_attention``'s output, differentiable: its backward recomputes each tile's weights.

    Same arguments and shapes as ``tiled_attention``; returns the output (B, H, T_q, d) only. First
    derivatives only: its backward is not itself differentiable, so a second derivative
    (``create_graph=True``, then differentiating again) raises an error rather than a wrong number.
    """
    tiling = _tiling(query, key, value, is_causal, key_padding_mask, block_q, block_k)
    return _FlashAttention.apply(query, key, value, tiling)


def tiles_read(t_q, t_k, block_q, block_k, is_causal):
    """How many block_q x block_k tiles a tiled kernel reads: all of them, or with is_causal fewer.

    Counted as the loops would (query tile i reads the key tiles up to its last query's position),
    but by arithmetic, so that sizes of any length answer at once.
    """
    for name, value in (("t_q", t_q), ("t_k", t_k), ("block_q", block_q), ("block_k", block_k)):
        positive_int(name, value)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)} {is_causal!r}")
    t_q, t_k, block_q, block_k = int(t_q), int(t_k), int(block_q), int(block_k)
    query_tiles = -(-t_q // block_q)
    if not is_causal:
        return query_tiles * -(-t_k // block_k)
    # Query tile i (all but the last) ends at stop = (i + 1) block_q and reads ceil((t_k - t_q + stop) / block_k)
    # key tiles when that is positive; the last ends at t_q and reads ceil(t_k / block_k).
    offset = t_k - t_q
    first = max(0, -(-(1 - offset) // block_q) - 1)  # the first tile with a key to read
    count = max(0, query_tiles - 1 - first)
    start = offset + (first + 1) * block_q + block_k - 1  # the numerator at tile `first`, ready for a floor
    return _floor_sum(count, block_k, block_q, start) + -(-t_k // block_k)


def _floor_sum(n, m, a, b):
    """sum over j in 0..n-1 of floor((a j + b) / m), for a, b >= 0 and m >= 1, in O(log) steps."""
    total = 0
    while n > 0:
        total += (a // m) * n * (n - 1) // 2 + (b // m) * n
        a, b = a % m, b % m
        last = a * n + b
        if last < m:
            break
        n, b, m, a = last // m, last % m, a, m
    return total
