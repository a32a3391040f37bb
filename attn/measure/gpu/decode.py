"""Decoding with the KV cache: time per generated token and the memory bandwidth it achieves.
"""


import torch
from torch.nn import functional

from attn.kvcache import PreallocatedKVCache
from attn.measure.gpu.cases import OUT_OF_MEMORY, first_line, free_memory, measure, random_tensor, seeded
from attn.measure.gpu.layer import layer_pair, without_value_checks

DECODE_COUNTING = (
    "bytes moved per step: the layer's weights, read once (the four projections and their biases); the new "
    "position's key and value, written into the cache in place (attn.kvcache.PreallocatedKVCache, as serving systems "
    "do: nothing already cached is copied); and the cached keys and values, 2 B H_kv T d x element size, read by "
    "attention, at the mean cache length of the timed steps; divided by the time per token. The token's own "
    "activations (a few B x E vectors) are not counted. The layer runs without its value checks, as in the layer "
    "comparison. A short cache and the weights can stay in the GPU's L2 cache "
    "between steps, so a figure can pass the HBM bandwidth"
)


def step_bytes(layer, batch, positions, element_size):
    """What one decoding step of ``layer`` moves through memory once ``positions`` keys and values are cached
    (the new one included): {"weights": read, "cache_written": the new key and value, "cache_read": all of them}."""
    per_position = 2 * batch * layer.num_kv_heads * layer.head_dim * element_size  # one key and one value
    return {"weights": sum(parameter.nbytes for parameter in layer.parameters()),
            "cache_written": per_position, "cache_read": per_position * positions}


def decode_case(layer, cache_length, shape, device, dtype, sizes, peaks):
    """Time per generated token with a preallocated KV cache at one cache length, and the attention read alone."""
    batch, heads, steps = shape["batch"], shape["heads"], shape["steps"]
    head_dim = shape["embed_dim"] // heads
    generator = seeded(device, seed=cache_length)
    keys, values = (random_tensor((batch, layer.num_kv_heads, cache_length, head_dim), device, dtype, generator)
                    for _ in range(2))
    tokens = random_tensor((batch, steps, shape["embed_dim"]), device, dtype, generator)
    cache = PreallocatedKVCache(capacity=cache_length + steps)

    def filled_cache():  # untimed: the prefix written again into the same buffers
        cache.reset()
        cache.append(keys, values)
        return cache

    def generate(cache):
        for step in range(steps):
            token = tokens[:, step:step + 1]
            layer(token, token, token, is_causal=True, cache=cache)

    mean_positions = cache_length + (steps + 1) / 2  # step s reads cache_length + s + 1 positions
    parts = step_bytes(layer, batch, mean_positions, keys.element_size())
    row = {"cache_length": cache_length, "steps": steps, "batch": batch, "heads": heads, "head_dim": head_dim,
           "cache": "attn.kvcache.PreallocatedKVCache", "bytes_per_step_parts": parts,
           "bytes_per_step": sum(parts.values())}
    with torch.inference_mode():
        step = measure(generate, device, sizes, setup=filled_cache, context=without_value_checks)  # checks: see layer.py
        query = tokens[:, :1].reshape(batch, 1, heads, head_dim).transpose(1, 2)  # (B, H, 1, d)
        alone = measure(lambda _: functional.scaled_dot_product_attention(query, keys, values), device, sizes)
    hbm = peaks["matched"]["hbm_tb_per_s"] if peaks["matched"] else None
    if step["status"] == "ok":
        step["seconds_per_token"] = step["seconds"] / steps
        step["tb_per_s"] = row["bytes_per_step"] / step["seconds_per_token"] / 1e12
        step["share_of_hbm"] = step["tb_per_s"] / hbm if hbm else None
    if alone["status"] == "ok":
        alone["tb_per_s"] = 2 * keys.nbytes / alone["seconds"] / 1e12
        alone["share_of_hbm"] = alone["tb_per_s"] / hbm if hbm else None
    row.update(layer_step=step, attention_only=alone)
    return row


def decode_sweep(device, sizes, peaks):
    """Decoding with the KV cache at every cache length of ``sizes.decode``."""
    shape = sizes.decode
    dtype = getattr(torch, sizes.dtype)
    layer, _ = layer_pair(device, dtype, shape["embed_dim"], shape["heads"])
    layer.eval()
    rows = []
    for cache_length in shape["cache_lengths"]:
        try:
            rows.append(decode_case(layer, cache_length, shape, device, dtype, sizes, peaks))
        except OUT_OF_MEMORY as error:
            rows.append({"cache_length": cache_length, "status": "out of memory", "reason": first_line(error)})
        free_memory(device)
    return rows
