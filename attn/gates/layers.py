"""The layers of lesson 22: GatedAttention (Qwen3-Next's output gate, QK-norm, a choice of softmax) and
DifferentialAttention (DiffLlama), each with ``from_transformers``. See ``attn.gates``."""

import math
import numbers

import torch
from torch import nn
from torch.nn import functional

from attn.common.layer_checks import check_parameters, check_sequence
from attn.common.rope_checks import check_rotary_options
from attn.common.validate import has_only_finite, non_negative_number, positive_int, require_choice, require_finite, type_name
from attn.gates.functional import _causal_scores, _checked_lambda, _differential_weights, _read
from attn.multihead import split_heads
from attn.norms import RMSNorm
from attn.positions import apply_rotary
from attn.softmax_variants import sink_weights, softpick_weights

__all__ = ["NORMALIZERS", "DifferentialAttention", "GatedAttention"]

NORMALIZERS = ("softmax", "sink", "off_by_one", "softpick")


def _rotate_half_order(rotated):
    """Feature order that turns transformers' rotate_half pairs (i, i + r/2) into neighbouring pairs (2i, 2i + 1)."""
    half = rotated // 2
    return torch.stack([torch.arange(half), torch.arange(half, 2 * half)], dim=1).flatten()  # 0, r/2, 1, r/2 + 1, ...


def _head_order(head_dim, rotated):
    """A head's feature order: its first ``rotated`` features re-paired, the rest in place."""
    return torch.cat([_rotate_half_order(rotated), torch.arange(rotated, head_dim)])


def _copy_rows(linear, weight, bias, rows):
    """linear.weight (and bias) = the given weight (and bias) rows, in the order ``rows``."""
    linear.weight.copy_(weight[rows])
    if linear.bias is not None:
        linear.bias.copy_(bias[rows])


def _sizes(embed_dim, num_heads, num_kv_heads, head_dim):
    embed_dim, num_heads = positive_int("embed_dim", embed_dim), positive_int("num_heads", num_heads)
    num_kv_heads = num_heads if num_kv_heads is None else positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
    if head_dim is None:
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} cannot be split into {num_heads} equal heads; give head_dim")
        head_dim = embed_dim // num_heads
    return embed_dim, num_heads, num_kv_heads, positive_int("head_dim", head_dim)


def _check_flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type_name(value)} {value!r:.60}")
    return value


def _check_x(layer, x):
    check_sequence("x", x, layer.embed_dim, layer.key_proj.weight)
    if x.shape[1] == 0:
        raise ValueError(f"x holds no positions (shape {tuple(x.shape)}); give at least one token")
    require_finite("x", x)


def _check_output(layer, output):
    if not has_only_finite(output):
        raise ValueError(f"x is finite, but {type(layer).__name__} overflowed {output.dtype} on it (a projection or the "
                         "scores passed its largest number); scale x down, or use float64")
    return output


