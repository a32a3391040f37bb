"""The ring-buffer KV cache of a sliding-window layer (lesson 14): its memory stops growing.

A windowed layer never looks further back than ``window`` positions (plus the sink tokens), so
its cache keeps only those: one buffer of sink_tokens + window slots, allocated once, in which
each new position overwrites the oldest one that no query will need again.
"""

import numbers

import torch

from attn.kvcache import KVCache

MAX_POSITIONS = 2**40  # a trillion positions: more than any machine's memory holds as keys


class RingKVCache(KVCache):
    """Keys and values of the last ``window`` positions and the first ``sink_tokens``, for ONE layer.

    The buffer (B, H_kv, sink_tokens + window, d) is made at the first append. Slot s < sink_tokens
    holds position s forever; position p >= sink_tokens lives in slot
    sink_tokens + (p - sink_tokens) % window until window later positions overwrite it.

    ``append(keys, values)`` takes this step's (B, H_kv, T_new, d) and returns the stored keys and
    values followed by the new ones, (B, H_kv, T_stored + T_new, d), in slot order, not time order:
    ``key_positions`` (T_stored + T_new,) says where each sits, and the layer builds its window mask
    from them (attention does not care about the order of its keys). Then the new positions are
    written into their slots.
    ``len(cache)``: positions seen so far (the next position's index); ``cache.stored``: positions
    held; ``cache.nbytes``: bytes of the held positions, which stops growing at
    2 * B * H_kv * (sink_tokens + window) * d * element size; ``allocated_nbytes``: the whole buffers.
    """

    def __init__(self, window, sink_tokens=0):
        super().__init__()
        for name, value, least in (("window", window, 1), ("sink_tokens", sink_tokens, 0)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
            if value < least:
                raise ValueError(f"{name} must be at least {least}, got {value}")
            if value > MAX_POSITIONS:
                raise ValueError(f"{name}={value} is more positions than any cache could hold (at most 2**40 = "
                                 f"{MAX_POSITIONS:,}); use a smaller window, or an attn.KVCache for a cache that never forgets")
        self.window, self.sink_tokens = int(window), int(sink_tokens)
        self.capacity = self.window + self.sink_tokens
        self._key_buffer = self._value_buffer = None
        self._seen = 0
        self._slot_positions = None  # (capacity,): the absolute position each slot holds, -1 while empty
        self.key_positions = torch.zeros(0, dtype=torch.long)  # of the keys the last append returned

    def __len__(self):
        return self._seen

    @property
    def stored(self):
        """Positions held in the buffer: min(len(cache), sink_tokens + window)."""
        return min(self._seen, self.capacity)

    @property
    def allocated_nbytes(self):
        """Bytes of the two buffers: 2 * B * H_kv * (sink_tokens + window) * d * element size."""
        return 0 if self._key_buffer is None else self._key_buffer.nbytes + self._value_buffer.nbytes

    def reset(self):
        """Forget every position (the buffers are kept, to be written over)."""
        super().reset()
        self._seen = 0
        if self._slot_positions is not None:
            self._slot_positions.fill_(-1)
        self.key_positions = torch.zeros(0, dtype=torch.long)

    def slots(self, positions):
        """The slot of each absolute position (a LongTensor): sinks fixed, the rest around the ring."""
        ring = self.sink_tokens + (positions - self.sink_tokens) % self.window
        return torch.where(positions < self.sink_tokens, positions, ring)

    def append(self, keys, values):
        """Return stored then new keys and values, each (B, H_kv, T_stored + T_new, d); then store the new ones."""
        self._check_new(keys, values)
        if self._keys is None:  # empty: make buffers, or keep the ones held if they fit
            self._allocate(keys)
        held = self.stored
        start, end = self._seen, self._seen + keys.shape[2]
        new_positions = torch.arange(start, end)  # (T_new,)
        all_keys = torch.cat((self._key_buffer[:, :, :held], keys), dim=2)  # a copy of at most capacity + T_new positions
        all_values = torch.cat((self._value_buffer[:, :, :held], values), dim=2)
        self.key_positions = torch.cat((self._slot_positions[:held], new_positions))
        # Keep what later queries can still see: the sinks and the last `window` positions.
        keep = (new_positions < self.sink_tokens) | (new_positions >= end - self.window)  # (T_new,)
        slots = self.slots(new_positions[keep])
        self._key_buffer[:, :, slots] = keys[:, :, keep]
        self._value_buffer[:, :, slots] = values[:, :, keep]
        self._slot_positions[slots] = new_positions[keep]
        self._seen = end
        self._keys = self._key_buffer[:, :, :self.stored]  # views of the filled slots
        self._values = self._value_buffer[:, :, :self.stored]
        return all_keys, all_values

    def _allocate(self, keys):
        batch, num_kv_heads, _, head_dim = keys.shape
        shape = (batch, num_kv_heads, self.capacity, head_dim)
        held = self._key_buffer
        if held is not None and held.shape == shape and held.dtype == keys.dtype and held.device == keys.device:
            return
        try:
            self._key_buffer, self._value_buffer = keys.new_zeros(shape), keys.new_zeros(shape)
            self._slot_positions = torch.full((self.capacity,), -1)
        except (RuntimeError, MemoryError):  # PyTorch's allocator: not enough memory for the buffers
            gib = 2 * keys.element_size() * batch * num_kv_heads * self.capacity * head_dim / 2**30
            raise ValueError(f"the ring buffers of {self.capacity:,} positions need {gib:,.1f} GiB, more than this machine "
                             "could allocate; use a smaller window") from None

    def __repr__(self):
        if self._keys is None:
            return f"RingKVCache(window={self.window}, sink_tokens={self.sink_tokens}, empty)"
        batch, num_kv_heads, _, head_dim = self._keys.shape
        return (f"RingKVCache(window={self.window}, sink_tokens={self.sink_tokens}, seen={self._seen}, "
                f"stored={self.stored}, batch={batch}, kv_heads={num_kv_heads}, head_dim={head_dim}, "
                f"dtype={self._keys.dtype}, nbytes={self.nbytes})")
