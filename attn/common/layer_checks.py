"""Each layer's arguments checked before any arithmetic: the attention layer, the block, rotary positions, tiled
attention and the recurrences of lesson 15. Built from the generic checks in ``attn.common.validate``."""

import math
import numbers

import torch

from attn.common.sizes import check_allocation
from attn.common.validate import (
    has_only_finite,
    positive_int,
    probability,
    require_computable,
    require_finite,
    require_floating,
    require_like,
    require_tensor,
    type_name,
)


def check_layer_arguments(embed_dim, num_heads, bias, dropout, num_kv_heads):
    """The constructor arguments of MultiHeadAttention; returns (embed_dim, num_heads, dropout, num_kv_heads)."""
    embed_dim, num_heads = positive_int("embed_dim", embed_dim), positive_int("num_heads", num_heads)
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be a positive multiple of num_heads={num_heads}")
    if not isinstance(bias, bool):
        raise TypeError(f"bias must be True or False, got {type_name(bias)} {bias!r}")
    num_kv_heads = num_heads if num_kv_heads is None else positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}: "
            "each key/value head serves a whole group of query heads"
        )
    head_dim = embed_dim // num_heads
    weights = 2 * embed_dim * (embed_dim + num_kv_heads * head_dim + 2)  # four projections and their biases
    check_parameters(f"MultiHeadAttention(embed_dim={embed_dim})", weights)
    return embed_dim, num_heads, probability("dropout", dropout), num_kv_heads


def check_parameters(what, count):
    """ValueError, before anything is built, if ``count`` parameters in the default dtype cannot fit in memory."""
    check_allocation(f"{what}, with {count:,} parameters,", count * torch.get_default_dtype().itemsize)


def check_rotary_base(rotary_base, head_dim):
    """None, or a finite number > 1 to use as the rotary base; head_dim must then be even (pairs rotate)."""
    if rotary_base is None:
        return None
    if isinstance(rotary_base, bool) or not isinstance(rotary_base, numbers.Real):
        raise TypeError(
            f"rotary_base must be None or a number > 1 (10000.0 is usual), got {type_name(rotary_base)} {rotary_base!r}")
    if not (math.isfinite(rotary_base) and rotary_base > 1):
        raise ValueError(f"rotary_base must be a finite number > 1 (10000.0 is usual), got {rotary_base!r}")
    if head_dim % 2:
        raise ValueError(f"rotary positions turn features in pairs, so the head size must be even, got {head_dim}")
    return float(rotary_base)


def check_sequence(name, tensor, embed_dim, weight):
    """``tensor`` must be a floating-point (B, T, embed_dim) torch.Tensor with ``weight``'s dtype and device."""
    require_tensor(name, tensor)
    require_floating(name, tensor)
    if tensor.dim() != 3 or tensor.shape[-1] != embed_dim:
        raise ValueError(f"{name} must have shape (B, T, {embed_dim}), got {tuple(tensor.shape)}")
    require_like(name, tensor, weight)


def check_layer_input(layer, x):
    """The input of a layer built on a MultiHeadAttention ``layer``: x (B, T, E) floating-point, with the layer's
    dtype and device, and finite."""
    check_sequence("x", x, layer.embed_dim, layer.query_proj.weight)
    require_finite("x", x)


def check_features(name, tensor, weight):
    """``tensor`` must be a floating-point (..., F) torch.Tensor with ``weight``'s dtype and device, where F is the
    size of ``weight``'s last axis (the features a norm or a linear layer reads)."""
    require_computable(name, tensor)
    require_floating(name, tensor)
    features = weight.shape[-1]
    if tensor.dim() == 0 or tensor.shape[-1] != features:
        raise ValueError(f"{name} must have shape (..., {features}), {features} features on its last axis, "
                         f"got {tuple(tensor.shape)}")
    require_like(name, tensor, weight)


def check_block_input(block, x):
    """The input of TransformerBlock.forward: (B, T, E), the block's dtype and device, finite, and small enough
    that the first LayerNorm does not overflow on it (that costs one more LayerNorm, without gradients)."""
    check_sequence("x", x, block.attention.embed_dim, block.norm1.weight)
    require_finite("x", x)
    with torch.no_grad():
        normed = block.norm1(x)  # (B, T, E)
    if not torch.isfinite(normed).all():
        largest = x.abs().max().item()
        raise ValueError(
            f"the block's input x is finite, but its first LayerNorm (norm1) overflowed on it: the largest |x| is "
            f"{largest:.3g}, too large for {x.dtype} once squared; scale x down, or use float64"
        )


