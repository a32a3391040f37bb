"""Attention with a fixed-size memory: linear attention, the delta rule and the gated delta rule (lesson 15).

Each head keeps one matrix S (d_k, d_v), whatever the length. Every token writes into it and its
query reads from it, o_t = S_t^T q_t (the write comes first, so a token reads its own pair):

- linear attention (Katharopoulos et al. 2020, without their feature map and normaliser):
  S_t = S_{t-1} + k_t v_t^T, lesson 1's table written as a sum of outer products;
- the delta rule (Schlag et al. 2021; Yang et al. 2024): S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,
  which writes only the error between the new value and what the memory already returns for k_t;
- the gated delta rule (Yang, Kautz and Hatamizadeh 2025; Qwen3-Next, Kimi Linear): decay first,
  S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T.

Queries, keys and values are (B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v); beta and alpha are
(B, H, T). No feature map, normalisation or 1/sqrt(d_k) is applied inside: that is the caller's
choice (Qwen3-Next, for one, normalises q and k to unit length and scales q by 1/sqrt(d_k)).

Every recurrence comes three ways, proven equal by the tests: a loop over tokens (``*_loop``), a
parallel form over the whole sequence, and a chunked form that loops over chunks and runs the
parallel form inside each (``*_chunked``). Every public function checks its input first; the forms' bodies
(``_linear_attention_loop`` and the rest) check nothing, so that the chunked form checks once, not per chunk.
"""

import torch

from attn.common.layer_checks import check_recurrence_inputs
from attn.common.validate import has_only_finite, positive_int, require_finite, require_floating, require_tensor

CHUNK_SIZE = 64  # tokens per chunk in the public functions (Qwen3-Next's reference uses 64 too)
DELTA_OVERSHOOT = (
    "each write moves the memory by beta |k|^2 times the error, so where beta |k|^2 > 2 the error grows at every "
    "write instead of shrinking; give keys of unit length (k / k.norm(dim=-1, keepdim=True)), or a smaller beta"
)


def check_memory_output(output, cause):
    """``output`` if it is finite; else a ValueError: finite inputs whose memory overflowed (``cause`` says how)."""
    require_tensor("output", output)
    if not has_only_finite(output):
        raise ValueError(
            f"the inputs are finite but the memory overflowed {output.dtype} and the outputs hold inf or NaN: {cause}"
        )
    return output


# Linear attention ----------------------------------------------------------------------------------------


def _linear_attention_loop(q, k, v):
    """S_t = S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, one token at a time. (B, H, T, d_k/d_v) -> (B, H, T, d_v)."""
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])  # (B, H, d_k, d_v)
    outputs = []
    for t in range(q.shape[2]):
        state = state + k[:, :, t, :, None] * v[:, :, t, None, :]  # outer product k_t v_t^T
        outputs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))  # S_t^T q_t
    return torch.stack(outputs, dim=2)


def _linear_attention_parallel(q, k, v):
    """The same outputs at once: (q k^T, masked causally, no softmax) v. (B, H, T, d) -> (B, H, T, d_v)."""
    scores = q @ k.transpose(-1, -2)  # (B, H, T, T)
    keep = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~keep, 0) @ v


def _linear_attention_chunked(q, k, v, chunk_size=CHUNK_SIZE):
    """Chunks of ``chunk_size`` tokens: the state carried between chunks, the parallel form inside one."""
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])  # (B, H, d_k, d_v)
    outputs = []
    for start in range(0, q.shape[2], chunk_size):
        part = slice(start, start + chunk_size)
        q_c, k_c, v_c = q[:, :, part], k[:, :, part], v[:, :, part]  # (B, H, C, d)
        outputs.append(q_c @ state + _linear_attention_parallel(q_c, k_c, v_c))  # earlier chunks + this one
        state = state + k_c.transpose(-1, -2) @ v_c  # (B, H, d_k, d_v): this chunk's outer products
    return torch.cat(outputs, dim=2)


def linear_attention(q, k, v, chunk_size=CHUNK_SIZE):
    """Causal linear attention: o_t = S_t^T q_t with S_t = sum_{s <= t} k_s v_s^T, no feature map or normaliser.

    q, k (B, H, T, d_k), v (B, H, T, d_v) -> (B, H, T, d_v). Computed in chunks of ``chunk_size`` tokens.
    """
    check_recurrence_inputs(q, k, v)
    output = _linear_attention_chunked(q, k, v, positive_int("chunk_size", chunk_size))
    return check_memory_output(output, "the sum of k v^T grows with every token; scale q, k and v down (or use float64)")


# The (gated) delta rule ----------------------------------------------------------------------------------


