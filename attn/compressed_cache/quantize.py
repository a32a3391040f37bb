"""Integer and FP8 codes for a cache's keys and values (lesson 21): a loop over groups, then all groups at once.

A group is ``group_size`` neighbouring numbers along one axis. Each group keeps one scale (and, asymmetric, one
zero point) and its numbers become small whole codes:

- asymmetric (KIVI's): scale s = (max - min) / (2**bits - 1), zero point z = min; code = round((x - z) / s)
  in 0 .. 2**bits - 1; x is read back as code * s + z. The group's smallest and largest numbers are hit exactly.
- symmetric: s = max |x| / (2**(bits - 1) - 1); code = round(x / s) in -(2**(bits - 1) - 1) .. 2**(bits - 1) - 1
  (stored with 2**(bits - 1) added, so that it is a whole number >= 0); x is read back as code * s.
- FP8 (``bits="fp8"``): x / s cast to torch.float8_e4m3fn (largest 448), s = max |x| / 448 per group, or one s
  for the whole tensor with ``group_size=None`` (as ``transformers``' FP8 cache and vLLM keep it).

Scales and zero points are stored in ``scale_dtype`` (default: x's dtype) and the codes are computed with the
stored ones, so that reading back uses exactly the numbers that made the codes. Codes of 2 and 4 bits are
packed, 4 and 2 to a byte, along the last axis; 16-bit codes take two bytes. ``QuantizedTensor.nbytes`` is
therefore what the storage really holds: packed codes, scales and zero points.
"""

import numbers
from dataclasses import dataclass, replace

import torch

from attn.common.validate import require_computable, require_finite, require_floating, type_name

INTEGER_BITS = (2, 4, 8, 16)
FP8 = "fp8"
FP8_DTYPE = torch.float8_e4m3fn
FP8_LARGEST = torch.finfo(FP8_DTYPE).max  # 448.0
SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class QuantizedTensor:
    """What ``quantize`` returns; ``dequantize`` reads it back.

    packed: uint8 (..., bytes per row) codes packed along the last axis (float8 of x's shape for FP8); scales and
    zero_points: x's shape with the grouped axis counting groups instead of numbers (zero_points None when
    symmetric or FP8; scales of shape () for FP8 with one scale); shape, dtype: x's; axis: the grouped axis (>= 0).
    """

    packed: torch.Tensor
    scales: torch.Tensor
    zero_points: torch.Tensor | None
    shape: tuple
    dtype: torch.dtype
    bits: object  # 2, 4, 8, 16 or "fp8"
    group_size: int | None
    axis: int
    symmetric: bool

    @property
    def codes(self):
        """The codes as whole numbers of x's shape (signed when symmetric); FP8: the float8 numbers themselves."""
        if self.bits == FP8:
            return self.packed
        codes = unpack_codes(self.packed, self.bits, self.shape[-1])
        return codes - 2 ** (self.bits - 1) if self.symmetric else codes

    @property
    def nbytes(self):
        """Bytes held: packed codes, scales and zero points."""
        extra = 0 if self.zero_points is None else self.zero_points.nbytes
        return self.packed.nbytes + self.scales.nbytes + extra


# Packing codes into bytes ------------------------------------------------------------------------------------


def pack_codes(codes, bits):
    """Whole-number codes (..., n), each in 0 .. 2**bits - 1, packed into uint8 (..., bytes) along the last axis.

    8 bits: one code a byte; 4 and 2 bits: 2 and 4 codes a byte, the first in the lowest bits (the last byte
    padded with zeros); 16 bits: two bytes a code, the low byte first.
    """
    bits = _integer_bits(bits)
    require_computable("codes", codes)
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool or codes.dim() == 0:
        raise TypeError(f"codes must be a tensor (..., n) of whole numbers, got {codes.dtype} of shape {tuple(codes.shape)}")
    if codes.numel() and (codes.min() < 0 or codes.max() >= 2**bits):
        raise ValueError(f"{bits}-bit codes must lie in 0 .. {2**bits - 1}, got {codes.min().item()} .. {codes.max().item()}")
    return _pack(codes.long(), bits)


def _pack(codes, bits):
    if bits == 16:
        return torch.stack((codes & 255, codes >> 8), dim=-1).flatten(-2).to(torch.uint8)  # (..., 2n)
    per_byte = 8 // bits
    padding = -codes.shape[-1] % per_byte
    codes = torch.nn.functional.pad(codes, (0, padding)).unflatten(-1, (-1, per_byte))  # (..., bytes, per_byte)
    shifts = torch.arange(per_byte, device=codes.device) * bits
    return (codes << shifts).sum(dim=-1).to(torch.uint8)