class GatedAttention(nn.Module):
    """Causal self-attention with an elementwise sigmoid output gate (Qwen3-Next), QK-norm and a choice of softmax.

    GatedAttention(embed_dim E, num_heads H, num_kv_heads=None, head_dim=None, bias=False, gate=True, qk_norm=True,
    normalize='softmax', rotary_base=10000.0, rotary_fraction=1.0, eps=1e-6):
    - gate: query_proj makes 2 d numbers per head, [query, gate logits g] (Qwen3-Next's layout); the head's
      output (d,) is multiplied by sigmoid(g) before out_proj. gate=False: plain attention, query_proj E -> H d.
    - qk_norm: RMSNorm (weight (d,), shared by the heads) on every head's queries and keys before rotary.
    - normalize: 'softmax'; 'sink' (a learned logit per head, ``sink_logits`` (H,), starting at 0, joins every
      row's denominator: gpt-oss); 'off_by_one' (the sink fixed at 0); 'softpick'.
    - rotary_base None: no positions; rotary_fraction: only the first d * fraction features turn (lesson 17).
    Scores are scaled by 1 / sqrt(d). head_dim defaults to E / H.

    forward(x (B, T, E), need_weights=False) -> (B, T, E), or (output, weights (B, H, T, T)).
    ``from_transformers(module)`` copies a transformers ``Qwen3NextAttention``.
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads=None, head_dim=None, bias=False, gate=True, qk_norm=True,
                 normalize="softmax", rotary_base=10000.0, rotary_fraction=1.0, eps=1e-6):
        super().__init__()
        embed_dim, num_heads, num_kv_heads, head_dim = _sizes(embed_dim, num_heads, num_kv_heads, head_dim)
        bias, self.gate, self.qk_norm = _check_flag("bias", bias), _check_flag("gate", gate), _check_flag("qk_norm", qk_norm)
        self.normalize = require_choice("normalize", normalize, NORMALIZERS)
        if rotary_base is not None and (isinstance(rotary_base, bool) or not isinstance(rotary_base, numbers.Real)
                                        or not (math.isfinite(rotary_base) and rotary_base > 1)):
            raise ValueError(f"rotary_base must be None or a finite number above 1 (10000.0 is usual), got {rotary_base!r}")
        _, self.rotary_fraction = check_rotary_options(rotary_base, None, rotary_fraction, head_dim)
        eps = non_negative_number("eps", eps)
        query_width = num_heads * head_dim * (2 if gate else 1)
        check_parameters(f"GatedAttention(embed_dim={embed_dim}, num_heads={num_heads})",
                         embed_dim * (query_width + 2 * num_kv_heads * head_dim + num_heads * head_dim))
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, num_kv_heads, head_dim
        self.rotary_base = None if rotary_base is None else float(rotary_base)
        self.query_proj = nn.Linear(embed_dim, query_width, bias=bias)
        self.key_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.value_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias)
        self.query_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.key_norm = RMSNorm(head_dim, eps) if qk_norm else None
        self.sink_logits = nn.Parameter(torch.zeros(num_heads)) if normalize == "sink" else None

    def projections(self, x):
        """x (B, T, E) -> queries (B, H, T, d), keys (B, H_kv, T, d), values (B, H_kv, T, d) and gate logits
        (B, T, H, d) (None without a gate): normed and rotated as the layer attends with them."""
        _check_x(self, x)
        return self._projections(x)

    def _projections(self, x):
        batch, length, _ = x.shape
        projected = self.query_proj(x).view(batch, length, self.num_heads, -1)  # (B, T, H, d or 2 d)
        q, gate = projected.chunk(2, dim=-1) if self.gate else (projected, None)
        k = self.key_proj(x).view(batch, length, self.num_kv_heads, self.head_dim)
        v = self.value_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if not (has_only_finite(projected) and has_only_finite(k) and has_only_finite(v)):
            raise ValueError(f"x is finite, but GatedAttention's projections overflowed {x.dtype} on it; scale x down, "
                             "or use float64")
        if self.qk_norm:
            q, k = self.query_norm(q), self.key_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if self.rotary_base is not None:
            q = apply_rotary(q, None, self.rotary_base, rotary_fraction=self.rotary_fraction)
            k = apply_rotary(k, None, self.rotary_base, rotary_fraction=self.rotary_fraction)
        return q, k, v, gate

    def logits(self, x):
        """x (B, T, E) -> the scaled scores (B, H, T, T) before normalisation, -inf above the diagonal."""
        _check_x(self, x)
        q, k, _, _ = self._projections(x)
        return _causal_scores(q, k, 1.0 / math.sqrt(self.head_dim))

    def _weights(self, scores):
        if self.normalize == "softmax":
            return torch.softmax(scores, dim=-1)
        if self.normalize == "softpick":
            return softpick_weights(scores, -1)
        sink = torch.zeros((), dtype=scores.dtype) if self.normalize == "off_by_one" else self.sink_logits.view(-1, 1, 1)
        return sink_weights(scores, sink.to(scores), -1)

    def forward(self, x, need_weights=False):
        _check_x(self, x)
        _check_flag("need_weights", need_weights)
        q, k, v, gate = self._projections(x)
        weights = self._weights(_causal_scores(q, k, 1.0 / math.sqrt(self.head_dim)))  # (B, H, T, T)
        heads = _read(weights, v).transpose(1, 2)  # (B, T, H, d)
        if gate is not None:
            heads = heads * torch.sigmoid(gate)  # each feature of each head, by its own token's gate
        output = _check_output(self, self.out_proj(heads.flatten(2)))
        return (output, weights) if need_weights else output

    @classmethod
    def from_transformers(cls, module):
        """A GatedAttention with the weights of a transformers ``Qwen3NextAttention`` (copied, same dtype and device).

        Qwen3-Next's norms scale by 1 + weight (weights start at 0); the course's RMSNorm by its weight, so 1 + weight
        is copied. Its rotary pairs feature i with i + r/2 in the first r = d * partial_rotary_factor features; the rows
        of the query, key and norm weights are reordered here so that attn.apply_rotary's neighbouring pairs match.
        Call it as ``layer(x)``: transformers' forward takes the rotary cos and sin from the model's rotary module.
        """
        config = _config_of(module, ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"), "Qwen3NextAttention")
        head_dim, heads = module.head_dim, config.num_attention_heads
        fraction = float(config.rope_parameters.get("partial_rotary_factor", 1.0))
        layer = cls(config.hidden_size, heads, config.num_key_value_heads, head_dim, bias=bool(config.attention_bias),
                    gate=True, qk_norm=True, rotary_base=float(config.rope_parameters["rope_theta"]),
                    rotary_fraction=fraction, eps=module.q_norm.eps)
        weight = module.q_proj.weight
        layer.to(dtype=weight.dtype, device=weight.device)
        order = _head_order(head_dim, int(head_dim * fraction) // 2 * 2)
        query_rows = torch.cat([order, torch.arange(head_dim, 2 * head_dim)])  # per head: [query re-paired, gate]
        with torch.no_grad():
            _copy_rows(layer.query_proj, weight, module.q_proj.bias, _per_head(query_rows, heads))
            _copy_rows(layer.key_proj, module.k_proj.weight, module.k_proj.bias, _per_head(order, config.num_key_value_heads))
            _copy_rows(layer.value_proj, module.v_proj.weight, module.v_proj.bias, torch.arange(module.v_proj.out_features))
            _copy_rows(layer.out_proj, module.o_proj.weight, module.o_proj.bias, torch.arange(config.hidden_size))
            layer.query_norm.weight.copy_(1 + module.q_norm.weight[order])
            layer.key_norm.weight.copy_(1 + module.k_norm.weight[order])
        return layer.train(module.training)


def _per_head(order, heads):
    """One head's row order repeated for ``heads`` heads, each offset by its block."""
    return torch.cat([order + head * len(order) for head in range(heads)])


