"""Ablations: a head's output removed, or only one path from a head to a later layer's input.
"""

import contextlib

import torch

from attn.models.induction.checks import _check_tokens, check_int
from attn.models.induction.data import _check_data
from attn.models.induction.model import _check_model, causal_keep_mask
from attn.models.induction.training import copy_metrics


@contextlib.contextmanager
def ablate_head(model, layer, head):
    """Inside the ``with`` block, head ``head`` of layer ``layer`` contributes nothing to the residual stream.

    Zeroes that head's d = E / H input columns of the layer's ``out_proj.weight`` (the columns
    that read the head's output) and restores them on exit, even after an error.
    """
    _check_model(model)
    layer = check_int("layer", layer, minimum=0, maximum=model.num_layers - 1)
    head = check_int("head", head, minimum=0, maximum=model.num_heads - 1)
    head_dim = model.embed_dim // model.num_heads
    weight = model.layers[layer].out_proj.weight  # (E, E): out_features x in_features
    columns = slice(head * head_dim, (head + 1) * head_dim)
    saved = weight[:, columns].detach().clone()
    with torch.no_grad():
        weight[:, columns] = 0
    try:
        yield model
    finally:
        with torch.no_grad():
            weight[:, columns] = saved


PATH_INPUTS = ("query", "key", "value")


def _head_output(model, layer, head, inputs):
    """inputs (B, T, E), what layer ``layer`` reads -> (B, T, E): what head ``head`` adds to the residual stream.

    Measured as the layer's output minus its output with that head ablated (so the out_proj bias,
    which belongs to no head, cancels). For positions="query_key" models without layer norm.
    """
    attention = model.layers[layer]
    length = inputs.shape[1]
    seen = inputs + model.position_embedding.weight[:length]  # (B, T, E): positions reach queries, keys
    mask = causal_keep_mask(length, inputs.device)
    full = attention(seen, seen, inputs, mask=mask)
    with ablate_head(model, layer, head):
        without = attention(seen, seen, inputs, mask=mask)
    return full - without


def _check_path(model, source, target_layer, inputs):
    _check_model(model)
    if model.positions != "query_key" or model.norms is not None:
        raise ValueError('forward_without_path needs a model with positions="query_key" and no layer norm')
    if not isinstance(source, tuple | list) or len(source) != 2:
        raise TypeError(f"source must be a (layer, head) pair, got {source!r:.60}")
    layer = check_int("the source layer", source[0], minimum=0, maximum=model.num_layers - 1)
    head = check_int("the source head", source[1], minimum=0, maximum=model.num_heads - 1)
    if layer == model.num_layers - 1:
        raise ValueError(f"the source layer {layer} is the last layer: no later layer reads its heads")
    target_layer = check_int("target_layer", target_layer, minimum=layer + 1, maximum=model.num_layers - 1)
    if isinstance(inputs, str) or not isinstance(inputs, tuple | list) or not inputs or not set(inputs) <= set(PATH_INPUTS):
        raise ValueError(f"inputs must be a non-empty tuple of names among {PATH_INPUTS} (the inputs the path is "
                         f"removed from), got {inputs!r:.60}")
    return (layer, head), target_layer, tuple(inputs)


@torch.no_grad()
def forward_without_path(model, tokens, source, target_layer, inputs):
    """The forward pass with head source = (layer, head) removed from
    some inputs ("query", "key", "value") of one later layer only.

    Every other reader of the residual stream still sees that head.
    Returns logits (B, T, V) and each layer's weights (B, H, T, T).
    """
    source, target_layer, inputs = _check_path(model, source, target_layer,
                                               inputs)
    tokens = _check_tokens(tokens, model.vocab_size, model.max_length)
    length = tokens.shape[1]
    where = model.position_embedding.weight[:length]  # (T, E)
    keep_mask = causal_keep_mask(length, tokens.device)  # (T, T)
    x = model.token_embedding(tokens)  # (B, T, E): the residual stream
    every_weights = []
    for index, layer in enumerate(model.layers):
        if index == source[0]:
            from_source = _head_output(model, *source, x)  # (B, T, E)
        read = {name: x for name in PATH_INPUTS}  # what each input reads
        if index == target_layer:
            for name in inputs:
                read[name] = x - from_source  # the stream without it
        out, weights = layer(read["query"] + where, read["key"] + where,
                             read["value"], mask=keep_mask,
                             need_weights=True)  # (B, T, E), (B, H, T, T)
        every_weights.append(weights)
        x = x + out  # the next layer and the readout see everything
    return model.unembedding(x), every_weights


def ablation_accuracies(model, data):
    """Second-copy accuracy with each head zeroed in turn: (num_layers, H)."""
    _check_model(model)
    _check_data(data)
    accuracies = torch.zeros(model.num_layers, model.num_heads)
    for layer in range(model.num_layers):
        for head in range(model.num_heads):
            with ablate_head(model, layer, head):
                accuracies[layer, head] = copy_metrics(model, data)["second_copy_accuracy"]
    return accuracies
