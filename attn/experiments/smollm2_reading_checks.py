"""The checks of lesson 16's reading command (attn.experiments.smollm2_reading), made before any work: each wrong
argument of its measures becomes one sentence."""

import torch

from attn.common.validate import (
    positive_int,
    require_computable,
    require_finite,
    require_floating,
    require_text,
    require_token_ids,
    seed_value,
    type_name,
    whole_number,
)
from attn.experiments import austen_heads

MAX_HEADS = 1_000_000  # far more heads than any model the course reads (SmolLM2-135M: 270); a pool beyond it is a mistake
MAX_DRAWS = 1000


def check_passages(model, passages):
    """A course decoder and passages (N, T) of its token ids, N >= 1 and T >= 3 (targets 2 .. T - 1)."""
    austen_heads.check_course_decoder(model)
    require_token_ids("passages", passages, 2)
    if passages.shape[0] == 0 or passages.shape[1] < 3:
        raise ValueError(f"passages must be (N, T) with N >= 1 and T >= 3 (the loss is over targets 2 .. T - 1), "
                         f"got {tuple(passages.shape)}")


def check_head_scores(scores, count):
    """scores (L, H): finite floating-point numbers; count: a positive int, at most L * H."""
    require_computable("scores", scores)
    require_floating("scores", scores)
    if scores.dim() != 2:
        raise ValueError(f"scores must be (L, H), one score a head, got shape {tuple(scores.shape)}")
    require_finite("scores", scores, "the order of the heads would mean nothing")
    if positive_int("count", count) > scores.numel():
        raise ValueError(f"cannot choose {count} heads of {scores.numel()}")


def check_draw(num_layers, num_heads, count, generator, excluded):
    """Positive sizes whose pool of heads is at most MAX_HEADS, a torch.Generator, excluded a collection of pairs."""
    heads = positive_int("num_layers", num_layers) * positive_int("num_heads", num_heads)
    if heads > MAX_HEADS:
        raise ValueError(f"num_layers * num_heads = {heads} heads, more than the {MAX_HEADS:,} a model read here has")
    positive_int("count", count)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator (torch.Generator().manual_seed(seed)), got {type_name(generator)}")
    if not isinstance(excluded, set | frozenset | list | tuple):
        raise TypeError(f"excluded must be a set, list or tuple of (layer, head) pairs, got {type_name(excluded)}")


def check_head_arguments(model, repeated, top_count, draws, seed):
    """head_measures' arguments: room for top_count heads and as many others, at most MAX_DRAWS draws, a seed."""
    austen_heads.check_repeated_passages(model, repeated)
    heads = len(model.blocks) * model.num_heads
    if 2 * positive_int("top_count", top_count) > heads:
        raise ValueError(f"top_count={top_count}: removing that many top heads and as many others needs "
                         f"{2 * top_count} heads, the model has {heads}")
    whole_number("draws", draws, minimum=1, maximum=MAX_DRAWS)
    seed_value(seed)


def encoded_chunks(model, tokenizer, chunks):
    """Each chunk's token ids (n,), after checking the model, the tokenizer and that each chunk is 2 to
    context_length tokens."""
    austen_heads.check_course_decoder(model)
    for method in ("encode", "decode"):
        if not callable(getattr(tokenizer, method, None)):
            raise TypeError(f"tokenizer must be the model's tokenizer (with encode and decode), got {type_name(tokenizer)}")
    if not isinstance(chunks, list | tuple) or not chunks:
        raise TypeError(f"chunks must be a non-empty list of texts, got {type_name(chunks)}")
    encoded = []
    for chunk in chunks:
        tokens = torch.tensor(tokenizer.encode(require_text("each chunk", chunk)), dtype=torch.long)
        if len(tokens) > model.context_length:
            raise ValueError(f"a chunk of {len(chunk)} characters is {len(tokens)} tokens, more than the "
                             f"{model.context_length} the model was trained on; use shorter chunks")
        if len(tokens) < 2:
            raise ValueError(f"the chunk {chunk!r:.40} is {len(tokens)} token(s); a cost needs a token after the first")
        encoded.append(tokens)
    return encoded


def check_costs(nats, characters):
    """nats and characters: 1-D finite floating-point tensors of one length >= 1, characters all positive."""
    for name, tensor in (("nats", nats), ("characters", characters)):
        require_computable(name, tensor)
        require_floating(name, tensor)
        if tensor.dim() != 1 or len(tensor) == 0:
            raise ValueError(f"{name} must be a 1-D tensor of one value a chunk, got shape {tuple(tensor.shape)}")
        require_finite(name, tensor, "the bits per character would be NaN or inf")
    if nats.shape != characters.shape:
        raise ValueError(f"nats and characters must have one value a chunk each, got {len(nats)} and {len(characters)}")
    if (characters <= 0).any():
        raise ValueError("every chunk must cover at least one character (characters > 0)")


def check_paired_values(first, second):
    """paired_interval's values (N,): dense, on a real device, real numbers (not bool, not complex), finite."""
    for name, values in (("first", first), ("second", second)):
        require_computable(name, values)
        if values.dtype == torch.bool or values.is_complex():
            raise TypeError(f"{name} must hold real numbers (losses, bits), got {values.dtype}")
        require_finite(name, values, "the mean and its interval would be NaN")
