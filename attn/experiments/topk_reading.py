"""Reading a trained decoder through k keys a query (lesson 18): the pieces of ``attn.experiments.smollm2_sparse``.

- how much of a head's weight its k highest-weight keys hold (``topk_mass_by_query``), or a window of k - 4 recent
  keys plus 4 sink tokens (``window_mass_by_query``), query by query;
- the oracle's keep-mask (``oracle_keep_mask``: each head's top-k by its own scores) and the losses of a passage read
  with every layer, or some, through it, through a window plus sinks or through a lightning indexer (``token_losses``
  with ``reader``);
- the distillation of a lightning indexer (DeepSeek-V3.2's warm-up stage): its target, the dense weights summed over
  heads and renormalised (``head_summed_target``), and its loss, the KL from that target to the softmax of the index
  scores (``indexer_kl``); the training loop stops when the validation KL has stopped falling.
"""

import math

import torch
from torch.nn import functional

from attn.common.validate import is_whole_number, require_callable, require_tensor, type_name, whole_number
from attn.experiments.austen_heads import check_course_decoder
from attn.sparse import LightningIndexer, topk_keep_mask
from attn.window import sliding_window_mask

SINK_TOKENS = 4  # the window arm: 4 sinks + k - 4 recent keys, lesson 14's StreamingLLM shape
MIN_GAIN = 0.005  # nats: a validation KL this much below the best so far counts as still falling (the indexers)


# Checks ---------------------------------------------------------------------------------------------------------


def _check_weights(weights):
    """Attention weights (..., T, T): a floating-point tensor, one row per query of a self-attention."""
    require_tensor("weights", weights)
    if not weights.is_floating_point() or weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be a floating-point tensor (..., T, T) of self-attention weights, "
                         f"got {weights.dtype} {tuple(weights.shape)}")
    if not torch.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("weights must be finite and >= 0 (softmax weights)")


def _check_top_k(top_k, length=None):
    top_k = whole_number("top_k", top_k, minimum=1, maximum=2**31)
    return top_k if length is None else min(top_k, length)


def _check_top_ks(top_ks):
    if not isinstance(top_ks, list | tuple) or not top_ks:
        raise TypeError(f"top_ks must be a non-empty list of key counts, got {type_name(top_ks)}")
    values = [_check_top_k(k) for k in top_ks]
    if values != sorted(set(values)):
        raise ValueError(f"top_ks must rise and not repeat, got {list(top_ks)}")
    return values


# 1. How much weight the k best keys hold ---------------------------------------------------------------------------


def topk_mass_by_query(weights, top_k):
    """Each query's weight on its ``top_k`` highest-weight keys: weights (..., T, T) -> (..., T).

    A query that sees k keys or fewer holds all of its weight in them (1, up to rounding)."""
    _check_weights(weights)
    top_k = _check_top_k(top_k, weights.shape[-1])
    return weights.topk(top_k, dim=-1).values.sum(dim=-1)


def _topk_masses(weights, top_ks):
    """``topk_mass_by_query`` for every k of the rising ``top_ks`` at once: weights (..., T, T) -> (..., T, K)."""
    length = weights.shape[-1]
    held = weights.topk(min(top_ks[-1], length), dim=-1).values.double().cumsum(dim=-1)  # (..., T, k_max)
    return held[..., [min(k, length) - 1 for k in top_ks]]


def window_mass_by_query(weights, top_k, sink_tokens=SINK_TOKENS):
    """Each query's weight on the keys a window of ``top_k - sink_tokens`` recent keys plus ``sink_tokens`` sinks keeps
    (as many keys as top-k reads): weights (..., T, T) -> (..., T)."""
    _check_weights(weights)
    top_k, sink_tokens = _check_top_k(top_k), whole_number("sink_tokens", sink_tokens, minimum=0, maximum=2**31)
    if top_k <= sink_tokens:
        raise ValueError(f"top_k={top_k} must be more than sink_tokens={sink_tokens}: the window keeps k - sinks keys")
    length = weights.shape[-1]
    keep = sliding_window_mask(length, length, top_k - sink_tokens, sink_tokens, device=weights.device)  # (T, T)
    return (weights * keep).sum(dim=-1)


def counted_queries(length, top_k):
    """Bool (T,): the queries that see more than ``top_k`` keys (query p sees the p + 1 keys 0 .. p)."""
    length = whole_number("length", length, minimum=0, maximum=2**24)
    return torch.arange(length) >= _check_top_k(top_k)


# 2. Reading through k keys ---------------------------------------------------------------------------------------


