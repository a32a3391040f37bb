"""Lesson 10's exercises: a KV cache's size, the mask a cached step needs, and decoding with a cache by hand.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

import numpy as np

from attn.course.exercises.answers import Array, Function, Number, attempt
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.registry import exercise

# Exercise 10.1's model: 24 layers, 16 query heads of d = 128 sharing H_kv = 4 key/value heads, 32,768 tokens, bfloat16.
LAYERS, HEADS, KV_HEADS, HEAD_DIM, CONTEXT, BYTES = 24, 16, 4, 128, 32_768, 2
CACHED, NEW = 6, 4  # exercise 10.2: positions already cached, tokens in this call (the lesson shows 4 and 3)
EMBED, LAYER_HEADS, BATCH, LENGTH = 16, 4, 2, 6  # exercise 10.3's layer and input


def _cache_gib(kv_heads=KV_HEADS, bytes_per_number=BYTES, tensors=2):
    return tensors * LAYERS * kv_heads * HEAD_DIM * CONTEXT * bytes_per_number / 2**30


def _end_aligned(t_q, t_k):
    return np.tril(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q)  # (T_q, T_k): query i is position T_k - T_q + i


def _layer_and_input():
    """A fresh seeded layer and input (B, T, E), made without touching the learner's random numbers.

    The layer notes every call made to it (see ``_watched_layer_class``), so the check can see how it was used.
    """
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(9)
        layer = _watched_layer_class()(EMBED, LAYER_HEADS).eval()
        x = torch.randn(BATCH, LENGTH, EMBED)
    return layer, x


def _watched_layer_class():
    """A MultiHeadAttention that records, for every call, (tokens in the query, the cache, its length before the call)."""
    from attn.kvcache import KVCache
    from attn.multihead import MultiHeadAttention

    class WatchedMultiHeadAttention(MultiHeadAttention):
        def forward(self, query, *arguments, **options):
            cache = options.get("cache", arguments[6] if len(arguments) > 6 else None)
            tokens = query.shape[1] if getattr(query, "ndim", 0) == 3 else None
            self.calls.append((tokens, cache, len(cache) if isinstance(cache, KVCache) else None))
            return super().forward(query, *arguments, **options)

    def init(self, *arguments):
        MultiHeadAttention.__init__(self, *arguments)
        self.calls = []

    WatchedMultiHeadAttention.__init__ = init
    return WatchedMultiHeadAttention


def _decoding_calls():
    label = f"with a MultiHeadAttention({EMBED}, {LAYER_HEADS}) layer and x of shape {(BATCH, LENGTH, EMBED)}"
    return [(label, _layer_and_input())]


def decode_with_cache(layer, x):
    """Exercise 10.3's solution: x (B, T, E) fed one token at a time through ``layer`` with a KV cache -> (B, T, E)."""
    import torch

    from attn.kvcache import KVCache

    cache = KVCache()
    outputs = []
    for t in range(x.shape[1]):
        token = x[:, t:t + 1]  # (B, 1, E)
        outputs.append(layer(token, token, token, is_causal=True, cache=cache))  # (B, 1, E)
    return torch.cat(outputs, dim=1)  # (B, T, E)


def _known_mistakes():
    """What a decoding loop gives without a cache, and what a non-causal full pass gives: each (B, T, E)."""
    import torch

    layer, x = _layer_and_input()
    with torch.no_grad():
        alone = torch.cat([layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1]) for t in range(LENGTH)], dim=1)
        everything = layer(x, x, x)
    return alone.numpy(), everything.numpy()


@exercise(
    "10.1",
    Number("your size in GiB"),
    solution=_cache_gib,
    success="2 x 24 layers x 4 key/value heads x 128 x 32,768 tokens x 2 bytes = 1.5 GiB for one sequence.",
)
def _cache_size(size, expected):
    if matches(size, _cache_gib(kv_heads=HEADS)):
        return "that counts all 16 query heads; the cache holds only the H_kv = 4 key/value heads."
    if matches(size, _cache_gib(tensors=1)):
        return "that is the keys alone; the cache holds keys and values, twice as much."
    if matches(size, _cache_gib(bytes_per_number=4)):
        return "that counts 4 bytes per number (float32); bfloat16 uses 2."
    if matches(size, expected * 2**30, atol=1):
        return "that is the size in bytes; divide by 2**30 for GiB."
    if matches(size, expected * 2**30 / 1e9):
        return "that is in GB (10**9 bytes); a GiB is 2**30 bytes."
    if matches(size, expected * 1024):
        return "that is in MiB; divide by 1024 for GiB."
    return compare_without_answer(size, expected, "your size in GiB")


