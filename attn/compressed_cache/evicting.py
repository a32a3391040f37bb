"""A KV cache that keeps at most ``budget`` entries per key/value head (lesson 21), evicting by a rule's score.

After each step the layer calls ``observe(queries)``: the cache computes the attention those queries gave its
keys (the weights the layer's softmax had), updates its rule's scores (attn.compressed_cache.scores) and drops
the lowest-scoring entries until ``budget`` remain, keeping its sink tokens and its last ``window`` positions.
Each key/value head chooses for itself (TOVA's heads all choose alike), so every head holds exactly ``budget``
entries, each at its own position; entries stay in time order. A prompt longer than the budget is attended in
full, then cut down at once (as SnapKV and ``kvpress`` compress a prompt); every later step adds one entry and
evicts one.

With ``bits`` the entries are also stored as codes, one scale (and zero point) per group of ``group_size``
channels of each entry: evict, then quantize what is kept. (KIVI's per-channel key groups span positions, and an
evicting cache removes positions one at a time, so the combined cache groups keys per position.)
"""

import numbers

import torch

from attn.common.validate import require_choice, require_computable, require_floating, type_name, whole_number
from attn.compressed_cache.base import CompressedCache
from attn.compressed_cache.quantize import _concatenate, _select, check_bits, check_scale_dtype, dequantize, quantize
from attn.compressed_cache.scores import NEEDS_ATTENTION, RULES, _attention_rows, _keep_indices, _scores

MAX_ENTRIES = 2**40


