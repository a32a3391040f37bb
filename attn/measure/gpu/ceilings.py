"""The card's practical ceilings: a large matrix product (compute) and a large copy (memory bandwidth).
"""


import torch

from attn.measure.gpu.cases import measure, random_tensor, seeded


def matmul_ceiling(device, sizes):
    """TFLOP/s of an n x n x n matrix product in the suite's dtype: the card's practical compute ceiling."""
    dtype, n = getattr(torch, sizes.dtype), sizes.matmul_size
    generator = seeded(device)
    a, b = (random_tensor((n, n), device, dtype, generator) for _ in range(2))
    with torch.inference_mode():
        result = measure(lambda _: a @ b, device, sizes)
    result.update(size=[n, n, n], dtype=sizes.dtype, flops=2 * n**3)
    if result["status"] == "ok":
        result["tflops"] = 2 * n**3 / result["seconds"] / 1e12
    return result


def copy_ceiling(device, sizes):
    """TB/s of a large device-to-device copy, counting bytes read plus bytes written: the memory ceiling."""
    count = sizes.copy_mib * 2**20 // 4
    source = random_tensor((count,), device, torch.float32, seeded(device))
    target = torch.empty_like(source)
    result = measure(lambda _: target.copy_(source), device, sizes)
    moved = 2 * source.nbytes
    result.update(bytes_moved=moved)
    if result["status"] == "ok":
        result["tb_per_s"] = moved / result["seconds"] / 1e12
    return result
