"""What Part 3's other designs send when the sequence is split (lesson 20).

Latent attention (lesson 15) caches, per token, a latent of r numbers and one rotary key of d_rope numbers,
shared by every head; the keys and values of all heads are rebuilt from them. Its ring therefore sends the
latents and rotary keys and rebuilds each block's keys and values where it arrives: r + d_rope numbers per
token instead of H (d_k + d_v). The gated delta rule (lesson 15) has no keys to send at all: process r
runs its positions from the state process r - 1 hands it, and hands on its last state, (d_k, d_v) per head,
whatever the length. That relay is sequential: process r waits for every process before it.
"""

import torch
import torch.distributed as dist

from attn.common.validate import type_name
from attn.distributed.group import agree, group_rank, split_positions
from attn.distributed.layouts import LAYOUTS
from attn.distributed.ring import RingPlan, ring_forward
from attn.distributed.traffic import record
from attn.latent import LatentAttention
from attn.linear import gated_delta_rule_parallel

__all__ = ["delta_rule_relay", "latent_ring_attention"]

STATE = 5  # message tag of the relayed state


def latent_ring_attention(layer, x, layout="contiguous", group=None):
    """A causal ``LatentAttention`` layer over the whole sequence, from this process's shard x (B, T_r, E).

    Returns this process's output shard (B, T_r, E), equal to the same positions of ``layer(x_whole)``.
    Forward only: it runs without gradients.
    """
    rank, world_size = group_rank("latent_ring_attention", group)
    problem = _latent_problem(layer, x, layout)
    row = None if problem else (x.shape[0], x.shape[2], x.shape[1], LAYOUTS.index(layout))
    rows = agree("latent_ring_attention", row, problem, group, ("batch", "embed_dim", "length", "layout"))
    positions = split_positions("latent_ring_attention", [r[2] for r in rows], layout, world_size)
    plan = RingPlan(rank, world_size, group, positions, True)
    with torch.no_grad():
        mine = positions[rank].to(x.device)
        q_nope, q_rope = layer.queries(x, mine)
        latents, rope_keys = layer.compress(x, mine)  # (B, T_r, r), (B, T_r, d_rope): all that travels
        queries = torch.cat([q_nope, q_rope], dim=-1) * (layer.scaling * q_nope.new_tensor(
            layer.nope_dim + layer.rope_dim).sqrt())  # block_attention divides by sqrt(d_k): the layer's scale instead

        def expand(block_latents, block_rope_keys):  # (B, 1, T_b, r), (B, 1, T_b, d_rope) -> keys, values
            up = layer.up_proj(block_latents[:, 0]).unflatten(-1, (layer.num_heads, -1)).transpose(1, 2)
            k_nope, values = up.split([layer.nope_dim, layer.value_dim], dim=-1)
            k_rope = block_rope_keys.expand(-1, layer.num_heads, -1, -1)
            return torch.cat([k_nope, k_rope], dim=-1), values

        context, _ = ring_forward(queries, latents[:, None], rope_keys[:, None], plan, expand)
        return layer.out_proj(context.transpose(1, 2).flatten(2))


def _latent_problem(layer, x, layout):
    if not isinstance(layer, LatentAttention):
        return TypeError(f"layer must be an attn.latent.LatentAttention, got {type_name(layer)}")
    if layout not in LAYOUTS:
        return ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r:.60}")
    try:
        layer.queries(x, torch.arange(x.shape[1]) if isinstance(x, torch.Tensor) and x.dim() == 3 else None)
    except (TypeError, ValueError) as error:
        return error
    return None


def delta_rule_relay(q, k, v, alpha, beta, group=None):
    """The gated delta rule over the whole sequence, each process holding a contiguous shard.

    q, k (B, H, T_r, d_k), v (B, H, T_r, d_v), alpha, beta (B, H, T_r), as ``attn.linear``'s functions take
    them. Process r waits for the state (B, H, d_k, d_v) of process r - 1, runs its positions from it and sends
    its last state on. Returns this process's outputs (B, H, T_r, d_v), equal to one device's.
    """
    rank, world_size = group_rank("delta_rule_relay", group)
    problem = None
    try:
        gated_delta_rule_parallel(q[..., :1, :], k[..., :1, :], v[..., :1, :], alpha[..., :1], beta[..., :1])
    except (TypeError, ValueError, IndexError) as error:
        problem = error if not isinstance(error, IndexError) else ValueError(f"q, k, v, alpha and beta must be "
                                                                           f"(B, H, T_r, ...) shards: {error}")
    row = None if problem else (*q.shape[:3], q.shape[3], v.shape[3])
    rows = agree("delta_rule_relay", row, problem, group, ("batch", "heads", "length", "key_dim", "value_dim"))
    split_positions("delta_rule_relay", [r[2] for r in rows], "contiguous", world_size)
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])  # the first process starts from an empty memory
    if rank > 0:
        dist.recv(state, group=group, group_src=rank - 1, tag=STATE)
    outputs, last = gated_delta_rule_parallel(q, k, v, alpha, beta, initial_state=state)
    if rank < world_size - 1:
        dist.send(last.contiguous(), group=group, group_dst=rank + 1, tag=STATE)
        record(sent_bytes=last.numel() * last.element_size())
    return outputs
