"""attn: the helper package of "Attention, Step by Step".

NumPy pieces (lessons 1-5, and the sinusoidal positions of lesson 8) import without PyTorch;
the PyTorch pieces (lesson 6 on) are loaded the first time one of them is asked for.

The tree follows the course: the layers a learner builds sit here at the top (one module each);
``attn.common`` holds the helpers under everything, ``attn.models`` the models trained with the
layers, ``attn.measure`` the measurements and ``attn.course`` the course's own machinery (the
self-checks among it). Imports run one way: common <- layers <- models <- measure and course.
"""

import importlib

from attn import softmax  # the module, callable as its NumPy softmax: attn.softmax(x), attn.softmax.softpick
from attn.attention import causal_mask, padding_mask, scaled_dot_product_attention
from attn.course.exercises import check
from attn.positions import sinusoidal_positions

# PyTorch names and the modules that define them, imported on first use.
_LAZY = {
    "KVCache": "attn.kvcache",
    "MultiHeadAttention": "attn.multihead",
    "RingKVCache": "attn.ring_cache",
    "TransformerBlock": "attn.block",
    "apply_rotary": "attn.positions",
}

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "RingKVCache",
    "TransformerBlock",
    "apply_rotary",
    "causal_mask",
    "check",
    "padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "softmax",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attn' has no attribute {name!r}")
