"""Which positions each process holds (lesson 20): the contiguous split and the balanced zigzag one.

Positions are the tokens' global indices 0 .. T - 1. ``"contiguous"`` gives process r of N the r-th of N
consecutive runs (``torch.tensor_split``: when N does not divide T the first T % N runs are one longer).
``"zigzag"`` cuts the sequence into 2N runs the same way and gives process r run r and run 2N - 1 - r, one
from the head and one from the tail, so that under a causal mask every process has about the same work.
"""

import torch

from attn.common.validate import require_choice, require_tensor, type_name, whole_number

__all__ = ["LAYOUTS", "shard", "shard_positions", "unshard"]

LAYOUTS = ("contiguous", "zigzag")
MAX_LENGTH = 2**24  # positions: 128 MiB of int64 indices, far more than a lesson needs
MAX_WORLD_SIZE = 2**12  # processes: a list of this many shards is built in well under a second


def pieces_per_process(layout):
    """1 for the contiguous layout, 2 for zigzag: the runs of consecutive positions each process holds."""
    return 1 if require_choice("layout", layout, LAYOUTS) == "contiguous" else 2


def shard_positions(length, world_size, layout="contiguous"):
    """The global positions of every process: a list of ``world_size`` int64 tensors, in rank order."""
    length = whole_number("length", length, minimum=1, maximum=MAX_LENGTH)
    world_size = whole_number("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
    pieces = pieces_per_process(layout) * world_size
    if length < pieces:
        raise ValueError(f"{length} positions cannot be split over {world_size} processes in the {layout} layout: "
                         f"it cuts the sequence into {pieces} runs of at least one position each")
    runs = torch.tensor_split(torch.arange(length), pieces)
    if layout == "contiguous":
        return list(runs)
    return [torch.cat([runs[rank], runs[pieces - 1 - rank]]) for rank in range(world_size)]


def shard(x, rank, world_size, layout="contiguous"):
    """Process ``rank``'s shard of x (B, H, T, d): x[:, :, positions] -> (B, H, T_r, d)."""
    _require_sequence("x", x)
    world_size = whole_number("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
    rank = whole_number("rank", rank, minimum=0, maximum=world_size - 1)
    positions = shard_positions(x.shape[2], world_size, layout)[rank]
    return x[:, :, positions.to(x.device)]


def unshard(shards, layout="contiguous"):
    """The shards of every process, in rank order -> the whole (B, H, T, d), positions back in order."""
    if not isinstance(shards, list | tuple) or not shards:
        raise TypeError(f"shards must be a non-empty list of (B, H, T_r, d) tensors in rank order, got {type_name(shards)}")
    if len(shards) > MAX_WORLD_SIZE:
        raise ValueError(f"shards holds {len(shards):,} pieces; at most {MAX_WORLD_SIZE:,} processes are split here")
    for rank, piece in enumerate(shards):
        _require_sequence(f"shards[{rank}]", piece)
        if piece.shape[:2] != shards[0].shape[:2] or piece.shape[3:] != shards[0].shape[3:]:
            raise ValueError(f"shards[{rank}] is {tuple(piece.shape)} but shards[0] is {tuple(shards[0].shape)}: "
                             "every shard must share B, H and d")
    length = sum(piece.shape[2] for piece in shards)
    positions = shard_positions(length, len(shards), layout)
    lengths = [piece.shape[2] for piece in shards]
    expected = [len(p) for p in positions]
    if lengths != expected:
        raise ValueError(f"shards of lengths {lengths} are not a {layout} split of {length} positions over "
                         f"{len(shards)} processes, which gives {expected}")
    order = torch.cat(positions).argsort().to(shards[0].device)  # where each position sits in the concatenation
    return torch.cat(list(shards), dim=2)[:, :, order]


def position_runs(positions):
    """Split a 1-D tensor of positions into runs of consecutive ones: a list of (start, stop) index pairs."""
    breaks = (positions[1:] != positions[:-1] + 1).nonzero().flatten() + 1
    edges = [0, *breaks.tolist(), len(positions)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _require_sequence(name, x):
    require_tensor(name, x)
    if x.dim() != 4 or 0 in x.shape:
        raise ValueError(f"{name} must be (B, H, T, d) with no size 0, got {tuple(x.shape)}")
