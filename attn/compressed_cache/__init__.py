"""Lesson 21's caches that forget on purpose: keys and values stored in fewer bits, or fewer of them kept.

A layer (imports only ``attn.common`` and the layers). ``attn.compressed_cache.quantize``: integer and FP8 codes
with group scales, a loop and then vectorised (``quantize``, ``dequantize``); ``quantized``: the
``QuantizedKVCache`` (KIVI's layout); ``scores``: the eviction rules' scores and the choice of what stays, loops
then vectorised; ``evicting``: the ``EvictingKVCache`` (and evict-then-quantize). Both caches have lesson 10's
KVCache interface, so ``MultiHeadAttention``, ``LlamaLM`` and the ``Decoder`` take them wherever they take an
``attn.KVCache``; ``caches_for(model, make)`` gives one per block.
"""

from attn.compressed_cache.base import caches_for
from attn.compressed_cache.evicting import EvictingKVCache
from attn.compressed_cache.quantize import QuantizedTensor, dequantize, pack_codes, quantize, quantize_loop, unpack_codes
from attn.compressed_cache.quantized import QuantizedKVCache
from attn.compressed_cache.scores import (
    RULES,
    attention_rows,
    eviction_scores,
    eviction_scores_loop,
    keep_indices,
    keep_indices_loop,
)

__all__ = ["RULES", "EvictingKVCache", "QuantizedKVCache", "QuantizedTensor", "attention_rows", "caches_for", "dequantize",
           "eviction_scores", "eviction_scores_loop", "keep_indices", "keep_indices_loop", "pack_codes", "quantize",
           "quantize_loop", "unpack_codes"]
