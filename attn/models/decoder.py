"""A small decoder-only model that generates token by token, with and without a KV cache (lesson 10).

``Decoder``: token and learned position embeddings, a stack of causal ``attn.TransformerBlock``s, a
final LayerNorm and a linear readout to one score (logit) per vocabulary entry. The toy task is
``counting_sequences``: count from a start in steps of a fixed size, modulo the vocabulary, so that
the first two tokens fix every later one and a reader can check a generated sequence at a glance.
"""

import numbers

import torch
from torch import nn

from attn.block import TransformerBlock
from attn.common.layer_checks import check_parameters
from attn.common.sizes import check_allocation
from attn.common.validate import (
    is_whole_number,
    positive_int,
    positive_number,
    require_tensor,
    type_name,
    whole_count,
    whole_number,
)
from attn.kvcache import KVCache, PreallocatedKVCache
from attn.ring_cache import RingKVCache
from attn.sampling import check_sampling, sample_next

MAX_LAYERS = 100_000  # more blocks than any model has


def counting_sequences(length, vocab_size=10):
    """Every sequence that counts from a start in equal steps modulo ``vocab_size``: int64 (vocab_size ** 2, length).

    Row start * vocab_size + step holds start, start + step, start + 2 step, ... (mod vocab_size).
    """
    length, vocab_size = positive_int("length", length), positive_int("vocab_size", vocab_size)
    check_allocation(f"counting_sequences({length}, vocab_size={vocab_size})", 8 * vocab_size**2 * (length + 2))
    start = torch.arange(vocab_size).repeat_interleave(vocab_size)[:, None]  # (vocab_size ** 2, 1)
    step = torch.arange(vocab_size).repeat(vocab_size)[:, None]  # (vocab_size ** 2, 1)
    return (start + step * torch.arange(length)) % vocab_size  # (vocab_size ** 2, length)


class Decoder(nn.Module):
    """Decoder(vocab_size, max_length, embed_dim E=32, num_heads H=4, num_layers=2, num_kv_heads=None, mlp_ratio=4).

    forward(tokens (B, T) int64, caches=None) -> logits (B, T, vocab_size); logits[:, t] scores the token after
    position t, which sees only positions 0..t (every block runs with is_causal=True). With ``caches``
    (one KVCache per block, from ``new_caches()``), the tokens continue the cached sequence: their
    positions start at len(caches[0]) and every block appends their keys and values to its cache.

    Lesson 14: ``layer_types``, one of "local" or "global" per layer (default: all "local" when a
    ``window`` is given, else all "global"), makes the local layers sliding-window layers of
    ``window`` keys and ``sink_tokens`` sinks; ``new_caches()`` then gives them RingKVCaches.
    """

    def __init__(self, vocab_size, max_length, embed_dim=32, num_heads=4, num_layers=2, num_kv_heads=None, mlp_ratio=4,
                 window=None, sink_tokens=0, layer_types=None):
        super().__init__()
        self.vocab_size, self.max_length = positive_int("vocab_size", vocab_size), positive_int("max_length", max_length)
        embed_dim = positive_int("embed_dim", embed_dim)  # checked here, before nn.Embedding sees it
        num_layers, ratio = positive_int("num_layers", num_layers), mlp_ratio if isinstance(mlp_ratio, numbers.Real) else 4
        if window is None and not (isinstance(sink_tokens, numbers.Integral) and sink_tokens == 0):
            raise ValueError(f"sink_tokens={sink_tokens!r} needs a window: without one every key is visible already")
        per_block = 4 * embed_dim * embed_dim + 2 * abs(ratio) * embed_dim * embed_dim  # attention, MLP (weights)
        size = (2 * self.vocab_size + self.max_length) * embed_dim + num_layers * int(per_block)
        check_parameters(f"Decoder(vocab_size={self.vocab_size}, embed_dim={embed_dim}, num_layers={num_layers})", size)
        self.token_embedding = nn.Embedding(self.vocab_size, embed_dim)
        self.position_embedding = nn.Embedding(self.max_length, embed_dim)
        self.layer_types = check_layer_types(layer_types, positive_int("num_layers", num_layers), window)
        self.blocks = nn.ModuleList(
            TransformerBlock(embed_dim, num_heads, mlp_ratio, num_kv_heads=num_kv_heads,
                             window=window if kind == "local" else None, sink_tokens=sink_tokens if kind == "local" else 0)
            for kind in self.layer_types
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, self.vocab_size)

    def forward(self, tokens, caches=None):
        start = check_decoder_call(self, tokens, caches)  # positions cached
        positions = torch.arange(start, start + tokens.shape[1])  # (T,)
        x = self.token_embedding(tokens)  # (B, T, E)
        x = x + self.position_embedding(positions.to(tokens.device))
        caches = caches or [None] * len(self.blocks)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, is_causal=True, cache=cache)  # (B, T, E)
        return self.readout(self.norm(x))  # (B, T, vocab_size)

    def new_caches(self):
        """One empty cache per block, for one batch of sequences: a RingKVCache for a local block, else a KVCache."""
        return [new_cache(block.attention) for block in self.blocks]


