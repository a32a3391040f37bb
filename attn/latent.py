"""Multi-head latent attention (DeepSeek-V2 and V3), plain and absorbed (lesson 15).

Each token's hidden state x (E,) is pressed into one small latent c = RMSNorm(W_DKV x) (r,) and
one rotary key k_rope = rotate(W_KR x) (d_rope,), shared by all heads. Per head h the keys are
[W_UK,h c ; k_rope] and the values W_UV,h c. The cache holds c and k_rope only: r + d_rope numbers
per token and layer, against 2 H d_head for multi-head attention.

Plain form: rebuild every head's keys and values from the cached latents, then attend as usual.
Absorbed form (decoding): q_h . (W_UK,h c) = (W_UK,h^T q_h) . c, so the query is carried into the
latent space once and scores are taken against c itself; the weighted sum of latents is carried
out through W_UV,h afterwards. The keys and values are never rebuilt. Rotary cannot be absorbed:
it turns q and k by their positions, and a rotation between W_UK^T and W_UK would differ for every
pair of positions; that is why the rotary part is a separate, small, shared key.
"""

import math
import numbers

import torch
from torch import nn

from attn.common.layer_checks import check_parameters
from attn.common.rope_checks import check_rope_scaling
from attn.common.validate import (
    has_only_finite,
    positive_int,
    positive_number,
    require_finite,
    require_floating,
    require_tensor,
    type_name,
)
from attn.norms import RMSNorm  # lesson 15 built it here; it lives in attn.norms now, attn.latent.RMSNorm still works
from attn.positions import apply_rotary, yarn_mscale

MAX_SCALING = 1e3  # scores times more than this leave softmax only inf


class LatentCache:
    """What latent attention keeps per token: the latents (B, T, r) and the rotary keys (B, T, d_rope)."""

    def __init__(self):
        self.latents = None
        self.rope_keys = None

    def __len__(self):
        return 0 if self.latents is None else self.latents.shape[1]

    @property
    def nbytes(self):
        """Bytes held: (r + d_rope) numbers per token, whatever the number of heads."""
        return 0 if self.latents is None else self.latents.nbytes + self.rope_keys.nbytes

    def append(self, latents, rope_keys):
        """Add (B, T_new, r) and (B, T_new, d_rope); returns everything cached, (B, T, r) and (B, T, d_rope)."""
        for name, tensor in (("latents", latents), ("rope_keys", rope_keys)):
            require_tensor(name, tensor)
            require_floating(name, tensor)
            if tensor.dim() != 3:
                raise ValueError(f"{name} must have shape (B, T_new, features), got {tuple(tensor.shape)}")
            require_finite(name, tensor, "every later query would read it")
        if latents.shape[:2] != rope_keys.shape[:2] or latents.dtype != rope_keys.dtype:
            raise ValueError(f"latents {tuple(latents.shape)} and rope_keys {tuple(rope_keys.shape)} must share B, T_new "
                             "and dtype")
        if self.latents is not None and (self.latents.shape[0], self.latents.shape[2], self.rope_keys.shape[2]) != (
                latents.shape[0], latents.shape[2], rope_keys.shape[2]):
            raise ValueError("these latents do not match the ones cached (batch or sizes differ); start a new LatentCache()")
        if self.latents is None:
            self.latents, self.rope_keys = latents, rope_keys
        else:
            self.latents = torch.cat([self.latents, latents], dim=1)
            self.rope_keys = torch.cat([self.rope_keys, rope_keys], dim=1)
        return self.latents, self.rope_keys


