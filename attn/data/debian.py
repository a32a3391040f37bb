"""Reading a Debian package (.deb) with the standard library: the data sets the course fetches with apt-get.

A .deb is an ``ar`` archive (``!<arch>`` then members of 60-byte headers) whose ``data.tar.*`` member, packed
with xz (Debian) or Zstandard (Ubuntu since 21.10), holds the package's files. ``deb_members`` reads the files
wanted in one pass; every damaged or truncated archive ends in a ValueError sentence (fuzzed in
tests/data/test_reader_fuzz.py and tests/data/test_fashion.py). Used by lesson 13's corpus and lesson 23's pictures.
"""

import argparse
import io
import lzma
import shutil
import subprocess
import tarfile
import zlib
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LARGEST_UNPACKED = 64 * 2**20  # a data.tar unpacked by zstd may hold no more


def deb_members(deb_bytes, suffixes, package, largest=LARGEST_UNPACKED):
    """dict suffix -> the bytes of the file whose path ends with it, for each of ``suffixes`` inside a .deb, read in
    one pass over its data.tar.* member; ValueError naming ``package`` if one is missing, or if one announces more
    than ``largest`` bytes."""
    if not isinstance(deb_bytes, bytes | bytearray):
        raise TypeError(f"deb_bytes must be bytes (the .deb file's contents), got {type(deb_bytes).__name__}")
    if not isinstance(suffixes, tuple | list) or not suffixes or not all(isinstance(s, str) and s for s in suffixes):
        raise TypeError(f"suffixes must be a list of the file names wanted (non-empty str), got {type(suffixes).__name__}")
    if not isinstance(package, str) or isinstance(largest, bool) or not isinstance(largest, int) or largest < 1:
        raise TypeError("package must name the Debian package (str) and largest be a whole number of bytes, 1 or more")
    if deb_bytes[:8] != b"!<arch>\n":
        raise ValueError("this is not a .deb file (a Debian package starts with '!<arch>')")
    position = 8
    while position + 60 <= len(deb_bytes):
        name = deb_bytes[position:position + 16].decode("latin-1").strip().rstrip("/")
        size_field = deb_bytes[position + 48:position + 58].decode("latin-1").strip()
        if not size_field.isdigit() or not size_field.isascii():
            raise ValueError(f"the .deb's member {name!r} has the size {size_field!r}, not a number: the file is damaged")
        size = int(size_field)
        body = deb_bytes[position + 60:position + 60 + size]
        if len(body) != size:
            raise ValueError(f"the .deb's member {name!r} announces {size:,} bytes but the file ends first: it is truncated")
        position += 60 + size + size % 2  # members are aligned to even offsets
        if name.startswith("data.tar"):
            return _tar_members(name, body, tuple(suffixes), package, largest)
    raise ValueError("the .deb holds no data.tar member: the file is damaged or not a Debian package")


def _tar_members(name, body, suffixes, package, largest):
    """dict suffix -> the file ending in it in the .deb's ``data.tar.*`` member ``body``; ValueError if one is missing."""
    if name.endswith(".zst") or body[:4] == ZSTD_MAGIC:
        body = _unzstd(name, body, package)
    found = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            for member in archive:
                wanted = [s for s in suffixes if s not in found and member.name.lstrip("./").endswith(s)]
                if wanted and member.isfile():
                    if member.size > largest:
                        raise ValueError(f"{member.name} announces {member.size:,} bytes, far more than the package holds")
                    found[wanted[0]] = archive.extractfile(member).read()
                    if len(found) == len(suffixes):
                        return found
    except (tarfile.TarError, EOFError, zlib.error, OSError, lzma.LZMAError) as error:
        raise ValueError(f"the .deb's {name} is not a readable tar archive ({type(error).__name__}: {error})") from None
    missing = next(s for s in suffixes if s not in found)
    raise ValueError(f"the package holds no file ending in {missing}: is it {package}?")


def _unzstd(name, body, package):
    """``body`` unpacked from Zstandard with the ``zstd`` tool, or a sentence saying how to read it."""
    tool = shutil.which("zstd")
    if tool is None:
        raise ValueError(
            f"the .deb's {name} is compressed with Zstandard (as Ubuntu's packages are since 21.10), which Python's "
            "standard library cannot unpack; install the zstd tool (apt-get install zstd) and run again, or use "
            f"Debian's {package} .deb (packed with xz) from https://packages.debian.org/stable/{package}"
        )
    done = subprocess.run([tool, "-d", "-c", "-q"], input=body, capture_output=True, check=False)
    if done.returncode != 0 or len(done.stdout) > LARGEST_UNPACKED:
        raise ValueError(f"the .deb's {name} could not be unpacked by zstd: the file is damaged")
    return done.stdout


def apt_download(package, folder, command, size):
    """``apt-get download PACKAGE`` into ``folder`` (no root needed, nothing installed); the path of the .deb.

    ``command`` is the course's command that called it, named in the way out when apt-get is missing; ``size`` the
    download's size in words ("about 31 MB"). Every failure is a SystemExit sentence.
    """
    if shutil.which("apt-get") is None:
        raise SystemExit(
            "apt-get is not available here (it is Debian's and Ubuntu's package tool). Download "
            f"{package}'s .deb from https://packages.debian.org/stable/{package} by hand and run "
            f"'{command} --deb FILE', or run this command in WSL or a Debian container."
        )
    print(f"Downloading {package} with apt-get ({size})...", flush=True)
    done = subprocess.run(["apt-get", "download", package], cwd=folder, capture_output=True, text=True)
    debs = sorted(Path(folder).glob(f"{package}_*.deb"))
    if done.returncode != 0 or not debs:
        raise SystemExit(f"apt-get download {package} failed: {done.stderr.strip()} (try 'apt-get update' first)")
    return debs[0]


LARGEST_DEB = 256 * 2**20  # a --deb file larger than this is not one of the course's packages: refused before reading


def deb_argument(package, size):
    """An argparse type for ``--deb FILE``: the path of an existing file no larger than LARGEST_DEB, or a sentence."""

    def deb_file(text):
        from attn.common.destinations import name_problem

        problem = name_problem(text)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        path = Path(text)
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"{path} is not a file; give the path of {package}'s .deb")
        if path.stat().st_size > LARGEST_DEB:
            raise argparse.ArgumentTypeError(f"{path} holds {path.stat().st_size:,} bytes, far more than {package}'s .deb "
                                             f"({size}): is it the right file?")
        return path

    return deb_file