def new_cache(attention):
    """The cache an attention layer needs: a RingKVCache of its window and sinks if it has a window, else a KVCache."""
    if not (isinstance(attention, nn.Module) and hasattr(attention, "window") and hasattr(attention, "sink_tokens")):
        raise TypeError(f"attention must be an attn.MultiHeadAttention (a block's .attention), got {type_name(attention)}")
    if attention.window is None:
        return KVCache()
    return RingKVCache(attention.window, attention.sink_tokens)


def check_layer_types(layer_types, num_layers, window):
    """``layer_types`` as a tuple of num_layers strings, "local" or "global" (default from ``window``)."""
    num_layers = whole_number("num_layers", num_layers, minimum=1, maximum=MAX_LAYERS)
    if layer_types is None:
        return ("global" if window is None else "local",) * num_layers
    if not isinstance(layer_types, list | tuple) or not all(isinstance(kind, str) for kind in layer_types):
        raise TypeError(f"layer_types must be a list of 'local' or 'global', one per layer, got {type_name(layer_types)}")
    if len(layer_types) != num_layers or not set(layer_types) <= {"local", "global"}:
        raise ValueError(f"layer_types must list 'local' or 'global' for each of the {num_layers} layers, "
                         f"got {list(layer_types)}")
    if "local" in layer_types and window is None:
        raise ValueError("layer_types has local layers but window is None; give the window they use")
    return tuple(layer_types)


