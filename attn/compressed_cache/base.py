"""What lesson 21's two caches share: lesson 10's KVCache interface, with the layout fixed by the first append.

Both caches keep their keys and values in a form of their own (codes, or a chosen subset), so ``keys`` and
``values`` are computed on demand, ``len(cache)`` counts the positions seen (not the entries held), and
``check_fits`` compares new keys with the layout recorded at the first append. Every append is checked whole
before anything changes, so a refused call leaves the cache as it was.
"""

import torch

from attn.common.validate import require_finite, type_name
from attn.kvcache import KVCache


class CompressedCache(KVCache):
    """Base of QuantizedKVCache and EvictingKVCache: the layout (B, H_kv, d, dtype, device) and the positions seen."""

    def __init__(self):
        super().__init__()
        self._layout = None  # (batch, num_kv_heads, head_dim, dtype, device), from the first append
        self._seen = 0

    def __len__(self):
        return self._seen

    @property
    def keys(self):
        """The keys attention reads, (B, H_kv, stored, d) (dequantized where stored as codes), or None while empty."""
        return self._read()[0] if self.stored else None

    @property
    def values(self):
        """The values attention reads, (B, H_kv, stored, d), or None while empty."""
        return self._read()[1] if self.stored else None

    def reset(self):
        """Forget every position, to start a new sequence (the layout too: the next append may have another)."""
        super().reset()
        self._layout, self._seen = None, 0

    def check_fits(self, batch, num_kv_heads, head_dim, dtype, device):
        """ValueError/TypeError unless keys (batch, num_kv_heads, T_new, head_dim) of this dtype and device can be appended."""
        if self._layout is None:
            return
        stored_batch, stored_heads, stored_dim, stored_dtype, stored_device = self._layout
        differences = [f"{what} {stored} in the cache, {new} now"
                       for what, stored, new in (("batch size", stored_batch, batch),
                                                 ("key/value heads", stored_heads, num_kv_heads),
                                                 ("head size", stored_dim, head_dim)) if stored != new]
        if differences:
            raise ValueError(f"this cache does not fit: {', '.join(differences)}; use one cache per layer and per batch, "
                             "and cache.reset() to start a new sequence")
        if dtype != stored_dtype:
            raise TypeError(f"the cache holds {stored_dtype} keys, the new ones are {dtype}; use one cache per layer")
        if device != stored_device:
            raise ValueError(f"the cache is on device {stored_device}, the new keys on {device}; use one cache per layer")

    def append(self, keys, values):
        """Each kind of compressed cache appends in its own way: QuantizedKVCache and EvictingKVCache."""
        raise TypeError("CompressedCache is the base of QuantizedKVCache and EvictingKVCache, which hold keys and values; "
                        "make one of those")

    def _check_new(self, keys, values):
        """KVCache's checks (kinds, shapes, the layout), then finite keys and values: NaN in a cache would reach every
        later query, and would make every scale and score it touches NaN."""
        super()._check_new(keys, values)
        require_finite("keys", keys, "every later query would read it")
        require_finite("values", values, "every later query would read it")

    def _record_layout(self, keys):
        batch, num_kv_heads, _, head_dim = keys.shape
        self._layout = (batch, num_kv_heads, head_dim, keys.dtype, keys.device)

    def _read(self):
        """(keys, values) held, each (B, H_kv, stored, d), as attention reads them."""
        raise NotImplementedError


def caches_for(model, make):
    """One cache per block of ``model`` (a LlamaLM, a Decoder, lesson 13's model), each from ``make()``: a list to
    pass as ``caches``, e.g. ``caches_for(model, lambda: QuantizedKVCache(4, 32, 32))``."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
        raise TypeError(f"model must be a language model with blocks (a LlamaLM or a Decoder), got {type_name(model)}")
    if not callable(make):
        raise TypeError(f"make must be a function that returns a new cache, got {type_name(make)}")
    caches = [make() for _ in blocks]
    if not all(isinstance(cache, KVCache) for cache in caches) or len({id(cache) for cache in caches}) != len(caches):
        raise TypeError("make() must return a new cache (an attn.KVCache, or one of lesson 21's) at every call, one per block")
    return caches
