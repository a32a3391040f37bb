"""The launcher of lesson 12's Triton kernel: ``flash_forward(query, key, value, is_causal=False)``.

Triton is imported the first time the kernel is launched, never by ``import attn``. Tensors on a CUDA
GPU run the compiled kernel; tensors on the CPU run the same kernel through Triton's interpreter, which
executes it with NumPy (slowly, but line by line as written). Where Triton is not installed (it ships
for Linux only), ``triton_status()`` says so in a sentence and ``flash_forward`` raises that sentence.
"""

import functools
import importlib.metadata
import importlib.util
import inspect
import os
import sys
from pathlib import Path

import torch

from attn.common.layer_checks import check_flash_inputs

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

MAX_TILE_NUMEL = 2**20  # the most numbers Triton lets one block hold (triton.TRITON_MAX_TENSOR_NUMEL)

# Triton reads TRITON_INTERPRET once, when it is first imported, and some of PyTorch's own modules
# import it (torch.nn.attention.bias, for one). Without CUDA the kernel can only be interpreted, so
# the variable is set as soon as this module is imported, unless Triton is loaded already.
if not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def triton_available():
    """True where Triton is installed, so that ``flash_forward`` can run."""
    return importlib.util.find_spec("triton") is not None


def triton_status():
    """A short sentence saying whether the kernel can run here, and how (compiled, or interpreted)."""
    if not triton_available():
        return "No Triton here (it ships for Linux only): the rest of lesson 12 runs without it"
    where = "compiled for the GPU" if torch.cuda.is_available() else "interpreted on the CPU"
    return f"Triton {importlib.metadata.version('triton')}: the kernel is {where}"


def flash_forward(query, key, value, is_causal=False, block_q=32, block_k=32):
    """Attention output from the Triton kernel: query (B, H, T_q, d), key and value (B, H, T_k, d).

    Returns (B, H, T_q, d) in the query's dtype (float16, bfloat16 or float32; tiles are computed in
    float32). is_causal: query i sees keys up to T_k - T_q + i; rows with no allowed key give zeros.
    block_q and block_k: powers of 2, at least 16 (the smallest tile a GPU's matrix units take).
    Forward only: the output carries no gradient (lesson 12's ``flash_attention`` has the backward).
    """
    block_q, block_k = check_flash_inputs(query, key, value, is_causal, block_q, block_k)
    _check_kernel_arguments(query, block_q, block_k)
    kernel, interpreting = _kernel()
    if query.device.type == "cpu" and not interpreting:
        raise RuntimeError(
            "the tensors are on the CPU, but Triton was imported without TRITON_INTERPRET=1, so it compiles for "
            "a GPU; move them with .cuda(), or restart Python with TRITON_INTERPRET=1 set before anything imports Triton"
        )
    if interpreting and query.dtype == torch.bfloat16:
        raise TypeError(
            "Triton's interpreter (3.7) multiplies bfloat16 tiles wrongly (tl.dot on the CPU), so the kernel "
            "refuses bfloat16 there; pass float16 or float32 on the CPU, or run bfloat16 on a GPU"
        )
    query, key, value = (tensor.contiguous() for tensor in (query, key, value))
    return launch(query, key, value, is_causal, block_q, block_k)


def launch(query, key, value, is_causal, block_q, block_k):
    """Launch the kernel on inputs ``flash_forward`` has already checked: no checks, no copies, no waiting.

    query (B, H, T_q, d), key and value (B, H, T_k, d), contiguous, one dtype and device. This is what
    a benchmark times, after checking the inputs once with ``flash_forward`` (or check_flash_inputs).
    """
    kernel, _ = _kernel()
    batch, num_heads, t_q, head_dim = query.shape
    output = torch.empty_like(query)
    # one program per (query tile, batch x head); -(-a // b) rounds a / b up
    grid = (-(-t_q // block_q), batch * num_heads)
    kernel[grid](  # kernel: flash_forward_kernel under triton.jit
        query, key, value, output,  # each tensor arrives as a pointer
        *query.stride()[:3], *key.stride()[:3],  # the b, h, t strides
        *value.stride()[:3], *output.stride()[:3],
        num_heads, t_q, key.shape[2], head_dim, head_dim**-0.5,
        IS_CAUSAL=is_causal, BLOCK_Q=block_q, BLOCK_K=block_k,
        # the feature axis padded to a power of 2, at least 16
        BLOCK_D=max(16, 1 << (head_dim - 1).bit_length()),
        PRECISION="ieee" if query.dtype == torch.float32 else "tf32",
    )
    return output


def _check_kernel_arguments(query, block_q, block_k):
    """What the kernel needs beyond tiled attention's checks: Triton, a dtype it takes, tile sizes."""
    if not triton_available():
        raise RuntimeError(triton_status())
    if query.dtype not in KERNEL_DTYPES:
        raise TypeError(f"the Triton kernel takes float16, bfloat16 or float32, got {query.dtype}; use query.float()")
    if query.device.type not in ("cpu", "cuda"):
        raise ValueError(f"the Triton kernel runs on a CUDA GPU or, by its interpreter, on the CPU; got {query.device}")
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if block < 16 or block & (block - 1):
            raise ValueError(f"{name} must be a power of 2 of at least 16 (16, 32, 64, ...), got {block}")
    block_d = max(16, 1 << (query.shape[-1] - 1).bit_length())
    largest = max(block_q * block_k, block_q * block_d, block_k * block_d)
    if largest > MAX_TILE_NUMEL:
        raise ValueError(
            f"block_q={block_q}, block_k={block_k} (with d padded to {block_d}) make a tile of {largest:,} numbers; "
            f"Triton holds at most {MAX_TILE_NUMEL:,} in one tile, so use smaller blocks such as 64"
        )


@functools.cache
def _kernel():
    """``flash_forward_kernel`` decorated by triton.jit, and whether Triton interprets it."""
    import triton

    from attn.triton_flash import flash_forward_kernel

    interpreting = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    return triton.jit(flash_forward_kernel), interpreting


def launch_source():
    """The lines of ``launch`` that start the kernel, from its file (lesson 12 prints them)."""
    text = inspect.getsource(launch)
    return text[text.index("    kernel, _ = _kernel()"):].rstrip("\n")


def kernel_source():
    """The source of ``flash_forward_kernel``, read from its file: printing it needs no Triton."""
    text = (Path(__file__).parent / "triton_flash.py").read_text()
    return text[text.index("def flash_forward_kernel"):].rstrip("\n")