def _gated_delta_rule_loop(q, k, v, alpha, beta, initial_state=None):
    """S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T, o_t = S_t^T q_t, token by token.

    alpha, beta (B, H, T); returns the outputs (B, H, T, d_v) and the last state (B, H, d_k, d_v).
    With alpha = 1 it is the delta rule.
    """
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1]) if initial_state is None else initial_state
    outputs = []
    for t in range(q.shape[2]):
        k_t, v_t = k[:, :, t], v[:, :, t]  # (B, H, d_k), (B, H, d_v)
        state = alpha[:, :, t, None, None] * state  # forget a little first
        recalled = torch.einsum("bhkv,bhk->bhv", state, k_t)  # what the memory returns for k_t
        error = beta[:, :, t, None] * (v_t - recalled)  # (B, H, d_v): write only the difference
        state = state + k_t[..., :, None] * error[..., None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))
    return torch.stack(outputs, dim=2), state


def decay_ratios(alpha):
    """(B, H, C) decays -> (B, H, C, C + 1) products: entry [t, i + 1] = alpha_{i+1} ... alpha_t for i < t, 1 at i = t.

    Column 0 stands for "before the chunk": entry [t, 0] = alpha_0 ... alpha_t, the decay of the incoming
    state. Entries above the diagonal (i > t) are 0. Built from sums of logs with the unused logs
    masked to 0 before the sum, so an alpha of exactly 0 gives a product of 0, never NaN.
    """
    require_tensor("alpha", alpha)
    require_floating("alpha", alpha)
    if alpha.dim() == 0:
        raise ValueError("alpha must have at least one axis, the chunk's tokens (..., C)")
    require_finite("alpha", alpha, "the decays would carry it into every product")
    if alpha.numel() and (alpha.min() < 0 or alpha.max() > 1):
        raise ValueError(f"alpha must lie in [0, 1] (how much of the memory each token keeps), got values from "
                         f"{alpha.min().item():.3g} to {alpha.max().item():.3g}")
    length = alpha.shape[-1]
    steps = torch.arange(length, device=alpha.device)
    since = torch.arange(-1, length, device=alpha.device)  # the column's start: -1 = before the chunk
    logs = alpha.log()[..., :, None].expand(*alpha.shape, length + 1)  # (B, H, C (step s), C + 1)
    counted = steps[:, None] > since[None, :]  # (C, C + 1): step s lies after the column's start
    sums = logs.masked_fill(~counted, 0).cumsum(dim=-2)  # [t, i]: sum of log alpha_s for start < s <= t
    future = since[None, :] > steps[:, None]  # start after t: nothing to read yet
    return sums.exp().masked_fill(future, 0)


def _gated_delta_rule_parallel(q, k, v, alpha, beta, initial_state=None):
    """The whole sequence as one chunk; returns (outputs (B, H, T, d_v), last state (B, H, d_k, d_v)).

    Writing S_t = g_t S_0 + sum_{i <= t} (g_t / g_i) k_i u_i^T, with g_t the product of the decays up to
    t, the recurrence becomes a triangular system for the written rows u (B, H, T, d_v):
    (I + diag(beta) A) U = diag(beta) (V - diag(g) K S_0), A[t, i] = (g_t / g_i) k_t . k_i for i < t.
    Then O = diag(g) Q S_0 + (D * Q K^T) U, with D[t, i] = g_t / g_i for i <= t.
    """
    length = q.shape[2]
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1]) if initial_state is None else initial_state
    ratios = decay_ratios(alpha)  # (B, H, T, T + 1)
    from_start, between = ratios[..., 0], ratios[..., 1:]  # (B, H, T), (B, H, T, T)
    strictly_lower = torch.ones(length, length, dtype=torch.bool, device=q.device).tril(-1)
    overlap = (k @ k.transpose(-1, -2)) * between * strictly_lower  # A (B, H, T, T)
    system = torch.eye(length, dtype=q.dtype, device=q.device) + beta[..., None] * overlap
    targets = beta[..., None] * (v - from_start[..., None] * (k @ state))  # (B, H, T, d_v)
    # PyTorch solves triangular systems in float32 and float64 only: float16 and bfloat16 are solved in float32.
    solve_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    written = torch.linalg.solve_triangular(
        system.to(solve_dtype), targets.to(solve_dtype), upper=False, unitriangular=True
    ).to(q.dtype)  # U
    outputs = from_start[..., None] * (q @ state) + ((q @ k.transpose(-1, -2)) * between) @ written
    to_end = between[..., -1, :]  # (B, H, T): g_T / g_i, the decay from each write to the chunk's end
    last = from_start[..., -1, None, None] * state + k.transpose(-1, -2) @ (to_end[..., None] * written)
    return outputs, last


