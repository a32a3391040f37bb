"""The FlashAttention forward as a Triton kernel: lesson 12's ``forward_tiles``, one program per query tile.

This module imports Triton; ``attn.triton_kernels`` imports it only when the kernel is first launched,
and decorates ``flash_forward_kernel`` with ``triton.jit`` there (compiled for a GPU, or run by Triton's
interpreter for tensors on the CPU). Lesson 12 prints the kernel, so its lines fit 78 characters.
"""

import triton.language as tl

# ruff: noqa: N803 - upper-case names are Triton's convention for pointers and compile-time constants


def flash_forward_kernel(
    Q, K, V, Out,  # pointers to (B, H, T, d) tensors, last axis contiguous
    stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
    stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
    num_heads, t_q, t_k, head_dim, scale,
    IS_CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):
    tile, batch_head = tl.program_id(0), tl.program_id(1)
    batch, head = batch_head // num_heads, batch_head % num_heads
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,) positions
    features = tl.arange(0, BLOCK_D)[None, :]  # (1, BLOCK_D), BLOCK_D >= d
    q_ptrs = (Q + batch * stride_qb + head * stride_qh
              + rows[:, None] * stride_qt + features)
    q_ok = (rows[:, None] < t_q) & (features < head_dim)
    q = tl.load(q_ptrs, mask=q_ok, other=0.0)  # (BLOCK_Q, BLOCK_D)
    k_base = K + batch * stride_kb + head * stride_kh + features
    v_base = V + batch * stride_vb + head * stride_vh + features
    row_max = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_Q,), tl.float32)
    accumulated = tl.zeros((BLOCK_Q, BLOCK_D), tl.float32)
    offset = t_k - t_q  # query i stands at key position offset + i
    key_end = t_k
    if IS_CAUSAL:  # key tiles after this tile's last query are never read
        key_end = tl.minimum(t_k, offset + (tile + 1) * BLOCK_Q)
    for start in range(0, key_end, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)  # (BLOCK_K,) key positions
        kv_ok = (cols[:, None] < t_k) & (features < head_dim)
        k = tl.load(k_base + cols[:, None] * stride_kt, mask=kv_ok, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vt, mask=kv_ok, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        keep = cols[None, :] < t_k  # the last tile may run past T_k
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + offset)
        scores = tl.where(keep, scores, float("-inf"))  # (BLOCK_Q, BLOCK_K)
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        rescale = tl.exp(row_max - shift)  # exp(m_old - m_new)
        weights = tl.exp(scores - shift[:, None])  # not yet normalised
        row_sum = row_sum * rescale + tl.sum(weights, 1)
        values = tl.dot(weights.to(v.dtype), v, input_precision=PRECISION)
        accumulated = accumulated * rescale[:, None] + values
        row_max = new_max
    output = accumulated / tl.maximum(row_sum, 1e-30)[:, None]  # no key: 0
    o_ptrs = (Out + batch * stride_ob + head * stride_oh
              + rows[:, None] * stride_ot + features)
    tl.store(o_ptrs, output.to(Out.dtype.element_ty), mask=q_ok)
