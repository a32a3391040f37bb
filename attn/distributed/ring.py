"""Ring attention (lesson 20): every process keeps its queries; blocks of keys and values travel around a ring.

At step s process r holds the block that started at process (r - s) mod N. It starts passing that block on
to r + 1 (and receiving the next from r - 1), computes its queries' partial result over the block while the
block travels, and merges it into its running output by log-sum-exp. After N steps every query has seen
every block: the output equals one-device attention, and no process ever holds more than two blocks.
The backward pass recomputes each block's weights (lesson 12); the queries' gradients stay home, and each
block's key and value gradients travel with it, one more step at the end to get back to their owner.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from attn.distributed.blocks import NEG_INF, _block_attention, _merge_partials, block_gradients
from attn.distributed.group import describe_shards
from attn.distributed.traffic import record
from attn.flash import refuse_second_derivatives

__all__ = ["ring_attention"]

KEYS, VALUES, GRAD_KEYS, GRAD_VALUES = range(1, 5)  # message tags: each kind of message has its own


@dataclass
class RingPlan:
    """Who this process is and which positions every process holds."""

    rank: int
    world_size: int
    group: object
    positions: list  # (T_r,) int64 per process, in rank order
    is_causal: bool

    def source(self, step):
        """The process whose block this one holds at ``step``."""
        return (self.rank - step) % self.world_size


class _Passing:
    """Sends to the next process and receives from the previous one, both started now; ``wait()`` finishes."""

    def __init__(self, tensors, incoming_length, plan, tags):
        self.received = [t.new_empty(*t.shape[:2], incoming_length, t.shape[3]) for t in tensors]
        after, before = (plan.rank + 1) % plan.world_size, (plan.rank - 1) % plan.world_size
        self.requests = []
        for tensor, buffer, tag in zip(tensors, self.received, tags, strict=True):
            self.requests.append(dist.isend(tensor.contiguous(), group=plan.group, group_dst=after, tag=tag))
            self.requests.append(dist.irecv(buffer, group=plan.group, group_src=before, tag=tag))
            record(sent_bytes=tensor.numel() * tensor.element_size())

    def wait(self):
        for request in self.requests:
            request.wait()
        return tuple(self.received)


def ring_forward(query, key, value, plan, expand=None):
    """This process's output (B, H, T_r, d_v) and log-sum-exp (B, H, T_r) over every process's block.

    ``expand``: None, or a function that turns the two travelling tensors into a block's keys and values
    (latent attention sends its latents and rotary keys and expands them on arrival).
    """
    block = (key, value)
    for step in range(plan.world_size):
        source = plan.source(step)
        passing = None
        if step < plan.world_size - 1:  # start sending before computing: the transfer overlaps the work
            passing = _Passing(block, len(plan.positions[plan.source(step + 1)]), plan, (KEYS, VALUES))
        keys, values = block if expand is None else expand(*block)
        if step == 0:
            output = query.new_zeros(*query.shape[:3], values.shape[-1])  # (B, H, T_r, d_v)
            lse = query.new_full(query.shape[:3], NEG_INF)
        part, part_lse, pairs = _block_attention(query, keys, values, plan.positions[plan.rank],
                                                plan.positions[source], plan.is_causal)
        record(pairs=pairs * query.shape[1])
        output, lse = _merge_partials(output, lse, part, part_lse)
        if passing is not None:
            block = passing.wait()
    return output, lse


def ring_backward(saved, grad_output, plan):
    """Gradients for this process's query, key and value shards."""
    query, key, value, output, lse = saved
    delta = (grad_output * output).sum(-1, keepdim=True)  # (B, H, T_r, 1), rowsum(dO * O)
    home = (query, plan.positions[plan.rank], output, lse, grad_output, delta)
    grad_query = torch.zeros_like(query)
    block, block_grads = (key, value), (torch.zeros_like(key), torch.zeros_like(value))
    for step in range(plan.world_size):
        source, last = plan.source(step), step == plan.world_size - 1
        passing = None if last else _Passing(block, len(plan.positions[plan.source(step + 1)]), plan, (KEYS, VALUES))
        part_query, part_key, part_value = block_gradients(home, *block, plan.positions[source], plan.is_causal)
        grad_query += part_query
        block_grads = (block_grads[0] + part_key, block_grads[1] + part_value)
        if plan.world_size > 1:  # the gradients so far go on with the block; the last pass takes them home
            arriving = plan.source(step + 1)
            block_grads = _Passing(block_grads, len(plan.positions[arriving]), plan, (GRAD_KEYS, GRAD_VALUES)).wait()
        if passing is not None:
            block = passing.wait()
    return grad_query, *block_grads


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, plan):
        output, lse = ring_forward(query, key, value, plan)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.plan = plan
        return output

    @staticmethod
    def backward(ctx, grad_output):
        refuse_second_derivatives()
        return (*ring_backward(ctx.saved_tensors, grad_output.contiguous(), ctx.plan), None)


def ring_attention(query, key, value, is_causal=False, layout="contiguous", group=None):
    """Attention over the whole sequence, called in every process of a group with that process's shard.

    query (B, H, T_r, d_k), key (B, H_kv, T_r, d_k), value (B, H_kv, T_r, d_v): the positions ``shard(x, rank,
    world_size, layout)`` gives this process, H_kv dividing H. Returns this process's output shard
    (B, H, T_r, d_v), equal to the same positions of one-device attention; differentiable (every process
    must call backward too: the gradients travel around the ring).
    """
    shards = describe_shards("ring_attention", query, key, value, is_causal, layout, group, split_heads=False)
    plan = RingPlan(shards.rank, shards.world_size, group, shards.positions, is_causal)
    return _RingAttention.apply(query, key, value, plan)