class EvictingKVCache(CompressedCache):
    """EvictingKVCache(budget=64, rule='h2o', sink_tokens=4, window=16, *, kernel_size=5, bits=None, group_size=None,
    symmetric=False, scale_dtype=None).

    budget: entries kept per key/value head, sinks and window included (at least sink_tokens + window, and 1);
    rule: 'h2o', 'snapkv', 'tova', 'knorm' or 'streaming' (attn.compressed_cache.scores); sink_tokens: the first
    positions, always kept; window: the most recent positions, always kept (SnapKV's observation window too, so at
    least 1 for it); kernel_size: SnapKV's pooling width (odd). bits, group_size, symmetric, scale_dtype: store the
    kept entries as codes (attn.compressed_cache.quantize, groups of channels of each entry). For ONE layer without
    a window of its own and without extra masks.

    append(keys, values) (B, H_kv, T_new, d) returns the held entries then the new ones, (B, H_kv, stored + T_new, d)
    each; observe(queries (B, H, T_q, d)) then scores and evicts. ``len(cache)``: positions seen; ``stored``:
    entries held per head; ``positions`` (B, H_kv, stored): where each came from; ``nbytes``: keys and values held
    (codes, scales, zero points); ``bookkeeping_nbytes``: positions and scores; ``pages_held(page_size)``.
    """

    evicts = True  # the layer refuses masks and windows with a cache that chooses its own keys

    def __init__(self, budget=64, rule="h2o", sink_tokens=4, window=16, *, kernel_size=5, bits=None, group_size=None,
                 symmetric=False, scale_dtype=None):
        super().__init__()
        self.rule = require_choice("rule", rule, RULES)
        self.budget = whole_number("budget", budget, 1, MAX_ENTRIES)
        self.sink_tokens = whole_number("sink_tokens", sink_tokens, 0, MAX_ENTRIES)
        self.window = whole_number("window", window, 0, MAX_ENTRIES)
        if self.sink_tokens + self.window > self.budget:
            raise ValueError(f"a budget of {self.budget} entries cannot hold {self.sink_tokens} sink tokens and a window of "
                             f"{self.window} positions, which are always kept; raise the budget or lower them")
        if self.rule == "snapkv" and self.window < 1:
            raise ValueError("rule 'snapkv' scores by the attention of its observation window, the last `window` "
                             "queries: window must be at least 1")
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, numbers.Integral) or kernel_size < 1 \
                or kernel_size % 2 == 0 or kernel_size > MAX_ENTRIES:
            raise ValueError(f"kernel_size must be an odd whole number >= 1 (SnapKV's centred pooling), got {kernel_size!r:.40}")
        self.kernel_size = int(kernel_size)
        self.bits, self.group_size = _check_codes(bits, group_size)
        if not isinstance(symmetric, bool):
            raise TypeError(f"symmetric must be True or False, got {type_name(symmetric)} {symmetric!r:.40}")
        self.symmetric = symmetric
        self.scale_dtype = None if scale_dtype is None else check_scale_dtype(scale_dtype, None)
        self.capacity = self.budget  # entries held between steps (what need_weights' size check reads)
        self._clear()

    def _clear(self):
        self._entries = None  # (keys, values): tensors (B, H_kv, S, d), or QuantizedTensors with bits
        self.positions = None  # (B, H_kv, S) int64
        self._scores = None  # (B, H_kv, S): the rule's scores (H2O's accumulated attention)
        self._rows = None  # snapkv: (B, H_kv, R, S) the observation window's rows, averaged over each group
        self._attended = None  # the keys the last append returned, until observe reads them

    @property
    def stored(self):
        """Entries held per key/value head (at most ``budget`` after each observe)."""
        return 0 if self.positions is None else self.positions.shape[2]

    @property
    def nbytes(self):
        """Bytes of the keys and values held: tensors, or codes with their scales and zero points."""
        return 0 if self._entries is None else self._entries[0].nbytes + self._entries[1].nbytes

    @property
    def bookkeeping_nbytes(self):
        """Bytes the choosing costs besides the keys and values: positions, scores and SnapKV's rows."""
        tensors = (self.positions, self._scores, self._rows)
        return sum(tensor.nbytes for tensor in tensors if tensor is not None)

    def reset(self):
        """Forget every position: a new sequence starts."""
        super().reset()
        self._clear()

    def append(self, keys, values):
        """Return held then new keys and values, each (B, H_kv, stored + T_new, d); then hold the new ones.

        If the last append was not followed by observe (a caller other than the layer), the entries over the budget
        are evicted first by the scores known, the unobserved ones counting as never attended."""
        self._check_new(keys, values)
        if self._layout is None and self.bits is not None and keys.shape[-1] % self.group_size:
            raise ValueError(f"group_size={self.group_size} does not divide the head size d={keys.shape[-1]}: each entry's "
                             "channels are grouped; choose a group size that divides it")
        state = self._evicted(self._state()) if self.stored > self.budget else self._state()
        held = self._read_entries(state["entries"])
        returned = (keys, values) if held is None else (torch.cat((held[0], keys), dim=2), torch.cat((held[1], values), dim=2))
        state = self._with_new(state, keys, values)
        if self.rule not in NEEDS_ATTENTION:  # scores known without queries: evict now
            state = self._evicted(state, self._seen + keys.shape[2])
        if self._layout is None:
            self._record_layout(keys)
        self._set(state)
        self._seen += keys.shape[2]
        self._attended = returned[0] if self.rule in NEEDS_ATTENTION else None
        return returned

    def observe(self, queries):
        """Score the held entries by the attention of ``queries`` (B, H, T_q, d), this step's (rotated) queries, and
        evict down to the budget. The layer calls it after attending; rules that read no attention ignore it."""
        require_computable("queries", queries)
        require_floating("queries", queries)
        if self.rule not in NEEDS_ATTENTION:
            return
        self._check_queries(queries)
        count = queries.shape[2]
        rows = {"h2o": count, "tova": 1, "snapkv": min(self.window, count)}[self.rule]
        weights = _attention_rows(queries, self._attended, rows)  # (B, H, rows, S)
        state = self._state()
        if self.rule == "h2o":
            state["scores"] = state["scores"] + _scores("h2o", weights, self._attended, state["positions"])
        elif self.rule == "tova":
            state["scores"] = _scores("tova", weights, self._attended, state["positions"])
        else:  # the window's last rows, each averaged over its group of query heads
            num_kv_heads = self._layout[1]
            new_rows = weights.unflatten(1, (num_kv_heads, -1)).mean(dim=2)  # (B, H_kv, rows, S)
            state["rows"] = torch.cat((state["rows"], new_rows), dim=2)[:, :, -self.window:]
            state["scores"] = _scores("snapkv", state["rows"], self._attended, state["positions"], self.window,
                                      self.kernel_size)
        self._set(self._evicted(state))
        self._attended = None

    def pages_held(self, page_size):
        """Pages of ``page_size`` positions (lesson 19's) each sequence still needs, (B,): a page is freed only when
        every head has evicted every position in it."""
        page_size = whole_number("page_size", page_size, 1, MAX_ENTRIES)
        if self.positions is None:
            return torch.zeros(0 if self._layout is None else self._layout[0], dtype=torch.long)
        pages = self.positions // page_size  # (B, H_kv, S)
        return torch.tensor([torch.unique(row).numel() for row in pages], dtype=torch.long)

    # State: computed whole, then set at once (a refused call changes nothing) -----------------------------------------

    def _state(self):
        return {"entries": self._entries, "positions": self.positions, "scores": self._scores, "rows": self._rows}

    def _set(self, state):
        self._entries, self.positions = state["entries"], state["positions"]
        self._scores, self._rows = state["scores"], state["rows"]

    def _with_new(self, state, keys, values):
        """The state with the new entries (B, H_kv, T_new, d) added after the held ones."""
        batch, num_kv_heads, count, _ = keys.shape
        start = self._seen
        positions = torch.arange(start, start + count, device=keys.device).expand(batch, num_kv_heads, count)
        compute = torch.promote_types(keys.dtype, torch.float32)
        if self.rule in NEEDS_ATTENTION:
            scores = torch.zeros(batch, num_kv_heads, count, dtype=compute, device=keys.device)
        else:
            scores = _scores(self.rule, None, keys, positions)
        new = (self._stored_form(keys), self._stored_form(values))
        if state["entries"] is None:
            entries, rows = new, None
            if self.rule == "snapkv":
                rows = torch.zeros(batch, num_kv_heads, 0, count, dtype=compute, device=keys.device)
            return {"entries": entries, "positions": positions.clone(), "scores": scores, "rows": rows}
        join = (lambda a, b: _concatenate(a, b, 2)) if self.bits is not None else (lambda a, b: torch.cat((a, b), dim=2))
        entries = (join(state["entries"][0], new[0]), join(state["entries"][1], new[1]))
        rows = state["rows"]
        if rows is not None:  # the new keys were not there for the earlier queries: weight 0
            rows = torch.nn.functional.pad(rows, (0, count))
        return {"entries": entries, "positions": torch.cat((state["positions"], positions), dim=2),
                "scores": torch.cat((state["scores"], scores), dim=2), "rows": rows}

    def _evicted(self, state, seen=None):
        """The state cut down to ``budget`` entries per head (unchanged if it holds no more)."""
        if state["positions"].shape[2] <= self.budget:
            return state
        seen = self._seen if seen is None else seen
        index = _keep_indices(state["scores"], state["positions"], self.budget, self.sink_tokens, self.window, seen)
        take = (lambda part: _select(part, index, 2)) if self.bits is not None else (lambda part: _gather(part, index))
        rows = state["rows"]
        if rows is not None:
            rows = rows.gather(3, index[:, :, None].expand(-1, -1, rows.shape[2], -1))
        return {"entries": (take(state["entries"][0]), take(state["entries"][1])),
                "positions": state["positions"].gather(2, index), "scores": state["scores"].gather(2, index), "rows": rows}

    def _stored_form(self, tensor):
        if self.bits is None:
            return tensor.clone()  # a copy: later changes to the caller's tensor stay out
        return quantize(tensor, self.bits, self.group_size, axis=3, symmetric=self.symmetric, scale_dtype=self.scale_dtype)

    def _read_entries(self, entries):
        if entries is None:
            return None
        return entries if self.bits is None else (dequantize(entries[0]), dequantize(entries[1]))

    def _read(self):
        return self._read_entries(self._entries)

    def _check_queries(self, queries):
        if self._attended is None:
            raise ValueError("observe(queries) scores the keys the last append returned: call append first, then observe "
                             "once (the layer does both)")
        batch, num_kv_heads, head_dim, dtype, device = self._layout
        if queries.dim() != 4 or queries.shape[0] != batch or queries.shape[-1] != head_dim or queries.shape[1] == 0 \
                or queries.shape[1] % num_kv_heads or not 1 <= queries.shape[2] <= self._attended.shape[2]:
            raise ValueError(f"queries must have shape (B={batch}, H, T_q, d={head_dim}) with H a multiple of the "
                             f"{num_kv_heads} key/value heads and 1 <= T_q <= {self._attended.shape[2]}, got "
                             f"{tuple(queries.shape)}")
        if queries.dtype != dtype or queries.device != device:
            raise TypeError(f"queries must be {dtype} on {device}, as the keys are, got {queries.dtype} on {queries.device}")
        if not bool(torch.isfinite(queries).all()):
            raise ValueError("queries contain NaN or inf; every attention weight, and so every score, would be NaN")

    def __repr__(self):
        codes = "" if self.bits is None else f", bits={self.bits!r}, group_size={self.group_size}"
        settings = f"budget={self.budget}, rule={self.rule!r}, sink_tokens={self.sink_tokens}, window={self.window}{codes}"
        if self.positions is None:
            return f"EvictingKVCache({settings}, empty)"
        return f"EvictingKVCache({settings}, seen={len(self)}, stored={self.stored}, nbytes={self.nbytes})"


def _gather(tensor, index):
    """Entries ``index`` (B, H_kv, K) of ``tensor`` (B, H_kv, S, d)."""
    return tensor.gather(2, index[..., None].expand(-1, -1, -1, tensor.shape[-1]))


def _check_codes(bits, group_size):
    if bits is None:
        if group_size is not None:
            raise ValueError(f"group_size={group_size!r:.40} is for codes; give bits too, or leave group_size None")
        return None, None
    bits = check_bits(bits)
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise TypeError(f"with bits={bits!r}, group_size must be a whole number of channels, got {type_name(group_size)} "
                        f"{group_size!r:.40}")
    if not 1 <= group_size <= MAX_ENTRIES:
        raise ValueError(f"group_size must be at least 1 channel, got {group_size}")
    return bits, int(group_size)

