"""The course's GGUF reader (attn.gguf) and block quantization (attn.quantization), against the pinned ``gguf`` package.

Files written here with the package's own writer (every value type, F32, F16, Q8_0 and Q4_1 tensors) and the real
SmolLM2 file (when ``python -m attn.pretrained`` has fetched it) read the same through both readers, exactly. A
damaged file (truncated, bytes flipped, lengths made huge) ends in one ValueError sentence, quickly.
"""

import os
import struct
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize as package_dequantize
from gguf.quants import quantize as package_quantize
from hypothesis import given, settings
from hypothesis import strategies as st

from attn import gguf as reader
from attn import quantization
from attn.models.pretrained import FOLDER, GGUF_NAME
from tests.gguf_files import write_gguf

REAL_FILE = FOLDER / GGUF_NAME
REAL_ABSENT = "SmolLM2's GGUF file is not in data/smollm2: fetch it with 'python -m attn.pretrained' (make test does)"
TYPES = gguf.GGMLQuantizationType


def crafted_tensors(seed=0):
    generator = np.random.default_rng(seed)
    return {
        "embedding": (generator.normal(size=(6, 64)).astype(np.float32), "Q8_0"),
        "weight": (generator.normal(size=(3, 4, 96)).astype(np.float32), "Q4_1"),
        "norm": (generator.normal(size=(40,)).astype(np.float32), "F32"),
        "half": (generator.normal(size=(5, 7)).astype(np.float32), "F16"),
        "brain": (generator.normal(size=(3, 9)).astype(np.float32), "BF16"),
        "flat": (np.full((2, 32), 0.25, dtype=np.float32), "Q4_1"),  # equal weights: a block whose scale is 0
    }


METADATA = {
    "test.u8": (7, gguf.GGUFValueType.UINT8), "test.i8": (-7, gguf.GGUFValueType.INT8),
    "test.u16": (700, gguf.GGUFValueType.UINT16), "test.i16": (-700, gguf.GGUFValueType.INT16),
    "test.u32": (70000, gguf.GGUFValueType.UINT32), "test.i32": (-70000, gguf.GGUFValueType.INT32),
    "test.f32": (0.5, gguf.GGUFValueType.FLOAT32), "test.bool": (True, gguf.GGUFValueType.BOOL),
    "test.u64": (2**40, gguf.GGUFValueType.UINT64), "test.i64": (-(2**40), gguf.GGUFValueType.INT64),
    "test.f64": (0.1, gguf.GGUFValueType.FLOAT64), "test.text": ("Bill is going to the théâtre 🎭", gguf.GGUFValueType.STRING),
    "test.words": (["a", "", "ĠBill"], gguf.GGUFValueType.ARRAY), "test.numbers": ([3, 1, 2], gguf.GGUFValueType.ARRAY),
}


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "crafted.gguf", crafted_tensors(), METADATA)


def package_read(path):
    """(metadata, tensors) through the gguf package: GGUFReader and gguf.quants.dequantize, float32."""
    package = gguf.GGUFReader(path)
    metadata = {key: field.contents() for key, field in package.fields.items() if not key.startswith("GGUF.")}
    tensors = {tensor.name: np.asarray(package_dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
               for tensor in package.tensors}
    return metadata, tensors


def largest_difference(ours, theirs):
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].shape == theirs[name].shape, name
        assert ours[name].dtype == np.float32, name
    return max(float(np.abs(ours[name] - theirs[name]).max()) for name in ours)


def test_a_crafted_file_reads_as_the_gguf_package_reads_it(crafted):
    metadata, tensors = reader.read(crafted)
    their_metadata, their_tensors = package_read(crafted)
    assert metadata == their_metadata
    assert metadata["test.text"] == "Bill is going to the théâtre 🎭" and metadata["test.words"] == ["a", "", "ĠBill"]
    assert largest_difference(tensors, their_tensors) == 0.0
    assert tensors["weight"].shape == (3, 4, 96)  # NumPy's order: the file's dimensions reversed


def test_the_header_lists_the_table_without_reading_the_data(crafted):
    header = reader.read_header(crafted)
    assert header.version == 3 and header.alignment == 32 and header.data_offset % 32 == 0
    package = {tensor.name: tensor for tensor in gguf.GGUFReader(crafted).tensors}
    for name, info in header.tensors.items():
        assert info.shape == tuple(int(n) for n in reversed(package[name].shape)), name
        assert (info.ggml_type, info.offset, info.nbytes) == (package[name].tensor_type.name,
                                                              int(package[name].data_offset), int(package[name].n_bytes))
        raw = reader.tensor_bytes(crafted, info)
        assert raw.dtype == np.uint8 and raw.size == info.nbytes
        assert np.array_equal(quantization.dequantize(raw, info.ggml_type).reshape(info.shape), reader.read(crafted)[1][name])


