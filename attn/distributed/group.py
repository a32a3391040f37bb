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

FIELDS = ("batch", "heads", "kv_heads", "length", "head_dim", "value_dim", "dtype", "is_causal", "layout", "valid")
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


def describe_shards(what, query, key, value, is_causal, layout, group, split_heads):
    """Check this process's shards against every other process's; the positions of all of them."""
    rank, world_size = group_rank(what, group)
    problem = _local_problem(query, key, value, is_causal, layout)
    mine = _description(query, key, value, is_causal, layout, problem is None)
    rows = _gather(mine, group, world_size, query)
    if problem is not None:
        raise problem
    refused = [r for r, row in enumerate(rows) if not row[-1]]
    if refused:
        raise ValueError(f"{what}: process {refused[0]}'s shards were refused (its own error says why), so this "
                         "process stops too rather than wait for it")
    for field, values in zip(FIELDS, zip(*rows, strict=True), strict=True):
        if field != "length" and len(set(values)) > 1:
            raise ValueError(f"{what}: the processes disagree on {field}, {list(values)} in rank order; every process "
                             "must pass shards of the same tensors with the same options")
    lengths = [row[3] for row in rows]
    total = sum(lengths)
    if total < pieces_per_process(layout) * world_size:
        raise ValueError(f"{what}: {total} positions in all cannot be split over {world_size} processes in the "
                         f"{layout} layout")
    positions = shard_positions(total, world_size, layout)
    expected = [len(p) for p in positions]
    if lengths != expected:
        raise ValueError(f"{what}: the shards have lengths {lengths} in rank order, but the {layout} layout splits "
                         f"{total} positions over {world_size} processes as {expected}; cut them with "
                         "attn.distributed.shard")
    if split_heads and (mine[1] % world_size or mine[2] % world_size):
        raise ValueError(f"{what} splits the heads over the processes: world size {world_size} must divide both the "
                         f"query heads ({mine[1]}) and the key/value heads ({mine[2]})")
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


def _description(query, key, value, is_causal, layout, valid):
    if not valid:
        return (0,) * (len(FIELDS) - 1) + (0,)
    return (*query.shape[:2], key.shape[1], query.shape[2], query.shape[3], value.shape[3],
            DTYPES.index(query.dtype), int(is_causal), LAYOUTS.index(layout), 1)


def _gather(row, group, world_size, query):
    device = query.device if isinstance(query, torch.Tensor) and dist.get_backend(group) == "nccl" else "cpu"
    mine = torch.tensor(row, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine, group=group)
    return [tuple(int(v) for v in row) for row in everyone]