class LatentAttention(nn.Module):
    """Causal multi-head latent attention; ``forward(x, absorbed=False, cache=None)``.

    embed_dim E, num_heads H, latent_dim r (kv_lora_rank), nope_dim and rope_dim (the per-head key's
    position-free and rotary parts), value_dim (per head), query_latent_dim (q_lora_rank: the query
    goes through its own low-rank bottleneck; None = one projection). Scores are scaled by
    1 / sqrt(nope_dim + rope_dim) unless ``scaling`` is given.
    Lesson 17: ``rope_scaling`` (None, or a dict in transformers' rope_parameters form, such as DeepSeek-V3's YaRN)
    changes the rotary frequencies and multiplies the rotated queries and keys by attn.positions'
    yarn_attention_factor; with YaRN's mscale_all_dim, the default score scale is also multiplied by
    yarn_mscale(factor, mscale_all_dim)^2, the softmax temperature DeepSeek applies (``deepseek_temperature``).
    """

    def __init__(self, embed_dim, num_heads, latent_dim, nope_dim, rope_dim, value_dim, query_latent_dim=None,
                 bias=False, rope_base=10000.0, eps=1e-6, scaling=None, rope_scaling=None):
        super().__init__()
        embed_dim, num_heads = positive_int("embed_dim", embed_dim), positive_int("num_heads", num_heads)
        latent_dim, nope_dim = positive_int("latent_dim", latent_dim), positive_int("nope_dim", nope_dim)
        rope_dim, value_dim = positive_int("rope_dim", rope_dim), positive_int("value_dim", value_dim)
        if rope_dim % 2:
            raise ValueError(f"rope_dim must be even (rotary turns features in pairs), got {rope_dim}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False, got {type_name(bias)} {bias!r}")
        rope_base, eps = positive_number("rope_base", rope_base), positive_number("eps", eps)
        rope_scaling = check_rope_scaling(rope_scaling, rope_base)
        scaling = None if scaling is None else positive_number("scaling", scaling)
        if scaling is not None and scaling > MAX_SCALING:
            raise ValueError(f"scaling={scaling!r} multiplies every score by more than {MAX_SCALING:g}, so that softmax sees "
                             "only inf; real models scale by about 1 / sqrt(nope_dim + rope_dim), below 1")
        query_width = num_heads * (nope_dim + rope_dim)
        check_parameters(
            f"LatentAttention(embed_dim={embed_dim}, num_heads={num_heads})",
            embed_dim * (query_width + latent_dim + rope_dim + num_heads * value_dim)
            + latent_dim * num_heads * (nope_dim + value_dim),
        )
        self.num_heads, self.latent_dim, self.nope_dim = num_heads, latent_dim, nope_dim
        self.rope_dim, self.value_dim, self.rope_base = rope_dim, value_dim, rope_base
        self.rope_scaling = rope_scaling
        self.scaling = deepseek_temperature(rope_scaling) / math.sqrt(nope_dim + rope_dim) if scaling is None else scaling
        if query_latent_dim is None:
            self.query_proj = nn.Linear(embed_dim, query_width, bias=False)
        else:
            query_latent_dim = positive_int("query_latent_dim", query_latent_dim)
            self.query_proj = nn.Sequential(
                nn.Linear(embed_dim, query_latent_dim, bias=bias), RMSNorm(query_latent_dim, eps),
                nn.Linear(query_latent_dim, query_width, bias=False),
            )
        self.down_proj = nn.Linear(embed_dim, latent_dim + rope_dim, bias=bias)  # W_DKV and W_KR side by side
        self.latent_norm = RMSNorm(latent_dim, eps)
        self.up_proj = nn.Linear(latent_dim, num_heads * (nope_dim + value_dim), bias=False)  # W_UK, W_UV per head
        self.out_proj = nn.Linear(num_heads * value_dim, embed_dim, bias=bias)

    def cache_numbers_per_token(self):
        """Numbers cached per token and layer: r + d_rope."""
        return self.latent_dim + self.rope_dim

    def up_weights(self):
        """W_UK (H, nope_dim, r) and W_UV (H, value_dim, r), cut out of up_proj per head."""
        per_head = self.up_proj.weight.view(self.num_heads, self.nope_dim + self.value_dim, self.latent_dim)
        return per_head[:, : self.nope_dim], per_head[:, self.nope_dim:]

    def queries(self, x, positions):
        """x (B, T, E) -> position-free queries (B, H, T, nope_dim) and rotated ones (B, H, T, rope_dim)."""
        self._check(x, False, None)
        q = self.query_proj(x).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # (B, H, T, nope + rope)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        return q_nope, apply_rotary(q_rope, positions, self.rope_base, self.rope_scaling)

    def compress(self, x, positions):
        """x (B, T, E) -> latents c (B, T, r) and rotated shared keys (B, T, rope_dim): all a cache keeps."""
        self._check(x, False, None)
        latents, rope_keys = self.down_proj(x).split([self.latent_dim, self.rope_dim], dim=-1)
        return self.latent_norm(latents), apply_rotary(rope_keys, positions, self.rope_base, self.rope_scaling)

    def query_latent(self, x):
        """x (B, T, E) -> the normalised query latent c_q (B, T, query_latent_dim) that DSA's indexer reads (lesson 18)."""
        self._check(x, False, None)
        if not isinstance(self.query_proj, nn.Sequential):
            raise ValueError("this layer has no query latent (query_latent_dim=None): its queries come from x in one step")
        return self.query_proj[1](self.query_proj[0](x))

    def forward(self, x, absorbed=False, cache=None, keep_mask=None):
        """x (B, T, E) -> (B, T, E), causal; with a LatentCache, x's tokens follow the cached ones.

        keep_mask: None, or bool (T, T_k) or (B, T, T_k), True = this query may read that key, applied on top of
        the causal mask (lesson 18 passes a top-k choice: DeepSeek Sparse Attention). A query that keeps no key
        gets a zero output, as in ``attn.multihead.explicit_attention``.
        """
        self._check(x, absorbed, cache)
        start = 0 if cache is None else len(cache)
        positions = torch.arange(start, start + x.shape[1], device=x.device)
        q_nope, q_rope = self.queries(x, positions)
        latents, rope_keys = self.compress(x, positions)
        if cache is not None:
            latents, rope_keys = cache.append(latents, rope_keys)  # (B, T_k, r), (B, T_k, rope_dim)
        keep = torch.ones(x.shape[1], latents.shape[1], dtype=torch.bool, device=x.device).tril(start)
        if keep_mask is not None:
            keep = keep & _checked_keep_mask(keep_mask, x, latents.shape[1])[..., None, :, :]  # (B or 1, 1, T, T_k)
        attend = self._absorbed if absorbed else self._plain
        context = attend(q_nope, q_rope, latents, rope_keys, keep)  # (B, H, T, value_dim)
        output = self.out_proj(context.transpose(1, 2).flatten(2))
        if not has_only_finite(output):  # finite inputs, but a projection, a norm or a score overflowed
            raise ValueError(
                f"x is finite, but the layer overflowed {x.dtype} on it (its projections, the latents' RMSNorm or the "
                f"scores reached inf) and the output holds inf or NaN; scale x down, or use float64"
            )
        return output

    def _plain(self, q_nope, q_rope, latents, rope_keys, keep):
        """Rebuild every head's keys (B, H, T_k, nope + rope) and values (B, H, T_k, value_dim), then attend."""
        up = self.up_proj(latents).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # (B, H, T_k, nope + v)
        k_nope, values = up.split([self.nope_dim, self.value_dim], dim=-1)
        k_rope = rope_keys[:, None].expand(-1, self.num_heads, -1, -1)  # one rotary key shared by the heads
        keys = torch.cat([k_nope, k_rope], dim=-1)
        queries = torch.cat([q_nope, q_rope], dim=-1)
        weights = self._weights(queries @ keys.transpose(-1, -2), keep)  # (B, H, T, T_k)
        return weights @ values

    def _absorbed(self, q_nope, q_rope, latents, rope_keys, keep):
        """Scores against the latents themselves: W_UK folded into the query, W_UV applied after the sum."""
        key_up, value_up = self.up_weights()  # (H, nope, r), (H, v, r)
        q_latent = q_nope @ key_up  # (B, H, T, r): W_UK,h^T q_h for every query
        scores = q_latent @ latents[:, None].transpose(-1, -2) + q_rope @ rope_keys[:, None].transpose(-1, -2)
        weights = self._weights(scores, keep)  # (B, H, T, T_k)
        latent_context = weights @ latents[:, None]  # (B, H, T, r): a weighted sum of cached latents
        return latent_context @ value_up.transpose(-1, -2)  # (B, H, T, value_dim)

    def _weights(self, scores, keep):
        weights = torch.softmax((scores * self.scaling).masked_fill(~keep, float("-inf")), dim=-1)
        return torch.where(keep.any(dim=-1, keepdim=True), weights, 0.0)  # a query that keeps nothing reads nothing

    def _check(self, x, absorbed, cache):
        require_tensor("x", x)
        weight = self.down_proj.weight
        if not x.is_floating_point() or x.dim() != 3 or x.shape[-1] != weight.shape[1] or 0 in x.shape:
            raise ValueError(f"x must be a floating-point (B, T, {weight.shape[1]}) tensor, got {x.dtype} {tuple(x.shape)}")
        if x.dtype != weight.dtype or x.device != weight.device:
            raise TypeError(
                f"x is {x.dtype} on {x.device} but the layer is {weight.dtype} on {weight.device}; "
                "use x.to(layer.down_proj.weight)"
            )
        require_finite("x", x)
        if not isinstance(absorbed, bool):
            raise TypeError(f"absorbed must be True or False, got {type_name(absorbed)} {absorbed!r}")
        if cache is not None:
            if not isinstance(cache, LatentCache):
                raise TypeError(f"cache must be an attn.latent.LatentCache or None, got {type_name(cache)}")
            if len(cache) and (cache.latents.shape[-1], cache.rope_keys.shape[-1]) != (self.latent_dim, self.rope_dim):
                raise ValueError(
                    f"the cache holds latents of {cache.latents.shape[-1]} and rotary keys of {cache.rope_keys.shape[-1]} "
                    f"numbers, written by another layer; this one has latent_dim={self.latent_dim}, rope_dim={self.rope_dim}: "
                    "give each layer its own LatentCache()"
                )
            if len(cache) and cache.latents.device != x.device:
                raise ValueError(f"the cache is on {cache.latents.device} but x is on {x.device}; start a new LatentCache()")
            if len(cache) and (cache.latents.shape[0] != x.shape[0] or cache.latents.dtype != x.dtype):
                raise ValueError(
                    f"the cache holds a batch of {cache.latents.shape[0]} in {cache.latents.dtype}, but x is a batch of "
                    f"{x.shape[0]} in {x.dtype}; start a new LatentCache()"
                )

    @classmethod
    def from_transformers(cls, module):
        """A LatentAttention with the weights of a Hugging Face ``DeepseekV3Attention`` (copied, same dtype and device).

        Rotary pairs: with ``rope_interleave`` the reference turns neighbouring features (2i, 2i + 1), as
        ``attn.apply_rotary`` does; without it, feature i with i + d/2, and the rotary rows of the query and
        key projections are reordered here so that the same pairs turn together.
        """
        config = _deepseek_config(module)
        layer = cls(
            config.hidden_size, config.num_attention_heads, config.kv_lora_rank, config.qk_nope_head_dim,
            config.qk_rope_head_dim, config.v_head_dim, config.q_lora_rank, bias=bool(config.attention_bias),
            rope_base=config.rope_parameters["rope_theta"], eps=module.kv_a_layernorm.variance_epsilon,
            scaling=module.scaling, rope_scaling=_rope_scaling(config),
        )
        weight = module.kv_a_proj_with_mqa.weight
        layer.to(dtype=weight.dtype, device=weight.device)
        order = _rope_order(config)
        with torch.no_grad():
            query_out = layer.query_proj if config.q_lora_rank is None else layer.query_proj[2]
            query_in = module.q_proj if config.q_lora_rank is None else module.q_b_proj
            query_out.weight.copy_(_reorder_rope_rows(query_in.weight, config, order, per_head=True))
            if config.q_lora_rank is not None:
                _copy_linear(layer.query_proj[0], module.q_a_proj)
                layer.query_proj[1].weight.copy_(module.q_a_layernorm.weight)
                layer.query_proj[1].eps = module.q_a_layernorm.variance_epsilon
            layer.down_proj.weight.copy_(_reorder_rope_rows(module.kv_a_proj_with_mqa.weight, config, order))
            if layer.down_proj.bias is not None:
                layer.down_proj.bias.copy_(_reorder_rope_rows(module.kv_a_proj_with_mqa.bias[:, None], config, order)[:, 0])
            layer.latent_norm.weight.copy_(module.kv_a_layernorm.weight)
            layer.up_proj.weight.copy_(module.kv_b_proj.weight)
            _copy_linear(layer.out_proj, module.o_proj)
        return layer.train(module.training)


