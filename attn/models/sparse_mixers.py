"""The token mixers lesson 18's side-by-side runs add (attn.experiments.sparse_runs): a window with sinks and DSA.

- ``WindowSinksMixer``: the course's MultiHeadAttention with a window of ``top_k - sinks`` keys and ``sinks`` sink
  tokens (lesson 14), so that every query from position top_k - 1 on reads exactly ``top_k`` keys;
- ``DSAMixer``: DeepSeek Sparse Attention (DeepSeek-V3.2): a small lightning indexer (attn.sparse.LightningIndexer,
  its query latent the layer's input itself, no rotary) scores every earlier key and the attention reads the
  ``top_k`` best (attn.sparse.topk_attention, every head the same keys). The indexer learns as DeepSeek-V3.2
  trains it: ``indexer_kl``, the KL divergence from the dense attention's weights (the same queries and keys over
  every earlier key, summed over the heads and renormalised, detached) to the softmax of its index scores, its
  input detached, added to the task's loss. Nothing else reaches the indexer: the top-k choice is a mask, so it
  passes no gradient back.
"""

import math

import torch
from torch import nn

from attn.common.layer_checks import check_sequence
from attn.common.validate import require_finite, require_tensor, whole_number
from attn.multihead import MultiHeadAttention, explicit_attention, merge_heads, split_heads
from attn.sparse import LightningIndexer, topk_attention

TOP_K, SINKS = 8, 2  # keys read per query; window+sinks: 2 sinks and the last 6 keys
INDEXER_HEADS, INDEXER_DIM = 2, 8  # the lightning indexer: 2 heads of 8, one shared key of 8 per token, no rotary


class WindowSinksMixer(nn.Module):
    """The course's MultiHeadAttention with a window of ``top_k - sinks`` keys and ``sinks`` sink tokens, causal.
    x (B, T, E) -> (B, T, E); the query at position p >= top_k - 1 reads exactly top_k keys."""

    def __init__(self, embed_dim, num_heads, top_k=TOP_K, sinks=SINKS):
        super().__init__()
        top_k = whole_number("top_k", top_k, minimum=1, maximum=2**20)
        sinks = whole_number("sinks", sinks, minimum=0, maximum=top_k - 1)
        self.attention = MultiHeadAttention(embed_dim, num_heads, window=top_k - sinks, sink_tokens=sinks)

    def forward(self, x):
        return self.attention(x, x, x, is_causal=True)


class _WithLoss(torch.autograd.Function):
    """``output`` unchanged; in the backward pass ``loss`` receives gradient 1, as if it had been added to the
    training loss (the way DeepSeek's released MoE code attaches its balance loss to a layer's output)."""

    @staticmethod
    def forward(ctx, output, loss):
        ctx.save_for_backward(loss)
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output):
        (loss,) = ctx.saved_tensors
        return grad_output, torch.ones_like(loss)


