"""The reference layers of lesson 14: transformers' MistralAttention, Gemma3Attention and GptOssAttention,
each built from a tiny random configuration (nothing downloaded), against the course's copy of it.

Each reference gets the mask that transformers' own mask functions build for its layer type and the
rotary cosines and sines its own rotary embedding computes; the course's copy
(``attn.model_attention.ModelAttention.from_transformers``) builds its window mask and rotary itself.
"""

import os
from dataclasses import dataclass

import torch

from attn.common.validate import seed_value, whole_number
from attn.model_attention import ModelAttention

EMBED_DIM, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 4, 2, 8
ROTARY_BASES = {"Mistral": 10000.0, "Gemma 3 local": 10000.0, "Gemma 3 global": 1000000.0, "gpt-oss": 150000.0}


@dataclass
class ReferenceCase:
    """One transformers attention layer, its inputs and what it was given."""

    name: str
    layer_index: int
    layer_type: str  # "sliding_attention" or "full_attention"
    window: int | None
    rotary_base: float
    module: torch.nn.Module
    x: torch.Tensor  # (B, T, E) float64
    mask: torch.Tensor  # (B, 1, T, T): 0 where kept, a large negative number elsewhere
    cos_sin: tuple  # the rotary cosines and sines, each (B, T, d)

    def largest_difference(self, rotary=True, window_change=0):
        """max |reference - course| over the outputs. rotary=False gives both no rotary (cos 1, sin 0);
        window_change widens (or narrows) the course's window, to show what an off-by-one does."""
        cos_sin = self.cos_sin if rotary else (torch.ones_like(self.cos_sin[0]), torch.zeros_like(self.cos_sin[1]))
        ours = ModelAttention.from_transformers(self.module, self.rotary_base if rotary else None)
        if window_change and self.window is not None:
            ours.attention.window += window_change
        with torch.no_grad():
            theirs = self.module(self.x, cos_sin, self.mask)[0]
            return (theirs - ours(self.x)).abs().max().item()


def _masks(config, x):
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    positions = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
    arguments = {"config": config, "inputs_embeds": x, "attention_mask": None, "cache": None,
                 "position_ids": positions, "allow_is_causal_skip": False}
    return {"full_attention": create_causal_mask(**arguments),
            "sliding_attention": create_sliding_window_causal_mask(**arguments)}, positions


def _randomise(module, generator):
    """Every parameter drawn from a normal distribution (biases, sinks and norms included), float64."""
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, dtype=torch.float64, generator=generator) * 0.15)
    return module


def reference_layers(length=24, window=5, seed=0):
    """Mistral (one sliding layer), Gemma 3 (five local layers and one global) and gpt-oss (one
    sliding and one full layer), as a list of ReferenceCase on one input x (2, length, 32)."""
    length = whole_number("length", length, minimum=1, maximum=4096)
    window = whole_number("window", window, minimum=1, maximum=2**31 - 1)
    seed = seed_value(seed)
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded
    from transformers import Gemma3TextConfig, GptOssConfig, MistralConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding
    from transformers.models.mistral.modeling_mistral import MistralAttention, MistralRotaryEmbedding

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, length, EMBED_DIM, dtype=torch.float64, generator=generator)
    common = {"hidden_size": EMBED_DIM, "num_attention_heads": NUM_HEADS, "num_key_value_heads": NUM_KV_HEADS,
              "head_dim": HEAD_DIM, "sliding_window": window, "attn_implementation": "eager"}

    def rope(base):
        return {"rope_type": "default", "rope_theta": base}

    cases = []
    configs = (
        ("Mistral", MistralConfig(**common, rope_parameters=rope(ROTARY_BASES["Mistral"])), MistralAttention,
         MistralRotaryEmbedding),
        ("Gemma 3", Gemma3TextConfig(**common, num_hidden_layers=6, query_pre_attn_scalar=HEAD_DIM,
                                     rope_parameters={"sliding_attention": rope(ROTARY_BASES["Gemma 3 local"]),
                                                      "full_attention": rope(ROTARY_BASES["Gemma 3 global"])}),
         Gemma3Attention, Gemma3RotaryEmbedding),
        ("gpt-oss", GptOssConfig(**common, num_hidden_layers=2, rope_parameters=rope(ROTARY_BASES["gpt-oss"])),
         GptOssAttention, GptOssRotaryEmbedding),
    )
    for name, config, attention_class, rotary_class in configs:
        masks, positions = _masks(config, x)
        layer_types = getattr(config, "layer_types", None) or ["sliding_attention"]
        rotary = rotary_class(config).double()
        for index, layer_type in enumerate(layer_types):
            module = _randomise(attention_class(config, index), generator)
            if name == "Gemma 3":
                base = ROTARY_BASES["Gemma 3 local" if layer_type == "sliding_attention" else "Gemma 3 global"]
                cos_sin = rotary(x, positions, layer_type=layer_type)
            else:
                base, cos_sin = ROTARY_BASES[name], rotary(x, positions)
            kept = window if layer_type == "sliding_attention" else None
            cases.append(ReferenceCase(name, index, layer_type, kept, base, module, x, masks[layer_type], cos_sin))
    return cases