def _checked_keep_mask(keep_mask, x, key_length):
    """keep_mask as a bool (T, T_k) or (B, T, T_k) tensor on x's device, or a sentence saying what is wrong."""
    require_tensor("keep_mask", keep_mask)
    batch, length = x.shape[:2]
    if keep_mask.dtype != torch.bool:
        raise TypeError(f"keep_mask must be a bool tensor (True = may read), got {keep_mask.dtype}")
    if keep_mask.shape not in ((length, key_length), (batch, length, key_length)):
        raise ValueError(f"keep_mask must have shape ({length}, {key_length}) or ({batch}, {length}, {key_length}) "
                         f"(queries x keys), got {tuple(keep_mask.shape)}")
    if keep_mask.device != x.device:
        raise ValueError(f"keep_mask is on {keep_mask.device} but x is on {x.device}")
    return keep_mask


def _copy_linear(ours, theirs):
    ours.weight.copy_(theirs.weight)
    if ours.bias is not None:
        ours.bias.copy_(theirs.bias)


def _deepseek_config(module):
    """The module's config, checked: an nn.Module with a DeepSeek-V3-style config, default rotary, no key/value groups."""
    config = getattr(module, "config", None)
    needed = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_parameters")
    if not isinstance(module, nn.Module) or config is None or not all(hasattr(config, name) for name in needed):
        raise TypeError(
            f"from_transformers takes a transformers DeepseekV3Attention module (model.model.layers[i].self_attn), "
            f"got {type_name(module)}"
        )
    rope_type = config.rope_parameters.get("rope_type", "default")
    if rope_type not in ("default", "yarn"):
        raise ValueError(
            f"this module uses {rope_type!r} rotary scaling; the course's latent attention takes the default rotary "
            "and DeepSeek-V3's YaRN"
        )
    if getattr(config, "num_key_value_heads", config.num_attention_heads) != config.num_attention_heads:
        raise ValueError("num_key_value_heads differs from num_attention_heads; latent attention shares no key heads")
    if isinstance(config.attention_dropout, numbers.Real) and config.attention_dropout and module.training:
        raise ValueError("the module uses attention dropout in training mode; call module.eval() before copying it")
    return config