def train(model, sequences, steps=300, learning_rate=3e-3, first_target=2):
    """Adam on next-token cross-entropy over the whole batch ``sequences`` (N, T) at every step; returns the losses.

    Targets start at position ``first_target``: a counting sequence's step is unknown until two tokens
    have been seen, so earlier predictions cannot be right and are not scored. Deterministic given the
    model's initial weights (full batches, no dropout).
    """
    steps, learning_rate = positive_int("steps", steps), positive_number("learning_rate", learning_rate)
    check_tokens(model, sequences, "sequences")
    length = sequences.shape[1]
    if length < 2:
        raise ValueError(f"sequences must have at least 2 tokens, got {length}: a model learns to predict a next one")
    check_room(model, length - 1, "sequence length - 1")  # the inputs are sequences[:, :-1]
    if isinstance(first_target, bool) or not isinstance(first_target, numbers.Integral):
        raise TypeError(f"first_target must be an int, got {type_name(first_target)} {first_target!r}")
    if not 1 <= first_target < length:
        raise ValueError(f"first_target must be between 1 and T - 1 = {length - 1}, got {first_target}")
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    inputs, targets = sequences[:, :-1], sequences[:, first_target:]  # (N, T - 1), (N, T - first_target)
    losses = []
    model.train()
    for _ in range(steps):
        logits = model(inputs)[:, first_target - 1:]  # (N, T - first_target, vocab_size): predictions of the targets
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def generate(model, prompt, new_tokens, use_cache=True, *, temperature=0.0, top_k=None, top_p=None, generator=None):
    """Decoding: prompt (B, T_0) -> (B, T_0 + new_tokens), each new token chosen from the last position's logits.

    use_cache=True feeds the prompt once (the prefill) and then only the newest token at each step,
    the blocks' KV caches holding everything earlier; use_cache=False feeds the whole sequence so far
    at every step. Both give the same tokens. temperature=0 (the default) is greedy decoding, the most
    likely token; a temperature > 0 samples, with top_k, top_p and generator as in attn.sampling.sample_next.
    The final length is known before the first step, so each cache is a PreallocatedKVCache of that many
    positions (a ring cache of a windowed layer stays as it is); a model that can compute the last position's
    logits alone (``last_only``, lesson 19's LlamaLM) computes only those.
    """
    check_tokens(model, prompt, "prompt")
    new_tokens = whole_count("new_tokens", new_tokens)
    check_room(model, prompt.shape[1] + new_tokens - 1, "prompt length + new_tokens - 1")
    example = torch.zeros(1, model.vocab_size, device=prompt.device)  # the arguments checked once, before any step
    check_sampling(example, temperature, top_k, top_p, generator)
    caches = decoding_caches(model, max(prompt.shape[1] + new_tokens - 1, 1)) if use_cache else None
    tokens, fed = prompt, prompt  # fed: what the model reads at this step
    for _ in range(new_tokens):
        logits = _last_logits(model, fed, caches)  # (B, vocab_size)
        choice = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        next_token = choice[:, None].to(tokens.dtype)  # (B, 1)
        tokens = torch.cat((tokens, next_token), dim=1)
        fed = next_token if use_cache else tokens
    return tokens


def decoding_caches(model, length):
    """``model.new_caches()`` with each KVCache replaced by a PreallocatedKVCache of ``length`` positions (lesson 10):
    when the final length is known, each step writes its own keys and values instead of copying the whole cache."""
    if not isinstance(model, Decoder) and not _decoder_like(model):
        raise TypeError(f"model must be an attn.models.decoder.Decoder, got {type_name(model)}")
    length = whole_number("length", length, minimum=1, maximum=model.max_length)
    return [PreallocatedKVCache(length) if type(cache) is KVCache else cache for cache in model.new_caches()]


def _last_logits(model, fed, caches):
    """The logits (B, vocab_size) of the position after ``fed`` (B, T): only that position's where the model can
    compute it alone (a ``last_only`` argument), else the last row of the whole forward pass."""
    if getattr(model, "computes_last_only", False):
        return model(fed, caches, last_only=True)[:, -1]
    return model(fed, caches)[:, -1]


@torch.no_grad()
def stepwise_logits(model, tokens, chunks=None):
    """The logits (B, T, vocab_size) of ``tokens`` (B, T) computed chunk by chunk through KV caches, concatenated.

    chunks: the number of tokens fed at each step, summing to T (default: one at a time); [4, 1, 1]
    is a prefill of 4 tokens followed by single steps. Equals model(tokens) up to rounding.
    """
    check_tokens(model, tokens, "tokens")
    chunks = [1] * tokens.shape[1] if chunks is None else _check_chunks(chunks, tokens.shape[1])
    caches, logits, start = model.new_caches(), [], 0
    for size in chunks:
        logits.append(model(tokens[:, start:start + size], caches))  # (B, size, vocab_size)
        start += size
    return torch.cat(logits, dim=1)


@torch.no_grad()
def sequence_accuracy(generated, expected):
    """Fraction of rows of ``generated`` (N, T) equal to ``expected`` (N, T) in every position."""
    for name, tensor in (("generated", generated), ("expected", expected)):
        require_tensor(name, tensor)
    if generated.shape != expected.shape or generated.dim() != 2:
        raise ValueError(f"generated and expected must both be (N, T), got {tuple(generated.shape)} and {tuple(expected.shape)}")
    if generated.numel() == 0:
        raise ValueError(f"generated and expected are empty, shape {tuple(generated.shape)}: there is no sequence to score")
    return (generated == expected).all(dim=1).float().mean().item()


