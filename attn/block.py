"""The pre-norm Transformer block (lesson 9): attention and an MLP, each added back to its input."""

from torch import nn

from attn.common import convert
from attn.common.layer_checks import check_block_arguments, check_block_input
from attn.multihead import MultiHeadAttention

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


class TransformerBlock(nn.Module):
    """Pre-norm Transformer block, batch first.

    x = x + dropout(attention(norm1(x))), then
    x = x + dropout(mlp(norm2(x))), where the MLP is Linear(E, mlp_ratio * E)
    -> activation ('gelu' or 'relu') -> dropout -> Linear(mlp_ratio * E, E).
    The attention is attn.MultiHeadAttention(E, num_heads, dropout=dropout,
    num_kv_heads=num_kv_heads, rotary_base=rotary_base).
    forward(x (B, T, E), mask=None, key_padding_mask=None, is_causal=False,
    cache=None, need_weights=False) -> (B, T, E), or with need_weights=True
    ((B, T, E), the attention weights (B, H, T, T_k)); the masks mean what
    they mean for MultiHeadAttention. num_kv_heads and cache belong to
    lesson 10 (grouped heads and the KV cache, one KVCache per block);
    rotary_base and need_weights to lesson 13 (rotary positions inside the
    attention, and reading its weights). With their defaults the block is
    exactly the two lines above. window and sink_tokens (lesson 14) make
    the attention a sliding window's (see MultiHeadAttention).
    """

    def __init__(
        self, embed_dim, num_heads, mlp_ratio=4, dropout=0.0,
        num_kv_heads=None, activation="gelu", rotary_base=None, window=None,
        sink_tokens=0,
    ):
        super().__init__()
        self.attention = MultiHeadAttention(
            embed_dim, num_heads, dropout=dropout, num_kv_heads=num_kv_heads,
            rotary_base=rotary_base, window=window, sink_tokens=sink_tokens,
        )
        # the MLP's hidden width, mlp_ratio * E:
        hidden = check_block_arguments(embed_dim, mlp_ratio, activation)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, hidden),  # mlp[0]: E -> mlp_ratio * E
            ACTIVATIONS[activation](),
            nn.Dropout(dropout),
            nn.Linear(hidden, embed_dim),  # mlp[3]: back to E
        )
        self.residual_dropout = nn.Dropout(dropout)

    def forward(
        self, x, mask=None, key_padding_mask=None, is_causal=False,
        cache=None, need_weights=False,
    ):
        check_block_input(self, x)
        normed = self.norm1(x)  # (B, T, E)
        attended = self.attention(  # (B, T, E), or it and the weights
            normed, normed, normed, mask, key_padding_mask, is_causal,
            cache=cache, need_weights=need_weights,
        )
        attended, weights = attended if need_weights else (attended, None)
        x = x + self.residual_dropout(attended)
        x = x + self.residual_dropout(self.mlp(self.norm2(x)))
        return (x, weights) if need_weights else x

    @classmethod
    def from_torch(cls, layer):
        """A block with the weights, eps, activation, dropout and training
        mode of an nn.TransformerEncoderLayer(norm_first=True,
        batch_first=True)."""
        arguments = convert.block_arguments(layer)
        return convert.copy_block(layer, cls(**arguments))
