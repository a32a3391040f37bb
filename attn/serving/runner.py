"""One step of a language model over a paged KV cache (lesson 19): many sequences, each at its own position.

The course's models (lesson 13's AustenLM, lesson 16's LlamaLM, lesson 10's Decoder) run their attention
through ``MultiHeadAttention``, whose cache holds one batch of sequences that all sit at the same position. A
server's step holds sequences at different positions, some decoding one token and some reading a chunk of their
prompt, so ``forward_step`` runs the model's own layers and weights with the attention replaced: every sequence's
chunk is rotated at its own positions, attends to its cached pages and to itself (merged by log-sum-exp), and its
keys and values are written into the pages the scheduler reserved.

Checks at the door: ``check_servable`` refuses a model whose weights hold NaN or inf, once, before any request is
served; a step makes its rotary angles once for all its layers (``rotary_angles``, then ``rotate`` in each layer),
and looks at its logits once, at the end.
"""

import torch

from attn.common.validate import has_only_finite, type_name
from attn.positions import rotary_angles, rotate
from attn.serving.paged_attention import _merge_attention, chunk_attention, paged_attention

__all__ = ["check_servable"]  # forward_step: the scheduler's, which checked its arguments

def check_servable(model):
    """TypeError/ValueError unless ``model`` has the interface of attn.lm.load()'s model with global attention
    layers that ``forward_step`` can run (no windows, no learned sinks, no dynamic rotary scaling)."""
    needed = ("blocks", "token_embedding", "norm", "readout", "vocab_size", "max_length")
    if not isinstance(model, torch.nn.Module) or not all(hasattr(model, name) for name in needed):
        raise TypeError(f"model must be a language model with the interface of attn.lm.load()'s (token_embedding, "
                        f"blocks, norm, readout, vocab_size, max_length), got {type_name(model)}")
    for index, block in enumerate(model.blocks):
        layer = getattr(block, "attention", None)
        if layer is None or not hasattr(layer, "query_proj"):
            raise TypeError(f"block {index} has no attn.MultiHeadAttention named attention")
        if layer.window is not None or layer.sink_logits is not None:
            raise ValueError(f"block {index}'s attention has a window or learned sinks: the paged server here runs "
                             "global attention layers (a window's pages are freed by PagedKVCache.free_outside_window)")
        scaling = layer.rotary_scaling or {}
        if scaling.get("rope_type") == "dynamic":
            raise ValueError("dynamic rotary scaling reads each sequence's length: a batch of several lengths cannot share it")
    broken = next((name for name, parameter in model.named_parameters() if not has_only_finite(parameter)), None)
    if broken is not None:
        raise ValueError(f"the model's weight {broken} holds NaN or inf: every token it served would be garbage; "
                         "load the weights again")
    return model


def model_shape(model):
    """(num_layers, num_kv_heads, head_dim, dtype) of a servable model: what its PagedKVCache holds."""
    layer = model.blocks[0].attention
    return len(model.blocks), layer.num_kv_heads, layer.head_dim, model.token_embedding.weight.dtype


@torch.no_grad()
def forward_step(model, cache, seqs, chunks, starts, slots):
    """Logits (S, V) of the last token of each sequence's chunk, after writing the chunks' keys and values.

    seqs: S sequence ids of ``cache``; chunks: S lists of token ids (a decode step's is one token); starts: the
    position of each chunk's first token (the positions before it are cached); slots: S tensors (len(chunk),)
    from ``cache.reserve``. Padding (to the longest chunk) is masked out and never written. Weights holding NaN or
    inf were refused at the door (``check_servable``), before any work; a step whose finite weights overflow is
    refused after its layers have written their keys into the reserved slots, which are not given back."""
    lengths = torch.tensor([len(chunk) for chunk in chunks])  # (S,)
    width = int(lengths.max())
    tokens = torch.zeros(len(seqs), width, dtype=torch.int64)  # (S, C), padded with token 0
    for row, chunk in enumerate(chunks):
        tokens[row, :len(chunk)] = torch.tensor(chunk)
    context = torch.tensor(starts, dtype=torch.int64)  # (S,): positions each chunk finds cached
    positions = context[:, None] + torch.arange(width)  # (S, C)
    real = torch.arange(width)[None] < lengths[:, None]  # (S, C)
    written = torch.cat(slots)  # (sum of lengths,): where the real tokens' keys go
    block_tables = cache.block_table_tensor(seqs)  # (S, M)
    x = model.token_embedding(tokens)  # (S, C, E)
    if hasattr(model, "position_embedding"):  # lesson 10's Decoder learns a table of positions
        x = x + model.position_embedding(positions.clamp(max=model.max_length - 1))
    angles = _StepAngles(positions, x.dtype)
    for layer, block in enumerate(model.blocks):
        attention_norm, mlp_norm = _norms(block)
        step = _LayerStep(block.attention, cache, layer, block_tables, context, angles, lengths)
        x = x + step(attention_norm(x), real, written)
        mlp_out = block.mlp(mlp_norm(x))
        x = x + mlp_out
    last = x[torch.arange(len(seqs)), lengths - 1]  # (S, E): each chunk's last real token
    logits = model.readout(model.norm(last))  # (S, V)
    if not has_only_finite(logits):  # the weights were finite at the door: something overflowed
        raise ValueError(f"the logits of this step hold NaN or inf although the model's weights are finite: a layer "
                         f"overflowed {logits.dtype}; serve the model in float32 or float64")
    return logits