def check_inputs(layer, query, key, value, is_causal, cache):
    """Everything about one call of MultiHeadAttention.forward except the masks (see attn.masks).

    Checks kinds, dtypes, devices and shapes first, then that query, key and value are finite:
    that costs one reduction per distinct input (self-attention passes one tensor three times and
    pays once), and on a GPU a wait for the result.
    """
    weight = layer.query_proj.weight
    inputs = (("query", query), ("key", key), ("value", value))
    for name, tensor in inputs:
        check_sequence(name, tensor, layer.embed_dim, weight)
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            f"batch sizes differ: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if key.shape[1] != value.shape[1]:
        raise ValueError(f"key and value lengths differ: key {tuple(key.shape)}, value {tuple(value.shape)}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)} {is_causal!r}")
    if cache is not None:
        # Known by what it does, not by its class: attn.common sits under the layers and imports none of them.
        if not all(callable(getattr(cache, method, None)) for method in ("append", "check_fits")):
            raise TypeError(f"cache must be an attn.KVCache or None, got {type_name(cache)}")
        cache.check_fits(query.shape[0], layer.num_kv_heads, layer.head_dim, weight.dtype, weight.device)
    seen = []
    for name, tensor in inputs:
        if not any(tensor is earlier for earlier in seen):
            require_finite(name, tensor)
            seen.append(tensor)


FORWARD_ARGUMENTS = ("query", "key", "value", "mask", "key_padding_mask", "is_causal", "need_weights", "cache")


def check_weights_fit(layer, args, kwargs):
    """MultiHeadAttention's forward pre-hook: with need_weights=True, the weights (B, H, T_q, T_k) it returns must fit
    in memory, refused before any work (a cache's keys count in T_k). Everything else is checked by forward."""
    given = dict(zip(FORWARD_ARGUMENTS, args, strict=False)) | kwargs
    query, key, cache = given.get("query"), given.get("key"), given.get("cache")
    if given.get("need_weights") is not True or not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (query, key)):
        return
    try:  # a ring cache holds at most its capacity; anything that is not a cache is refused later by check_inputs
        cached = min(len(cache), getattr(cache, "capacity", len(cache))) if cache is not None else 0
    except TypeError:
        cached = 0
    shape = (query.shape[0], layer.num_heads, query.shape[1], cached + key.shape[1])
    check_allocation(f"the attention weights (B, H, T_q, T_k) = {shape} that need_weights=True returns",
                     math.prod(shape) * layer.query_proj.weight.dtype.itemsize, query.device,
                     advice="call with need_weights=False (the fused path keeps no weights), or with shorter sequences")


