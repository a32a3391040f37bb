"""Block quantization as GGUF files store it (lesson 16): Q8_0 and Q4_1, one block by a loop, then all blocks at once.

A quantized row of weights is cut into blocks of 32 consecutive numbers, each stored with its own scale:

- Q8_0, 34 bytes a block: a float16 scale ``d``, then 32 signed bytes ``q``; the weights are ``w = d * q``.
- Q4_1, 20 bytes a block: a float16 scale ``d``, a float16 minimum ``m``, then 16 bytes holding 32 four-bit
  codes ``q`` (0..15); the weights are ``w = d * q + m``. Byte ``j`` holds weight ``j`` in its low four bits
  and weight ``j + 16`` in its high four bits (ggml's order, which the ``gguf`` package's dequantizer follows).

The loop versions (``*_block``) read one block of bytes with ``struct`` and return 32 Python floats; the
vectorised versions take the raw bytes of a whole tensor, ``(..., row_bytes)`` uint8, and return
``(..., row_length)`` float32, computed in float32 as ggml computes it (so the two agree exactly).
``quantize_q4_1`` goes the other way (the lesson measures what a round trip through 4 bits costs).
"""

import struct

import numpy as np

BLOCK = 32  # numbers per block, for both formats
Q8_0_BYTES = 2 + BLOCK  # float16 d, 32 int8
Q4_1_BYTES = 2 + 2 + BLOCK // 2  # float16 d, float16 m, 16 bytes of two 4-bit codes each


# One block, by a loop ------------------------------------------------------------------------------------


def dequantize_q8_0_block(block):
    """The 32 weights of one Q8_0 block (34 bytes: float16 d, 32 int8 q): a list of float, w = d * q."""
    block = _one_block(block, Q8_0_BYTES, "Q8_0")
    (scale,) = struct.unpack("<e", block[:2])
    codes = struct.unpack("<32b", block[2:])
    return [float(np.float32(scale) * np.float32(code)) for code in codes]


def dequantize_q4_1_block(block):
    """The 32 weights of one Q4_1 block (20 bytes: float16 d, float16 m, 16 bytes of 4-bit q): w = d * q + m.

    Byte j of the codes holds weight j in its low nibble and weight j + 16 in its high nibble.
    """
    block = _one_block(block, Q4_1_BYTES, "Q4_1")
    scale, minimum = struct.unpack("<ee", block[:4])
    low = [byte & 0x0F for byte in block[4:]]  # weights 0..15
    high = [byte >> 4 for byte in block[4:]]  # weights 16..31
    return [float(np.float32(scale) * np.float32(code) + np.float32(minimum)) for code in low + high]


def _one_block(block, size, name):
    if isinstance(block, np.ndarray):
        if block.dtype != np.uint8:
            raise TypeError(f"a {name} block must be bytes or a uint8 array, got an array of {block.dtype}")
        block = block.tobytes()
    if not isinstance(block, bytes | bytearray | memoryview):
        raise TypeError(f"a {name} block must be bytes or a uint8 array, got {type(block).__name__}")
    block = bytes(block)
    if len(block) != size:
        raise ValueError(f"a {name} block is {size} bytes, got {len(block)}")
    return block


# Every block at once ---------------------------------------------------------------------------------------


def dequantize_q8_0(raw):
    """Q8_0 bytes (..., n * 34) uint8 -> weights (..., n * 32) float32, every block at once (w = d * q)."""
    blocks = _blocks(raw, Q8_0_BYTES, "Q8_0")  # (..., n, 34)
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)  # (..., n, 1)
    codes = blocks[..., 2:].view(np.int8).astype(np.float32)  # (..., n, 32)
    return (scale * codes).reshape(*blocks.shape[:-2], blocks.shape[-2] * BLOCK)  # -1 cannot be inferred when a size is 0


def dequantize_q4_1(raw):
    """Q4_1 bytes (..., n * 20) uint8 -> weights (..., n * 32) float32, every block at once (w = d * q + m)."""
    blocks = _blocks(raw, Q4_1_BYTES, "Q4_1")  # (..., n, 20)
    scale = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)  # (..., n, 1)
    minimum = blocks[..., 2:4].copy().view(np.float16).astype(np.float32)  # (..., n, 1)
    packed = blocks[..., 4:]  # (..., n, 16)
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float32)  # (..., n, 32)
    return (scale * codes + minimum).reshape(*blocks.shape[:-2], blocks.shape[-2] * BLOCK)


