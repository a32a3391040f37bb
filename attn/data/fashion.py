"""Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package, read with the standard library (lesson 23).

Fashion-MNIST (Xiao, Rasul and Vollgraf 2017) holds 70,000 grayscale pictures of clothes, 28 by 28 pixels,
in ten classes: 60,000 to train on and 10,000 to test. Debian packages Zalando's files unchanged: four
gzip-compressed IDX files under ``usr/share/datasets/fashion-mnist/``. This module fetches them as lesson 13
fetches its corpus:

- ``apt-get download dataset-fashion-mnist`` (about 31 MB; no root needed, nothing is installed);
- the .deb is an ``ar`` archive whose ``data.tar.xz`` holds the four files (``attn.data.debian.deb_members``);
- each is gunzipped with a bound on its size, read as IDX (``read_idx``: a header checked against the file's
  size before anything is allocated), its shape checked and its SHA-256 compared with the published file's;
- the four IDX files are written, unpacked, to the git-ignored ``data/fashion/``.

    python -m attn.fashion              # apt-get download, then read; writes data/fashion/*-ubyte
    python -m attn.fashion --deb FILE   # a .deb downloaded by hand (any system, no apt-get)

``fashion_mnist(split)`` returns a split's images and labels as NumPy arrays, or raises FileNotFoundError
naming that command.

The IDX format (LeCun et al.'s MNIST page): two zero bytes, a byte naming the type of the values (0x08
unsigned byte, 0x09 signed byte, 0x0B 16-bit, 0x0C 32-bit integers, 0x0D float32, 0x0E float64), a byte
giving the number of dimensions, one big-endian 32-bit size per dimension, then the values, big-endian,
row-major.
"""

import argparse
import hashlib
import struct
import tempfile
from pathlib import Path

import numpy as np

from attn.data.corpus import inflate
from attn.data.debian import apt_download, deb_argument, deb_members

PACKAGE = "dataset-fashion-mnist"
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
FASHION_FOLDER = REPOSITORY_ROOT / "data" / "fashion"
FETCH_COMMAND = "python -m attn.fashion"
PACKAGE_PATH = "usr/share/datasets/fashion-mnist/"
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
SPLITS = {"train": 60_000, "test": 10_000}
# file name -> (SHA-256 of the unpacked IDX file, its shape): Zalando's files as Debian ships them
# (dataset-fashion-mnist 0.0~git20200523.55506a9-1); the .deb itself may be repacked, so its contents are checked.
FILES = {
    "train-images-idx3-ubyte": ("c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888", (60_000, 28, 28)),
    "train-labels-idx1-ubyte": ("bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9", (60_000,)),
    "t10k-images-idx3-ubyte": ("5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b", (10_000, 28, 28)),
    "t10k-labels-idx1-ubyte": ("0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34", (10_000,)),
}
SPLIT_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
LARGEST_FILE = 48 * 2**20  # the largest file unpacks to 47,040,016 bytes; a member claiming more is refused
# IDX type code -> (name, NumPy's big-endian dtype)
IDX_TYPES = {0x08: ("unsigned byte", ">u1"), 0x09: ("signed byte", ">i1"), 0x0B: ("16-bit integer", ">i2"),
             0x0C: ("32-bit integer", ">i4"), 0x0D: ("float32", ">f4"), 0x0E: ("float64", ">f8")}
LARGEST_RANK = 8