def check_attention_shapes(query, key, value):
    """Shapes for explicit_attention and fused_attention: query (B, H, T_q, d), key and value (B, H_kv, T_k, d)."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_computable(name, tensor)
        require_floating(name, tensor)
        if tensor.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, T, d), got {tuple(tensor.shape)}")
    batch, num_heads, _, head_dim = query.shape
    if key.shape != value.shape or key.shape[0] != batch or key.shape[-1] != head_dim:
        raise ValueError(
            f"key and value must both be (B, H_kv, T_k, d) = ({batch}, H_kv, T_k, {head_dim}) for query "
            f"{tuple(query.shape)}, got key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if key.shape[1] == 0 or num_heads % key.shape[1]:
        raise ValueError(f"key/value heads ({key.shape[1]}) must divide query heads ({num_heads})")
    if head_dim == 0:
        raise ValueError(f"query and key need at least one feature (d >= 1) to score with, got shape {tuple(query.shape)}")
    for name, tensor in (("key", key), ("value", value)):
        if tensor.dtype != query.dtype or tensor.device != query.device:
            raise TypeError(f"{name} is {tensor.dtype} on {tensor.device} but query is {query.dtype} on {query.device}; "
                            f"convert it with {name}.to(query)")


def score_dtype(query, fused):
    """The dtype the scores are computed in: the query's for the explicit path; at least float32 for the fused kernels,
    which accumulate float16 and bfloat16 products in float32."""
    return torch.promote_types(query.dtype, torch.float32) if fused else query.dtype


def check_attention_inputs(query, key, value, dropout_p, is_causal, fused=False):
    """All of explicit_attention's and fused_attention's arguments but the mask: shapes, a bool is_causal,
    a dropout probability, and finite query, key and value (one reduction each)."""
    check_attention_shapes(query, key, value)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)} {is_causal!r:.60}")
    probability("dropout_p", dropout_p)
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_finite(name, tensor)
    check_scores_fit(query, key, score_dtype(query, fused), "the dtype they are computed in")


def check_projected(q, k):
    """A windowed layer's projected q (B, H, T_q, d) and keys k (B, H_kv, T_k, d), before it attends: finite (finite
    inputs can overflow in a projection) and scores that fit their dtype (the explicit path computes them in it)."""
    for name, tensor in (("queries", q), ("keys", k)):
        if not has_only_finite(tensor):
            raise ValueError(
                f"the layer's projected {name} overflowed {tensor.dtype}: the inputs are finite but too large for the "
                "projection; scale them down (or use float64)"
            )
    check_scores_fit(q, k, q.dtype, "the dtype the layer computes them in")


def check_output_finite(layer, output):
    """A layer's output (or (output, weights)) after its checked, finite inputs: finite, else a sentence (one reduction
    over the output). Finite inputs can overflow inside: x of 1e30 gives scores of 1e60, and softmax over inf NaN."""
    tensor = output[0] if isinstance(output, tuple) else output
    if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta" and not has_only_finite(tensor):
        raise ValueError(f"the inputs are finite, but {type(layer).__name__} overflowed {tensor.dtype} on them (a "
                         "projection, or the scores Q K^T, passed its largest number); scale the inputs down, or use "
                         "float64")


MAX_MLP_BYTES = 2**36  # 64 GiB: a TransformerBlock whose MLP weights would need more is surely a typo


def check_block_arguments(embed_dim, mlp_ratio, activation):
    """TransformerBlock's own arguments; returns the MLP's hidden width, mlp_ratio * embed_dim."""
    if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, numbers.Real):
        raise TypeError(f"mlp_ratio must be a positive number, got {type_name(mlp_ratio)} {mlp_ratio!r}")
    hidden = mlp_ratio * embed_dim
    if not (math.isfinite(hidden) and hidden >= 1 and abs(hidden - round(hidden)) < 1e-6):
        raise ValueError(f"mlp_ratio * embed_dim must be a positive whole number of features, got {mlp_ratio} * {embed_dim}")
    weight_bytes = 2 * round(hidden) * embed_dim * torch.get_default_dtype().itemsize  # the MLP's two weight matrices
    if weight_bytes > MAX_MLP_BYTES:
        raise ValueError(
            f"mlp_ratio={mlp_ratio} gives an MLP of {round(hidden):,} hidden features, whose two weight matrices would need "
            f"{weight_bytes / 2**30:,.0f} GiB; the usual mlp_ratio is 4"
        )
    if not isinstance(activation, str):
        raise TypeError(f"activation must be the string 'gelu' or 'relu', got {type_name(activation)}")
    if activation not in ("gelu", "relu"):
        raise ValueError(f"activation must be 'gelu' or 'relu', got {activation!r}")
    return round(hidden)


def check_rotary_arguments(x, positions, base):
    """The arguments of attn.apply_rotary: x (..., T, d) with d even, positions (T,) or broadcastable, base > 0."""
    require_tensor("x", x)
    require_floating("x", x)
    if x.dim() < 2 or x.shape[-1] == 0 or x.shape[-1] % 2:
        raise ValueError(f"x must have shape (..., T, d) with d even (features rotate in pairs), got {tuple(x.shape)}")
    require_finite("x", x, "rotating it would carry it into every score it enters")
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a positive number, got {type_name(base)} {base!r}")
    if not (math.isfinite(base) and base > 0):
        raise ValueError(f"base must be a positive finite number, got {base!r}")
    if positions is None:
        return
    require_tensor("positions", positions)
    if positions.dtype == torch.bool or positions.dtype.is_complex:
        raise TypeError(f"positions must hold integers or real numbers, got {positions.dtype}")
    if positions.device != x.device:
        raise ValueError(f"positions is on device {positions.device} but x is on {x.device}; move it with positions.to(x.device)")
    leading = tuple(x.shape[:-1])  # (..., T)
    try:
        fits = positions.dim() >= 1 and positions.shape[-1] == leading[-1]
        fits = fits and torch.broadcast_shapes(positions.shape, leading) == leading
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"positions of shape {tuple(positions.shape)} must be (T,) or broadcast to x.shape[:-1] = {leading}")
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError("positions contains NaN or inf")


FLASH_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_flash_inputs(query, key, value, is_causal, block_q, block_k):
    """The arguments of lesson 12's tiled attention; returns (block_q, block_k) as ints.

    query (B, H, T_q, d), key and value (B, H, T_k, d): one dtype and device, floating point, finite;
    T_q, T_k and d at least 1, and no score Q K^T / sqrt(d) large enough to overflow the float32 (or float64)
    the tiles are computed in. Blocks are positive ints (a block larger than T is allowed: one tile).
    """
    check_flash_tensors(query, key, value)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {type_name(is_causal)} {is_causal!r}")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_finite(name, tensor)
    check_scores_fit(query, key, torch.promote_types(query.dtype, torch.float32))
    return positive_int("block_q", block_q), positive_int("block_k", block_k)


def check_flash_tensors(query, key, value):
    """What tiled attention needs of its tensors without reading their numbers: kinds, dtypes, shapes, a real device.

    query (B, H, T_q, d), key and value (B, H, T_k, d), one floating dtype and one device, no size 0.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_tensor(name, tensor)
        require_floating(name, tensor)
        if tensor.dtype not in FLASH_DTYPES:
            raise TypeError(f"{name} is {tensor.dtype}; tiled attention takes float16, bfloat16, float32 or float64")
        if tensor.dim() != 4 or 0 in tensor.shape:
            raise ValueError(f"{name} must have shape (B, H, T, d) with no size 0, got {tuple(tensor.shape)}")
    if key.shape != value.shape or key.shape[:2] != query.shape[:2] or key.shape[-1] != query.shape[-1]:
        raise ValueError(
            f"query (B, H, T_q, d) and key, value (B, H, T_k, d) must agree in B, H and d: query "
            f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    for name, tensor in (("key", key), ("value", value)):
        if tensor.dtype != query.dtype or tensor.device != query.device:
            raise TypeError(
                f"{name} is {tensor.dtype} on {tensor.device} but query is {query.dtype} on {query.device}; "
                f"convert it with {name}.to(query)"
            )
    if query.device.type == "meta":
        raise ValueError("query, key and value are on the meta device, which holds shapes but no numbers to attend over")


def largest_magnitude(tensor):
    """max |tensor| as a Python float, by one reduction that makes no copy of ``tensor`` (0.0 for an empty tensor)."""
    if tensor.numel() == 0:
        return 0.0
    smallest, largest = torch.aminmax(tensor)
    return max(-smallest.item(), largest.item())


def check_scores_fit(query, key, compute_dtype, where="which the tiles are computed in"):
    """ValueError if finite query and key (..., T, d) could give a score Q K^T / sqrt(d) beyond ``compute_dtype``.

    A bound, not the scores themselves (which a tiled kernel never holds at once): each score is at most
    sqrt(d) max|q| max|k| in size, since a dot product of d terms is at most d max|q| max|k|.
    """
    head_dim = query.shape[-1]
    bound = math.sqrt(head_dim) * largest_magnitude(query) * largest_magnitude(key)
    limit = torch.finfo(compute_dtype).max
    if not bound <= limit:  # also catches a bound that is itself inf
        raise ValueError(
            f"the scores Q K^T / sqrt(d) could overflow {compute_dtype}, {where}: the largest "
            f"|query| is {largest_magnitude(query):.3g} and |key| {largest_magnitude(key):.3g}, so a score can reach "
            f"{bound:.3g}, beyond {limit:.3g}; scale the query and key down (or use float64)"
        )


def check_rotary_angles(angles, base):
    """ValueError if the rotation angles (..., T, d / 2) overflowed: a base so small that base^(-2i / d) is inf."""
    if not torch.isfinite(angles).all():
        raise ValueError(
            f"base={base!r} makes the rotation angles overflow {angles.dtype} (the frequencies base^(-2i / d) or the "
            "angles position * frequency reach inf); use a base above 1, such as the usual 10000"
        )


def _check_rates(name, rates, batch_heads_length, low, high, meaning):
    """One (B, H, T) tensor of per-token rates, beta or alpha: a tensor, the queries' dtype, inside [low, high]."""
    require_tensor(name, rates)
    require_floating(name, rates)
    if tuple(rates.shape) != batch_heads_length:
        raise ValueError(
            f"{name} must have shape (B, H, T) = {batch_heads_length}, one number per token, got {tuple(rates.shape)}"
        )
    require_finite(name, rates, "the memory it scales would hold NaN from then on")
    if rates.numel() and (rates.min() < low or rates.max() > high):
        raise ValueError(
            f"{name} must lie in [{low}, {high}] ({meaning}), "
            f"got values from {rates.min().item():.3g} to {rates.max().item():.3g}"
        )


def check_recurrence_inputs(q, k, v, beta=None, alpha=None):
    """The inputs of attn.linear's recurrences: q, k (B, H, T, d_k), v (B, H, T, d_v), beta and alpha (B, H, T).

    All floating point of one dtype and device, finite, T >= 1; beta in [0, 2] (beyond 2 a write overshoots
    and the memory grows without bound), alpha in [0, 1] (a decay).
    """
    named = [("q", q), ("k", k), ("v", v)] + [(name, t) for name, t in (("beta", beta), ("alpha", alpha)) if t is not None]
    for name, tensor in named:
        require_tensor(name, tensor)
        require_floating(name, tensor)
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() != 4 or 0 in tensor.shape:
            raise ValueError(f"{name} must have shape (B, H, T, d) with no size 0, got {tuple(tensor.shape)}")
    if q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"q and k must both be (B, H, T, d_k) and v (B, H, T, d_v) with the same B, H and T: got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    for name, tensor in named[1:]:
        if tensor.dtype != q.dtype or tensor.device != q.device:
            raise TypeError(
                f"{name} is {tensor.dtype} on {tensor.device} but q is {q.dtype} on {q.device}; convert it with {name}.to(q)"
            )
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        require_finite(name, tensor, "the memory it is written into would carry it to every later output")
    if beta is not None:
        _check_rates("beta", beta, tuple(q.shape[:3]), 0, 2, "the strength of each write")
    if alpha is not None:
        _check_rates("alpha", alpha, tuple(q.shape[:3]), 0, 1, "how much of the memory each token keeps")


def check_index_scores(index_scores):
    """``index_scores`` (..., T_q, T_k): a dense floating-point tensor with real numbers, T_q <= T_k, no NaN and
    no +inf (-inf is allowed: a key the scorer rules out, such as padding)."""
    if not isinstance(index_scores, torch.Tensor):
        raise TypeError(f"index_scores must be a torch.Tensor of scores (..., T_q, T_k), got {type_name(index_scores)}")
    if index_scores.layout != torch.strided:
        raise TypeError(f"index_scores has layout {index_scores.layout}; convert it with index_scores.to_dense()")
    if index_scores.device.type == "meta":
        raise ValueError("index_scores is on the meta device, which holds shapes but no scores to choose from")
    if not index_scores.is_floating_point():
        raise TypeError(f"index_scores must hold floating-point scores, got {index_scores.dtype}; convert it with .float()")
    if index_scores.dim() < 2:
        raise ValueError(f"index_scores must have shape (..., T_q, T_k), at least 2 axes, got {tuple(index_scores.shape)}")
    t_q, t_k = index_scores.shape[-2:]
    if t_q > t_k:
        raise ValueError(f"index_scores has T_q={t_q} queries but only T_k={t_k} keys: end-aligned, each query needs "
                         "its own key among the keys")
    # the ranking sorts a copy of the scores and holds two int64 tables of their size
    check_allocation(f"ranking {index_scores.numel():,} index scores", index_scores.numel() * (index_scores.itemsize + 16),
                     index_scores.device, "choose keys for fewer queries at a time")
    if index_scores.isnan().any() or (index_scores == math.inf).any():
        raise ValueError("index_scores contains NaN or +inf, so no ranking of the keys exists; -inf alone is allowed "
                         "(a key that may never be chosen)")