def _blocks(raw, size, name):
    """``raw`` (..., n * size) uint8 seen as (..., n, size), after checking it."""
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8:
        kind = f"an array of {raw.dtype}" if isinstance(raw, np.ndarray) else type(raw).__name__
        raise TypeError(f"{name} data must be a NumPy uint8 array of raw bytes (..., n * {size}), got {kind}")
    if raw.ndim == 0 or raw.shape[-1] % size:
        raise ValueError(f"{name} data must have a last axis of whole {size}-byte blocks, got shape {raw.shape}")
    return np.ascontiguousarray(raw).reshape(*raw.shape[:-1], raw.shape[-1] // size, size)


def dequantize(raw, ggml_type):
    """Raw bytes (..., row_bytes) uint8 of a tensor of ``ggml_type`` ('F32', 'F16', 'BF16', 'Q8_0', 'Q4_1')
    -> its numbers (..., row_length) float32."""
    if not isinstance(ggml_type, str) or ggml_type not in DEQUANTIZERS:
        raise ValueError(f"ggml type {ggml_type!r} is not one this reader dequantizes ({', '.join(DEQUANTIZERS)})")
    return DEQUANTIZERS[ggml_type](raw)


def _plain(dtype):
    def convert(raw):
        _blocks(raw, np.dtype(dtype).itemsize, str(np.dtype(dtype)))
        return np.ascontiguousarray(raw).view(dtype).astype(np.float32)

    return convert


def _bfloat16(raw):
    _blocks(raw, 2, "BF16")
    halves = np.ascontiguousarray(raw).view(np.uint16).astype(np.uint32)
    return (halves << 16).view(np.float32)  # a bfloat16 is the top half of a float32


DEQUANTIZERS = {"F32": _plain("<f4"), "F16": _plain("<f2"), "BF16": _bfloat16, "Q8_0": dequantize_q8_0,
                "Q4_1": dequantize_q4_1}


# And back: what 4 bits cost ------------------------------------------------------------------------------


def quantize_q4_1(weights):
    """Weights (..., n * 32), finite floats -> Q4_1 bytes (..., n * 20) uint8, as ggml's reference quantizer does.

    Per block: m = the smallest weight, d = (largest - smallest) / 15, q = the nearest whole number to
    (w - m) / d, clipped to 0..15 (a block of equal weights gets d = 0 and q = 0); d and m are then
    rounded to float16. Dequantizing gives back each weight to within about d / 2 plus float16's rounding.
    """
    weights = _weights(weights)
    blocks = weights.reshape(*weights.shape[:-1], -1, BLOCK)  # (..., n, 32)
    smallest = blocks.min(axis=-1, keepdims=True)  # (..., n, 1)
    scale = (blocks.max(axis=-1, keepdims=True) - smallest) / np.float32(15)
    inverse = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale != 0)
    codes = np.trunc((blocks - smallest) * inverse + np.float32(0.5)).astype(np.uint8).clip(0, 15)  # (..., n, 32)
    packed = codes[..., :16] | (codes[..., 16:] << np.uint8(4))  # (..., n, 16)
    header = np.concatenate([scale.astype(np.float16).view(np.uint8), smallest.astype(np.float16).view(np.uint8)], -1)
    return np.concatenate([header, packed], axis=-1).reshape(*weights.shape[:-1], -1)  # (..., n * 20)


def _weights(weights):
    if not isinstance(weights, np.ndarray) or not np.issubdtype(weights.dtype, np.floating):
        kind = f"an array of {weights.dtype}" if isinstance(weights, np.ndarray) else type(weights).__name__
        raise TypeError(f"weights must be a NumPy array of floats (..., n * 32), got {kind}; "
                        "convert a tensor with tensor.numpy()")
    if weights.ndim == 0 or weights.shape[-1] == 0 or weights.shape[-1] % BLOCK:
        raise ValueError(f"weights must have a last axis of whole blocks of {BLOCK}, got shape {weights.shape}")
    weights = weights.astype(np.float32)
    if not np.isfinite(weights).all():
        raise ValueError("weights contain NaN or inf, which no 4-bit code can stand for")
    if np.abs(weights).max() > 65504:
        raise ValueError("weights reach past 65504, float16's largest number, so a block's scale or minimum cannot be stored")
    return weights