def _gated_delta_rule_chunked(q, k, v, alpha, beta, chunk_size=CHUNK_SIZE):
    """Chunks of ``chunk_size`` tokens, the parallel form inside each, the state carried between them.

    Returns (outputs (B, H, T, d_v), last state (B, H, d_k, d_v)). The last chunk may be shorter.
    """
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    outputs = []
    for start in range(0, q.shape[2], chunk_size):
        part = slice(start, start + chunk_size)
        output, state = _gated_delta_rule_parallel(
            q[:, :, part], k[:, :, part], v[:, :, part], alpha[:, :, part], beta[:, :, part], state
        )
        outputs.append(output)
    return torch.cat(outputs, dim=2), state


def delta_rule(q, k, v, beta, chunk_size=CHUNK_SIZE):
    """The delta rule: S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T, o_t = S_t^T q_t.

    q, k (B, H, T, d_k), v (B, H, T, d_v), beta (B, H, T) -> (B, H, T, d_v). With unit-length keys and
    beta = 1, writing (k, v) makes the memory return exactly v for k: the old value is overwritten.
    """
    check_recurrence_inputs(q, k, v, beta=beta)
    alpha = torch.ones_like(beta)
    output = _gated_delta_rule_chunked(q, k, v, alpha, beta, positive_int("chunk_size", chunk_size))[0]
    return check_memory_output(output, DELTA_OVERSHOOT)


def gated_delta_rule(q, k, v, alpha, beta, chunk_size=CHUNK_SIZE):
    """The gated delta rule: S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T, o_t = S_t^T q_t.

    q, k (B, H, T, d_k), v (B, H, T, d_v), alpha and beta (B, H, T) -> (B, H, T, d_v); alpha in [0, 1]
    decays the whole memory before each write.
    """
    check_recurrence_inputs(q, k, v, beta=beta, alpha=alpha)
    output = _gated_delta_rule_chunked(q, k, v, alpha, beta, positive_int("chunk_size", chunk_size))[0]
    return check_memory_output(output, DELTA_OVERSHOOT)


# The three forms, each checking its input before its body runs -------------------------------------------


def _check_state(initial_state, q, v):
    """None, or the state (B, H, d_k, d_v) a recurrence starts from: the queries' dtype and device, finite."""
    if initial_state is None:
        return
    require_tensor("initial_state", initial_state)
    expected = (*q.shape[:2], q.shape[-1], v.shape[-1])
    if tuple(initial_state.shape) != expected:
        raise ValueError(f"initial_state must have shape (B, H, d_k, d_v) = {expected}, got {tuple(initial_state.shape)}")
    if initial_state.dtype != q.dtype or initial_state.device != q.device:
        raise TypeError(f"initial_state is {initial_state.dtype} on {initial_state.device} but q is {q.dtype} on "
                        f"{q.device}; convert it with initial_state.to(q)")
    require_finite("initial_state", initial_state, "every output would read it")


def linear_attention_loop(q, k, v):
    """S_t = S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, one token at a time. (B, H, T, d_k/d_v) -> (B, H, T, d_v)."""
    check_recurrence_inputs(q, k, v)
    return _linear_attention_loop(q, k, v)


def linear_attention_parallel(q, k, v):
    """The same outputs at once: (q k^T, masked causally, no softmax) v. (B, H, T, d) -> (B, H, T, d_v)."""
    check_recurrence_inputs(q, k, v)
    return _linear_attention_parallel(q, k, v)


def linear_attention_chunked(q, k, v, chunk_size=CHUNK_SIZE):
    """Chunks of ``chunk_size`` tokens: the state carried between chunks, the parallel form inside one."""
    check_recurrence_inputs(q, k, v)
    return _linear_attention_chunked(q, k, v, positive_int("chunk_size", chunk_size))


def gated_delta_rule_loop(q, k, v, alpha, beta, initial_state=None):
    """The gated delta rule token by token; returns (outputs (B, H, T, d_v), last state (B, H, d_k, d_v))."""
    check_recurrence_inputs(q, k, v, beta=beta, alpha=alpha)
    _check_state(initial_state, q, v)
    return _gated_delta_rule_loop(q, k, v, alpha, beta, initial_state)


def gated_delta_rule_parallel(q, k, v, alpha, beta, initial_state=None):
    """The whole sequence as one chunk (a triangular solve); returns (outputs, last state), as the loop does."""
    check_recurrence_inputs(q, k, v, beta=beta, alpha=alpha)
    _check_state(initial_state, q, v)
    return _gated_delta_rule_parallel(q, k, v, alpha, beta, initial_state)


def gated_delta_rule_chunked(q, k, v, alpha, beta, chunk_size=CHUNK_SIZE):
    """Chunks of ``chunk_size`` tokens, the parallel form inside each; returns (outputs, last state)."""
    check_recurrence_inputs(q, k, v, beta=beta, alpha=alpha)
    return _gated_delta_rule_chunked(q, k, v, alpha, beta, positive_int("chunk_size", chunk_size))
