"""Lesson 23's data: Fashion-MNIST from Debian's dataset-fashion-mnist, its IDX reader and its command line.

The reader is tested on IDX files and a .deb written here byte by byte (no network), and fuzzed as the Austen
readers are (tests/data/test_reader_fuzz.py): every damaged, truncated or crafted file ends in a sentence, in
bounded time, and a header claiming billions of values allocates nothing. The tests that read the real files
run where ``python -m attn.fashion`` has fetched them and say how to fetch them where it has not.
"""

import gzip
import hashlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn import fashion
from attn.data import debian
from attn.data import fashion as fashion_data
from tests.data.test_austen import a_deb
from tests.data.test_reader_fuzz import FLIPS, damaged, sentence_or_result
from tests.hostile_sweep import memory_limit, time_limit

FASHION_ABSENT = "Fashion-MNIST is not fetched here; run 'python -m attn.fashion' (needs apt-get) to run this test"


def idx_bytes(array, code=0x08):
    """An IDX file written here: two zero bytes, the type code, the rank, the big-endian sizes, the values."""
    dtype = dict((c, d) for c, (_, d) in fashion_data.IDX_TYPES.items())[code]
    array = np.asarray(array)
    return bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.astype(dtype).tobytes()


RNG = np.random.default_rng(23)
SMALL = {  # four small files in Fashion-MNIST's layout: 6 training and 3 test pictures of 4 x 4 pixels
    "train-images-idx3-ubyte": idx_bytes(RNG.integers(0, 256, (6, 4, 4))),
    "train-labels-idx1-ubyte": idx_bytes(np.array([0, 1, 2, 9, 8, 7])),
    "t10k-images-idx3-ubyte": idx_bytes(RNG.integers(0, 256, (3, 4, 4))),
    "t10k-labels-idx1-ubyte": idx_bytes(np.array([5, 3, 1])),
}
SMALL_DEB = a_deb({fashion_data.PACKAGE_PATH + name + ".gz": gzip.compress(data, mtime=0) for name, data in SMALL.items()})


@pytest.fixture
def small_package(monkeypatch):
    """The checksums and shapes the reader expects, those of SMALL (the real ones belong to 55 MB of pictures)."""
    table = {name: (hashlib.sha256(data).hexdigest(), fashion_data.read_idx(data).shape) for name, data in SMALL.items()}
    monkeypatch.setattr(fashion_data, "FILES", table)
    return table


def test_the_idx_reader_reads_every_type_and_rank_written_here():
    for code, (_, dtype) in fashion_data.IDX_TYPES.items():
        for shape in ((5,), (2, 3), (2, 1, 3, 2)):
            values = np.arange(np.prod(shape)).reshape(shape) - (0 if dtype == ">u1" else 2)
            read = fashion.read_idx(idx_bytes(values, code))
            assert read.shape == shape and read.dtype == np.dtype(dtype).newbyteorder("=")
            np.testing.assert_array_equal(read, values.astype(dtype))


def test_the_idx_reader_reads_big_endian_values_as_big_endian():
    data = bytes([0, 0, 0x0B, 1]) + struct.pack(">I", 2) + struct.pack(">hh", 258, -2)
    assert fashion.read_idx(data).tolist() == [258, -2]


