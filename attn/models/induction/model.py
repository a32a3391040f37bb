"""The attention-only transformer of lesson 11, and the causal keep mask it attends with.
"""


import torch
from torch import nn

from attn.common.device import check_device
from attn.common.layer_checks import check_parameters
from attn.common.sizes import check_allocation
from attn.common.validate import whole_count
from attn.models.induction.checks import _check_tokens, check_int, check_seed
from attn.models.induction.data import EMBED_DIM, MAX_LENGTH, NUM_HEADS, VOCAB_SIZE
from attn.multihead import MultiHeadAttention


def causal_keep_mask(length, device=None):
    """(T, T) boolean keep-mask: position i may attend to positions 0..i."""
    length = whole_count("length", length)
    device = check_device("device", device)
    check_allocation(f"a causal mask of {length} x {length} bools", length * length, device)
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class AttentionOnlyTransformer(nn.Module):
    """Token and learned position embeddings, ``num_layers`` residual causal attention layers, an unembedding.

    Each layer adds its output to the residual stream x (B, T, E) under a causal mask. With
    positions="query_key", x starts as the token embeddings and each layer computes
    x = x + attention(query=x + P, key=x + P, value=x), P (T, E) the position embeddings; with
    positions="residual", x starts as tokens + P and x = x + attention(x, x, x). With
    ``layer_norm=True`` each layer reads norm(x) instead of x and a final norm precedes the
    unembedding (measured: it does not make the heads form more reliably).
    forward(tokens (B, T)) returns logits (B, T, V); with need_weights=True it returns
    (logits, weights), weights a list with one (B, H, T, T) tensor per layer.
    """

    def __init__(self, vocab_size=VOCAB_SIZE, embed_dim=EMBED_DIM, num_heads=NUM_HEADS, num_layers=2,
                 max_length=MAX_LENGTH, positions="query_key", layer_norm=False, seed=0):
        super().__init__()
        if positions not in ("query_key", "residual"):
            raise ValueError(f'positions must be "query_key" or "residual", got {positions!r}')
        self.positions = positions
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.embed_dim = check_int("embed_dim", embed_dim, minimum=1)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        self.num_layers = check_int("num_layers", num_layers, minimum=1)
        self.max_length = check_int("max_length", max_length, minimum=1)
        seed = check_seed(seed)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be a multiple of num_heads={num_heads}")
        size = (2 * self.vocab_size + self.max_length) * self.embed_dim + self.num_layers * 4 * self.embed_dim**2
        check_parameters(f"AttentionOnlyTransformer(vocab_size={vocab_size}, embed_dim={embed_dim}, "
                         f"num_layers={num_layers})", size)
        with torch.random.fork_rng(devices=[]):  # seeded initial weights, global generator untouched
            torch.manual_seed(seed)
            self.token_embedding = nn.Embedding(vocab_size, embed_dim)
            self.position_embedding = nn.Embedding(max_length, embed_dim)
            self.layers = nn.ModuleList(MultiHeadAttention(embed_dim, num_heads) for _ in range(num_layers))
            self.norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(num_layers + 1)) if layer_norm else None
            self.unembedding = nn.Linear(embed_dim, vocab_size)

    def forward(self, tokens, need_weights=False):
        """tokens (B, T) -> logits (B, T, V); with need_weights, also
        a list of each layer's attention weights (B, H, T, T)."""
        tokens = _check_tokens(tokens, self.vocab_size, self.max_length)
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)  # (T,)
        where = self.position_embedding(positions)  # (T, E)
        x = self.token_embedding(tokens)  # (B, T, E): the residual stream
        if self.positions == "residual":
            x = x + where
        keep_mask = causal_keep_mask(length, tokens.device)  # (T, T)
        every_weights = []
        for index, layer in enumerate(self.layers):
            inputs = x if self.norms is None else self.norms[index](x)
            seen = inputs  # what the queries and keys are made from
            if self.positions == "query_key":
                seen = inputs + where  # positions reach queries, keys only
            out = layer(seen, seen, inputs, mask=keep_mask,
                        need_weights=need_weights)  # (B, T, E)
            if need_weights:
                out, weights = out
                every_weights.append(weights)  # (B, H, T, T)
            x = x + out  # each layer adds to the residual stream
        if self.norms is not None:
            x = self.norms[-1](x)
        logits = self.unembedding(x)  # (B, T, V)
        if need_weights:
            return logits, every_weights
        return logits


def _check_model(model):
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