def test_another_alignment_is_read_from_the_metadata(tmp_path):
    path = write_gguf(tmp_path / "aligned.gguf", crafted_tensors(1), alignment=64)
    header = reader.read_header(path)
    assert header.alignment == 64 and all((info.offset - header.data_offset) % 64 == 0 for info in header.tensors.values())
    assert largest_difference(reader.read(path)[1], package_read(path)[1]) == 0.0


def test_every_ggml_type_size_is_the_packages():
    for number, (name, block, block_bytes) in reader.GGML_TYPES.items():
        kind = TYPES(number)
        assert kind.name == name and gguf.GGML_QUANT_SIZES[kind] == (block, block_bytes), name


@pytest.mark.skipif(not REAL_FILE.is_file(), reason=REAL_ABSENT)
def test_every_tensor_of_smollm2s_file_equals_the_gguf_packages():
    start = time.perf_counter()
    metadata, tensors = reader.read(REAL_FILE)
    seconds = time.perf_counter() - start
    their_metadata, their_tensors = package_read(REAL_FILE)
    difference = largest_difference(tensors, their_tensors)
    print(f"{len(tensors)} tensors read in {seconds:.1f} s; largest difference from the gguf package: {difference}")
    assert difference == 0.0 and len(tensors) == 272
    assert metadata == their_metadata
    kinds = {info.ggml_type for info in reader.read_header(REAL_FILE).tensors.values()}
    assert kinds == {"Q4_1", "Q8_0", "F32"}


# Quantization: one block by a loop, all at once, and back -----------------------------------------------


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1))
def test_the_one_block_loops_equal_the_vectorised_versions(seed):
    generator = np.random.default_rng(seed)
    for kind, size, loop, vectorised in (("Q8_0", 34, quantization.dequantize_q8_0_block, quantization.dequantize_q8_0),
                                         ("Q4_1", 20, quantization.dequantize_q4_1_block, quantization.dequantize_q4_1)):
        weights = generator.normal(size=(3, 64)).astype(np.float32) * generator.uniform(0.01, 10)
        raw = package_quantize(weights, TYPES[kind])  # (3, 2 * size)
        by_loop = [loop(raw[row, start:start + size]) for row in range(3) for start in (0, size)]
        assert np.array_equal(np.array(by_loop, dtype=np.float32).reshape(3, 64), vectorised(raw)), kind
        assert np.array_equal(vectorised(raw), package_dequantize(raw, TYPES[kind])), kind


def test_the_nibble_order_is_low_halves_first():
    """Byte j of a Q4_1 block holds weight j (low four bits) and weight j + 16 (high four bits)."""
    block = struct.pack("<ee", 1.0, 0.0) + bytes([0x21] * 16)  # low nibble 1, high nibble 2
    assert quantization.dequantize_q4_1_block(block) == [1.0] * 16 + [2.0] * 16


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1), st.floats(1e-3, 1e3))
def test_quantize_q4_1_writes_the_packages_bytes_and_round_trips_within_half_a_step(seed, spread):
    weights = (np.random.default_rng(seed).normal(size=(4, 96)) * spread).astype(np.float32)
    ours = quantization.quantize_q4_1(weights)
    assert np.array_equal(ours, package_quantize(weights, TYPES.Q4_1))
    back = quantization.dequantize_q4_1(ours)
    step = (weights.reshape(4, 3, 32).max(-1) - weights.reshape(4, 3, 32).min(-1)) / 15  # (4, 3)
    error = np.abs(back - weights).reshape(4, 3, 32).max(-1)
    assert (error <= step / 2 * 1.01 + np.abs(weights).reshape(4, 3, 32).max(-1) * 2e-3).all()


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: quantization.dequantize_q8_0_block(b"\0" * 33), ValueError, "a Q8_0 block is 34 bytes, got 33"),
    (lambda: quantization.dequantize_q4_1_block([0] * 20), TypeError, "bytes or a uint8 array, got list"),
    (lambda: quantization.dequantize_q4_1_block(np.zeros(20, np.int8)), TypeError, "got an array of int8"),
    (lambda: quantization.dequantize_q8_0(np.zeros((2, 35), np.uint8)), ValueError, "whole 34-byte blocks"),
    (lambda: quantization.dequantize_q4_1(np.zeros(20)), TypeError, "NumPy uint8 array of raw bytes"),
    (lambda: quantization.dequantize_q4_1(np.uint8(3)), TypeError, "NumPy uint8 array"),
    (lambda: quantization.dequantize(np.zeros(18, np.uint8), "Q4_0"), ValueError, "not one this reader dequantizes"),
    (lambda: quantization.quantize_q4_1(np.zeros((2, 31), np.float32)), ValueError, "whole blocks of 32"),
    (lambda: quantization.quantize_q4_1(np.zeros((0,), np.float32)), ValueError, "whole blocks of 32"),
    (lambda: quantization.quantize_q4_1(np.full(32, np.nan, np.float32)), ValueError, "NaN or inf"),
    (lambda: quantization.quantize_q4_1(np.full(32, 1e6, np.float32)), ValueError, "float16's largest"),
    (lambda: quantization.quantize_q4_1([0.0] * 32), TypeError, "NumPy array of floats"),
    (lambda: quantization.quantize_q4_1(np.zeros(32, np.int64)), TypeError, "NumPy array of floats"),
])
def test_quantization_refuses_bad_input_with_a_sentence(call, error, message):
    with pytest.raises(error, match=message):
        call()