def oracle_keep_mask(weights, top_k):
    """Keep-mask (..., T, T): each query's ``top_k`` highest-weight keys among the keys it sees (causal), per head.

    The weights of a softmax rank the keys as its scores do, so this is the top-k of the true scores. The same mask
    as ``attn.sparse.topk_keep_mask(weights, top_k)`` wherever no two weights tie (tests/experiments/test_smollm2_sparse.py);
    torch.topk picks k keys without sorting whole rows, which is what makes every layer of SmolLM2 affordable here."""
    _check_weights(weights)
    length = weights.shape[-1]
    top_k = _check_top_k(top_k, length)
    causal = torch.ones(length, length, dtype=torch.bool, device=weights.device).tril()  # (T, T)
    ranked = weights.masked_fill(~causal, -1.0)  # future keys last, below every weight
    chosen = ranked.topk(top_k, dim=-1).indices  # (..., T, k)
    keep = torch.zeros(weights.shape, dtype=torch.bool, device=weights.device).scatter_(-1, chosen, True)
    return keep & causal


@torch.no_grad()
def _oracle_block(block, x, top_k):
    """A LlamaBlock in which every head reads only its ``top_k`` best keys by its own scores: x (B, T, E) -> (B, T, E).

    The dense weights choose the keys (``oracle_keep_mask``); the block then runs again with that keep-mask, so each
    softmax runs over the kept scores alone."""
    normed = block.attention_norm(x)
    _, weights = block.attention(normed, normed, normed, is_causal=True, need_weights=True)  # (B, H, T, T)
    return block(x, mask=oracle_keep_mask(weights, top_k))


def window_mask(length, top_k, sink_tokens=SINK_TOKENS):
    """The window arm's keep-mask (T, T): ``sink_tokens`` sinks and ``top_k - sink_tokens`` recent keys, itself included."""
    top_k, sink_tokens = _check_top_k(top_k), whole_number("sink_tokens", sink_tokens, minimum=0, maximum=2**31)
    if top_k <= sink_tokens:
        raise ValueError(f"top_k={top_k} must be more than sink_tokens={sink_tokens}: the window keeps k - sinks keys")
    return sliding_window_mask(length, length, top_k - sink_tokens, sink_tokens)


@torch.no_grad()
def token_losses(model, tokens, read=None):
    """Next-token losses (T - 1,) of a passage tokens (T,), layer i computed by ``read(i, block, x)`` (None: dense)."""
    check_course_decoder(model)
    _check_passage(model, tokens)
    if read is not None:
        require_callable("read", read)
    x = model.token_embedding(tokens[None])  # (1, T, E)
    for layer, block in enumerate(model.blocks):
        x = block(x) if read is None else read(layer, block, x)
    logits = model.readout(model.norm(x))[0]  # (T, V)
    return functional.cross_entropy(logits[:-1], tokens[1:], reduction="none")


def _check_passage(model, tokens):
    require_tensor("tokens", tokens)
    if tokens.dim() != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool or len(tokens) < 2:
        raise ValueError(f"tokens must be a 1-D tensor of at least 2 token ids, got {tokens.dtype} {tuple(tokens.shape)}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= model.vocab_size:
        raise ValueError(f"tokens holds ids outside the model's vocabulary 0..{model.vocab_size - 1}")


def reader(arm, top_k, layers=None, indexers=None):
    """``token_losses``' read function for one arm: 'dense', 'oracle', 'window' or 'indexer', on ``layers`` (None: all;
    the others dense); ``indexers`` maps a layer to its LightningIndexer (the 'indexer' arm)."""
    if arm not in ("dense", "oracle", "window", "indexer"):
        raise ValueError(f"arm must be one of 'dense', 'oracle', 'window', 'indexer', got {arm!r:.60}")
    if layers is not None and (not isinstance(layers, list | tuple) or not all(is_whole_number(n) for n in layers)):
        raise TypeError(f"layers must be None (every layer) or a list of layer numbers, got {type_name(layers)}")
    if arm == "indexer" and (not isinstance(indexers, dict) or layers is None or set(layers) - set(indexers)
                             or not all(isinstance(indexers[n], LightningIndexer) for n in layers)):
        raise ValueError("the indexer arm needs an indexer (a dict layer -> LightningIndexer) for each of its layers")
    _check_top_k(top_k)

    def read(layer, block, x):
        if arm == "dense" or (layers is not None and layer not in layers):
            return block(x)
        if arm == "oracle":
            return _oracle_block(block, x, top_k)
        if arm == "window":
            return block(x, mask=window_mask(x.shape[1], top_k))
        normed = block.attention_norm(x)
        keep = topk_keep_mask(indexers[layer](normed, normed), top_k)  # (B, T, T): one choice for every head
        return block(x, mask=keep[:, None])

    return read


# 3. The distilled indexer -----------------------------------------------------------------------------------------


def head_summed_target(weights):
    """DeepSeek-V3.2's warm-up target: the dense weights (B, H, T, T) summed over heads and renormalised, (B, T, T)."""
    _check_weights(weights)
    summed = weights.sum(dim=-3)
    return summed / summed.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(summed.dtype).tiny)