@exercise(
    "10.2",
    Array("your mask", kind="mask", meaning="True = may attend"),
    solution=lambda: _end_aligned(NEW, CACHED + NEW),
    success="the 4 new queries are positions 6, 7, 8 and 9, so the triangle is aligned to the end: tril(diagonal=6).",
)
def _step_mask(mask, expected):
    pattern = mask.astype(bool)
    if pattern.shape == (CACHED + NEW, CACHED + NEW):
        return (
            f"this call has T_q = {NEW} queries (the new tokens) against T_k = {CACHED + NEW} keys: the mask has one row "
            "per new token and one column per key."
        )
    if matches(pattern, np.tril(np.ones((NEW, CACHED + NEW), dtype=bool))):
        return (
            "that triangle starts at the top-left, as PyTorch's is_causal=True builds it: new query 0 would see only key 0. "
            f"New query i is position {CACHED} + i, so it may see keys 0 to {CACHED} + i."
        )
    if matches(pattern, np.ones((NEW, CACHED + NEW), dtype=bool)):
        return (
            f"with every entry True the first new token would see the {NEW - 1} tokens after it; it is position "
            f"{CACHED}, so it may see keys 0 to {CACHED}."
        )
    mistake = _step_mask_mistake(pattern, expected)
    if mistake is not None:
        return mistake
    problem = compare(pattern, expected, "your mask")
    if problem is None and mask.dtype != bool:
        return f"the pattern is right, but your mask holds {mask.dtype} numbers; attention functions want dtype=bool."
    return problem


def _step_mask_mistake(pattern, expected):
    """The hint for a (T_q, T_k) mask that is a common mistake of exercise 10.2, or None."""
    if matches(pattern, ~expected):
        return (
            "that is the right triangle with True and False swapped, as if True meant blocked (the convention of "
            "nn.MultiheadAttention's masks); the course's masks, like scaled_dot_product_attention's, mean "
            "True = may attend: drop the ~."
        )
    if matches(pattern, _triangle(diagonal=CACHED - 1)):
        return (
            f"each new query misses its own key, so the diagonal is one too low: new query i is position {CACHED} + i "
            f"and may see keys 0 to {CACHED} + i, itself included, which is tril(diagonal=T_k - T_q)."
        )
    if matches(pattern, _triangle(diagonal=CACHED + 1)):
        return (
            f"each new query also sees the token after it, so the diagonal is one too high: new query i is position "
            f"{CACHED} + i and may see keys 0 to {CACHED} + i, no further, which is tril(diagonal=T_k - T_q)."
        )
    return None


def _triangle(diagonal):
    """The (T_q, T_k) = (4, 10) keep-mask np.tril(..., k=diagonal): exercise 10.2's answer has diagonal 6."""
    return np.tril(np.ones((NEW, CACHED + NEW), dtype=bool), k=diagonal)


@exercise(
    "10.3",
    Function("your decoding function", calls=_decoding_calls, returns=Array("the outputs")),
    solution=lambda: decode_with_cache,
    success="one token per call with one KVCache gives every row of the full causal pass, layer(x, x, x, is_causal=True).",
)
def _decoding_by_hand(decoded, expected):
    output, target = decoded.outputs[0], expected.outputs[0]
    if output.shape == target[:, -1:].shape or output.shape == target[:, -1].shape:
        return "your function returned the last step only; collect every step's output and concatenate them along T."
    if output.shape != target.shape:
        return f"your function returned shape {output.shape}; expected one output row per token, {target.shape}."
    alone, everything = _known_mistakes()
    if matches(output, alone, atol=1e-5):
        return "each step saw only its own token: create one KVCache before the loop and pass it as cache= to every call."
    if matches(output, everything, atol=1e-5):
        return "every token saw all the others, later ones too: feed one token per call, with the cache, and is_causal=True."
    problem = compare(output, target, "what your function returned", atol=1e-5)
    calls, error = _watched_calls(decoded.function)
    if calls and calls[0][2]:
        return (
            f"your KVCache already held {calls[0][2]} positions when your function started (left from an earlier run): "
            "create it inside your function, so that every run starts with an empty cache."
        )
    return problem or _usage_problem(calls, error)


def _watched_calls(function):
    """Run ``function`` once more on a watched layer: its calls (tokens, cache, cached positions), and any error."""
    layer, x = _layer_and_input()
    _, error = attempt(function, layer, x)
    return layer.calls, error


def _usage_problem(calls, error):
    """None if the calls were T calls of one token each through one KVCache, else what the function did instead."""
    if error is not None:
        return f"your function gave the right numbers once, but raised {type(error).__name__} when run again on a fresh layer."
    if not calls:
        return "your function never called the layer it was given; feed x through it, one token per call."
    tokens, caches, _ = zip(*calls, strict=True)
    instead = f"the exercise asks for {LENGTH} calls of one token each, all with cache= one KVCache"
    if any(cache is None for cache in caches):
        return f"the numbers are right, but the layer was called without a cache; {instead}."
    if len({id(cache) for cache in caches}) > 1:
        return f"the numbers are right, but your calls used {len({id(cache) for cache in caches})} different caches; {instead}."
    if any(count != 1 for count in tokens) or len(tokens) != LENGTH:
        fed = ", ".join(str(count) for count in tokens)
        return f"the numbers are right, but your calls fed {fed} tokens; {instead}."
    return None