def read_idx(data, what="the IDX file"):
    """The array an IDX file holds: a NumPy array of its shape, in its dtype (native byte order, a copy).

    ``data``: the file's bytes. Every field of the header is checked before the values are read: the two zero
    bytes, a known type code, 1 to 8 dimensions, and sizes whose product times the value's width is exactly what
    follows the header (so a header claiming billions of values allocates nothing). ValueError, naming ``what``,
    for anything else.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data must be bytes (the IDX file's contents), got {type(data).__name__}")
    if not isinstance(what, str):
        raise TypeError(f"what must name the file (text), got {type(what).__name__}")
    data = bytes(data)
    if len(data) < 4 or data[:2] != b"\0\0":
        raise ValueError(f"{what} is not an IDX file (it should start with two zero bytes, a type code and a rank)")
    code, rank = data[2], data[3]
    if code not in IDX_TYPES:
        raise ValueError(f"{what} has the type code 0x{code:02X}, not one of IDX's (0x08, 0x09, 0x0B to 0x0E): it is damaged")
    if not 1 <= rank <= LARGEST_RANK:
        raise ValueError(f"{what} claims {rank} dimensions; an IDX file here has 1 to {LARGEST_RANK}: it is damaged")
    header = 4 + 4 * rank
    if len(data) < header:
        raise ValueError(f"{what} ends inside its header ({len(data)} bytes, where {rank} sizes need {header}): it is truncated")
    shape = struct.unpack(f">{rank}I", data[4:header])
    name, dtype = IDX_TYPES[code]
    width = np.dtype(dtype).itemsize
    count = 1
    for size in shape:  # Python's integers: the product never overflows
        count *= size
    if count * width != len(data) - header:
        raise ValueError(f"{what} claims {' x '.join(map(str, shape))} values of {name} ({count * width:,} bytes) but holds "
                         f"{len(data) - header:,} bytes after its header: it is damaged or truncated")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype[1:])


def _checked_file(name, unpacked):
    """The IDX array of file ``name`` (one of FILES) from its unpacked bytes, its checksum and shape verified."""
    digest, shape = FILES[name]
    array = read_idx(unpacked, name)
    if array.shape != shape or array.dtype != np.uint8:
        raise ValueError(f"{name} holds {array.dtype} values of shape {array.shape}, where Fashion-MNIST's holds uint8 "
                         f"values of shape {shape}: is the package {PACKAGE}?")
    if hashlib.sha256(unpacked).hexdigest() != digest:
        raise ValueError(f"{name} is not the published Fashion-MNIST file (its SHA-256 differs): the package is damaged")
    if name.endswith("labels-idx1-ubyte") and array.max() >= len(CLASS_NAMES):
        raise ValueError(f"{name} holds the label {array.max()}, where Fashion-MNIST's run from 0 to 9")
    return array


def files_from_deb(deb_bytes):
    """dict file name -> the unpacked bytes of each of the four IDX files in a ``dataset-fashion-mnist`` .deb, checked."""
    suffixes = [PACKAGE_PATH + name + ".gz" for name in FILES]
    packed = deb_members(deb_bytes, suffixes, package=PACKAGE, largest=LARGEST_FILE)
    files = {}
    for name, suffix in zip(FILES, suffixes, strict=True):
        if packed[suffix][:2] != b"\x1f\x8b":
            raise ValueError(f"{name}.gz is not gzip-compressed (it should start with 0x1F 0x8B): the package is damaged")
        unpacked = inflate(packed[suffix], 31, f"{name}.gz")
        if len(unpacked) > LARGEST_FILE:
            raise ValueError(f"{name}.gz unpacks to {len(unpacked):,} bytes, more than Fashion-MNIST's files hold")
        _checked_file(name, unpacked)
        files[name] = unpacked
    return files


def download_deb(folder):
    """``apt-get download dataset-fashion-mnist`` into ``folder``; the path of the .deb."""
    return apt_download(PACKAGE, folder, FETCH_COMMAND, "about 31 MB")


def write_files(files, folder):
    """Each IDX file, unpacked, as ``folder``/<name>; returns the paths. ``files``: dict name (one of FILES) -> bytes."""
    from attn.common.destinations import output_folder

    if not isinstance(files, dict) or not all(name in FILES and isinstance(data, bytes) for name, data in files.items()):
        raise TypeError(f"files must be a dict of Fashion-MNIST file name -> bytes (names: {', '.join(FILES)})")
    folder = output_folder(folder, list(files), example="data/fashion")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        paths.append(folder / name)
    return paths


def fashion_mnist(split="train", directory=None):
    """One split of Fashion-MNIST: images, a uint8 NumPy array (N, 28, 28) of pixels 0 (black) to 255, and labels,
    a uint8 array (N,) of classes 0 to 9 (their names: CLASS_NAMES). N is 60,000 for 'train', 10,000 for 'test'.

    Read from ``directory`` (default: data/fashion at the repository's root), where ``python -m attn.fashion``
    writes the files. FileNotFoundError, naming that command, if they are absent; ValueError if one is damaged.
    """
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r:.40}")
    if directory is not None and not isinstance(directory, str | Path):
        raise TypeError(f"directory must be None or a path (str or pathlib.Path), got {type(directory).__name__}")
    if directory is not None:
        from attn.common.destinations import name_problem

        problem = name_problem(directory)
        if problem is not None:
            raise ValueError(f"directory: {problem}")
    folder = FASHION_FOLDER if directory is None else Path(directory)
    arrays = []
    for name in SPLIT_FILES[split]:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"Fashion-MNIST's {name} is not in {folder}; fetch the data with '{FETCH_COMMAND}' "
                                    "(needs apt-get, as on Debian, Ubuntu or WSL), about 10 seconds")
        shape = FILES[name][1]
        expected = 4 + 4 * len(shape) + int(np.prod(shape))
        if path.stat().st_size != expected:  # checked before reading: a huge file is never read in
            raise ValueError(f"{path} holds {path.stat().st_size:,} bytes where Fashion-MNIST's {name} holds {expected:,}: "
                             f"fetch the data again with '{FETCH_COMMAND}'")
        array = read_idx(path.read_bytes(), str(path))
        if array.shape != shape or array.dtype != np.uint8:
            raise ValueError(f"{path} holds {array.dtype} values of shape {array.shape}, not Fashion-MNIST's {shape}: "
                             f"fetch the data again with '{FETCH_COMMAND}'")
        arrays.append(array)
    images, labels = arrays
    if labels.max() >= len(CLASS_NAMES):
        raise ValueError(f"{folder / SPLIT_FILES[split][1]} holds the label {labels.max()}, where Fashion-MNIST's run from "
                         f"0 to 9: fetch the data again with '{FETCH_COMMAND}'")
    return images, labels


def _output_folder(text):  # --out: a folder for the four files (none a folder, nor a link leading out of it)
    from attn.common.destinations import folder_argument

    return folder_argument(*FILES, example="data/fashion")(text)


_deb_file = deb_argument(PACKAGE, "about 31 MB")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=FETCH_COMMAND,
        description=f"Fetch Fashion-MNIST from Debian's {PACKAGE} and write its four IDX files, unpacked.")
    parser.add_argument("--out", type=_output_folder, default=FASHION_FOLDER,
                        help="folder for the files (default: data/fashion at the repository's root)")
    parser.add_argument("--deb", type=_deb_file, default=None,
                        help=f"read this {PACKAGE} .deb instead of downloading one with apt-get")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        deb = args.deb or download_deb(scratch)
        try:
            files = files_from_deb(Path(deb).read_bytes())
        except (ValueError, OSError) as error:
            raise SystemExit(f"{deb} could not be read as {PACKAGE}: {error}") from None
    for path, name in zip(write_files(files, args.out), files, strict=True):
        print(f"{path}: {' x '.join(map(str, FILES[name][1]))} values, checksum verified")
    print(f"Wrote {len(files)} files: {SPLITS['train']:,} training and {SPLITS['test']:,} test images, "
          f"{len(CLASS_NAMES)} classes.")


if __name__ == "__main__":
    main()
