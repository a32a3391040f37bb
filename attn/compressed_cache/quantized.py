"""A KV cache stored as codes (lesson 21): KIVI's layout, keys grouped per channel and values per token.

Keys have a few channels with large numbers in every position (outlier channels), so KIVI (Liu et al. 2024)
gives each channel of a run of ``group_size`` positions its own scale: keys are grouped along the positions'
axis. Values have no such channels and are read as a weighted average of positions, so each position's values
are grouped along their channels. A group along the positions can only be made once ``group_size`` positions
exist, so the most recent positions stay in full precision (the residual) until ``residual`` of them have
gathered; then they become codes all at once, and the residual starts again.

Attention reads the codes dequantized, the residual as it is, and this step's own keys and values at full
precision (they are at hand: the layer has just computed them), as ``transformers``' QuantizedCache does with its
quanto backend (its FP8 backend reads a step's own keys back from their codes). ``nbytes`` counts exactly what is
held: packed codes, scales, zero points, residual.
"""

import numbers

import torch

from attn.common.validate import require_choice, type_name
from attn.compressed_cache.base import CompressedCache
from attn.compressed_cache.quantize import FP8, _concatenate, _quantize_fp8, check_bits, check_scale_dtype, dequantize, quantize

KEY_GROUPINGS = ("channel", "token")


class QuantizedKVCache(CompressedCache):
    """QuantizedKVCache(bits=4, group_size=32, residual=32, *, symmetric=False, key_grouping='channel', scale_dtype=None).

    bits: 2, 4, 8 or 16 (integer codes, attn.compressed_cache.quantize) or 'fp8'; group_size: positions per key
    group (key_grouping='channel', KIVI's) or channels per group (values always, keys with key_grouping='token');
    it must divide the head size d. residual: positions kept in full precision until they are made codes together;
    with channel-grouped keys a positive multiple of group_size. FP8 takes group_size=None: one scale for keys and
    one for values, set by the first positions made codes and kept from then on (transformers' FP8 cache, vLLM's);
    a later number beyond 448 times it is stored as 448 times it.
    scale_dtype: the dtype of scales and zero points (default: the keys'). For ONE layer, as attn.KVCache.

    append(keys, values) (B, H_kv, T_new, d) returns (B, H_kv, T, d) each: the held ones as attention reads them,
    then the new ones. ``nbytes``: codes, scales, zero points and residual held; ``bytes_per_token()``:
    nbytes / len(cache); ``quantized_positions`` and ``residual_positions`` say which is which.
    """

    def __init__(self, bits=4, group_size=32, residual=32, *, symmetric=False, key_grouping="channel", scale_dtype=None):
        super().__init__()
        self.bits = check_bits(bits)
        self.key_grouping = require_choice("key_grouping", key_grouping, KEY_GROUPINGS)
        if not isinstance(symmetric, bool):
            raise TypeError(f"symmetric must be True or False, got {type_name(symmetric)} {symmetric!r:.40}")
        self.symmetric = symmetric
        self.scale_dtype = None if scale_dtype is None else check_scale_dtype(scale_dtype, None)
        self.group_size = _check_group_size(self.bits, group_size)
        self.residual = _check_residual(residual, self.bits, self.group_size, key_grouping)
        self._codes = None  # (keys, values) QuantizedTensors (B, H_kv, quantized_positions, d), or None
        self._tail = None  # (keys, values) in full precision (B, H_kv, residual_positions, d), or None

    @property
    def quantized_positions(self):
        """Positions held as codes (the oldest ones)."""
        return 0 if self._codes is None else self._codes[0].shape[2]

    @property
    def residual_positions(self):
        """Positions held in full precision (the most recent ones)."""
        return 0 if self._tail is None else self._tail[0].shape[2]

    @property
    def nbytes(self):
        """Bytes held: packed codes, scales and zero points of keys and values, and the full-precision residual."""
        held = 0 if self._codes is None else self._codes[0].nbytes + self._codes[1].nbytes
        return held + (0 if self._tail is None else self._tail[0].nbytes + self._tail[1].nbytes)

    def reset(self):
        """Forget every position (and the FP8 scales): a new sequence starts."""
        super().reset()
        self._codes = self._tail = None

    def append(self, keys, values):
        """Return held then new keys and values, each (B, H_kv, T, d); then hold the new ones (codes once due)."""
        self._check_new(keys, values)
        if self._layout is None:
            self._check_head_size(keys.shape[-1])
        held_keys, held_values = self._read() if self.stored else (None, None)
        returned = (keys, values) if held_keys is None else (torch.cat((held_keys, keys), dim=2),
                                                             torch.cat((held_values, values), dim=2))
        tail = (keys, values) if self._tail is None else (torch.cat((self._tail[0], keys), dim=2),
                                                          torch.cat((self._tail[1], values), dim=2))
        due = _due(tail[0].shape[2], self.residual)
        codes = self._codes
        if due:  # the oldest `due` residual positions become codes, all checked before anything is kept
            made = (self._quantize_keys(tail[0][:, :, :due]), self._quantize_values(tail[1][:, :, :due]))
            codes = made if codes is None else (_concatenate(codes[0], made[0], 2), _concatenate(codes[1], made[1], 2))
            tail = (tail[0][:, :, due:].clone(), tail[1][:, :, due:].clone())  # clones: no view into a larger tensor
        else:
            tail = (tail[0].clone(), tail[1].clone()) if self._tail is None else tail  # a copy of the caller's tensors
        if self._layout is None:
            self._record_layout(keys)
        self._codes, self._tail = codes, tail
        self._seen += keys.shape[2]
        return returned

    def _quantize_keys(self, keys):
        """(B, H_kv, n, d) keys as codes: per channel over runs of group_size positions (KIVI), or per position."""
        if self.bits == FP8:
            return self._fp8(keys, 0)
        axis = 2 if self.key_grouping == "channel" else 3
        return quantize(keys, self.bits, self.group_size, axis=axis, symmetric=self.symmetric, scale_dtype=self.scale_dtype)

    def _quantize_values(self, values):
        """(B, H_kv, n, d) values as codes: per position, group_size channels a group."""
        if self.bits == FP8:
            return self._fp8(values, 1)
        return quantize(values, self.bits, self.group_size, axis=3, symmetric=self.symmetric, scale_dtype=self.scale_dtype)

    def _fp8(self, tensor, which):
        """FP8 codes with the scale the first codes of keys (which=0) or values (1) set."""
        scale = None if self._codes is None else self._codes[which].scales
        return _quantize_fp8(tensor, None, 3, self.scale_dtype or tensor.dtype, scale)

    def _read(self):
        parts = [] if self._codes is None else [(dequantize(self._codes[0]), dequantize(self._codes[1]))]
        parts += [] if self._tail is None else [self._tail]
        if len(parts) == 1:
            return parts[0]
        return torch.cat((parts[0][0], parts[1][0]), dim=2), torch.cat((parts[0][1], parts[1][1]), dim=2)

    def _check_head_size(self, head_dim):
        if self.bits != FP8 and head_dim % self.group_size:  # values are grouped along their channels
            raise ValueError(f"group_size={self.group_size} does not divide the head size d={head_dim}: values are grouped "
                             f"along their {head_dim} channels; choose a group size that divides it")

    def __repr__(self):
        settings = (f"bits={self.bits!r}, group_size={self.group_size}, residual={self.residual}"
                    + (", symmetric=True" if self.symmetric else "") + (", key_grouping='token'"
                                                                        if self.key_grouping == "token" else ""))
        if not self.stored:
            return f"QuantizedKVCache({settings}, empty)"
        return (f"QuantizedKVCache({settings}, positions={len(self)}, quantized={self.quantized_positions}, "
                f"residual={self.residual_positions}, nbytes={self.nbytes})")