@pytest.mark.parametrize("data, message", [
    (b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x00", "not an IDX file"),
    (b"\x00\x00", "not an IDX file"),
    (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00", "type code 0x07"),
    (b"\x00\x00\x08\x00", "claims 0 dimensions"),
    (b"\x00\x00\x08\x09" + b"\x00" * 36, "claims 9 dimensions"),
    (b"\x00\x00\x08\x03" + struct.pack(">I", 60_000), "ends inside its header"),
    (b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x00" * 4, "holds 4 bytes after its header"),
    (b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x00" * 6, "holds 6 bytes after its header"),
])
def test_a_damaged_idx_file_gets_a_sentence(data, message):
    with pytest.raises(ValueError, match=message):
        fashion.read_idx(data)


def test_a_header_claiming_billions_of_values_allocates_nothing():
    lying = bytes([0, 0, 0x0E, 4]) + struct.pack(">4I", *(2**32 - 1,) * 4) + b"\x00" * 64
    with time_limit(2.0), memory_limit(2**30), pytest.raises(ValueError, match="claims 4294967295 x"):
        fashion.read_idx(lying)


def test_the_reader_refuses_what_is_not_bytes():
    with pytest.raises(TypeError, match="data must be bytes"):
        fashion.read_idx(np.zeros(3))
    with pytest.raises(TypeError, match="what must name the file"):
        fashion.read_idx(SMALL["t10k-labels-idx1-ubyte"], what=3)


IDX_SAMPLE = SMALL["t10k-images-idx3-ubyte"]


@given(cut=st.integers(0, len(IDX_SAMPLE)), flips=FLIPS)
def test_a_damaged_idx_file_ends_in_a_sentence(cut, flips):
    result = sentence_or_result(lambda: fashion.read_idx(damaged(IDX_SAMPLE, cut, flips)))
    if isinstance(result, np.ndarray):  # read: then it holds exactly the bytes after its header
        assert result.nbytes == len(damaged(IDX_SAMPLE, cut, flips)) - 4 - 4 * result.ndim


@given(sizes=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=8), code=st.sampled_from([8, 9, 11, 12, 13, 14]),
       tail=st.binary(max_size=64))
def test_crafted_idx_headers_never_allocate_what_they_claim(sizes, code, tail):
    data = bytes([0, 0, code, len(sizes)]) + struct.pack(f">{len(sizes)}I", *sizes) + tail
    with memory_limit(2**30):
        result = sentence_or_result(lambda: fashion.read_idx(data))
    assert isinstance(result, ValueError | np.ndarray)


# --- the package, written here ---------------------------------------------------------------------------


def test_the_four_files_are_read_from_a_deb_written_here(small_package):
    files = fashion_data.files_from_deb(SMALL_DEB)
    assert files == SMALL


def test_a_file_that_is_not_the_published_one_is_refused(small_package, monkeypatch):
    table = dict(small_package)
    table["t10k-labels-idx1-ubyte"] = ("0" * 64, table["t10k-labels-idx1-ubyte"][1])
    monkeypatch.setattr(fashion_data, "FILES", table)
    with pytest.raises(ValueError, match="not the published Fashion-MNIST file"):
        fashion_data.files_from_deb(SMALL_DEB)


def test_a_file_of_another_shape_is_refused(small_package, monkeypatch):
    table = dict(small_package)
    table["train-images-idx3-ubyte"] = (table["train-images-idx3-ubyte"][0], (6, 28, 28))
    monkeypatch.setattr(fashion_data, "FILES", table)
    with pytest.raises(ValueError, match=r"shape \(6, 4, 4\), where Fashion-MNIST's holds uint8 values of shape"):
        fashion_data.files_from_deb(SMALL_DEB)


def test_a_package_without_the_files_names_the_package():
    deb = a_deb({"usr/share/doc/readme.txt": b"hello"})
    with pytest.raises(ValueError, match="holds no file ending in .*train-images-idx3-ubyte.gz: is it dataset-fashion-mnist"):
        fashion_data.files_from_deb(deb)


@pytest.mark.parametrize("cut", [len(SMALL_DEB) // 2, len(SMALL_DEB) - 7, 70])
def test_a_truncated_deb_gets_a_sentence(cut, small_package):
    with pytest.raises(ValueError, match="truncated|not a readable tar archive|damaged"):
        fashion_data.files_from_deb(SMALL_DEB[:cut])


@settings(max_examples=60)
@given(cut=st.integers(0, len(SMALL_DEB)), flips=FLIPS)
def test_a_damaged_deb_ends_in_a_sentence(cut, flips):
    sentence_or_result(lambda: fashion_data.files_from_deb(damaged(SMALL_DEB, cut, flips)))


def test_the_command_reads_a_deb_and_the_reader_reads_what_it_wrote(small_package, tmp_path, capsys):
    (tmp_path / "package.deb").write_bytes(SMALL_DEB)
    fashion.main(["--deb", str(tmp_path / "package.deb"), "--out", str(tmp_path / "fashion")])
    assert "Wrote 4 files" in capsys.readouterr().out
    monkey_shapes = {name: shape for name, (_, shape) in small_package.items()}
    assert all((tmp_path / "fashion" / name).read_bytes() == SMALL[name] for name in monkey_shapes)


def test_the_command_ends_a_truncated_deb_in_one_sentence(tmp_path):
    (tmp_path / "package.deb").write_bytes(SMALL_DEB[: len(SMALL_DEB) // 2])
    with pytest.raises(SystemExit) as exit_info:
        fashion.main(["--deb", str(tmp_path / "package.deb"), "--out", str(tmp_path / "fashion")])
    assert "could not be read as dataset-fashion-mnist" in exit_info.value.code


def test_missing_files_name_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m attn.fashion"):
        fashion.fashion_mnist("train", tmp_path)
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        fashion.fashion_mnist("validation", tmp_path)


def test_a_damaged_file_on_disk_gets_a_sentence_before_it_is_read(tmp_path):
    for name in fashion_data.SPLIT_FILES["test"]:
        (tmp_path / name).write_bytes(b"\x00\x00\x08\x01" + struct.pack(">I", 3) + b"\x01\x02\x03")
    with pytest.raises(ValueError, match="fetch the data again"):
        fashion.fashion_mnist("test", tmp_path)


# --- the real files, where they are fetched --------------------------------------------------------------


def test_the_real_files_hold_fashion_mnist():
    try:
        images, labels = fashion.fashion_mnist("test")
    except FileNotFoundError:
        pytest.skip(FASHION_ABSENT)
    assert images.shape == (10_000, 28, 28) and labels.shape == (10_000,)
    assert np.bincount(labels).tolist() == [1_000] * 10  # the test split is balanced
    assert labels[:3].tolist() == [9, 2, 1]  # an ankle boot, a pullover, a pair of trousers
    assert images.dtype == np.uint8 and images.max() == 255


def test_without_apt_get_the_command_says_how_to_fetch_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as exit_info:
        fashion.main(["--out", str(tmp_path / "fashion")])
    assert "apt-get is not available here" in exit_info.value.code and "--deb FILE" in exit_info.value.code
    assert not (tmp_path / "fashion").exists()


def test_a_failed_download_gets_a_sentence(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setattr(debian.shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(debian.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 100, "", "E: no network"))
    with pytest.raises(SystemExit) as exit_info:
        fashion.main(["--out", str(tmp_path / "fashion")])
    assert "apt-get download dataset-fashion-mnist failed: E: no network" in exit_info.value.code
