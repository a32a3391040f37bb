"""Multi-head attention in PyTorch: the course's layer, checked against nn.MultiheadAttention."""

import math

import torch
from torch import nn
from torch.nn import functional

from attn.common import convert
from attn.common.layer_checks import (
    check_attention_inputs,
    check_inputs,
    check_layer_arguments,
    check_output_finite,
    check_projected,
    check_rotary_base,
    check_weights_fit,
)
from attn.common.rope_checks import check_rope_scaling, check_rotary_options
from attn.common.validate import positive_int, require_tensor
from attn.masks import add_causal, build_keep_mask, check_keep_mask, open_empty_rows
from attn.positions import _rotate, apply_rotary
from attn.ring_cache import RingKVCache
from attn.streaming import check_sink_positions, streaming_attention
from attn.window import check_window_arguments, check_window_call, layer_keep_mask, sink_attention

# scaled_dot_product_attention shares key/value heads itself (enable_gqa) from PyTorch 2.5 on.
SDPA_SHARES_HEADS = torch.__version__ >= (2, 5)


def split_heads(x, num_heads):
    """(B, T, E) -> (B, H, T, E / H): each head sees its own slice of the features."""
    require_tensor("x", x)
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, T, E), got {tuple(x.shape)}")
    num_heads = positive_int("num_heads", num_heads)
    if x.shape[-1] % num_heads:
        raise ValueError(f"the {x.shape[-1]} features of x cannot be split into {num_heads} equal heads")
    return _split_heads(x, num_heads)


def _split_heads(x, num_heads):
    """``split_heads`` without its checks, for the layer, whose projections have these shapes by construction."""
    batch, length, embed_dim = x.shape
    return x.view(batch, length, num_heads, embed_dim // num_heads).transpose(1, 2)


def merge_heads(x):
    """(B, H, T, d) -> (B, T, H * d): the inverse of ``split_heads``."""
    require_tensor("x", x)
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, H, T, d), got {tuple(x.shape)}")
    return _merge_heads(x)


