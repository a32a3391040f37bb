"""A reader for GGUF, llama.cpp's one-file format for a model's weights and settings (lesson 16), in NumPy.

A GGUF file (version 2 or 3, little-endian) is, in order:

1. the magic bytes ``GGUF``, the version (uint32), the number of tensors and of metadata entries (uint64 each);
2. the metadata: each entry a key (a string: uint64 length, then UTF-8 bytes), a value type (uint32) and a
   value: a number, a bool, a string, or an array (element type uint32, count uint64, the elements);
3. the tensor table: for each tensor its name, its number of dimensions (uint32, at most 4), the dimensions
   (uint64 each, **fastest-varying first**, so a PyTorch weight (out, in) is listed as [in, out]), its ggml type
   (uint32: F32, F16, Q8_0, Q4_1...) and the offset of its bytes from the start of the data;
4. padding up to a multiple of ``general.alignment`` (32 when the metadata does not say), then the data.

``read_header(path)`` reads 1 to 3 and stops; ``tensor_bytes(path, info)`` gives one tensor's raw bytes;
``read(path)`` gives ``(metadata, tensors)`` with every tensor dequantized to float32, NumPy's shape being the
file's dimensions reversed (as the ``gguf`` package gives them). Nothing is allocated before its length has been
compared with the bytes left in the file, so a truncated or damaged file ends in one ValueError sentence.

The rows of W_q and W_k in a Llama GGUF file are in the rotary layout of the course's ``attn.apply_rotary``
(neighbouring pairs): llama.cpp's converter reorders Hugging Face's rows when it writes the file
(``attn.models.llama.rotate_half_to_pairs``), and ``transformers`` undoes it when it reads one.
"""

import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np

from attn.common.sources import source_problem
from attn.quantization import DEQUANTIZERS

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NESTING = 8  # arrays of arrays: deeper than any real file, shallow enough never to exhaust the stack

# value types: id -> (name, struct format); 8 is a string, 9 an array
SCALARS = {0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"), 4: ("UINT32", "<I"),
           5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<B"), 10: ("UINT64", "<Q"), 11: ("INT64", "<q"),
           12: ("FLOAT64", "<d")}
STRING, ARRAY = 8, 9

# ggml's tensor types: id -> (name, numbers per block, bytes per block). Only some are dequantized here
# (attn.quantization.DEQUANTIZERS); the others can still be listed and their bytes read.
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84),
              11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
              15: ("Q8_K", 256, 292), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
              28: ("F64", 1, 8), 30: ("BF16", 1, 2)}


class TensorInfo(NamedTuple):
    """One row of the tensor table. ``shape``: NumPy's order (the file's dimensions reversed);
    ``offset``: where its bytes start, counted from the start of the file; ``nbytes``: how many there are."""

    name: str
    shape: tuple
    ggml_type: str
    offset: int
    nbytes: int


class Header(NamedTuple):
    """Everything before the data: ``metadata`` dict key -> value (int, float, bool, str or list),
    ``tensors`` dict name -> TensorInfo in the file's order, ``alignment`` and ``data_offset`` in bytes."""

    version: int
    metadata: dict
    tensors: dict
    alignment: int
    data_offset: int


