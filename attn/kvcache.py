"""The KV cache: keys and values of the positions an attention layer has already seen (lesson 10).

When a model generates one token at a time, the keys and values of earlier tokens never change,
so each layer keeps them instead of recomputing them: a new token's query attends to the cache.
"""

import numbers

import torch

from attn.common.sizes import check_allocation
from attn.common.validate import require_tensor


class KVCache:
    """Keys and values of every position seen so far, for ONE attention layer (use one cache per layer).

    ``append(keys, values)`` takes this step's keys and values, each (B, H_kv, T_new, d), and returns
    all of them, each (B, H_kv, T, d) with T = len(cache). H_kv is the layer's number of key/value
    heads, so a grouped-query layer (H_kv < H) stores H / H_kv times fewer bytes.
    ``len(cache)``: cached positions T; ``cache.nbytes``: bytes held by keys and values together;
    ``cache.keys`` / ``cache.values``: the stored tensors (None while empty); ``reset()`` empties it.

    The interface every cache of the course shares (lesson 14's RingKVCache, lesson 21's compressed caches), which
    is all that MultiHeadAttention and the models ask of one: ``append`` returns the keys and values to attend to;
    ``check_fits`` refuses keys of another shape, dtype or device before anything changes; ``len(cache)`` is the
    number of positions seen, the next position's index (rotary positions count from it); ``stored`` the keys
    ``append`` returns before its new ones; ``nbytes`` and ``bytes_per_token()`` what is held. A cache that
    chooses what to forget by attention also has ``observe(queries)``, which the layer calls after attending.
    """

    def __init__(self):
        self._keys = None
        self._values = None

    @property
    def keys(self):
        """Cached keys (B, H_kv, T, d), or None while the cache is empty."""
        return self._keys

    @property
    def values(self):
        """Cached values (B, H_kv, T, d), or None while the cache is empty."""
        return self._values

    def __len__(self):
        return 0 if self._keys is None else self._keys.shape[2]

    @property
    def nbytes(self):
        """Bytes held: 2 * B * H_kv * T * d * element size (keys and values)."""
        return 0 if self._keys is None else self._keys.nbytes + self._values.nbytes

    @property
    def stored(self):
        """Positions held, whose keys ``append`` returns before the new ones: all of them, len(cache)."""
        return len(self)

    def bytes_per_token(self):
        """nbytes / len(cache): bytes held per position seen (0.0 while empty); 2 * B * H_kv * d * element size here."""
        return self.nbytes / len(self) if len(self) else 0.0

    def reset(self):
        """Forget every position, to start a new sequence."""
        self._keys = self._values = None

    def append(self, keys, values):
        """Add keys and values (B, H_kv, T_new, d) at the end; return all.

        Returns keys and values (B, H_kv, T, d). torch.cat writes a new tensor
        holding every cached position, so a step copies the whole cache.
        """
        self._check_new(keys, values)
        if self._keys is None:  # a copy: later changes to the inputs stay out
            self._keys, self._values = keys.clone(), values.clone()
        else:  # (B, H_kv, T + T_new, d): old and new copied into new memory
            self._keys = torch.cat((self._keys, keys), dim=2)
            self._values = torch.cat((self._values, values), dim=2)
        return self._keys, self._values

    def check_fits(self, batch, num_kv_heads, head_dim, dtype, device):
        """ValueError/TypeError unless keys (batch, num_kv_heads, T_new, head_dim) of this dtype and device can be appended."""
        if self._keys is None:
            return
        stored_batch, stored_heads, _, stored_dim = self._keys.shape
        differences = [
            f"{what} {stored} in the cache, {new} now"
            for what, stored, new in (
                ("batch size", stored_batch, batch),
                ("key/value heads", stored_heads, num_kv_heads),
                ("head size", stored_dim, head_dim),
            )
            if stored != new
        ]
        if differences:
            raise ValueError(
                f"this cache does not fit: {', '.join(differences)} (cached keys {tuple(self._keys.shape)}); "
                "use one cache per layer and per batch, and cache.reset() to start a new sequence"
            )
        if dtype != self._keys.dtype:
            raise TypeError(f"the cache holds {self._keys.dtype} keys, the new ones are {dtype}; use one cache per layer")
        if device != self._keys.device:
            raise ValueError(f"the cache is on device {self._keys.device}, the new keys on {device}; use one cache per layer")

    def _check_new(self, keys, values):
        for name, tensor in (("keys", keys), ("values", values)):
            require_tensor(name, tensor)
            if tensor.dim() != 4:
                raise ValueError(f"{name} must have shape (B, H_kv, T_new, d), got {tuple(tensor.shape)}")
        if keys.shape != values.shape or keys.dtype != values.dtype or keys.device != values.device:
            raise ValueError(
                f"keys and values must match in shape, dtype and device, got keys {tuple(keys.shape)} {keys.dtype} "
                f"on {keys.device}, values {tuple(values.shape)} {values.dtype} on {values.device}"
            )
        batch, num_kv_heads, _, head_dim = keys.shape
        self.check_fits(batch, num_kv_heads, head_dim, keys.dtype, keys.device)

    def __repr__(self):
        if self._keys is None:
            return "KVCache(empty)"
        batch, num_kv_heads, length, head_dim = self._keys.shape
        return (
            f"KVCache(positions={length}, batch={batch}, kv_heads={num_kv_heads}, head_dim={head_dim}, "
            f"dtype={self._keys.dtype}, device={self._keys.device}, nbytes={self.nbytes})"
        )


