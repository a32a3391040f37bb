"""Decoding with the KV cache: time per generated token and the memory bandwidth it achieves.
"""


import torch
from torch.nn import functional

from attn.kvcache import KVCache
from attn.measure.gpu.cases import OUT_OF_MEMORY, first_line, free_memory, measure, random_tensor, seeded
from attn.measure.gpu.layer import layer_pair

DECODE_COUNTING = (
    "bytes read per step: the cached keys and values, 2 B H T d x element size, at the mean cache length of the timed "
    "steps, divided by the time per token; the course's KVCache also copies the whole cache on every append (torch.cat), "
    "which is not counted, so the memory traffic of a layer step is larger than this; a short cache can stay in the "
    "GPU's L2 cache between steps, so its figure can pass the HBM bandwidth"
)


def decode_case(layer, cache_length, shape, device, dtype, sizes, peaks):
    """Time per generated token with the course's KVCache at one cache length, and the attention read alone."""
    batch, heads, steps = shape["batch"], shape["heads"], shape["steps"]
    head_dim = shape["embed_dim"] // heads
    generator = seeded(device, seed=cache_length)
    keys, values = (random_tensor((batch, heads, cache_length, head_dim), device, dtype, generator) for _ in range(2))
    tokens = random_tensor((batch, steps, shape["embed_dim"]), device, dtype, generator)

    def filled_cache():
        cache = KVCache()
        cache.append(keys, values)
        return cache

    def generate(cache):
        for step in range(steps):
            token = tokens[:, step:step + 1]
            layer(token, token, token, is_causal=True, cache=cache)

    element = keys.element_size()
    mean_length = cache_length + (steps + 1) / 2  # the cache grows by one position per step
    row = {"cache_length": cache_length, "steps": steps, "batch": batch, "heads": heads, "head_dim": head_dim,
           "bytes_read_per_step": 2 * batch * heads * mean_length * head_dim * element}
    with torch.inference_mode():
        step = measure(generate, device, sizes, setup=filled_cache)
        query = tokens[:, :1].reshape(batch, 1, heads, head_dim).transpose(1, 2)  # (B, H, 1, d)
        alone = measure(lambda _: functional.scaled_dot_product_attention(query, keys, values), device, sizes)
    hbm = peaks["matched"]["hbm_tb_per_s"] if peaks["matched"] else None
    if step["status"] == "ok":
        step["seconds_per_token"] = step["seconds"] / steps
        step["tb_per_s"] = row["bytes_read_per_step"] / step["seconds_per_token"] / 1e12
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