def deepseek_temperature(rope_scaling):
    """The factor DeepSeek multiplies its softmax scale by (DeepseekV3Attention): yarn_mscale(s, mscale_all_dim)^2 for
    a YaRN scaling with mscale_all_dim, else 1. A float; ``rope_scaling`` None or a rope_parameters dict."""
    rope_scaling = check_rope_scaling(rope_scaling)
    if rope_scaling is None or rope_scaling["rope_type"] != "yarn" or not rope_scaling.get("mscale_all_dim"):
        return 1.0
    return yarn_mscale(rope_scaling["factor"], rope_scaling["mscale_all_dim"]) ** 2


def _rope_scaling(config):
    """The config's YaRN parameters as LatentAttention's rope_scaling, or None for the default rotary."""
    parameters = dict(config.rope_parameters)
    if parameters.get("rope_type", "default") == "default":
        return None
    return {key: value for key, value in parameters.items() if key != "rope_theta"}  # the base is passed apart


def _rope_order(config):
    """Feature order that turns the reference's rotary layout into neighbouring pairs (identity if interleaved)."""
    half = config.qk_rope_head_dim // 2
    if getattr(config, "rope_interleave", True):
        return torch.arange(2 * half)
    return torch.stack([torch.arange(half), torch.arange(half, 2 * half)], dim=1).flatten()  # 0, d/2, 1, d/2 + 1, ...


def _reorder_rope_rows(weight, config, order, per_head=False):
    """Reorder the output rows that make rotary features: each head's last rope_dim rows, or the last rope_dim rows."""
    rope = config.qk_rope_head_dim
    if per_head:
        rows = weight.view(config.num_attention_heads, -1, weight.shape[-1])  # (H, nope + rope, in)
        return torch.cat([rows[:, :-rope], rows[:, -rope:][:, order]], dim=1).flatten(0, 1)
    return torch.cat([weight[:-rope], weight[-rope:][order]], dim=0)