class PreallocatedKVCache(KVCache):
    """A KVCache that writes into one buffer of ``capacity`` positions, made at the first append.

    What serving systems do: the buffer (B, H_kv, capacity, d) is allocated once, each append writes
    only the new positions in place, and a length counter says how many are filled. ``keys`` and
    ``values`` are views of the filled part, so nothing already cached is copied again.
    ``nbytes`` counts the filled positions, as for KVCache; ``allocated_nbytes`` the whole buffers.
    """

    def __init__(self, capacity):
        super().__init__()
        if isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral):
            raise TypeError(f"capacity must be a whole number of positions, got {type(capacity).__name__} {capacity!r}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 position, got {capacity}")
        self.capacity = int(capacity)
        self._key_buffer = self._value_buffer = None

    @property
    def allocated_nbytes(self):
        """Bytes of the two buffers, filled or not: 2 * B * H_kv * capacity * d * element size."""
        if self._key_buffer is None:
            return 0
        return self._key_buffer.nbytes + self._value_buffer.nbytes

    def reset(self):
        """Forget every position (the buffers are kept, to be written over)."""
        super().reset()

    def append(self, keys, values):
        """Write keys and values (B, H_kv, T_new, d) after the filled part.

        Returns views of the filled part, each (B, H_kv, T, d): no copy.
        """
        self._check_new(keys, values)
        end = len(self) + keys.shape[2]
        if end > self.capacity:
            raise ValueError(
                f"this cache has room for {self.capacity} positions, {len(self)} are filled and "
                f"{keys.shape[2]} more do not fit; make it with a larger capacity"
            )
        if self._key_buffer is None or len(self) == 0:
            self._allocate(keys)
        start = len(self)
        self._key_buffer[:, :, start:end] = keys  # in place: only the new positions
        self._value_buffer[:, :, start:end] = values
        self._keys = self._key_buffer[:, :, :end]  # views, (B, H_kv, T, d)
        self._values = self._value_buffer[:, :, :end]
        return self._keys, self._values

    def _allocate(self, keys):
        """Buffers (B, H_kv, capacity, d) like ``keys``, unless the ones held already fit."""
        batch, num_kv_heads, _, head_dim = keys.shape
        shape = (batch, num_kv_heads, self.capacity, head_dim)
        held = self._key_buffer
        if held is not None and held.shape == shape and held.dtype == keys.dtype and held.device == keys.device:
            return
        buffers = 2 * batch * num_kv_heads * self.capacity * head_dim * keys.element_size()
        check_allocation(f"a cache of capacity {self.capacity} for keys and values of shape {tuple(keys.shape)}",
                         buffers, keys.device)
        self._key_buffer = keys.new_empty(shape)
        self._value_buffer = keys.new_empty(shape)

    def __repr__(self):
        return super().__repr__().replace("KVCache(", f"PreallocatedKVCache(capacity={self.capacity}, ", 1)