# Checks: every wrong input becomes one sentence that says what is wrong ---------------------------


def check_tokens(model, tokens, name="tokens"):
    """``tokens`` must be an integer tensor (B, T) of ids in [0, vocab_size) on the model's device."""
    if not isinstance(model, Decoder) and not _decoder_like(model):
        raise TypeError(f"model must be an attn.models.decoder.Decoder, got {type_name(model)} "
                        "(or a module with its interface, as lesson 13's model: vocab_size, max_length, readout, new_caches)")
    require_tensor(name, tokens)
    if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
        raise TypeError(f"{name} must hold integer token ids, got {tokens.dtype}; convert it with {name}.long()")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be int64 (or int32), the token ids nn.Embedding reads, got {tokens.dtype}; "
                        f"convert it with {name}.long()")
    if tokens.dim() != 2 or tokens.shape[1] == 0:
        raise ValueError(f"{name} must have shape (B, T) with T >= 1, got {tuple(tokens.shape)}")
    device = model.readout.weight.device
    if tokens.device != device:
        raise ValueError(f"{name} is on device {tokens.device} but the model is on {device}; move it with {name}.to('{device}')")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= model.vocab_size):
        lowest, highest = tokens.min().item(), tokens.max().item()
        raise ValueError(f"{name} must be token ids from 0 to {model.vocab_size - 1}, got values from {lowest} to {highest}")


def _decoder_like(model):
    """True for a module that generates like a Decoder (lesson 13's AustenLM): same attributes, same call."""
    needed = ("vocab_size", "max_length", "readout", "new_caches", "blocks")
    return isinstance(model, nn.Module) and all(hasattr(model, name) for name in needed)


def check_decoder_call(model, tokens, caches):
    """Everything about one call of Decoder.forward; returns the number of positions already cached."""
    check_tokens(model, tokens)
    start = 0
    if caches is not None:
        if not isinstance(caches, list | tuple) or not all(isinstance(cache, KVCache) for cache in caches):
            raise TypeError(f"caches must be a list of attn.KVCache, one per block (model.new_caches()), got {type_name(caches)}")
        if len(caches) != len(model.blocks):
            raise ValueError(f"caches must hold one KVCache per block: {len(model.blocks)}, got {len(caches)}")
        lengths = {len(cache) for cache in caches}
        if len(lengths) != 1:
            raise ValueError(f"the caches hold different numbers of positions, {sorted(lengths)}; use the caches of one sequence")
        start = lengths.pop()
    check_room(model, start + tokens.shape[1], "cached positions + new tokens")
    return start


def check_room(model, length, what):
    """ValueError if ``length`` positions do not fit the model's learned position embeddings."""
    if not isinstance(model, Decoder) and not _decoder_like(model):
        raise TypeError(f"model must be an attn.models.decoder.Decoder, got {type_name(model)}")
    whole_count("length", length)
    if not isinstance(what, str):
        raise TypeError(f"what must be text saying what the length counts, got {type_name(what)}")
    if length > model.max_length:
        raise ValueError(
            f"{what} = {length} is more than the model's max_length = {model.max_length}: "
            "it has learned position embeddings for positions 0 .. max_length - 1 only"
        )



def _check_chunks(chunks, length):
    if not isinstance(chunks, list | tuple) or not all(is_whole_number(size) for size in chunks):
        raise TypeError(f"chunks must be a list of ints (tokens fed per step), got {type_name(chunks)} {chunks!r}")
    if any(size <= 0 for size in chunks) or sum(chunks) != length:
        raise ValueError(f"chunks must be positive and sum to T = {length}, got {list(chunks)}")
    return [int(size) for size in chunks]