def _merge_heads(x):
    """``merge_heads`` without its checks, for the layer."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


def explicit_attention(query, key, value, keep_mask=None, dropout_p=0.0, is_causal=False):
    """softmax(Q K^T / sqrt(d)) V written out, keeping the weights.

    query (B, H, T_q, d); key, value (B, H_kv, T_k, d), where H_kv divides H and query head h uses
    key/value head h // (H / H_kv) (grouped-query attention; H_kv = H is ordinary multi-head).
    keep_mask: boolean, True = may attend, broadcastable to (B, H, T_q, T_k); is_causal adds the
    causal mask aligned to the end of the keys (see ``attn.masks.causal_keep_mask``).
    Rows with no allowed key get zero weights and a zero output. dropout_p: dropout on the weights.
    Returns output (B, H, T_q, d) and weights (B, H, T_q, T_k), after dropout as nn.MultiheadAttention returns them.
    """
    check_attention_inputs(query, key, value, dropout_p, is_causal)
    check_keep_mask(keep_mask, (*query.shape[:3], key.shape[2]), query.device)
    return _explicit_attention(query, key, value, keep_mask, dropout_p, is_causal)


def _explicit_attention(query, key, value, keep_mask, dropout_p, is_causal):
    """``explicit_attention`` without its checks, for callers that made them (the layer checks its own inputs)."""
    batch, num_heads, t_q, head_dim = query.shape
    num_kv_heads, t_k = key.shape[1], key.shape[2]
    grouped = query.reshape(batch, num_kv_heads, num_heads // num_kv_heads, t_q, head_dim)  # (B, H_kv, H / H_kv, T_q, d)
    scores = grouped @ key.unsqueeze(2).transpose(-2, -1) / math.sqrt(head_dim)  # (B, H_kv, H / H_kv, T_q, T_k)
    scores = scores.reshape(batch, num_heads, t_q, t_k)  # (B, H, T_q, T_k)
    keep_mask = add_causal(keep_mask, is_causal, t_q, t_k, query.device)
    has_any = None
    if keep_mask is not None:
        keep_mask, has_any = open_empty_rows(keep_mask)
        scores = scores.masked_fill(~keep_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if has_any is not None:
        weights = weights * has_any  # rows with nothing to attend to: zero weights
    weights = functional.dropout(weights, dropout_p, training=dropout_p > 0)
    grouped_weights = weights.reshape(batch, num_kv_heads, num_heads // num_kv_heads, t_q, t_k)
    output = grouped_weights @ value.unsqueeze(2)  # (B, H_kv, H / H_kv, T_q, d)
    return output.reshape(batch, num_heads, t_q, value.shape[-1]), weights


def fused_attention(query, key, value, keep_mask=None, dropout_p=0.0, is_causal=False):
    """The same output as ``explicit_attention`` from ``scaled_dot_product_attention``.

    PyTorch runs a fused kernel, which never stores the weights, where one accepts the call, and
    otherwise its math backend, which does (on a CPU, for example, with dropout in training mode).

    With ``is_causal``, T_q == T_k and no keep_mask, PyTorch's own causal flag is used, so the fastest
    kernels can run; with one query (a decoding step) no mask is needed, since the last position sees every key;
    in every other case the end-aligned causal mask is built and combined with keep_mask.
    """
    check_attention_inputs(query, key, value, dropout_p, is_causal, fused=True)
    check_keep_mask(keep_mask, (*query.shape[:3], key.shape[2]), query.device)
    return _fused_attention(query, key, value, keep_mask, dropout_p, is_causal)


def _fused_attention(query, key, value, keep_mask, dropout_p, is_causal):
    """``fused_attention`` without its checks, for callers that made them (the layer checks its own inputs)."""
    key, value, options = _shared_heads(query, key, value)
    options["dropout_p"] = dropout_p
    t_q, t_k = query.shape[2], key.shape[2]
    if is_causal and keep_mask is None and t_q == t_k:
        return functional.scaled_dot_product_attention(query, key, value, is_causal=True, **options)
    if is_causal and keep_mask is None and t_q == 1:  # one query after the keys (a decoding step): it sees them all
        return functional.scaled_dot_product_attention(query, key, value, **options)
    keep_mask = add_causal(keep_mask, is_causal, t_q, t_k, query.device)
    if keep_mask is None:
        return functional.scaled_dot_product_attention(query, key, value, **options)
    keep_mask, has_any = open_empty_rows(keep_mask)
    output = functional.scaled_dot_product_attention(query, key, value, attn_mask=keep_mask, **options)
    return output * has_any


def _shared_heads(query, key, value):
    """Key/value heads and kernel options for scaled_dot_product_attention when H_kv < H."""
    groups = query.shape[1] // key.shape[1]
    if groups == 1:
        return key, value, {}
    if SDPA_SHARES_HEADS:
        return key, value, {"enable_gqa": True}
    return key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1), {}


def _weights_fit(layer, args, kwargs):
    """MultiHeadAttention's forward pre-hook: ``check_weights_fit``, looked up when called, so that the GPU suite's
    unchecked timings (attn.measure.gpu.layer.without_value_checks) can replace it as they replace check_inputs."""
    check_weights_fit(layer, args, kwargs)


def _output_finite(layer, args, kwargs, output):
    """MultiHeadAttention's forward hook: ``check_output_finite`` (looked up when called, as ``_weights_fit``)."""
    check_output_finite(layer, output)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first.

    MultiHeadAttention(embed_dim E, num_heads H, bias=True, dropout=0.0, num_kv_heads=None, rotary_base=None,
    window=None, sink_tokens=0, learned_sinks=False, sink_positions='absolute', rotary_scaling=None,
    rotary_fraction=1.0):
    E must be divisible by H; each head works on d = E / H features. dropout: probability of dropping
    an attention weight, in training mode only (as nn.MultiheadAttention). num_kv_heads H_kv (default H)
    must divide H: the key and value projections make H_kv heads and each serves H / H_kv query heads
    (grouped-query attention; H_kv = 1 is multi-query attention). rotary_base: None (no positions
    inside the layer), or the base of lesson 8's rotary embedding (attn.apply_rotary), which then
    rotates every head's queries and keys by their positions; positions count from 0, continue from
    len(cache) with a cache, and the queries are aligned to the end of the keys (self-attention).
    Lesson 14: window W (default None, every key) lets the query at position p see keys
    p - W < j <= p only (causal, whatever is_causal says), plus the first sink_tokens positions;
    learned_sinks=True adds one learned logit per head to each softmax's denominator (gpt-oss),
    the parameter ``sink_logits`` (H,), and always runs the explicit path.
    Lesson 16: sink_positions='cache' (with a window) rotates every key at its place in the cache, as
    StreamingLLM does (attn.streaming): keys are cached before rotary, a sink is never far away;
    'absolute' (the default) rotates them where they stand in the text.
    Lesson 17: rotary_scaling (a dict in transformers' rope_parameters form, see attn.positions.rotary_frequencies;
    ``set_rotary_scaling`` changes it on a trained layer) and rotary_fraction (partial rotary: only the first
    d * rotary_fraction features of each head turn) are passed to attn.apply_rotary; rotary_base=None is NoPE.

    forward(query (B, T_q, E), key (B, T_new, E), value (B, T_new, E), mask=None, key_padding_mask=None,
    is_causal=False, need_weights=False, cache=None) returns output (B, T_q, E), or
    (output, weights (B, H, T_q, T_k)) with need_weights=True. T_k = T_new, plus the cached positions with a cache.

    - mask: boolean keep-mask (True = may attend) of rank 0 to 4, broadcastable to (B, H, T_q, T_k);
      3-D is (B, T_q, T_k), 2-D (T_q, T_k), 1-D (T_k,), 0-D one bool for everything.
    - key_padding_mask: boolean (B, T_k), True = real token. nn.MultiheadAttention's argument of the same
      name means the opposite (True = padding): convert theirs with ``~``.
    - is_causal: query i may attend to keys up to its own position, counted from the END of the keys
      (query i is position T_k - T_q + i), which is what decoding with a cache needs. Combined with the masks.
    - cache: an attn.KVCache; this call's keys and values (B, H_kv, T_new, d) are appended to it and
      attention runs over every cached position. One cache per layer. A windowed layer may take an
      attn.RingKVCache of its window and sinks instead (then no mask or key_padding_mask). Lesson 21: a
      QuantizedKVCache, or an EvictingKVCache (a layer without a window, no mask; the layer hands it this
      step's queries through ``cache.observe(q)`` after attending).
    A row with no allowed key gives zero weights and a zero attention output (the output projection's
    bias remains). The inputs are checked first (attn.common.layer_checks): kinds, dtypes, devices and shapes, then
    that query, key and value hold no NaN or inf (one reduction per input, a ValueError if they do).
    """

    def __init__(
        self, embed_dim, num_heads, bias=True, dropout=0.0, num_kv_heads=None,
        rotary_base=None, window=None, sink_tokens=0, learned_sinks=False, sink_positions="absolute",
        rotary_scaling=None, rotary_fraction=1.0,
    ):
        super().__init__()
        embed_dim, num_heads, dropout, num_kv_heads = check_layer_arguments(embed_dim, num_heads, bias, dropout, num_kv_heads)
        self.rotary_base = check_rotary_base(rotary_base, embed_dim // num_heads)
        self.rotary_scaling, self.rotary_fraction = check_rotary_options(  # lesson 17
            self.rotary_base, rotary_scaling, rotary_fraction, embed_dim // num_heads)
        self.window, self.sink_tokens = check_window_arguments(window, sink_tokens)  # lesson 14
        if not isinstance(learned_sinks, bool):
            raise TypeError(f"learned_sinks must be True or False, got {type(learned_sinks).__name__} {learned_sinks!r}")
        if learned_sinks and dropout:
            raise ValueError(f"learned_sinks cannot be combined with dropout={dropout}: the sink path has no dropout")
        self.sink_logits = nn.Parameter(torch.zeros(num_heads)) if learned_sinks else None
        self.sink_positions = check_sink_positions(sink_positions, self.window)  # lesson 16
        if sink_positions == "cache" and (learned_sinks or dropout):
            raise ValueError("sink_positions='cache' runs its own written-out path, without learned sinks or dropout")
        if sink_positions == "cache" and (self.rotary_scaling is not None or self.rotary_fraction != 1):
            raise ValueError("sink_positions='cache' runs its own written-out path, with the plain rotary of "
                             "rotary_base only: no rotary_scaling or rotary_fraction")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim, self.dropout = embed_dim // num_heads, dropout
        self.query_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.key_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.value_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.register_forward_pre_hook(_weights_fit, with_kwargs=True)  # need_weights: weights that fit, checked first
        self.register_forward_hook(_output_finite, with_kwargs=True)  # finite inputs that overflowed inside: a sentence

    def forward(
        self, query, key, value, mask=None, key_padding_mask=None,
        is_causal=False, need_weights=False, cache=None,
    ):
        check_inputs(self, query, key, value, is_causal, cache)
        check_window_call(self, mask, key_padding_mask, cache)
        # q: (B, H, T_q, d); k and v: (B, H_kv, T_new, d)
        q = split_heads(self.query_proj(query), self.num_heads)
        k = split_heads(self.key_proj(key), self.num_kv_heads)
        v = split_heads(self.value_proj(value), self.num_kv_heads)
        # One keep-mask broadcastable to (B, H, T_q, T_k), or None:
        keep_mask = build_keep_mask(mask, key_padding_mask, q, k, cache)
        if self.window and self.sink_positions == "cache":  # lesson 16
            return self._streaming(q, k, v, keep_mask, cache, need_weights)
        q, k = self._rotate(q, k, cache)  # rotary positions (lesson 13), if any
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, T_k, d): cached, then new
        if self.window is not None:  # lesson 14: the window's band, causal by itself
            keep_mask, is_causal = self._window(keep_mask, q, k, cache), False
        dropout_p = self.dropout if self.training else 0.0
        attention_inputs = (q, k, v, keep_mask, dropout_p, is_causal)
        if self.sink_logits is not None:  # lesson 14: learned sinks, written out
            heads, weights = self._sink_attention(*attention_inputs)
        elif need_weights:  # the explicit path, which keeps the weights
            heads, weights = _explicit_attention(*attention_inputs)
        else:  # scaled_dot_product_attention: fused where a kernel accepts it
            heads, weights = _fused_attention(*attention_inputs), None
        if hasattr(cache, "observe"):  # lesson 21: an evicting cache reads q
            cache.observe(q)
        output = self.out_proj(merge_heads(heads))  # (B, T_q, E)
        return (output, weights) if need_weights else output

    def _window(self, keep_mask, q, k, cache):
        """The keep-mask AND the window's band (with its sink tokens), for q (B, H, T_q, d) and k (B, H_kv, T_k, d).

        Also where the windowed layer checks its projections: finite, and scores that fit their dtype (a ring cache
        holds at most window + sink_tokens keys, so this reads a bounded number of them)."""
        check_projected(q, k)
        return layer_keep_mask(keep_mask, q.shape[2], k.shape[2], self.window, self.sink_tokens, cache, q.device)

    def _streaming(self, q, k, v, keep_mask, cache, need_weights):
        """Lesson 16: keys cached before rotary, each scored at its place in the cache (attn.streaming); returns
        what forward returns."""
        heads, weights = self._streaming_heads(q, k, v, keep_mask, cache)
        output = self.out_proj(merge_heads(heads))  # (B, T_q, E)
        return (output, weights) if need_weights else output

    def _streaming_heads(self, q, k, v, keep_mask, cache):
        """The heads (B, H, T_q, d) and weights of StreamingLLM's attention over the cached, un-rotated keys."""
        if self.training and self.dropout:
            raise ValueError("sink_positions='cache' has no dropout: call model.eval() first")
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, T_k, d), not rotated
        key_positions = cache.key_positions if isinstance(cache, RingKVCache) else torch.arange(k.shape[2])
        key_positions = key_positions.to(q.device)
        return streaming_attention(q, k, v, self.window, self.sink_tokens, self.rotary_base,
                                   key_positions[-q.shape[2]:], key_positions, keep_mask)

    def _sink_attention(self, q, k, v, keep_mask, dropout_p, is_causal):
        """Attention with a learned sink logit per head in every softmax's denominator (lesson 14)."""
        keep_mask = add_causal(keep_mask, is_causal, q.shape[2], k.shape[2], q.device)
        return sink_attention(q, k, v, self.sink_logits, keep_mask)

    def _rotate(self, q, k, cache):
        """Rotary positions (lesson 8) for q (B, H, T_q, d) and k (B, H_kv, T_new, d), unchanged without a
        rotary_base: the new keys sit at positions len(cache), len(cache) + 1, ...; the queries at the last T_q."""
        if self.rotary_base is None:
            return q, k
        cached = 0 if cache is None else len(cache)
        key_positions = torch.arange(cached, cached + k.shape[2], device=k.device)  # (T_new,)
        query_positions = key_positions[k.shape[2] - q.shape[2]:] if q.shape[2] <= k.shape[2] else (
            torch.arange(q.shape[2], device=q.device) + cached)  # (T_q,)
        turn = {"base": self.rotary_base, "scaling": self.rotary_scaling, "rotary_fraction": self.rotary_fraction}
        return apply_rotary(q, query_positions, **turn), apply_rotary(k, key_positions, **turn)

    def _runs_plain(self):
        """True when ``_self_attend`` computes what forward computes: no window, learned sinks or dropout in use,
        and no hook but the layer's own two (_self_attend is not a call of the module, so hooks would not run; the
        model checks its output once at its door instead of each layer's)."""
        hooks = list(self._forward_pre_hooks.values()) + list(self._forward_hooks.values())
        dropping = self.training and self.dropout > 0
        return self.window is None and self.sink_logits is None and not dropping and hooks == [_weights_fit, _output_finite]

    def _self_attend(self, x, angles, cache):
        """forward(x, x, x, is_causal=True, cache=cache) for a model that checked its input at its door (lesson 19):
        the same arithmetic without forward's checks, for a layer that ``_runs_plain``. x (B, T, E) -> (B, T, E).

        angles: the rotary angles of this call's T positions (attn.positions.rotary_angles), made once by the model
        for all its layers, or None without rotary positions. cache: an attn.KVCache or None.
        """
        q = _split_heads(self.query_proj(x), self.num_heads)  # (B, H, T, d)
        k = _split_heads(self.key_proj(x), self.num_kv_heads)  # (B, H_kv, T, d)
        v = _split_heads(self.value_proj(x), self.num_kv_heads)
        if angles is not None:
            q, k = _rotate(q, angles), _rotate(k, angles)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, T_k, d): cached, then new
        heads = _fused_attention(q, k, v, None, 0.0, True)  # (B, H, T, d)
        if hasattr(cache, "observe"):  # lesson 21: an evicting cache reads q
            cache.observe(q)
        return self.out_proj(_merge_heads(heads))  # (B, T, E)

    def set_rotary_scaling(self, scaling):
        """Read a trained layer at another length (lesson 17): the rotary scaling from now on (None: none); returns self."""
        if self.rotary_base is None:
            raise ValueError("this layer has no rotary positions (rotary_base=None) to scale")
        if self.sink_positions == "cache" and scaling is not None:
            raise ValueError("sink_positions='cache' runs its own written-out path, without rotary_scaling")
        self.rotary_scaling = check_rope_scaling(scaling, self.rotary_base)
        return self

    @classmethod
    def from_torch(cls, module):
        """A layer with the weights, dropout and training mode of an ``nn.MultiheadAttention(batch_first=True)``."""
        return convert.copy_attention(module, cls(**convert.attention_arguments(module)))
