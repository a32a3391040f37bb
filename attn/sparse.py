"""Attention that chooses (lesson 18): top-k keep-masks and DeepSeek-V3.2's lightning indexer.

Sparse attention keeps every key but lets each query read only a few of them, chosen by a cheap score.
``topk_keep_mask`` turns any index scores (..., T_q, T_k) into a causal, end-aligned keep-mask that
holds each query's k best keys (plus, optionally, its first ``sink_tokens`` keys); lesson 6's masked
attention (``attn.multihead.explicit_attention``) then reads only those, and ``topk_attention`` does both.

DeepSeek Sparse Attention (DSA, DeepSeek-V3.2) gets its scores from a *lightning indexer*: a few small
heads j whose queries q_j come from the layer's query latent, one key k_s per token shared by every
head, and per-token head weights w_j. The index score of query t for key s is

    I(t, s) = sum_j w_j(t) * ReLU(q_j(t) . k_s)

(equation 1 of the DeepSeek-V3.2 report). One shared key per token is why it is cheap to cache, like the
absorbed, multi-query form of latent attention (lesson 15); ReLU instead of softmax makes it cheap to
compute. ``LightningIndexer`` follows ``transformers``' ``DeepseekV32Indexer``, which adds to the report's
equation what DeepSeek's released code does: a LayerNorm on the key, rotary positions on the first
``rope_dim`` features of q and k, and two positive scales (1 / sqrt(head_dim) inside the ReLU,
1 / sqrt(num_heads) on the weights). Positive scales change no ranking, so the top-k is the same.
DeepSeek's own kernel also turns q and k by a Hadamard rotation and rounds them to FP8; the rotation is
orthogonal (dot products unchanged) and the rounding is precision only, so neither is here (nor in
``transformers``).
"""

import math

import torch
from torch import nn
from torch.nn import functional

from attn.common.layer_checks import (
    check_index_scores,
    check_parameters,
    check_rotary_base,
    check_sequence,
    largest_magnitude,
)
from attn.common.validate import has_only_finite, positive_int, require_finite, type_name, whole_count
from attn.multihead import explicit_attention
from attn.positions import apply_rotary


def topk_keep_mask(index_scores, top_k, sink_tokens=0):
    """Bool keep-mask (..., T_q, T_k) holding each query's ``top_k`` best visible keys and its sink tokens.

    End-aligned and causal as ``attn.window.sliding_window_mask``: query i stands at key position
    p = T_k - T_q + i and can see keys j <= p whose score is above -inf ("visible"). Rules, each tested:

    - sinks: the first ``sink_tokens`` keys are kept whenever visible and are NOT counted in ``top_k``;
      top-k chooses among the other visible keys, so a query keeps up to sink_tokens + top_k keys;
    - each query keeps min(top_k, visible non-sink keys) of them, the highest scores first;
    - ties: among equal scores the earlier key wins;
    - a query with no visible key keeps nothing (a row of False, which the course's attention turns
      into zero weights and a zero output);
    - with top_k >= T_k the mask is the causal mask wherever the scores are finite.
    """
    check_index_scores(index_scores)
    top_k, sink_tokens = whole_count("top_k", top_k), whole_count("sink_tokens", sink_tokens)
    t_q, t_k = index_scores.shape[-2:]
    top_k, sink_tokens = min(top_k, t_k), min(sink_tokens, t_k)  # beyond T_k they change nothing (and fit int64)
    keys = torch.arange(t_k, device=index_scores.device)  # (T_k,)
    causal = keys[None, :] <= keys[t_k - t_q:, None]  # (T_q, T_k): key j <= query position p
    visible = causal & (index_scores > -math.inf)  # (..., T_q, T_k)
    sinks = visible & (keys < sink_tokens)  # (..., T_q, T_k): kept, not counted
    choosable = visible & ~sinks
    return sinks | (choosable & (_ranks(index_scores, choosable) < top_k))


def _ranks(index_scores, choosable):
    """Each key's place (0 = best) among its query's choosable keys, ties to the earlier key: (..., T_q, T_k) int64.

    A stable descending sort keeps equal scores in key order; keys that may not be chosen sort last as -inf."""
    ranked = index_scores.masked_fill(~choosable, -math.inf)
    order = ranked.sort(dim=-1, descending=True, stable=True).indices  # (..., T_q, T_k): key ids, best first
    places = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, places)  # place of each key