# Hostile files: one sentence each, quickly ----------------------------------------------------------------


def small_file():
    """The bytes of a small valid GGUF file (all value types, five tensors): the seed of every damaged file."""
    with tempfile.TemporaryDirectory() as folder:
        return write_gguf(Path(folder) / "small.gguf", crafted_tensors(2), METADATA).read_bytes()


SMALL = small_file()
SMALL_END = 2312  # where its last tensor ends (the writer pads the file beyond it): checked below


def read_bytes(data):
    """attn.gguf.read on a file holding ``data``: (metadata, tensors), or the ValueError's sentence; and the seconds."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "damaged.gguf"
        path.write_bytes(data)
        start = time.perf_counter()
        try:
            result = reader.read(path)
        except ValueError as error:
            result = str(error)
        return result, time.perf_counter() - start


def header_with(tensor_rows=(), entries=(), version=3, counts=None):
    """A GGUF file's bytes built by hand: entries (key, type, packed value), rows (name, dims, type, offset)."""
    def text(value):
        encoded = value.encode() if isinstance(value, str) else value
        return struct.pack("<Q", len(encoded)) + encoded

    tensor_count, entry_count = counts or (len(tensor_rows), len(entries))
    data = b"GGUF" + struct.pack("<IQQ", version, tensor_count, entry_count)
    for key, kind, packed in entries:
        data += text(key) + struct.pack("<I", kind) + packed
    for name, dims, kind, offset in tensor_rows:
        data += text(name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims) + struct.pack("<IQ", kind, offset)
    return data + b"\0" * (-len(data) % 32)


ROW = ("w", [32, 2], 0, 0)  # 64 float32 numbers, 256 bytes


@pytest.mark.parametrize(("data", "message"), [
    (b"GGML" + SMALL[4:], "is not a GGUF file: it starts with b'GGML'"),
    (b"GG", "ends in the middle of the magic bytes"),
    (header_with(version=1), "GGUF version 1, which this reader does not know"),
    (header_with(version=3 << 24), "byte-swapped: a big-endian file"),
    (header_with(counts=(2**63, 0)), "the tensor count is 9,223,372,036,854,775,808 items long, more than"),
    (header_with(counts=(0, 2**64 - 1)), "the metadata count is"),
    (header_with(entries=[("k", 8, struct.pack("<Q", 2**62))]), "the length of the value of 'k' is"),
    (header_with(entries=[("k", 9, struct.pack("<IQ", 8, 2**60))]), "the length of the value of 'k' is"),
    (header_with(entries=[("k", 9, struct.pack("<IQ", 4, 2**61))]), "the length of the value of 'k' is"),
    (header_with(entries=[("k", 13, b"")]), "value type 13, which GGUF does not define"),
    (header_with(entries=[("k", 4, b"\0" * 4), ("k", 4, b"\0" * 4)]), "the metadata key 'k' twice"),
    (header_with(entries=[("k", 8, struct.pack("<Q", 2) + b"\xff\xfe")]), "is not valid UTF-8"),
    (header_with(entries=[("k", 9, struct.pack("<IQ", 9, 1) * 9 + struct.pack("<IQ", 4, 0))]), "nests arrays more than 8"),
    (header_with(entries=[("general.alignment", 4, struct.pack("<I", 24))]), "alignment is 24; it must be a power of two"),
    (header_with([("w", [], 0, 0)]), "has 0 dimensions; GGUF allows 1 to 4"),
    (header_with([("w", [1] * 5, 0, 0)]), "has 5 dimensions"),
    (header_with([("w", [0, 4], 0, 0)]), "dimensions [0, 4]; each must be between 1 and 2**62"),
    (header_with([("w", [2**63, 4], 0, 0)]), "each must be between 1 and 2**62"),
    (header_with([("w", [2**61, 2**61, 2**61, 2**61], 0, 0)]), "ends past the end of the file"),
    (header_with([("w", [32, 2], 0, 2**64 - 32)]), "ends past the end of the file"),
    (header_with([("w", [32, 2], 0, 8)]) + b"\0" * 512, "is not aligned"),
    (header_with([("w", [32, 2], 99, 0)]) + b"\0" * 256, "ggml type 99, which this reader does not know"),
    (header_with([("w", [30, 2], 3, 0)]) + b"\0" * 256, "stored in blocks of 32, but its rows hold 30"),
    (header_with([ROW, ("v", [32, 2], 0, 128)]) + b"\0" * 512, "tensors 'w' and 'v' overlap"),
    (header_with([ROW, ROW]) + b"\0" * 512, "lists the tensor 'w' twice"),
    (header_with([("w", [256], 12, 0)]) + b"\0" * 256, "'w' is Q4_K, which this reader does not dequantize"),
])
def test_a_damaged_file_gets_one_sentence(data, message):
    result, seconds = read_bytes(data)
    assert isinstance(result, str), "a damaged file was read without complaint"
    assert message in result, result
    assert seconds < 1 and "\n" not in result