def indexer_kl(index_scores, attention_weights):
    """KL(p || softmax(I)) averaged over queries: DeepSeek-V3.2's loss for its lightning indexer.

    index_scores (B, T, T): the indexer's scores for every (query, key), causal keys only are used;
    attention_weights (B, H, T, T): the dense attention's causal weights. p, the target, is the weights summed over
    heads and renormalised (each row sums to 1), detached. Returns a scalar; 0 when softmax(I) equals p.
    """
    require_tensor("index_scores", index_scores)
    require_tensor("attention_weights", attention_weights)
    if (index_scores.dim() != 3 or attention_weights.dim() != 4 or attention_weights.shape[2:] != index_scores.shape[1:]
            or attention_weights.shape[0] != index_scores.shape[0] or index_scores.shape[1] != index_scores.shape[2]):
        raise ValueError(f"index_scores must be (B, T, T) and attention_weights (B, H, T, T), got "
                         f"{tuple(index_scores.shape)} and {tuple(attention_weights.shape)}")
    require_finite("attention_weights", attention_weights)
    if index_scores.is_floating_point() and bool((index_scores.isnan() | (index_scores == math.inf)).any()):
        raise ValueError("index_scores hold NaN or +inf: the loss would be NaN (-inf is allowed: a key given no chance)")
    if not index_scores.is_floating_point() or attention_weights.dtype != index_scores.dtype:
        raise TypeError(f"index_scores and attention_weights must share one floating dtype, got {index_scores.dtype} "
                        f"and {attention_weights.dtype}")
    length = index_scores.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=index_scores.device).tril()  # (T, T)
    if index_scores.shape[0] == 0 or length == 0:
        raise ValueError(f"index_scores {tuple(index_scores.shape)} hold no query: the loss is an average over queries")
    if not bool(((index_scores > -math.inf) & causal).any(dim=-1).all()):
        raise ValueError("a query's index scores are -inf for every key it may read, so softmax(I) of its row is "
                         "undefined: the indexer must give each query at least one finite score")
    target = attention_weights.detach().sum(dim=1)  # (B, T, T): summed over the heads
    target = target.masked_fill(~causal, 0.0)
    target = target / target.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(target.dtype).tiny)
    log_index = torch.log_softmax(index_scores.masked_fill(~causal, -math.inf), dim=-1)  # (B, T, T)
    log_index = log_index.masked_fill(~causal, 0.0)  # 0 * -inf would be NaN: the future keys hold no target
    return (torch.xlogy(target, target) - target * log_index).sum(dim=-1).mean()


class DSAMixer(nn.Module):
    """Top-k attention whose keys a lightning indexer chooses, the indexer trained by ``indexer_kl``.

    x (B, T, E) -> (B, T, E), causal. In training (with gradients on) the KL term rides on the output
    (``_WithLoss``) and ``last_kl`` keeps its value; the indexer sees x detached, and the top-k mask passes no
    gradient, so only the KL term trains the indexer and the KL term trains nothing else.
    """

    def __init__(self, embed_dim, num_heads, top_k=TOP_K, indexer_heads=INDEXER_HEADS, indexer_dim=INDEXER_DIM):
        super().__init__()
        self.top_k = whole_number("top_k", top_k, minimum=1, maximum=2**20)
        self.attention = MultiHeadAttention(embed_dim, num_heads)  # its projections; its forward is not used
        self.indexer = LightningIndexer(embed_dim, embed_dim, indexer_heads, indexer_dim, rope_dim=0)
        self.last_kl = None

    def heads(self, x):
        """x (B, T, E) -> q, k, v (B, H, T, d): the layer's projections, split into heads."""
        attention = self.attention
        check_sequence("x", x, attention.embed_dim, attention.query_proj.weight)
        require_finite("x", x)
        q = split_heads(attention.query_proj(x), attention.num_heads)
        k = split_heads(attention.key_proj(x), attention.num_kv_heads)
        v = split_heads(attention.value_proj(x), attention.num_kv_heads)
        return q, k, v

    def read(self, x):
        """x (B, T, E) -> output (B, T, E), the top-k attention's weights (B, H, T, T) and index scores (B, T, T)."""
        q, k, v = self.heads(x)
        index_scores = self.indexer(x.detach(), x.detach())  # (B, T, T): the indexer's input is detached
        heads, weights = topk_attention(q, k, v, index_scores.detach(), self.top_k)  # (B, H, T, d), (B, H, T, T)
        return self.attention.out_proj(merge_heads(heads)), weights, index_scores

    def forward(self, x):
        output, _, index_scores = self.read(x)
        if not (self.training and torch.is_grad_enabled()) or x.shape[0] * x.shape[1] == 0:  # no query: no KL term
            return output
        with torch.no_grad():
            _, dense = explicit_attention(*self.heads(x), is_causal=True)  # (B, H, T, T): every earlier key
        kl = indexer_kl(index_scores, dense)
        self.last_kl = kl.detach()
        return _WithLoss.apply(output, kl)