def topk_attention(query, key, value, index_scores, top_k, sink_tokens=0):
    """Attention that reads only the keys ``topk_keep_mask`` keeps, every head the same keys (as in DSA).

    query (B, H, T_q, d); key, value (B, H_kv, T_k, d); index_scores (B, T_q, T_k). The softmax runs over the
    kept keys alone (lesson 6's masked attention, ``attn.multihead.explicit_attention``); a query that keeps
    nothing gets zero weights and a zero output. Returns output (B, H, T_q, d) and weights (B, H, T_q, T_k).
    """
    check_index_scores(index_scores)
    if index_scores.dim() != 3:
        raise ValueError(f"index_scores must have shape (B, T_q, T_k), one choice per batch shared by the heads, "
                         f"got {tuple(index_scores.shape)}")
    keep = topk_keep_mask(index_scores, top_k, sink_tokens)[:, None]  # (B, 1, T_q, T_k): one choice for all heads
    return explicit_attention(query, key, value, keep)


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: index scores (B, T, T) for self-attention over T tokens.

    x (B, T, E): the layer's input; query_latent (B, T, R): the layer's query latent (latent attention's
    normalised down-projection of x, lesson 15). Per head j: q_j = W_q,j c_q (head_dim,); one key per token
    k = LayerNorm(W_k x) (head_dim,); rotary turns the first ``rope_dim`` features of q_j and k by position
    (neighbouring pairs, as ``attn.apply_rotary``); w_j = W_w x / sqrt(num_heads). Score:
    I(t, s) = sum_j w_j(t) ReLU(q_j(t) . k_s / sqrt(head_dim)), for every pair (causality is the mask's job).
    It scores one sequence against itself; decoding with an indexer key cache (T_q < T_k) is not built here.
    """

    def __init__(self, embed_dim, query_latent_dim, num_heads, head_dim, rope_dim, rope_base=10000.0, eps=1e-6):
        super().__init__()
        embed_dim, query_latent_dim = positive_int("embed_dim", embed_dim), positive_int("query_latent_dim", query_latent_dim)
        num_heads, head_dim = positive_int("num_heads", num_heads), positive_int("head_dim", head_dim)
        rope_dim = whole_count("rope_dim", rope_dim)
        if rope_dim > head_dim or rope_dim % 2:
            raise ValueError(f"rope_dim must be an even number of features at most head_dim={head_dim}, got {rope_dim}")
        if rope_dim:
            check_rotary_base(rope_base, rope_dim)
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
            raise ValueError(f"eps must be a small positive number (LayerNorm's epsilon, 1e-6 is usual), got {eps!r:.60}")
        count = num_heads * head_dim * query_latent_dim + embed_dim * (head_dim + num_heads) + 2 * head_dim
        check_parameters("the lightning indexer", count)
        self.num_heads, self.head_dim, self.rope_dim, self.rope_base = num_heads, head_dim, rope_dim, float(rope_base)
        self.query_proj = nn.Linear(query_latent_dim, num_heads * head_dim, bias=False)  # c_q (R,) -> H_I heads (d_I,)
        self.key_proj = nn.Linear(embed_dim, head_dim, bias=False)  # x (E,) -> one shared key (d_I,)
        self.key_norm = nn.LayerNorm(head_dim, eps=eps)
        self.head_weights = nn.Linear(embed_dim, num_heads, bias=False)  # x (E,) -> one weight per head (H_I,)

    def forward(self, x, query_latent):
        """x (B, T, E), query_latent (B, T, R) -> index scores (B, T, T), before any top-k."""
        self._check(x, query_latent)
        batch, length, _ = x.shape
        q = self.query_proj(query_latent).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H_I, T, d_I)
        k = self.key_norm(self.key_proj(x))  # (B, T, d_I)
        if not (has_only_finite(q) and has_only_finite(k)):
            raise ValueError(f"x and query_latent are finite, but the indexer's projections overflowed {q.dtype} on them "
                             f"(the largest |x| is {largest_magnitude(x):.3g}, |query_latent| "
                             f"{largest_magnitude(query_latent):.3g}); scale them down or use float64")
        q, k = self._rotate(q), self._rotate(k)
        dots = functional.relu(q @ k[:, None].transpose(-2, -1) / math.sqrt(self.head_dim))  # (B, H_I, T, T)
        weights = self.head_weights(x) / math.sqrt(self.num_heads)  # (B, T, H_I)
        scores = torch.einsum("bth,bhts->bts", weights, dots)  # (B, T, T): weighted sum over the heads
        if not has_only_finite(scores):
            raise ValueError(f"the index scores overflowed {scores.dtype}: x and query_latent are too large for it; "
                             "scale them down or use float64")
        return scores

    def _rotate(self, features):
        """Rotary on the first rope_dim features of (..., T, d_I); the rest pass through."""
        if not self.rope_dim:
            return features
        turned = apply_rotary(features[..., :self.rope_dim], base=self.rope_base)
        return torch.cat([turned, features[..., self.rope_dim:]], dim=-1)

    def _check(self, x, query_latent):
        check_sequence("x", x, self.key_proj.in_features, self.key_proj.weight)
        check_sequence("query_latent", query_latent, self.query_proj.in_features, self.query_proj.weight)
        if query_latent.shape[:2] != x.shape[:2]:
            raise ValueError(f"x {tuple(x.shape)} and query_latent {tuple(query_latent.shape)} must share (B, T)")
        require_finite("x", x, "the index scores would be NaN")
        require_finite("query_latent", query_latent, "the index scores would be NaN")

    @classmethod
    def from_transformers(cls, module):
        """A LightningIndexer with the weights of a ``transformers`` ``DeepseekV32Indexer`` (same dtype and device).

        The reference turns feature i with i + rope_dim / 2 (rotate_half); the rows of its rotary features are
        reordered here into neighbouring pairs, in the query projection, the key projection and the key's
        LayerNorm alike (a LayerNorm does not care about the order of its features), so every dot product is equal.
        The reference returns only its top-k indices (torch.topk), computed in float32 whatever its input; where a
        query sees fewer than k keys they include future keys (its attention masks them), and its ties fall in no
        stated order (ReLU makes exact ties common: a key on which every head is zero scores 0). ``topk_keep_mask``
        keeps neither future keys nor an unstated tie rule; tests/layers/test_sparse.py compares the two where no tie decides.
        """
        config = _indexer_config(module)
        layer = cls(config.hidden_size, config.q_lora_rank, config.index_n_heads, config.index_head_dim,
                    config.qk_rope_head_dim, config.rope_parameters["rope_theta"], module.k_norm.eps)
        weight = module.wk.weight
        layer.to(dtype=weight.dtype, device=weight.device)
        order = _pair_order(config.index_head_dim, config.qk_rope_head_dim).to(weight.device)
        with torch.no_grad():
            query_rows = module.wq_b.weight.view(config.index_n_heads, config.index_head_dim, -1)  # (H_I, d_I, R)
            layer.query_proj.weight.copy_(query_rows[:, order].flatten(0, 1))
            layer.key_proj.weight.copy_(module.wk.weight[order])
            layer.key_norm.weight.copy_(module.k_norm.weight[order])
            layer.key_norm.bias.copy_(module.k_norm.bias[order])
            layer.head_weights.weight.copy_(module.weights_proj.weight)
        return layer.train(module.training)


def _pair_order(head_dim, rope_dim):
    """Feature order that turns rotate_half's pairs (i, i + r/2) among the first r features into neighbours."""
    half = rope_dim // 2
    pairs = torch.stack([torch.arange(half), torch.arange(half, rope_dim)], dim=1).flatten()  # 0, r/2, 1, r/2 + 1, ...
    return torch.cat([pairs, torch.arange(rope_dim, head_dim)])


def _indexer_config(module):
    """The module's config, checked: a DeepseekV32Indexer-like module with the default rotary."""
    config = getattr(module, "config", None)
    needed = ("hidden_size", "q_lora_rank", "index_n_heads", "index_head_dim", "qk_rope_head_dim", "rope_parameters")
    parts = ("wq_b", "wk", "k_norm", "weights_proj")
    if (not isinstance(module, nn.Module) or config is None or not all(hasattr(config, name) for name in needed)
            or not all(hasattr(module, name) for name in parts)):
        raise TypeError("from_transformers takes a transformers DeepseekV32Indexer (model.model.layers[i].self_attn.indexer), "
                        f"got {type_name(module)}")
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"this indexer's model uses {rope_type!r} rotary scaling; LightningIndexer takes the default rotary")
    if config.q_lora_rank is None:
        raise ValueError("this config has no query latent (q_lora_rank is None); the indexer reads its queries from one")
    return config