def test_a_file_built_by_hand_reads_when_nothing_is_wrong():
    numbers = np.arange(64, dtype=np.float32)
    (metadata, tensors), _ = read_bytes(header_with([ROW], [("k", 8, struct.pack("<Q", 2) + b"hi")]) + numbers.tobytes())
    assert metadata == {"k": "hi"} and np.array_equal(tensors["w"], numbers.reshape(2, 32))


@settings(max_examples=150)
@given(st.integers(0, SMALL_END - 1))
def test_every_truncation_gets_a_sentence(length):
    result, seconds = read_bytes(SMALL[:length])
    assert isinstance(result, str) and seconds < 1, (length, result)


def test_the_small_files_last_tensor_ends_where_the_truncations_stop():
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "small.gguf"
        path.write_bytes(SMALL)
        assert max(info.offset + info.nbytes for info in reader.read_header(path).tensors.values()) == SMALL_END


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(0, len(SMALL) - 1), st.integers(0, 255)), min_size=1, max_size=4))
def test_flipped_bytes_read_or_get_a_sentence_quickly(flips):
    data = bytearray(SMALL)
    for position, value in flips:
        data[position] = value
    result, seconds = read_bytes(bytes(data))
    assert seconds < 1, flips
    if isinstance(result, str):
        assert result and "\n" not in result
    else:
        metadata, tensors = result
        assert all(array.dtype == np.float32 for array in tensors.values())


@settings(max_examples=150)
@given(st.integers(0, len(SMALL) - 8), st.sampled_from([2**31, 2**32 - 1, 2**40, 2**62, 2**63, 2**64 - 1]))
def test_a_huge_length_anywhere_gets_a_sentence_without_a_huge_allocation(position, value):
    data = bytearray(SMALL)
    data[position:position + 8] = struct.pack("<Q", value)
    result, seconds = read_bytes(bytes(data))
    assert seconds < 1


def test_what_is_not_a_gguf_file_gets_a_sentence(tmp_path):
    with pytest.raises(TypeError, match="the path of a .gguf file must be a str or pathlib.Path"):
        reader.read(3)
    with pytest.raises(FileNotFoundError, match="there is no file at"):
        reader.read(tmp_path / "absent.gguf")
    (tmp_path / "dangling.gguf").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="a symbolic link to nowhere"):
        reader.read_header(tmp_path / "dangling.gguf")
    with pytest.raises(ValueError, match="is a folder; give the path of a .gguf file"):
        reader.read(tmp_path)
    (tmp_path / "empty.gguf").touch()
    with pytest.raises(ValueError, match="is empty, not a GGUF file"):
        reader.read(tmp_path / "empty.gguf")
    os.mkfifo(tmp_path / "pipe.gguf")
    with pytest.raises(ValueError, match="is not an ordinary file"):
        reader.read(tmp_path / "pipe.gguf")  # never opened: opening a pipe would wait for a writer
    with pytest.raises(ValueError, match="is not an ordinary file"):
        reader.read("/dev/zero")


def test_tensor_bytes_wants_a_row_of_this_files_table(crafted, tmp_path):
    info = reader.read_header(crafted).tensors["norm"]
    with pytest.raises(TypeError, match="info must be a TensorInfo"):
        reader.tensor_bytes(crafted, ("norm",))
    with pytest.raises(ValueError, match="has no tensor 'norm' at offset"):
        reader.tensor_bytes(crafted, info._replace(offset=info.offset + 32))