def _due(tail_length, residual):
    """How many of the oldest residual positions become codes now: whole runs of ``residual`` (all with residual 0)."""
    return tail_length if residual == 0 else tail_length // residual * residual


def _check_group_size(bits, group_size):
    if bits == FP8:
        if group_size is not None:
            raise ValueError(f"an FP8 cache keeps one scale for keys and one for values, so it takes group_size=None, "
                             f"got {group_size!r:.40}")
        return None
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise TypeError(f"group_size must be a whole number of positions or channels, got {type_name(group_size)} "
                        f"{group_size!r:.40}")
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    return int(group_size)


def _check_residual(residual, bits, group_size, key_grouping):
    if isinstance(residual, bool) or not isinstance(residual, numbers.Integral):
        raise TypeError(f"residual must be a whole number of positions, got {type_name(residual)} {residual!r:.40}")
    if residual < 0:
        raise ValueError(f"residual must be 0 or more positions, got {residual}")
    if bits != FP8 and key_grouping == "channel" and (residual < group_size or residual % group_size):
        raise ValueError(f"keys grouped per channel are made codes group_size={group_size} positions at a time, so residual "
                         f"must be a positive multiple of {group_size}, got {residual}")
    if residual > 2**40:
        raise ValueError(f"residual={residual} is more positions than any cache could hold (at most 2**40)")
    return int(residual)
