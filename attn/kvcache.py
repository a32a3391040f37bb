"""The KV cache: keys and values of the positions an attention layer has already seen (lesson 9).

When a model generates one token at a time, the keys and values of earlier tokens never change,
so each layer keeps them instead of recomputing them: a new token's query attends to the cache.
"""

import torch


class KVCache:
    """Keys and values of every position seen so far, for ONE attention layer (use one cache per layer).

    ``append(keys, values)`` takes this step's keys and values, each (B, H_kv, T_new, d), and returns
    all of them, each (B, H_kv, T, d) with T = len(cache). H_kv is the layer's number of key/value
    heads, so a grouped-query layer (H_kv < H) stores H / H_kv times fewer bytes.
    ``len(cache)``: cached positions T; ``cache.nbytes``: bytes held by keys and values together;
    ``cache.keys`` / ``cache.values``: the stored tensors (None while empty); ``reset()`` empties it.
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

    def reset(self):
        """Forget every position, to start a new sequence."""
        self._keys = self._values = None

    def append(self, keys, values):
        """Add keys and values (B, H_kv, T_new, d) at the end; return all cached keys and values (B, H_kv, T, d)."""
        self._check_new(keys, values)
        if self._keys is None:
            self._keys, self._values = keys.clone(), values.clone()  # a copy: later changes to the caller's tensors stay out
        else:
            self._keys = torch.cat((self._keys, keys), dim=2)  # (B, H_kv, T + T_new, d)
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
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
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