def unpack_codes(packed, bits, count):
    """The inverse of ``pack_codes``: uint8 (..., bytes) -> int64 codes (..., count)."""
    bits = _integer_bits(bits)
    require_computable("packed", packed)
    if packed.dtype != torch.uint8 or packed.dim() == 0:
        raise TypeError(f"packed must be a uint8 tensor (..., bytes) from pack_codes, got {packed.dtype} "
                        f"of shape {tuple(packed.shape)}")
    if not isinstance(count, numbers.Integral) or isinstance(count, bool) or not 0 <= count <= packed.shape[-1] * 8 // bits:
        raise ValueError(f"count must be a whole number of codes from 0 to {packed.shape[-1] * 8 // bits} "
                         f"(what {packed.shape[-1]} bytes hold at {bits} bits), got {count!r:.40}")
    return _unpack(packed, bits, int(count))


def _unpack(packed, bits, count):
    packed = packed.long()
    if bits == 16:
        pairs = packed.unflatten(-1, (-1, 2))  # (..., n, 2): low byte, high byte
        return (pairs[..., 0] | (pairs[..., 1] << 8))[..., :count]
    per_byte = 8 // bits
    shifts = torch.arange(per_byte, device=packed.device) * bits
    return ((packed[..., None] >> shifts) & (2**bits - 1)).flatten(-2)[..., :count]


# Quantizing: one group at a time, then all at once ----------------------------------------------------------


def quantize_loop(x, bits, group_size, axis=-1, symmetric=False, scale_dtype=None):
    """``quantize`` written as a loop over the groups, one group's scale and codes at a time (integer bits only).

    Returns the same QuantizedTensor as ``quantize``, number for number (tests/test_compressed_cache.py).
    """
    x, bits, group_size, axis, scale_dtype = _check_quantize(x, bits, group_size, axis, symmetric, scale_dtype)
    if bits == FP8:
        raise ValueError("quantize_loop writes out the integer codes; use quantize(x, 'fp8', ...) for FP8")
    compute = _compute_dtype(x)
    rows = x.movedim(axis, -1).to(compute)  # (..., n): each row's groups run along its last axis
    flat = rows.reshape(-1, rows.shape[-1])  # (rows, n)
    groups = rows.shape[-1] // group_size
    codes = torch.zeros(flat.shape, dtype=torch.long)
    scales = torch.zeros(flat.shape[0], groups, dtype=scale_dtype)
    zeros = torch.zeros(flat.shape[0], groups, dtype=scale_dtype)
    for row in range(flat.shape[0]):
        for group in range(groups):
            numbers_ = flat[row, group * group_size:(group + 1) * group_size]  # (group_size,)
            if symmetric:
                largest = 2 ** (bits - 1) - 1
                scale = (numbers_.abs().max() / largest).to(scale_dtype)
                step = scale.to(compute) if scale > 0 else torch.ones((), dtype=compute)
                group_codes = torch.round(numbers_ / step).clamp(-largest, largest) + 2 ** (bits - 1)
            else:
                scale = ((numbers_.max() - numbers_.min()) / (2**bits - 1)).to(scale_dtype)
                zero = numbers_.min().to(scale_dtype)
                step = scale.to(compute) if scale > 0 else torch.ones((), dtype=compute)
                group_codes = torch.round((numbers_ - zero.to(compute)) / step).clamp(0, 2**bits - 1)
                zeros[row, group] = zero
            scales[row, group] = scale
            codes[row, group * group_size:(group + 1) * group_size] = group_codes.long()
    lead = rows.shape[:-1]
    return _assemble(x, bits, group_size, axis, symmetric, codes.reshape(rows.shape), scales.reshape(*lead, groups),
                     None if symmetric else zeros.reshape(*lead, groups))


def quantize(x, bits, group_size, axis=-1, symmetric=False, scale_dtype=None):
    """Codes for ``x`` with one scale (and zero point) per group of ``group_size`` numbers along ``axis``.

    x: a finite floating-point tensor; bits: 2, 4, 8 or 16 (integer codes) or "fp8"; group_size: a whole number
    dividing x.shape[axis], or None for one group along the whole axis (FP8: one scale for the whole tensor);
    symmetric: integer codes around 0 without a zero point (FP8 is symmetric by itself); scale_dtype: the dtype
    scales and zero points are stored in (default x.dtype). Returns a QuantizedTensor; ``dequantize`` reads it.
    """
    x, bits, group_size, axis, scale_dtype = _check_quantize(x, bits, group_size, axis, symmetric, scale_dtype)
    if bits == FP8:
        return _quantize_fp8(x, group_size, axis, scale_dtype)
    compute = _compute_dtype(x)
    rows = x.movedim(axis, -1).to(compute)  # (..., n)
    grouped = rows.unflatten(-1, (-1, group_size))  # (..., groups, group_size)
    if symmetric:
        largest = 2 ** (bits - 1) - 1
        scales = (grouped.abs().amax(dim=-1) / largest).to(scale_dtype)  # (..., groups)
        step = _nonzero(scales.to(compute))[..., None]
        codes = torch.round(grouped / step).clamp(-largest, largest) + 2 ** (bits - 1)
        zeros = None
    else:
        low, high = grouped.amin(dim=-1), grouped.amax(dim=-1)  # (..., groups)
        scales, zeros = ((high - low) / (2**bits - 1)).to(scale_dtype), low.to(scale_dtype)
        step = _nonzero(scales.to(compute))[..., None]
        codes = torch.round((grouped - zeros.to(compute)[..., None]) / step).clamp(0, 2**bits - 1)
    _require_finite_scales(scales, zeros, scale_dtype)
    return _assemble(x, bits, group_size, axis, symmetric, codes.flatten(-2).long(), scales, zeros)