def _config_of(module, parts, what):
    config = getattr(module, "config", None)
    if not isinstance(module, nn.Module) or config is None or not all(hasattr(module, part) for part in parts):
        raise TypeError(f"from_transformers takes a transformers {what} module (model.model.layers[i].self_attn), "
                        f"got {type_name(module)}")
    if getattr(config, "attention_dropout", 0) and module.training:
        raise ValueError("the module uses attention dropout in training mode; call module.eval() before copying it")
    return config


class DifferentialAttention(nn.Module):
    """Causal differential attention (Ye et al. 2024), as DiffLlama writes it.

    DifferentialAttention(embed_dim E, num_heads H, num_kv_heads=None, head_dim=None, bias=False,
    rotary_base=10000.0, lambda_init=0.8, eps=1e-5): H and H_kv even. Query heads h and h + H/2 are one
    differential head's two maps; key heads g and g + H_kv/2 its two keys; value heads g and g + H_kv/2,
    side by side, its values (2 d wide). lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) +
    lambda_init, one number for the layer, from four learned vectors (d,). Each differential head's output
    (2 d) is RMS-normalised (no weight) and multiplied by 1 - lambda_init, then out_proj reads the H d features.

    forward(x (B, T, E)) -> (B, T, E). ``lam()``: the current lambda. ``from_transformers(module)`` copies a
    transformers ``DiffLlamaAttention``.
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads=None, head_dim=None, bias=False, rotary_base=10000.0,
                 lambda_init=0.8, eps=1e-5):
        super().__init__()
        embed_dim, num_heads, num_kv_heads, head_dim = _sizes(embed_dim, num_heads, num_kv_heads, head_dim)
        if num_heads % 2 or num_kv_heads % 2:
            raise ValueError(f"num_heads={num_heads} and num_kv_heads={num_kv_heads} must be even: heads pair up, "
                             "h with h + H/2, into one differential head")
        bias = _check_flag("bias", bias)
        if rotary_base is not None and (isinstance(rotary_base, bool) or not isinstance(rotary_base, numbers.Real)
                                        or not (math.isfinite(rotary_base) and rotary_base > 1)):
            raise ValueError(f"rotary_base must be None or a finite number above 1 (10000.0 is usual), got {rotary_base!r}")
        check_rotary_options(rotary_base, None, 1.0, head_dim)
        self.lambda_init = float(_checked_lambda(lambda_init))
        self.eps = non_negative_number("eps", eps)
        check_parameters(f"DifferentialAttention(embed_dim={embed_dim}, num_heads={num_heads})",
                         embed_dim * (2 * num_heads * head_dim + 2 * num_kv_heads * head_dim))
        self.embed_dim, self.num_heads, self.num_kv_heads, self.head_dim = embed_dim, num_heads, num_kv_heads, head_dim
        self.rotary_base = None if rotary_base is None else float(rotary_base)
        self.query_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=bias)
        self.key_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.value_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias)
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(head_dim) * 0.1) for _ in range(4))

    def lam(self):
        """lambda, a 0-d tensor: exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init."""
        return (torch.exp(self.lambda_q1 @ self.lambda_k1) - torch.exp(self.lambda_q2 @ self.lambda_k2)
                + self.lambda_init)

    def forward(self, x):
        _check_x(self, x)
        lam = self.lam()
        _checked_lambda(lam)  # a learned lambda of 1 or more: the same sentence as the function's
        batch, length, _ = x.shape
        q = split_heads(self.query_proj(x), self.num_heads)  # (B, H, T, d)
        k = split_heads(self.key_proj(x), self.num_kv_heads)
        v = split_heads(self.value_proj(x), self.num_kv_heads)
        if self.rotary_base is not None:
            q, k = apply_rotary(q, None, self.rotary_base), apply_rotary(k, None, self.rotary_base)
        weights = _differential_weights(_pairs(q), _pairs(k), lam, 1.0 / math.sqrt(self.head_dim))  # (B, H/2, T, T)
        heads = _read(weights, _pairs(v))  # (B, H/2, T, 2 d)
        heads = functional.rms_norm(heads, (2 * self.head_dim,), eps=self.eps) * (1 - self.lambda_init)
        return _check_output(self, self.out_proj(heads.transpose(1, 2).reshape(batch, length, -1)))

    @classmethod
    def from_transformers(cls, module):
        """A DifferentialAttention with the weights of a transformers ``DiffLlamaAttention`` (same dtype and device).

        Its rotary pairs feature i with i + d/2; the query and key rows are reordered so that attn.apply_rotary's
        neighbouring pairs match. Call it as ``layer(x)``.
        """
        config = _config_of(module, ("q_proj", "k_proj", "v_proj", "o_proj", "lambda_q1", "groupnorm"), "DiffLlamaAttention")
        head_dim = module.head_dim
        layer = cls(config.hidden_size, config.num_attention_heads, config.num_key_value_heads, head_dim,
                    bias=bool(config.attention_bias), rotary_base=float(config.rope_parameters["rope_theta"]),
                    lambda_init=module.lambda_init, eps=module.groupnorm.eps)
        weight = module.q_proj.weight
        layer.to(dtype=weight.dtype, device=weight.device)
        order = _head_order(head_dim, head_dim)
        with torch.no_grad():
            _copy_rows(layer.query_proj, weight, module.q_proj.bias, _per_head(order, config.num_attention_heads))
            _copy_rows(layer.key_proj, module.k_proj.weight, module.k_proj.bias, _per_head(order, config.num_key_value_heads))
            _copy_rows(layer.value_proj, module.v_proj.weight, module.v_proj.bias, torch.arange(module.v_proj.out_features))
            _copy_rows(layer.out_proj, module.o_proj.weight, module.o_proj.bias, torch.arange(config.hidden_size))
            for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                getattr(layer, name).copy_(getattr(module, name))
        return layer.train(module.training)


def _pairs(heads):
    """(B, 2 n, T, d) -> (B, n, T, 2 d): heads h and h + n side by side, one differential head's two halves."""
    return torch.cat(heads.chunk(2, dim=1), dim=-1)
