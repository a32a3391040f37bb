"""The residual stream's size by layer and position (lesson 22): where a model's massive activations sit.

Sun et al. (2024) found a few activations in the residual stream of large language models that are
thousands of times larger than the rest, at fixed features and on the first token (or a delimiter),
written by one early layer and carried unchanged to the last ones. They act as biases: after the
block's RMSNorm divides by the huge norm, that token's key and value are short, and heads park
their weight on it (the attention sink of lessons 14 and 16). ``massive_activations`` reads the norm
of every position's residual vector before the first block and after each block.
"""

import torch
from torch import nn

from attn.common.validate import type_name
from attn.models.decoder import check_tokens


def massive_activations(model, tokens):
    """Norms of the residual stream: (L + 1, B, T), row 0 the input of the first block, row l the output of block l.

    model: a course language model with a ``blocks`` list that it runs in order on the residual stream
    (attn.lm's AustenLM, attn.models.llama's LlamaLM such as SmolLM2 from attn.pretrained.load(), lesson 10's
    Decoder). tokens: (B, T) token ids. Runs the model once, without gradients; returns float32 norms.
    """
    blocks = getattr(model, "blocks", None) if isinstance(model, nn.Module) else None
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise TypeError(f"model must be a course language model with a list of blocks (AustenLM, LlamaLM, Decoder), got "
                        f"{type_name(model)}")
    check_tokens(model, tokens)
    norms = []

    def before(block, args):
        norms.append(args[0].detach().float().norm(dim=-1))  # (B, T): the stream this block reads

    def after(block, args, output):
        stream = output[0] if isinstance(output, tuple) else output
        norms.append(stream.detach().float().norm(dim=-1))

    handles = [block.register_forward_pre_hook(before) for block in blocks]
    handles.append(blocks[-1].register_forward_hook(after))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(norms)  # (L + 1, B, T)
