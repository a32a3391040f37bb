"""Attention that chooses blocks (lesson 18): Native Sparse Attention (NSA) and Mixture of Block Attention (MoBA).

Both cut the sequence into blocks of ``block_size`` positions (block c holds positions c * block_size, ...,
(c + 1) * block_size - 1; the last may be partial) and let each query read only a few whole blocks, chosen by a
cheap score against one summary per block: the mean of its keys (``block_means``). Reading whole blocks is what
makes them fast on a GPU: a tile of keys that no query of a tile of queries chose is skipped (lessons 12 and 14).

NSA (Yuan et al. 2025, arXiv 2502.11089) sums three branches per query head, each weighted by a gate:
compressed attention over the block means, attention over the selected blocks, and a sliding window. The
compressed branch's softmax weights are what choose the blocks. The course follows the reference code of
flash-linear-attention (fla-core's ``naive_nsa``), which simplifies the paper in two ways, both kept here:
a block's summary is the plain mean of its keys (the paper learns an MLP with positions inside the block), and the
compression blocks are the selection blocks, not overlapping (the paper allows a stride below the block length
and a different selection block size). The mean needs no training and can be written in one line, which a
lesson can show; the choice it makes is the paper's.

MoBA (Lu et al. 2025, arXiv 2502.13189) has no compressed branch and no gates: each query head scores the blocks
wholly in its past by q . mean(k), reads its top-scoring ones and always its own block (causally inside it).
"""

import math

import torch
from torch import nn
from torch.nn import functional

from attn.common.block_checks import (
    check_block_count,
    check_block_input,
    check_block_keep,
    check_block_size,
    check_gates,
    check_self_attention,
)
from attn.common.layer_checks import check_layer_arguments, check_layer_input, check_rotary_base
from attn.multihead import _merge_heads, _split_heads, explicit_attention
from attn.positions import apply_rotary
from attn.window import check_window_arguments, sliding_window_mask

# Selection priorities of NSA's forced blocks: above every probability (<= 1), the nearest first.
FORCED_CURRENT, FORCED_PREVIOUS, FORCED_FIRST = 4.0, 3.0, 2.0


def block_means(x, block_size):
    """Each block's mean along the time axis: (..., T, d) -> (..., n_blocks, d), n_blocks = ceil(T / block_size).

    The last block, when T is not a multiple of block_size, is the mean of the positions it has (its sum divided by
    T - start, not by block_size): fla's ``mean_pooling`` divides by min(block_size, T - start) too. Summed in
    float32 at least (as fla's kernel does), so float16 blocks cannot overflow, and returned in x's dtype.
    """
    check_block_input("x", x)
    block_size = check_block_size(block_size, x.shape[-2])
    return _block_means(x, block_size)


def _block_means(x, block_size):
    length = x.shape[-2]
    n_blocks = math.ceil(length / block_size)
    padded = functional.pad(x, (0, 0, 0, n_blocks * block_size - length))  # (..., n_blocks * block_size, d), zeros after T
    sums = padded.unflatten(-2, (n_blocks, block_size)).sum(-2, dtype=torch.promote_types(x.dtype, torch.float32))
    starts = torch.arange(n_blocks, device=x.device) * block_size  # (n_blocks,)
    counts = (length - starts).clamp(max=block_size)  # positions in each block
    return (sums / counts[:, None]).to(x.dtype)  # (..., n_blocks, d)


def _blocks_in_the_past(length, block_size, device):
    """(T, n_blocks) bool: block c is wholly in query t's past, its last position (c + 1) * block_size - 1 <= t."""
    n_blocks = math.ceil(length / block_size)
    ends = (torch.arange(n_blocks, device=device) + 1) * block_size - 1  # (n_blocks,)
    return ends[None, :] <= torch.arange(length, device=device)[:, None]


