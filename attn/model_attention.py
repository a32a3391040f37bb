"""A real model's attention layer composed from the course's pieces (lesson 14): ModelAttention.

It extends lesson 6's ``MultiHeadAttention`` (its projections, window, sinks and learned sink logits) with
rotary positions (lesson 8) and Gemma 3's QK-norm, and copies the weights of a ``transformers`` Mistral,
Gemma 3 or gpt-oss attention layer. It sits above the layers it composes, so imports run one way:
window <- multihead <- model_attention.
"""

import math
import numbers

import torch

from attn.common.layer_checks import check_layer_input, check_rotary_base
from attn.common.validate import positive_number, type_name
from attn.multihead import MultiHeadAttention, explicit_attention, merge_heads, split_heads
from attn.positions import apply_rotary
from attn.window import rotary_pairing, sink_attention, sliding_window_mask


class ModelAttention(torch.nn.Module):
    """A real model's attention layer from the course's pieces (lesson 14).

    ``attention``: an attn.MultiHeadAttention (its projections, window, sinks and learned sink logits);
    ``rotary_base``: rotary positions (lesson 8) on queries and keys, or None; ``qk_norm_eps``: a per-head
    RMSNorm of queries and keys before rotary, each with its own scale (d,) (Gemma 3), or None.
    forward(x (B, T, E)) -> (B, T, E), one causal pass over positions 0..T-1.
    """

    def __init__(self, attention, rotary_base=None, qk_norm_eps=None):
        super().__init__()
        rotary_base, qk_norm_eps = _check_arguments(attention, rotary_base, qk_norm_eps)
        self.attention, self.rotary_base, self.qk_norm_eps = attention, rotary_base, qk_norm_eps
        if qk_norm_eps is not None:
            self.query_norm_scale = torch.nn.Parameter(torch.ones(attention.head_dim))
            self.key_norm_scale = torch.nn.Parameter(torch.ones(attention.head_dim))

    def _rms_norm(self, x, scale):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.qk_norm_eps) * scale

    def forward(self, x):
        check_layer_input(self.attention, x)  # (B, T, E), finite
        layer = self.attention
        q = split_heads(layer.query_proj(x), layer.num_heads)  # (B, H, T, d)
        k = split_heads(layer.key_proj(x), layer.num_kv_heads)  # (B, H_kv, T, d)
        v = split_heads(layer.value_proj(x), layer.num_kv_heads)
        if self.qk_norm_eps is not None:
            q, k = self._rms_norm(q, self.query_norm_scale), self._rms_norm(k, self.key_norm_scale)
        if self.rotary_base is not None:
            q, k = apply_rotary(q, base=self.rotary_base), apply_rotary(k, base=self.rotary_base)
        length = x.shape[1]
        if layer.window is None:
            keep_mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        else:
            keep_mask = sliding_window_mask(length, length, layer.window, layer.sink_tokens, x.device)
        if layer.sink_logits is not None:
            heads, _ = sink_attention(q, k, v, layer.sink_logits, keep_mask)
        else:
            heads, _ = explicit_attention(q, k, v, keep_mask)
        return layer.out_proj(merge_heads(heads))

    @classmethod
    def from_transformers(cls, module, rotary_base=None):
        """The course's copy of a transformers MistralAttention, Gemma3Attention or GptOssAttention:
        weights copied (query and key rows reordered to the course's rotary pairing), window, learned
        sinks and QK-norm taken from the module. ``rotary_base``: the base its model's rotary uses."""
        needed = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")
        if not isinstance(module, torch.nn.Module) or not all(hasattr(module, name) for name in needed):
            raise TypeError(f"module must be a transformers attention layer (MistralAttention, Gemma3Attention or "
                            f"GptOssAttention), got {type_name(module)}")
        if rotary_base is not None and (isinstance(rotary_base, bool) or not isinstance(rotary_base, numbers.Real)
                                        or not rotary_base > 0):
            raise ValueError(f"rotary_base must be None or a positive number, got {rotary_base!r}")
        head_dim = module.head_dim
        num_heads = module.q_proj.out_features // head_dim
        num_kv_heads = module.k_proj.out_features // head_dim
        embed_dim = module.q_proj.in_features
        if num_heads * head_dim != embed_dim:
            raise ValueError(f"the course's layer needs H * d = E, got {num_heads} * {head_dim} != {embed_dim}")
        if not math.isclose(module.scaling, head_dim**-0.5):
            raise ValueError(f"the course scales scores by 1/sqrt(d) = {head_dim**-0.5:.4g}, the module by {module.scaling:.4g}")
        # Gemma 3 and gpt-oss keep the window on the layer (None on global layers); Mistral in its config.
        window = getattr(module, "sliding_window", getattr(module.config, "sliding_window", None))
        layer = MultiHeadAttention(embed_dim, num_heads, bias=module.q_proj.bias is not None, num_kv_heads=num_kv_heads,
                                   window=window, learned_sinks=hasattr(module, "sinks"))
        pairing = rotary_pairing(head_dim) if rotary_base is not None else torch.arange(head_dim)
        qk_norm_eps = module.q_norm.eps if hasattr(module, "q_norm") else None
        copy = cls(layer, rotary_base, qk_norm_eps).to(module.q_proj.weight.dtype)
        with torch.no_grad():
            for ours, theirs, heads, reorder in (
                (layer.query_proj, module.q_proj, num_heads, True), (layer.key_proj, module.k_proj, num_kv_heads, True),
                (layer.value_proj, module.v_proj, num_kv_heads, False), (layer.out_proj, module.o_proj, 1, False),
            ):
                rows = torch.arange(ours.out_features)
                if reorder:  # each head's features in the course's rotary pairing
                    rows = (torch.arange(heads)[:, None] * head_dim + pairing).flatten()
                ours.weight.copy_(theirs.weight[rows])
                if ours.bias is not None:
                    ours.bias.copy_(theirs.bias[rows])
            if layer.sink_logits is not None:
                layer.sink_logits.copy_(module.sinks)
            if copy.qk_norm_eps is not None:  # Gemma's RMSNorm scales by 1 + weight
                copy.query_norm_scale.copy_(1 + module.q_norm.weight[pairing])
                copy.key_norm_scale.copy_(1 + module.k_norm.weight[pairing])
        return copy.eval()


def _check_arguments(attention, rotary_base, qk_norm_eps):
    """ModelAttention's arguments: a MultiHeadAttention, and rotary_base and qk_norm_eps each None or a positive
    finite number (rotary_base > 1, with an even head size). Returns (rotary_base, qk_norm_eps)."""
    if not isinstance(attention, MultiHeadAttention):
        raise TypeError(f"attention must be an attn.MultiHeadAttention (its projections, window and sinks), "
                        f"got {type_name(attention)}")
    rotary_base = check_rotary_base(rotary_base, attention.head_dim)
    if qk_norm_eps is not None:
        qk_norm_eps = positive_number("qk_norm_eps", qk_norm_eps)
    return rotary_base, qk_norm_eps