class _Cursor:
    """Reads the file's values one after another, checking each length against the bytes left first."""

    def __init__(self, data):
        self.data, self.position = memoryview(data), 0

    def left(self):
        return len(self.data) - self.position

    def take(self, count, what):
        if count > self.left():
            raise ValueError(f"the GGUF file ends in the middle of {what}: {count:,} bytes are needed at byte "
                             f"{self.position:,}, and only {self.left():,} are left (the file is truncated or damaged)")
        start = self.position
        self.position += count
        return self.data[start:self.position]

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what, smallest_item):
        """A uint64 count of items, each at least ``smallest_item`` bytes: checked against the bytes left."""
        number = self.unpack("<Q", what)
        if number * smallest_item > self.left():
            raise ValueError(f"{what} is {number:,} items long, more than the {self.left():,} bytes left in the file "
                             "could hold (the file is truncated or damaged)")
        return number

    def string(self, what):
        raw = bytes(self.take(self.count(f"the length of {what}", 1), what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{what} is not valid UTF-8 text (the file is damaged)") from None

    def value(self, kind, what, depth=0):
        if kind in SCALARS:
            name, fmt = SCALARS[kind]
            number = self.unpack(fmt, what)
            return bool(number) if name == "BOOL" else number
        if kind == STRING:
            return self.string(what)
        if kind == ARRAY:
            return self.array(what, depth)
        raise ValueError(f"{what} has value type {kind}, which GGUF does not define (0 to 12): the file is damaged")

    def array(self, what, depth):
        if depth >= MAX_NESTING:
            raise ValueError(f"{what} nests arrays more than {MAX_NESTING} deep: the file is damaged")
        kind = self.unpack("<I", f"the element type of {what}")
        if kind in SCALARS:
            name, fmt = SCALARS[kind]
            size = struct.calcsize(fmt)
            number = self.count(f"the length of {what}", size)
            values = np.frombuffer(self.take(number * size, what), dtype=np.dtype(fmt)).tolist()
            return [bool(v) for v in values] if name == "BOOL" else values
        smallest = 8 if kind == STRING else 12  # a string's length; an array's element type and count
        number = self.count(f"the length of {what}", smallest)
        return [self.value(kind, f"element {index} of {what}", depth + 1) for index in range(number)]


def _checked_path(path):
    problem = source_problem(path, "a .gguf file")
    if problem is not None:
        error, sentence = problem
        raise error(sentence)
    path = Path(path)
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty, not a GGUF file")
    return path


def _mapped(path):
    """The file's bytes, mapped into memory (read when touched, never copied whole)."""
    try:
        return np.memmap(path, dtype=np.uint8, mode="r")
    except OSError as error:
        raise ValueError(f"{path} cannot be read: {error.strerror or error}") from None


def read_header(path):
    """The magic, version, metadata and tensor table of the GGUF file at ``path``, without the data: a Header."""
    path = _checked_path(path)
    return _parse_header(_mapped(path), path)


def _parse_header(data, path):
    cursor = _Cursor(data)
    magic = bytes(cursor.take(4, "the magic bytes"))
    if magic != MAGIC:
        raise ValueError(f"{path} is not a GGUF file: it starts with {magic!r}, not {MAGIC!r}")
    version = cursor.unpack("<I", "the version")
    if version not in VERSIONS:
        swapped = " (it looks byte-swapped: a big-endian file, which this reader does not read)" if version > 0xFFFF else ""
        raise ValueError(f"{path} is GGUF version {version}, which this reader does not know (2 or 3){swapped}")
    tensor_count = cursor.count("the tensor count", 8 + 4 + 8 + 4 + 8)  # the smallest row of the table
    entry_count = cursor.count("the metadata count", 8 + 4 + 1)  # the smallest metadata entry
    metadata = {}
    for index in range(entry_count):
        key = cursor.string(f"the key of metadata entry {index}")
        if key in metadata:
            raise ValueError(f"{path} has the metadata key {key!r} twice: the file is damaged")
        metadata[key] = cursor.value(cursor.unpack("<I", f"the value type of {key!r}"), f"the value of {key!r}")
    rows = [_tensor_row(cursor, index) for index in range(tensor_count)]
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"{path}'s general.alignment is {alignment!r}; it must be a power of two")
    data_offset = -(-cursor.position // alignment) * alignment
    return Header(version, metadata, _tensor_table(rows, data_offset, alignment, len(data), path), alignment, data_offset)


def _tensor_row(cursor, index):
    """(name, dims fastest first, type id, offset) of one row of the tensor table."""
    name = cursor.string(f"the name of tensor {index}")
    dimensions = cursor.unpack("<I", f"the number of dimensions of {name!r}")
    if not 1 <= dimensions <= MAX_DIMS:
        raise ValueError(f"tensor {name!r} has {dimensions} dimensions; GGUF allows 1 to {MAX_DIMS}: the file is damaged")
    dims = [cursor.unpack("<Q", f"the dimensions of {name!r}") for _ in range(dimensions)]
    kind = cursor.unpack("<I", f"the type of {name!r}")
    offset = cursor.unpack("<Q", f"the offset of {name!r}")
    return name, dims, kind, offset


def _tensor_table(rows, data_offset, alignment, file_size, path):
    """dict name -> TensorInfo, after checking names, types, sizes and that no two tensors overlap."""
    table = {}
    for name, dims, kind, offset in rows:
        if name in table:
            raise ValueError(f"{path} lists the tensor {name!r} twice: the file is damaged")
        if kind not in GGML_TYPES:
            raise ValueError(f"tensor {name!r} has ggml type {kind}, which this reader does not know: the file is "
                             "damaged or newer than this reader")
        type_name, block, block_bytes = GGML_TYPES[kind]
        if any(size == 0 or size >= 2**62 for size in dims):
            raise ValueError(f"tensor {name!r} has dimensions {dims}; each must be between 1 and 2**62 (the file is damaged)")
        if dims[0] % block:
            raise ValueError(f"tensor {name!r} is {type_name}, stored in blocks of {block}, but its rows hold {dims[0]} numbers")
        count = int(np.prod(dims, dtype=object))
        nbytes = count // block * block_bytes
        start = data_offset + offset
        if offset % alignment or start + nbytes > file_size:
            where = "is not aligned" if offset % alignment else "ends past the end of the file"
            raise ValueError(f"tensor {name!r} {where} (offset {offset:,}, {nbytes:,} bytes, "
                             f"the file has {file_size:,} bytes, alignment {alignment}): the file is truncated or damaged")
        table[name] = TensorInfo(name, tuple(reversed(dims)), type_name, start, nbytes)
    ordered = sorted(table.values(), key=lambda info: info.offset)
    for first, second in zip(ordered, ordered[1:], strict=False):
        if first.offset + first.nbytes > second.offset:
            raise ValueError(f"tensors {first.name!r} and {second.name!r} overlap in the file: it is damaged")
    return table


def _raw(data, info):
    """One tensor's bytes as (..., row_bytes) uint8: a view into the mapped file."""
    return data[info.offset:info.offset + info.nbytes].reshape(*info.shape[:-1], -1)


def tensor_bytes(path, info):
    """The raw bytes of one tensor (a TensorInfo from ``read_header(path)``): (..., row_bytes) uint8, a copy."""
    if not isinstance(info, TensorInfo):
        raise TypeError(f"info must be a TensorInfo from read_header(path).tensors, got {type(info).__name__}")
    header = read_header(path)
    if header.tensors.get(info.name) != info:
        raise ValueError(f"{path} has no tensor {info.name!r} at offset {info.offset:,}: take info from this file's header")
    return np.array(_raw(_mapped(Path(path)), info))


def read(path):
    """``(metadata, tensors)`` of the GGUF file at ``path``: metadata a dict, tensors a dict name -> float32 array.

    Each array has NumPy's shape, the file's dimensions reversed: a linear layer's weight (out, in), as PyTorch
    stores it. Every tensor must be of a type ``attn.quantization`` dequantizes (F32, F16, BF16, Q8_0, Q4_1).
    """
    path = _checked_path(path)
    data = _mapped(path)
    header = _parse_header(data, path)
    unknown = [info for info in header.tensors.values() if info.ggml_type not in DEQUANTIZERS]
    if unknown:
        raise ValueError(f"tensor {unknown[0].name!r} is {unknown[0].ggml_type}, which this reader does not dequantize "
                         f"(it reads {', '.join(DEQUANTIZERS)})")
    tensors = {name: DEQUANTIZERS[info.ggml_type](_raw(data, info)).reshape(info.shape)
               for name, info in header.tensors.items()}
    return header.metadata, tensors