def _assemble(x, bits, group_size, axis, symmetric, codes, scales, zeros):
    """The QuantizedTensor of codes (..., n) and scales (..., groups) laid out along the last axis; axis moved back."""
    codes = codes.movedim(-1, axis)  # x's shape
    scales = scales.movedim(-1, axis)
    zeros = None if zeros is None else zeros.movedim(-1, axis)
    return QuantizedTensor(_pack(codes, bits), scales.contiguous(), None if zeros is None else zeros.contiguous(),
                           tuple(x.shape), x.dtype, bits, group_size, axis, symmetric)


def _quantize_fp8(x, group_size, axis, scale_dtype, scale=None):
    """FP8 codes: one scale per group along ``axis`` (group_size None: one for the whole tensor, or ``scale``)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    if group_size is None:
        if scale is None:  # max |x| / 448, never 0 (transformers' FP8 cache clamps the same way)
            scale = _fp8_scale(x.abs().amax().to(compute), scale_dtype)
        codes = (x.to(compute) / scale.to(compute)).clamp(-FP8_LARGEST, FP8_LARGEST).to(FP8_DTYPE)
        _require_finite_scales(scale, None, scale_dtype)
        return QuantizedTensor(codes, scale, None, tuple(x.shape), x.dtype, FP8, None, axis, True)
    grouped = x.movedim(axis, -1).to(compute).unflatten(-1, (-1, group_size))  # (..., groups, group_size)
    scales = _fp8_scale(grouped.abs().amax(dim=-1), scale_dtype)
    _require_finite_scales(scales, None, scale_dtype)
    codes = (grouped / scales.to(compute)[..., None]).clamp(-FP8_LARGEST, FP8_LARGEST).to(FP8_DTYPE)
    return QuantizedTensor(codes.flatten(-2).movedim(-1, axis).contiguous(), scales.movedim(-1, axis).contiguous(), None,
                           tuple(x.shape), x.dtype, FP8, group_size, axis, True)


def _fp8_scale(largest, scale_dtype):
    """max |x| / 448 in scale_dtype, never 0: a group of zeros still divides by a positive number."""
    scale = (largest / FP8_LARGEST).clamp(min=torch.finfo(torch.float32).tiny).to(scale_dtype)
    return scale.clamp(min=torch.finfo(scale_dtype).tiny)


def dequantize(quantized):
    """The numbers a QuantizedTensor stands for, in the original shape and dtype: code * scale (+ zero point)."""
    if not isinstance(quantized, QuantizedTensor):
        raise TypeError(f"dequantize reads what quantize returns (an attn.compressed_cache.QuantizedTensor), "
                        f"got {type_name(quantized)}")
    compute = torch.promote_types(quantized.dtype, torch.float32)
    if quantized.bits == FP8:
        codes = quantized.packed.to(compute)  # x's shape
    else:
        codes = _unpack(quantized.packed, quantized.bits, quantized.shape[-1]).to(compute)
        if quantized.symmetric:
            codes = codes - 2 ** (quantized.bits - 1)
    if quantized.group_size is None and quantized.bits == FP8:
        return (codes * quantized.scales.to(compute)).to(quantized.dtype)
    axis = quantized.axis
    size = quantized.group_size or quantized.shape[axis]
    grouped = codes.movedim(axis, -1).unflatten(-1, (-1, size))  # (..., groups, group_size)
    numbers_ = grouped * quantized.scales.movedim(axis, -1).to(compute)[..., None]
    if quantized.zero_points is not None:
        numbers_ = numbers_ + quantized.zero_points.movedim(axis, -1).to(compute)[..., None]
    return numbers_.flatten(-2).movedim(-1, axis).to(quantized.dtype)


# Storage that grows and shrinks along the positions' axis (the caches') --------------------------------------


def _concatenate(first, second, dim):
    """Two QuantizedTensors of the same kind, joined along ``dim`` (not the last, along which codes are packed)."""
    same = ("bits", "group_size", "axis", "symmetric", "dtype")
    if any(getattr(first, name) != getattr(second, name) for name in same) or dim >= len(first.shape) - 1:
        raise ValueError("only QuantizedTensors of one kind join, along an axis before the last")
    one_scale = first.scales.dim() == 0
    if one_scale and not torch.equal(first.scales, second.scales):
        raise ValueError("FP8 tensors with one scale each join only when the scales are the same")
    scales = first.scales if one_scale else torch.cat((first.scales, second.scales), dim=dim)
    zeros = None if first.zero_points is None else torch.cat((first.zero_points, second.zero_points), dim=dim)
    shape = list(first.shape)
    shape[dim] += second.shape[dim]
    return replace(first, packed=torch.cat((first.packed, second.packed), dim=dim), scales=scales, zero_points=zeros,
                   shape=tuple(shape))


def _select(quantized, index, dim):
    """The entries ``index`` (LongTensor broadcast along ``dim``, as torch.gather takes it) of a QuantizedTensor
    whose groups run along its last axis (one scale per entry along ``dim``)."""
    def gather(tensor):
        taken = index.reshape(*index.shape, *([1] * (tensor.dim() - index.dim())))
        taken = taken.expand(*index.shape, *tensor.shape[index.dim():])
        if tensor.dtype == FP8_DTYPE:  # PyTorch gathers no float8 on the CPU: its bytes, then read as float8 again
            return tensor.view(torch.uint8).gather(dim, taken).view(FP8_DTYPE)
        return tensor.gather(dim, taken)

    zeros = None if quantized.zero_points is None else gather(quantized.zero_points)
    shape = list(quantized.shape)
    shape[dim] = index.shape[dim]
    return replace(quantized, packed=gather(quantized.packed), scales=gather(quantized.scales), zero_points=zeros,
                   shape=tuple(shape))


# Checks ---------------------------------------------------------------------------------------------------------


def _compute_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _nonzero(scales):
    """A group whose numbers are all equal has scale 0: its codes are 0, computed with a step of 1 instead."""
    return torch.where(scales > 0, scales, torch.ones_like(scales))


def _integer_bits(bits):
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or bits not in INTEGER_BITS:
        raise ValueError(f"bits must be 2, 4, 8 or 16 for integer codes, got {bits!r:.40}")
    return int(bits)


def check_bits(bits):
    """2, 4, 8, 16 or 'fp8', or a sentence saying what bits may be."""
    if bits == FP8 and isinstance(bits, str):
        return FP8
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral | str):
        raise TypeError(f"bits must be 2, 4, 8 or 16 (integer codes) or 'fp8', got {type_name(bits)} {bits!r:.40}")
    if bits not in INTEGER_BITS:
        reason = " (a cache stored in 0 bits keeps nothing)" if bits == 0 else (
            " (64-bit codes take more room than the float32 numbers they stand for)" if bits == 64 else "")
        raise ValueError(f"bits must be 2, 4, 8 or 16 (integer codes) or 'fp8', got {bits!r:.40}{reason}")
    return int(bits)


def check_scale_dtype(scale_dtype, default):
    if scale_dtype is None:
        return default
    if scale_dtype not in SCALE_DTYPES:
        raise TypeError(f"scale_dtype must be None or one of {', '.join(map(str, SCALE_DTYPES))}, got {scale_dtype!r:.60}")
    return scale_dtype


def _check_quantize(x, bits, group_size, axis, symmetric, scale_dtype):
    require_computable("x", x)
    require_floating("x", x)
    if x.dim() == 0 or x.numel() == 0:
        raise ValueError(f"x must hold numbers along at least one axis, got shape {tuple(x.shape)}")
    bits = check_bits(bits)
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be True or False, got {type_name(symmetric)} {symmetric!r:.40}")
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis must be a whole number from {-x.dim()} to {x.dim() - 1} for x of shape {tuple(x.shape)}, "
                         f"got {axis!r:.40}")
    axis = int(axis) % x.dim()
    length = x.shape[axis]
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
            raise TypeError(f"group_size must be a whole number or None, got {type_name(group_size)} {group_size!r:.40}")
        if group_size < 1 or length % group_size:
            raise ValueError(f"group_size={group_size} must divide the {length} numbers along axis {axis} of x "
                             f"{tuple(x.shape)} into whole groups")
        group_size = int(group_size)
    elif bits != FP8:
        group_size = length
    scale_dtype = check_scale_dtype(scale_dtype, x.dtype)
    require_finite("x", x, "its groups' scales would be NaN or inf")
    return x, bits, group_size, axis, scale_dtype


def _require_finite_scales(scales, zeros, scale_dtype):
    for tensor in (scales,) if zeros is None else (scales, zeros):
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"x's numbers span more than {scale_dtype} can hold as a scale or zero point; "
                             "scale x down, or store the scales in float32 (scale_dtype=torch.float32)")
