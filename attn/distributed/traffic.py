"""What lesson 20's algorithms send and compute, counted two ways that the tests prove equal.

``count_traffic()`` counts, inside one process, the bytes its sends carry and the (query, key) score pairs
it computes while the block runs. The byte formulas below give the same byte counts without running anything,
so they can be drawn for lengths and process counts this machine cannot run; ``causal_work`` counts the pairs
a causal mask keeps, which the ring computes plus the masked part of the runs that cross the diagonal. A "block" is one process's
keys and values: B * H_kv * (T / N) * (d_k + d_v) numbers.
"""

from contextlib import contextmanager
from dataclasses import dataclass

from attn.common.validate import require_choice, whole_number
from attn.distributed.layouts import LAYOUTS, MAX_LENGTH, MAX_WORLD_SIZE, shard_positions

__all__ = ["Traffic", "all_gather_bytes", "causal_work", "count_traffic", "ring_bytes", "ulysses_bytes"]


@dataclass
class Traffic:
    """Counts for one process: bytes sent, and (query, key) score pairs computed, summed over heads, per batch entry."""

    sent_bytes: int = 0
    pairs: int = 0


_counters = []  # the open count_traffic() blocks of this process


@contextmanager
def count_traffic():
    """``with count_traffic() as traffic:`` counts what this process sends and computes inside the block."""
    traffic = Traffic()
    _counters.append(traffic)
    try:
        yield traffic
    finally:
        _counters.remove(traffic)


def record(sent_bytes=0, pairs=0):
    """Add to every open count (called by the algorithms; cheap when nothing counts)."""
    for traffic in _counters:
        traffic.sent_bytes += sent_bytes
        traffic.pairs += pairs


def _sizes(batch, heads, kv_heads, length, world_size, head_dim, value_dim, element_bytes):
    sizes = [whole_number(name, value, minimum=1) for name, value in (
        ("batch", batch), ("heads", heads), ("kv_heads", kv_heads), ("length", length),
        ("world_size", world_size), ("head_dim", head_dim), ("value_dim", value_dim or head_dim),
        ("element_bytes", element_bytes))]
    if sizes[1] % sizes[2]:
        raise ValueError(f"kv_heads={kv_heads} must divide heads={heads} (grouped-query heads)")
    if sizes[3] % sizes[4]:
        raise ValueError(f"the formulas assume world_size={world_size} divides length={length}: each process "
                         "then holds T / N positions")
    return sizes


def ring_bytes(batch, heads, kv_heads, length, world_size, head_dim, value_dim=None, element_bytes=4):
    """Bytes one process sends in ring attention: {"forward": ..., "backward": ...}.

    Forward: its block travels N - 1 steps. Backward: the keys and values travel N - 1 steps again, and their
    gradients (a block's size) travel N steps, the last one home.
    """
    b, _, h_kv, t, n, d_k, d_v, size = _sizes(batch, heads, kv_heads, length, world_size, head_dim, value_dim,
                                              element_bytes)
    block = b * h_kv * (t // n) * (d_k + d_v) * size
    return {"forward": (n - 1) * block, "backward": (n - 1) * block + (n if n > 1 else 0) * block}


def all_gather_bytes(batch, heads, kv_heads, length, world_size, head_dim, value_dim=None, element_bytes=4):
    """Bytes one process sends when keys and values are all-gathered (Llama 3's way): the same N - 1 blocks out,
    and in the backward a reduce-scatter of the gradients, N - 1 blocks (each process sums the others' parts)."""
    b, _, h_kv, t, n, d_k, d_v, size = _sizes(batch, heads, kv_heads, length, world_size, head_dim, value_dim,
                                              element_bytes)
    block = b * h_kv * (t // n) * (d_k + d_v) * size
    return {"forward": (n - 1) * block, "backward": (n - 1) * block}


def ulysses_bytes(batch, heads, kv_heads, length, world_size, head_dim, value_dim=None, element_bytes=4):
    """Bytes one process sends in Ulysses: all-to-all of q, k, v to a head split, and of the output back.

    Each all-to-all keeps 1/N of the process's shard and sends the rest. The backward sends the same tensors'
    gradients the other way: the same bytes.
    """
    b, h, h_kv, t, n, d_k, d_v, size = _sizes(batch, heads, kv_heads, length, world_size, head_dim, value_dim,
                                              element_bytes)
    if h % n or h_kv % n:
        raise ValueError(f"Ulysses splits the heads over the processes: world_size={world_size} must divide "
                         f"heads={heads} and kv_heads={kv_heads}")
    per_position = h * d_k + h_kv * (d_k + d_v) + h * d_v  # q, k, v in, the output back
    sent = b * (t // n) * per_position * size * (n - 1) // n
    return {"forward": sent, "backward": sent}


def causal_work(length, world_size, layout="contiguous"):
    """Score pairs (query, key) with key <= query that each process computes: a list in rank order.

    These are the pairs the causal mask keeps; a kernel that skips whole blocks and masks the diagonal ones
    computes a little more, which ``count_traffic`` counts exactly.
    """
    require_choice("layout", layout, LAYOUTS)
    length = whole_number("length", length, minimum=1, maximum=MAX_LENGTH)
    whole_number("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
    return [int((positions + 1).sum()) for positions in shard_positions(length, world_size, layout)]