def indexer_kl(index_scores, target):
    """Mean over queries of KL(target || softmax of the index scores over the keys each query sees):
    index_scores (B, T, T), target (B, T, T) rows summing to 1 on the causal keys. Zero when the indexer is perfect."""
    require_tensor("index_scores", index_scores)
    require_tensor("target", target)
    if index_scores.shape != target.shape or index_scores.dim() != 3 or index_scores.shape[-1] != index_scores.shape[-2]:
        raise ValueError(f"index_scores and target must share one shape (B, T, T), got {tuple(index_scores.shape)} and "
                         f"{tuple(target.shape)}")
    if not index_scores.is_floating_point() or index_scores.isnan().any() or (index_scores == math.inf).any():
        raise ValueError("index_scores must be floating-point scores with no NaN and no +inf (-inf rules a key out)")
    if not target.is_floating_point() or not torch.isfinite(target).all() or (target < 0).any():
        raise ValueError("target must hold finite weights >= 0 (head_summed_target gives them)")
    length = target.shape[-1]
    if target.shape[0] == 0 or length == 0:
        raise ValueError(f"index_scores {tuple(index_scores.shape)} hold no query: the loss is an average over queries")
    causal = torch.ones(length, length, dtype=torch.bool, device=target.device).tril()
    if not bool(((index_scores > -math.inf) & causal).any(dim=-1).all()):
        raise ValueError("a query's index scores are -inf for every key it may read, so their softmax is undefined: "
                         "give each query at least one finite score")
    log_q = torch.log_softmax(index_scores.masked_fill(~causal, -math.inf), dim=-1)
    # p log p - p log q, with 0 log 0 = 0 and nothing taken from keys the target gives no weight
    terms = torch.xlogy(target, target) - torch.where(target > 0, target * log_q, torch.zeros_like(target))
    return terms.sum(dim=-1).mean()


def _make_indexer(model, settings, layer):
    """A LightningIndexer for ``layer`` of ``model``: SmolLM2 has no query latent, so its query latent is the layer's
    normed input itself (query_latent_dim = embed_dim); rotary with the model's base."""
    attention = model.blocks[layer].attention
    return LightningIndexer(attention.embed_dim, attention.embed_dim, settings["indexer_heads"],
                            settings["indexer_head_dim"], settings["indexer_rope_dim"], rope_base=attention.rotary_base)


@torch.no_grad()
def _layer_inputs_and_targets(model, passages, layers):
    """For each passage (N, T) and each layer in ``layers``: its normed input (N, T, E) and its head-summed dense
    weights (N, T, T), a dict layer -> (inputs, targets); the model read dense up to the last of ``layers``."""
    found = {layer: ([], []) for layer in layers}
    for tokens in passages:
        x = model.token_embedding(tokens[None])
        for layer, block in enumerate(model.blocks[:max(layers) + 1]):
            if layer in found:
                found[layer][0].append(block.attention_norm(x)[0])
                x, weights = block(x, need_weights=True)
                found[layer][1].append(head_summed_target(weights)[0])
            else:
                x = block(x)
    return {layer: (torch.stack(inputs), torch.stack(targets)) for layer, (inputs, targets) in found.items()}


def _validation_kl(indexer, inputs, targets):
    with torch.no_grad():
        return sum(indexer_kl(indexer(x[None], x[None]), p[None]).item() for x, p in zip(inputs, targets, strict=True)) \
            / len(inputs)


def _train_indexer(indexer, train, valid, settings, generator):
    """Train ``indexer`` on (inputs (N, T, E), targets (N, T, T)) one passage a step (Adam) until the validation KL has
    not fallen by MIN_GAIN for ``patience`` measurements; returns (steps, curve of validation KLs, stopped_flat)."""
    optimizer = torch.optim.Adam(indexer.parameters(), lr=settings["learning_rate"])
    curve = [round(_validation_kl(indexer, *valid), 5)]
    best, flat, step = curve[0], 0, 0
    while step < settings["max_steps"] and flat < settings["patience"]:
        for _ in range(min(settings["eval_every"], settings["max_steps"] - step)):
            chosen = int(torch.randint(len(train[0]), (1,), generator=generator))
            x, target = train[0][chosen][None], train[1][chosen][None]
            loss = indexer_kl(indexer(x, x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        curve.append(round(_validation_kl(indexer, *valid), 5))
        best, flat = (curve[-1], 0) if curve[-1] < best - MIN_GAIN else (best, flat + 1)
    return step, curve, flat >= settings["patience"]