class _StepAngles:
    """The rotary angles of one step's positions (S, C), made once for all the layers that share their settings
    (head size, base, scaling, fraction): ``angles(layer)`` gives a RotaryAngles for (S, 1, C), one for every head."""

    def __init__(self, positions, dtype):
        self.positions = positions[:, None, :]  # (S, 1, C): the same angles for every head
        self.compute = torch.float64 if dtype == torch.float64 else torch.float32  # as apply_rotary computes them
        self.made = []  # (settings, angles): a list, since a scaling is a dict

    def __call__(self, layer):
        settings = (layer.head_dim, layer.rotary_base, layer.rotary_scaling, layer.rotary_fraction)
        for made_for, angles in self.made:
            if made_for == settings:
                return angles
        angles = rotary_angles(self.positions, layer.head_dim, layer.rotary_base, layer.rotary_scaling,
                               layer.rotary_fraction, dtype=self.compute)
        self.made.append((settings, angles))
        return angles


def _norms(block):
    """The two pre-norms of a block: lesson 9's TransformerBlock (norm1, norm2) or lesson 16's LlamaBlock."""
    if hasattr(block, "attention_norm"):
        return block.attention_norm, block.mlp_norm
    return block.norm1, block.norm2


class _LayerStep:
    """One attention layer's work in a step: projections, rotary at each token's position, attention over the
    cached pages and over the chunk (merged by log-sum-exp), the new keys and values written into the pages."""

    def __init__(self, layer, cache, index, block_tables, context, angles, lengths):
        self.layer, self.cache, self.index = layer, cache, index
        self.block_tables, self.context, self.angles, self.lengths = block_tables, context, angles, lengths

    def __call__(self, x, real, written):
        layer = self.layer
        batch, width, _ = x.shape
        q = layer.query_proj(x).view(batch, width, layer.num_heads, layer.head_dim).transpose(1, 2)  # (S, H, C, d)
        k = layer.key_proj(x).view(batch, width, layer.num_kv_heads, layer.head_dim).transpose(1, 2)  # (S, H_kv, C, d)
        v = layer.value_proj(x).view(batch, width, layer.num_kv_heads, layer.head_dim).transpose(1, 2)
        if layer.rotary_base is not None:  # each token turned at its own position, by angles made once a step
            turn = self.angles(layer)
            q, k = rotate(q, turn), rotate(k, turn)
        cached = paged_attention(q, self.cache.key_pages[self.index], self.cache.value_pages[self.index],
                                 self.block_tables, self.context)  # over positions < start: (S, H, C, d), (S, H, C)
        own = chunk_attention(q, k, v, self.lengths)  # over the chunk itself, causal
        heads, _ = _merge_attention(*cached, *own)  # (S, H, C, d): parts made here, merged without a check
        new_keys = k.transpose(1, 2)[real]  # (sum of lengths, H_kv, d)
        self.cache._write(self.index, written, new_keys, v.transpose(1, 2)[real])  # slots from reserve
        return layer.out_proj(heads.transpose(1, 2).reshape(batch, width, layer.num_heads * layer.head_dim))
