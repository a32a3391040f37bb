"""Checks that every process of a group agrees before lesson 20's algorithms send anything.

Each process checks its own shards, then all share a short description (sizes, dtype, options, and whether
their own checks passed). Every process then raises the same kind of sentence, or none does: a process that
refused its input while the others went on to send would leave them waiting for a message that never comes.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from attn.common.validate import has_only_finite, require_choice, type_name
from attn.distributed.layouts import LAYOUTS, pieces_per_process, shard_positions

__all__ = ["group_rank"]  # the other checks are called by attn.distributed's algorithms only

FIELDS = ("batch", "heads", "kv_heads", "length", "head_dim", "value_dim", "dtype", "is_causal", "layout")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class Shards:
    """This process's rank, the group's size, and every process's global positions (rank order)."""

    rank: int
    world_size: int
    positions: list


def group_rank(what, group):
    """(rank, world size) of this process in ``group`` (None: every process); a sentence if there is no group."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(f"{what} runs in every process of an initialised process group, and this process has none: "
                         "call it inside a function that attn.distributed.spawn runs, or after "
                         "torch.distributed.init_process_group")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be None (every process) or a torch.distributed.ProcessGroup, got {type_name(group)}")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{what} was called with a group this process is not a member of")
    return rank, dist.get_world_size(group)


class PeerRefusedError(ValueError):
    """Raised by a process whose own input was fine, because another process's input was refused."""


def agree(what, row, problem, group, fields):
    """Share each process's description ``row`` (whole numbers named by ``fields``) and raise together.

    ``problem`` is the exception this process's own input deserves, or None. Every process raises when any
    does; the fields other than "length" must be equal everywhere. Returns every process's row, rank order.
    """
    _, world_size = group_rank(what, group)
    valid = problem is None
    rows = _gather((*(row if valid else (0,) * len(fields)), int(valid)), group, world_size)
    if problem is not None:
        raise problem
    refused = [r for r, shared in enumerate(rows) if not shared[-1]]
    if refused:
        raise PeerRefusedError(f"{what}: process {refused[0]}'s input was refused (its own error says why), so this "
                               "process stops too rather than wait for it")
    for field, values in zip(fields, zip(*rows, strict=True), strict=False):
        if field != "length" and len(set(values)) > 1:
            raise ValueError(f"{what}: the processes disagree on {field}, {list(values)} in rank order; every process "
                             "must pass shards of the same tensors with the same options")
    return [shared[:-1] for shared in rows]


def split_positions(what, lengths, layout, world_size):
    """Every process's positions, given the shard lengths in rank order; a sentence if they are not the layout's."""
    total = sum(lengths)
    if total < pieces_per_process(layout) * world_size:
        raise ValueError(f"{what}: {total} positions in all cannot be split over {world_size} processes in the "
                         f"{layout} layout")
    positions = shard_positions(total, world_size, layout)
    expected = [len(p) for p in positions]
    if list(lengths) != expected:
        raise ValueError(f"{what}: the shards have lengths {list(lengths)} in rank order, but the {layout} layout "
                         f"splits {total} positions over {world_size} processes as {expected}; cut them with "
                         "attn.distributed.shard")
    return positions


def describe_shards(what, query, key, value, is_causal, layout, group, split_heads):
    """Check this process's shards against every other process's; the positions of all of them."""
    rank, world_size = group_rank(what, group)
    problem = _local_problem(query, key, value, is_causal, layout)
    row = None if problem else (*query.shape[:2], key.shape[1], query.shape[2], query.shape[3], value.shape[3],
                                DTYPES.index(query.dtype), int(is_causal), LAYOUTS.index(layout))
    rows = agree(what, row, problem, group, FIELDS)
    positions = split_positions(what, [shared[3] for shared in rows], layout, world_size)
    if split_heads and (row[1] % world_size or row[2] % world_size):
        raise ValueError(f"{what} splits the heads over the processes: world size {world_size} must divide both the "
                         f"query heads ({row[1]}) and the key/value heads ({row[2]})")
    return Shards(rank, world_size, [p.to(query.device) for p in positions])


def _local_problem(query, key, value, is_causal, layout):
    """The exception this process's own inputs deserve, or None."""
    try:
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor shard (B, H, T_r, d), got {type_name(tensor)}")
            if tensor.dtype not in DTYPES or tensor.dim() != 4 or 0 in tensor.shape:
                raise ValueError(f"{name} must be a floating-point (B, H, T_r, d) shard with no size 0, got "
                                 f"{tensor.dtype} {tuple(tensor.shape)}")
            if tensor.dtype != query.dtype or tensor.device != query.device:
                raise TypeError(f"{name} is {tensor.dtype} on {tensor.device} but query is {query.dtype} on "
                                f"{query.device}")
        if key.shape[:3] != value.shape[:3] or key.shape[0] != query.shape[0] or key.shape[2] != query.shape[2]:
            raise ValueError(f"query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} must "
                             "share B and T_r, and key and value their heads")
        if key.shape[3] != query.shape[3] or query.shape[1] % key.shape[1]:
            raise ValueError(f"key {tuple(key.shape)} must have query's d_k ({query.shape[3]}) and a number of heads "
                             f"that divides query's ({query.shape[1]})")
        if not isinstance(is_causal, bool):
            raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)}")
        require_choice("layout", layout, LAYOUTS)
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            if not has_only_finite(tensor):
                raise ValueError(f"{name} holds NaN or inf: attention would spread it to every output that sees it")
    except (TypeError, ValueError) as error:
        return error
    return None


def _gather(row, group, world_size):
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu"
    mine = torch.tensor(row, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine, group=group)
    return [tuple(int(v) for v in row) for row in everyone]
