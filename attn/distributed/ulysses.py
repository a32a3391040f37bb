"""DeepSpeed-Ulysses (lesson 20): trade the sequence split for a head split, attend locally, trade back.

Each process starts with every head for its positions. One all-to-all gives each process every position for
its H / N heads: it sends the j-th group of heads of its positions to process j, and receives its own group of
heads from every process. Attention over the whole sequence then needs nothing from anyone: each head is
independent. A second all-to-all returns each output to the process that holds its positions. The heads
(query and key/value heads both) must divide among the processes; that is Ulysses' limit.
"""

import torch
import torch.distributed as dist

from attn.distributed.blocks import _block_attention
from attn.distributed.group import describe_shards
from attn.distributed.traffic import record

__all__ = ["ulysses_attention"]

TRADE = 6  # message tag of the all-to-all's pieces


class _AllToAll(torch.autograd.Function):
    """Piece j goes to process j; piece i of the result came from process i. Its gradient is the trade back."""

    @staticmethod
    def forward(ctx, group, incoming_shapes, *pieces):
        ctx.group, ctx.outgoing_shapes = group, [piece.shape for piece in pieces]
        return all_to_all(list(pieces), incoming_shapes, group)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *all_to_all([grad.contiguous() for grad in grads], ctx.outgoing_shapes, ctx.group))


def all_to_all(pieces, incoming_shapes, group):
    """Send pieces[j] to process j; receive a tensor of incoming_shapes[i] from process i (a list, rank order).

    Written as point-to-point sends, one to each other process, because gloo's own all_to_all needs every
    piece to have one shape, and a length that the processes do not divide gives pieces of two lengths.
    """
    rank = dist.get_rank(group)
    received = [pieces[0].new_empty(shape) for shape in incoming_shapes]
    received[rank] = pieces[rank].clone()  # this process's own piece stays here
    requests = []
    for other in range(len(pieces)):
        if other != rank:
            requests.append(dist.isend(pieces[other].contiguous(), group=group, group_dst=other, tag=TRADE))
            requests.append(dist.irecv(received[other], group=group, group_src=other, tag=TRADE))
            record(sent_bytes=pieces[other].numel() * pieces[other].element_size())
    for request in requests:
        request.wait()
    return tuple(received)


def to_heads(x, positions, group):
    """(B, H, T_r, d) sequence shard -> (B, H / N, T, d): this process's heads, every position in order."""
    world_size = len(positions)
    pieces = x.chunk(world_size, dim=1)  # head groups, (B, H / N, T_r, d) each
    shapes = [(x.shape[0], x.shape[1] // world_size, len(p), x.shape[3]) for p in positions]
    received = _AllToAll.apply(group, shapes, *pieces)  # from process i: my heads at its positions
    order = torch.cat(positions).argsort()  # the layout's order back to 0 .. T - 1
    return torch.cat(received, dim=2)[:, :, order]


def to_positions(x, positions, group):
    """(B, H / N, T, d) head shard -> (B, H, T_r, d): every head again, this process's positions only."""
    rank = dist.get_rank(group)
    pieces = [x[:, :, p] for p in positions]  # the positions each process holds
    shapes = [(x.shape[0], x.shape[1], len(positions[rank]), x.shape[3])] * len(positions)
    return torch.cat(_AllToAll.apply(group, shapes, *pieces), dim=1)  # head groups in rank order


def ulysses_attention(query, key, value, is_causal=False, layout="contiguous", group=None):
    """Attention over the whole sequence by a head split; called in every process with its shard.

    Same arguments, shapes and result as ``ring_attention``: query (B, H, T_r, d_k), key (B, H_kv, T_r, d_k),
    value (B, H_kv, T_r, d_v) -> output (B, H, T_r, d_v), differentiable. The world size must divide H and H_kv.
    """
    shards = describe_shards("ulysses_attention", query, key, value, is_causal, layout, group, split_heads=True)
    q, k, v = (to_heads(t, shards.positions, group) for t in (query, key, value))
    everywhere = torch.arange(q.shape[2], device=q.device)  # this process now holds every position
    output, _, pairs = _block_attention(q, k, v, everywhere, everywhere, is_causal)  # (B, H / N, T, d_v)
    record(pairs=pairs * q.shape[1])
    return to_positions(output, shards.positions, group)
