"""Attention split across devices (lesson 20, Part 4): ring attention, zigzag shards, Ulysses, and what
latent attention and the gated delta rule send.

``attn.distributed.processes``: ``spawn`` runs a function in N processes joined in a gloo process group.
``attn.distributed.layouts``: which positions each process holds (``shard``, ``unshard``). ``blocks``: one
process's queries against one block of keys, and the log-sum-exp merge. ``ring``: ``ring_attention``.
``ulysses``: ``ulysses_attention``. ``beyond``: latent attention's ring and the delta rule's relay.
``traffic``: the bytes sent and the work done, counted while running and by formula.

Imports: attn.distributed may import attn.common and the layers; attn.measure and attn.course may import it.
"""

from attn.distributed.beyond import delta_rule_relay, latent_ring_attention
from attn.distributed.layouts import LAYOUTS, shard, shard_positions, unshard
from attn.distributed.processes import spawn
from attn.distributed.ring import ring_attention
from attn.distributed.traffic import all_gather_bytes, causal_work, count_traffic, ring_bytes, ulysses_bytes
from attn.distributed.ulysses import ulysses_attention

__all__ = ["LAYOUTS", "all_gather_bytes", "causal_work", "count_traffic", "delta_rule_relay", "latent_ring_attention",
           "ring_attention", "ring_bytes", "shard", "shard_positions", "spawn", "ulysses_attention", "ulysses_bytes",
           "unshard"]
