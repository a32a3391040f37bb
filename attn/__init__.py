"""attn: the helper package of "Attention, Step by Step".

NumPy pieces (lessons 1-5) import without PyTorch; the PyTorch layer
(lesson 6 on) is loaded the first time it is asked for.
"""

from attn.attention import causal_mask, padding_mask, scaled_dot_product_attention
from attn.exercises import check
from attn.softmax import softmax

__all__ = [
    "MultiHeadAttention",
    "causal_mask",
    "check",
    "padding_mask",
    "scaled_dot_product_attention",
    "softmax",
]


def __getattr__(name):
    if name == "MultiHeadAttention":
        from attn.multihead import MultiHeadAttention

        return MultiHeadAttention
    raise AttributeError(f"module 'attn' has no attribute {name!r}")