def _own_blocks(length, block_size, device):
    """(T, 1) int64: the block each query stands in."""
    return (torch.arange(length, device=device) // block_size)[:, None]


def block_token_mask(block_keep, block_size):
    """The token keep-mask of a block choice: (..., T, n_blocks) -> (..., T, T), causal.

    Query t may read key j when it chose j's block (block j // block_size) and j <= t (inside its own block too).
    """
    if not isinstance(block_keep, torch.Tensor) or block_keep.dtype != torch.bool or block_keep.dim() < 2:
        raise TypeError("block_keep must be a bool tensor (..., T, n_blocks) (True = the query reads that block)")
    block_size = check_block_size(block_size, block_keep.shape[-2])
    length, n_blocks = block_keep.shape[-2:]
    if n_blocks != math.ceil(length / block_size):
        raise ValueError(f"block_keep has {n_blocks} blocks but T={length} positions make {math.ceil(length / block_size)} "
                         f"blocks of {block_size}")
    return _block_token_mask(block_keep, block_size)


def _block_token_mask(block_keep, block_size):
    length = block_keep.shape[-2]
    positions = torch.arange(length, device=block_keep.device)
    tokens = block_keep.repeat_interleave(block_size, dim=-1)[..., :length]  # (..., T, T): each block's choice, per key
    return tokens & (positions[None, :] <= positions[:, None])


def _top_blocks(priority, allowed, count):
    """(..., T, n_blocks) bool: the ``count`` highest priorities among the allowed blocks, ties to the earlier block."""
    ranked = priority.masked_fill(~allowed, -math.inf)
    order = ranked.sort(dim=-1, descending=True, stable=True).indices[..., :count]  # best blocks first
    chosen = torch.zeros_like(allowed).scatter_(-1, order, True)
    return chosen & allowed


# NSA ---------------------------------------------------------------------------------------------------------------


def nsa_compressed_attention(query, key, value, block_size):
    """NSA's compressed branch: attention over the block means of the keys and values.

    query (B, H, T, d); key, value (B, H_kv, T, d) (grouped-query heads as ``attn.multihead``). Query t sees block c
    only once the block is wholly in its past, its last position included ((c + 1) * block_size - 1 <= t): its own block
    only from that block's last position on. The queries before position block_size - 1 see no block and get zero
    weights and a zero output (as fla's ``naive_nsa_compression``, where the softmax's NaN is set to 0).
    Returns output (B, H, T, d) and weights (B, H, T, n_blocks).
    """
    check_self_attention(query, key, value)
    block_size = check_block_size(block_size, query.shape[2])
    return _compressed(query, key, value, block_size)


def _compressed(query, key, value, block_size):
    visible = _blocks_in_the_past(query.shape[2], block_size, query.device)  # (T, n_blocks)
    return explicit_attention(query, _block_means(key, block_size), _block_means(value, block_size), visible)


def nsa_select_blocks(compressed_weights, num_kv_heads, block_size, block_count):
    """NSA's block choice: (B, H, T, n_blocks) compressed weights -> bool block keep-mask (B, H_kv, T, n_blocks).

    A block's score is its compressed-attention weight averaged over the H / H_kv query heads that share a key/value
    head (the paper sums them: the same ranking), so the group reads the same blocks. The first block and the query's
    own and previous blocks are always chosen (the paper's "1 initial and 2 local blocks", fla's rule); they count in
    ``block_count``. Then the highest scores among the blocks wholly in the past, ties to the earlier block. With
    block_count < 3 the forced blocks compete, the nearest first: own, previous, first (fla leaves that order to
    torch.topk, unstated). A query reads min(block_count, its allowed blocks) blocks.
    """
    if not isinstance(compressed_weights, torch.Tensor) or not compressed_weights.is_floating_point() \
            or compressed_weights.dim() != 4:
        raise TypeError("compressed_weights must be the floating-point (B, H, T, n_blocks) weights of "
                        "nsa_compressed_attention")
    check_block_input("compressed_weights", compressed_weights)
    block_size = check_block_size(block_size, compressed_weights.shape[2])
    block_count = check_block_count("block_count", block_count)
    num_kv_heads = check_block_count("num_kv_heads", num_kv_heads)
    batch, heads, length, n_blocks = compressed_weights.shape
    if heads % num_kv_heads or n_blocks != math.ceil(length / block_size):
        raise ValueError(f"compressed_weights {tuple(compressed_weights.shape)} must be (B, H, T, ceil(T / {block_size})) "
                         f"with H a multiple of num_kv_heads={num_kv_heads}")
    return _select(compressed_weights, num_kv_heads, block_size, block_count)


def _select(weights, num_kv_heads, block_size, block_count):
    batch, heads, length, n_blocks = weights.shape
    scores = weights.view(batch, num_kv_heads, heads // num_kv_heads, length, n_blocks).mean(2)  # (B, H_kv, T, n)
    blocks = torch.arange(n_blocks, device=weights.device)[None, :]  # (1, n)
    own = _own_blocks(length, block_size, weights.device)  # (T, 1)
    priority = torch.where(blocks == 0, FORCED_FIRST, scores)  # (B, H_kv, T, n)
    priority = torch.where(blocks == own - 1, FORCED_PREVIOUS, priority)
    priority = torch.where(blocks == own, FORCED_CURRENT, priority)
    allowed = _blocks_in_the_past(length, block_size, weights.device) | (blocks == own)  # (T, n); first, previous: past
    return _top_blocks(priority, allowed.expand_as(priority), block_count)


def nsa_selected_attention(query, key, value, block_keep, block_size):
    """NSA's selected branch: each query head reads the tokens of the blocks its key/value head chose, causally.

    query (B, H, T, d); key, value (B, H_kv, T, d); block_keep (B, H_kv, T, n_blocks) bool (``nsa_select_blocks``).
    Returns output (B, H, T, d) and weights (B, H, T, T); a query that chose nothing gets zeros.
    """
    check_self_attention(query, key, value)
    block_size = check_block_size(block_size, query.shape[2])
    batch, _, length, _ = query.shape
    check_block_keep(block_keep, batch, key.shape[1], length, block_size, query.device)
    return _selected(query, key, value, block_keep, block_size)


def _selected(query, key, value, block_keep, block_size):
    groups = query.shape[1] // key.shape[1]
    tokens = _block_token_mask(block_keep, block_size).repeat_interleave(groups, dim=1)  # (B, H, T, T)
    return explicit_attention(query, key, value, tokens)


def nsa_attention(query, key, value, gates, block_size, block_count, window=None):
    """Native Sparse Attention: gates[..., 0] * compressed + gates[..., 1] * selected (+ gates[..., 2] * window).

    query (B, H, T, d); key, value (B, H_kv, T, d), causal self-attention over one sequence; gates (B, H, T, 3), one
    gate per query head, position and branch (compressed, selected, sliding window), or (B, H, T, 2) with
    window=None (no window branch, as fla's naive_nsa with window_size=0). The gates are used as given (the layer
    makes them with a sigmoid). The window branch is lesson 14's: query p reads keys p - window < j <= p.
    Returns output (B, H, T, d). fla's naive_nsa computes its branches in float32 whatever the input dtype.
    """
    check_self_attention(query, key, value)
    block_size, block_count = check_block_size(block_size, query.shape[2]), check_block_count("block_count", block_count)
    window, _ = check_window_arguments(window, 0)
    check_gates(gates, query, 2 if window is None else 3)
    compressed, weights = _compressed(query, key, value, block_size)
    block_keep = _select(weights, key.shape[1], block_size, block_count)
    selected, _ = _selected(query, key, value, block_keep, block_size)
    output = gates[..., 0:1] * compressed + gates[..., 1:2] * selected  # (B, H, T, d)
    if window is not None:
        band = sliding_window_mask(query.shape[2], key.shape[2], window, device=query.device)  # (T, T)
        output = output + gates[..., 2:3] * explicit_attention(query, key, value, band)[0]
    return output


class NativeSparseAttention(nn.Module):
    """Native Sparse Attention as a layer: NativeSparseAttention(embed_dim E, num_heads H, num_kv_heads H_kv,
    block_size, block_count, window, bias=True, rotary_base=None).

    Query, key, value and output projections as ``attn.MultiHeadAttention`` (H_kv key/value heads, grouped-query);
    gates = sigmoid(Linear(x)), one per query head and branch (the paper's gate MLP, as one linear layer), 3 branches,
    or 2 with window=None. rotary_base: None (no positions inside the layer) or the base of lesson 8's rotary
    embedding, applied to queries and keys before everything (the compressed keys are means of turned keys).
    forward(x (B, T, E)) -> (B, T, E): causal self-attention over the whole sequence (``nsa_attention``); no cache.
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, block_size, block_count, window, bias=True, rotary_base=None):
        super().__init__()
        embed_dim, num_heads, _, num_kv_heads = check_layer_arguments(embed_dim, num_heads, bias, 0.0, num_kv_heads)
        self.block_size, self.block_count = check_block_size(block_size), check_block_count("block_count", block_count)
        self.window, _ = check_window_arguments(window, 0)
        self.rotary_base = check_rotary_base(rotary_base, embed_dim // num_heads)
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim, self.branches = embed_dim // num_heads, 2 if self.window is None else 3
        self.query_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.key_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.value_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.gate_proj = nn.Linear(embed_dim, num_heads * self.branches, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x):
        """x (B, T, E) -> (B, T, E)."""
        check_layer_input(self, x)
        batch, length, _ = x.shape
        q = _split_heads(self.query_proj(x), self.num_heads)  # (B, H, T, d)
        k = _split_heads(self.key_proj(x), self.num_kv_heads)  # (B, H_kv, T, d)
        v = _split_heads(self.value_proj(x), self.num_kv_heads)
        if self.rotary_base is not None:
            q, k = apply_rotary(q, base=self.rotary_base), apply_rotary(k, base=self.rotary_base)
        gates = torch.sigmoid(self.gate_proj(x)).view(batch, length, self.num_heads, self.branches).transpose(1, 2)
        heads = nsa_attention(q, k, v, gates, self.block_size, self.block_count, self.window)  # (B, H, T, d)
        return self.out_proj(_merge_heads(heads))

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"block_size={self.block_size}, block_count={self.block_count}, window={self.window}")


# MoBA --------------------------------------------------------------------------------------------------------------


def moba_select_blocks(query, key, block_size, top_blocks):
    """MoBA's block choice: bool (B, H, T, n_blocks), one choice per query head.

    query (B, H, T, d); key (B, H_kv, T, d). Query t scores each block wholly before its own block by q . mean(k)
    (the block's mean key, ``block_means``; no scale, which would change no ranking); its own block is always chosen
    and counts in ``top_blocks`` (as MoBA's reference code: the current block gets the score +inf); the rest of the
    top_blocks are the highest-scoring past blocks, ties to the earlier block; later blocks never.
    """
    check_self_attention(query, key, key)
    block_size, top_blocks = check_block_size(block_size, query.shape[2]), check_block_count("top_blocks", top_blocks)
    return _moba_select(query, key, block_size, top_blocks)


def _moba_select(query, key, block_size, top_blocks):
    batch, heads, length, head_dim = query.shape
    means = _block_means(key, block_size)  # (B, H_kv, n, d)
    grouped = query.view(batch, key.shape[1], heads // key.shape[1], length, head_dim)  # (B, H_kv, G, T, d)
    scores = (grouped @ means.unsqueeze(2).transpose(-2, -1)).flatten(1, 2)  # (B, H, T, n)
    blocks = torch.arange(means.shape[2], device=query.device)[None, :]  # (1, n)
    own = _own_blocks(length, block_size, query.device)  # (T, 1)
    priority = torch.where(blocks == own, math.inf, scores)
    allowed = (blocks <= own).expand_as(priority)  # past blocks and its own
    return _top_blocks(priority, allowed, top_blocks)


def moba_attention(query, key, value, block_size, top_blocks):
    """Mixture of Block Attention: each query head reads its ``moba_select_blocks`` blocks, causally.

    query (B, H, T, d); key, value (B, H_kv, T, d). Returns output (B, H, T, d) and weights (B, H, T, T).
    With top_blocks >= the number of blocks it is plain causal attention.
    """
    check_self_attention(query, key, value)
    block_size, top_blocks = check_block_size(block_size, query.shape[2]), check_block_count("top_blocks", top_blocks)
    block_keep = _moba_select(query, key, block_size, top_blocks)
    return explicit_attention(query, key, value, _block_token_mask(block_keep, block_size))
