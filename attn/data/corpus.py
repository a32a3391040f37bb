"""Jane Austen's six novels from Debian's ``r-cran-janeaustenr`` package, read without R (lesson 13).

The package stores each novel as an R character vector (one element per printed line) in R's
lazy-load files ``data/Rdata.rdx`` and ``data/Rdata.rdb``. This module reads them with the standard
library alone:

- a ``.deb`` is an ``ar`` archive whose ``data.tar.xz`` member holds the package's files;
- ``Rdata.rdx`` is a gzip-compressed R serialisation of a list whose ``variables`` entry maps each
  novel's name to an (offset, length) pair in ``Rdata.rdb``;
- each such chunk of ``Rdata.rdb`` is a 4-byte big-endian length, then a zlib stream holding an XDR
  (big-endian) serialisation, version 2 or 3, of one character vector (R Internals, "Serialization
  Formats"). ``read_r_object`` reads the few kinds of R objects these files contain.

The lines are then joined into paragraphs (a blank line ends one), the underscores that mark
italics (``_very_``) are dropped, as a reader does not see them, and chapter headings ("CHAPTER 1",
"VOLUME I") are kept as paragraphs of their own, so the model sees where chapters begin. Each novel
becomes one UTF-8 text file, one paragraph per line, in a folder that git ignores:

    python -m attn.corpus              # apt-get download, then read; writes data/austen/*.txt
    python -m attn.corpus --deb FILE   # a .deb downloaded by hand (any system, no apt-get)

``austen()`` returns the novels as a dict, or raises FileNotFoundError naming that command.
"""

import argparse
import re
import struct
import sys
import tempfile
import zlib
from pathlib import Path

from attn.data.debian import apt_download, deb_argument, deb_members

PACKAGE = "r-cran-janeaustenr"
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
CORPUS_FOLDER = REPOSITORY_ROOT / "data" / "austen"
FETCH_COMMAND = "python -m attn.corpus"
DATA_PATH = "usr/lib/R/site-library/janeaustenr/data/Rdata"
# the six novels, by the names the R package gives them, with their titles
TITLES = {
    "sensesensibility": "Sense and Sensibility",
    "prideprejudice": "Pride and Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}

# R's serialisation: the low byte of each item's flags is its type (R Internals, "Serialization Formats")
NILSXP, SYMSXP, LISTSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP = 0, 1, 2, 9, 10, 13, 14, 16, 19
REFSXP, NILVALUE_SXP = 255, 254
HAS_ATTRIBUTES, HAS_TAG = 1 << 9, 1 << 10
LATIN1_MASK = 1 << 2
# The package's files are about 1.6 MB packed and 5 MB unpacked; anything announcing far more is damaged or crafted,
# and is refused before it is unpacked (a few hundred bytes of zlib can claim gigabytes).
LARGEST_UNPACKED = 64 * 2**20


class _XDRReader:
    """Reads one R serialisation (``X\\n`` format: big-endian integers) item by item."""

    def __init__(self, data):
        self.data, self.position, self.references = data, 0, []

    def take(self, count):
        if count < 0:
            raise ValueError(f"the R serialisation announces a length of {count} bytes: the file is damaged")
        if self.position + count > len(self.data):
            raise ValueError("the R serialisation ends in the middle of an item: the file is damaged")
        chunk = self.data[self.position:self.position + count]
        self.position += count
        return chunk

    def integer(self):
        return struct.unpack(">i", self.take(4))[0]

    def length(self):
        value = self.integer()
        if value == -1:  # a long vector: the length follows as two 32-bit halves
            upper, lower = self.integer(), self.integer()
            value = (upper << 32) + (lower & 0xFFFFFFFF)
        if value < 0:
            raise ValueError(f"the R serialisation announces a vector of {value} items: the file is damaged")
        if value > len(self.data) - self.position:  # every item takes at least a byte
            raise ValueError(f"the R serialisation ends in the middle of an item: {value:,} items announced, more than it holds")
        return value

    def header(self):
        if self.take(2) != b"X\n":
            raise ValueError("not an R serialisation in XDR format (it should start with 'X\\n')")
        version = self.integer()
        if version not in (2, 3):
            raise ValueError(f"R serialisation version {version} is not one this reader knows (2 or 3)")
        self.take(8)  # the R versions that wrote it and that can read it
        if version == 3:
            self.take(self.integer())  # the native encoding's name, e.g. UTF-8

    def item(self):
        """The next R object: None, str, list, dict (a named list), or a Python list of numbers."""
        flags = self.integer()
        kind = flags & 0xFF
        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:  # an object seen before, by its place in the reference table
            index = flags >> 8 or self.integer()
            return self.references[self._checked(index)]
        if kind == SYMSXP:
            name = self.item()
            self.references.append(name)
            return name
        if kind == LISTSXP:
            return self._pairlist(flags)
        if kind == CHARSXP:
            return self._string(flags)
        readers = {
            STRSXP: lambda n: [self.item() for _ in range(n)],
            VECSXP: lambda n: [self.item() for _ in range(n)],
            INTSXP: lambda n: list(struct.unpack(f">{n}i", self.take(4 * n))),
            LGLSXP: lambda n: list(struct.unpack(f">{n}i", self.take(4 * n))),
            REALSXP: lambda n: list(struct.unpack(f">{n}d", self.take(8 * n))),
        }
        if kind not in readers:
            raise ValueError(f"R object type {kind} is not one this reader knows (the file holds something unexpected)")
        values = readers[kind](self.length())
        if flags & HAS_ATTRIBUTES:
            names = self._names(self.item(), values)  # attributes: a pairlist
            if names is not None and kind == VECSXP:
                return dict(zip(names, values, strict=True))
        return values

    def _checked(self, index):
        """The place in the reference table of object ``index`` (1-based), which must have been defined."""
        if not 1 <= index <= len(self.references):
            raise ValueError(f"the R serialisation refers to object {index}, which it never defined: the file is damaged")
        return index - 1

    @staticmethod
    def _names(attributes, values):
        """The "names" attribute (a list of str, one per item of ``values``), or None when there is none."""
        names = attributes.get("names") if isinstance(attributes, dict) else attributes  # not a pairlist: refused below
        if names is not None and (not isinstance(names, list) or len(names) != len(values)
                                  or not all(isinstance(name, str) for name in names)):
            raise ValueError("an R list's names do not match its items: the file is damaged")
        return names

    def _pairlist(self, flags):
        """A pairlist (R's linked list, here attributes) as a dict: tag -> value."""
        result = {}
        while True:
            if flags & HAS_ATTRIBUTES:
                self.item()
            tag = self.item() if flags & HAS_TAG else len(result)
            if not isinstance(tag, str | int | type(None)):
                raise ValueError("an R pairlist has a tag that is not a name: the file is damaged")
            result[tag] = self.item()
            flags = self.integer()
            if flags & 0xFF == NILVALUE_SXP:
                return result
            if flags & 0xFF != LISTSXP:
                raise ValueError("an R pairlist ends in something that is not a pairlist: the file is damaged")

    def _string(self, flags):
        size = self.integer()
        if size == -1:
            return None  # NA_character_
        raw = self.take(size)
        try:
            return raw.decode("latin-1" if flags >> 12 & LATIN1_MASK else "utf-8")
        except UnicodeDecodeError:
            raise ValueError("an R string is not valid UTF-8: the file is damaged") from None


def read_r_object(data):
    """One R object from the bytes of an XDR serialisation (version 2 or 3); ValueError if they are not one."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    reader = _XDRReader(bytes(data))
    reader.header()
    try:
        return reader.item()
    except RecursionError:
        raise ValueError("the R serialisation nests objects thousands deep: the file is damaged or crafted") from None


def inflate(data, wbits, what, announced=None):
    """``data`` unpacked by zlib (``wbits``: 15 zlib, 31 gzip), never more than ``announced`` or 64 MB; else ValueError."""
    if not isinstance(data, bytes | bytearray):
        raise TypeError(f"data must be bytes (a compressed stream), got {type(data).__name__}")
    if wbits not in (15, 31) or isinstance(wbits, bool):
        raise ValueError(f"wbits must be 15 (zlib) or 31 (gzip), got {wbits!r:.40}")
    if not isinstance(what, str) or announced is not None and (type(announced) is not int or announced < 0):
        raise ValueError(f"what must name the stream (text) and announced be None or a whole number of bytes, 0 or "
                         f"more, got {type(what).__name__}, {announced!r:.40}")
    limit = LARGEST_UNPACKED if announced is None else announced
    if limit > LARGEST_UNPACKED:
        raise ValueError(f"{what} announces {limit:,} bytes unpacked, far more than the package holds: the file is damaged")
    unpacker = zlib.decompressobj(wbits)
    try:
        unpacked = unpacker.decompress(data, limit + 1)
    except zlib.error as error:
        raise ValueError(f"{what} is not a complete zlib stream ({error}): the file is damaged") from None
    if len(unpacked) > limit:
        raise ValueError(f"{what} unpacks to more than the {limit:,} bytes announced: the file is damaged")
    if not unpacker.eof:
        raise ValueError(f"{what} ends before its compressed stream does: the file is truncated")
    if announced is not None and len(unpacked) != announced:
        raise ValueError(f"{what}: {len(unpacked):,} bytes unpacked where the file announces {announced:,}")
    return unpacked


def read_lazy_load(rdx_bytes, rdb_bytes):
    """Every variable of an R lazy-load database: dict name -> object (here: novel -> list of lines)."""
    for name, value in (("rdx_bytes", rdx_bytes), ("rdb_bytes", rdb_bytes)):
        if not isinstance(value, bytes | bytearray):
            raise TypeError(f"{name} must be bytes (the file's contents), got {type(value).__name__}")
    gzipped = rdx_bytes[:2] == b"\x1f\x8b"
    index = read_r_object(inflate(rdx_bytes if gzipped else rdx_bytes[4:], 31 if gzipped else 15, "the index (Rdata.rdx)"))
    variables_index = index.get("variables") if isinstance(index, dict) else None
    if not isinstance(variables_index, dict):
        raise ValueError("the index (Rdata.rdx) has no table of variables: is it an R lazy-load database?")
    variables = {}
    for name, place in variables_index.items():
        if not (isinstance(place, list) and len(place) == 2 and all(isinstance(n, int) and n >= 0 for n in place)):
            raise ValueError(f"{name}: the index gives {str(place)[:40]} where an (offset, length) pair should be")
        offset, length = place
        chunk = rdb_bytes[offset:offset + length]
        if length < 4 or len(chunk) != length:
            raise ValueError(f"{name}: the index points outside Rdata.rdb (offset {offset}, length {length}): it is damaged")
        expected = struct.unpack(">I", chunk[:4])[0]  # the serialisation's length, then its zlib stream
        variables[name] = read_r_object(inflate(chunk[4:], 15, name, announced=expected))
    return variables


def deb_member(deb_bytes, suffix):
    """The bytes of the file whose path ends with ``suffix`` inside a .deb (an ar archive holding data.tar.*)."""
    return deb_members(deb_bytes, (suffix,), package=PACKAGE, largest=LARGEST_UNPACKED)[suffix]


def paragraphs(lines):
    """The novel's lines (hard-wrapped, blank between paragraphs) -> paragraphs, italics underscores dropped."""
    if not isinstance(lines, list | tuple) or not all(line is None or isinstance(line, str) for line in lines):
        raise TypeError(f"lines must be a list of str (None for a missing line), got {type(lines).__name__}")
    result, current = [], []
    for line in lines:
        line = (line or "").strip()
        if line:
            current.append(line)
        elif current:
            result.append(" ".join(current))
            current = []
    if current:
        result.append(" ".join(current))
    return [re.sub(r"\s+", " ", paragraph.replace("_", "")).strip() for paragraph in result]


def novels_from_deb(deb_bytes):
    """dict novel name -> text (one paragraph per line), in the order of TITLES."""
    variables = read_lazy_load(deb_member(deb_bytes, DATA_PATH + ".rdx"), deb_member(deb_bytes, DATA_PATH + ".rdb"))
    missing = [name for name in TITLES if name not in variables]
    if missing:
        raise ValueError(f"the package lacks the novels {missing}: is it {PACKAGE}?")
    return {name: "\n".join(paragraphs(variables[name])) + "\n" for name in TITLES}


def download_deb(folder):
    """``apt-get download r-cran-janeaustenr`` into ``folder``; the path of the .deb."""
    return apt_download(PACKAGE, folder, FETCH_COMMAND, "about 1.6 MB")


def write_corpus(novels, folder):
    """One UTF-8 file per novel, ``folder``/<name>.txt; returns the paths."""
    from attn.common.destinations import output_folder

    if not isinstance(novels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in novels.items()):
        raise TypeError(f"novels must be a dict of name -> text (str), got {type(novels).__name__}")
    folder = output_folder(folder, [f"{name}.txt" for name in novels], example="data/austen")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in novels.items():
        path = folder / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def austen(directory=None):
    """The six novels: dict name -> text (one paragraph per line), in publication order.

    Read from ``directory`` (default: data/austen at the repository's root), where
    ``python -m attn.corpus`` writes them. FileNotFoundError, naming that command, if they are absent.
    """
    if directory is not None and not isinstance(directory, str | Path):
        raise TypeError(f"directory must be None or a path (str or pathlib.Path), got {type(directory).__name__}")
    if directory is not None:
        from attn.common.destinations import name_problem

        problem = name_problem(directory)
        if problem is not None:
            raise ValueError(f"directory: {problem}")
    folder = CORPUS_FOLDER if directory is None else Path(directory)
    missing = [name for name in TITLES if not (folder / f"{name}.txt").is_file()]
    if missing:
        raise FileNotFoundError(
            f"Austen's novels are not in {folder} ({len(missing)} of 6 missing); fetch them with "
            f"'{FETCH_COMMAND}' (needs apt-get, as on Debian, Ubuntu or WSL), about 10 seconds"
        )
    novels = {}
    for name in TITLES:
        try:
            novels[name] = (folder / f"{name}.txt").read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{folder / f'{name}.txt'} is not UTF-8 text (byte {error.start:,} cannot be read); fetch "
                             f"the novels again with '{FETCH_COMMAND}'") from None
    return novels


def _output_folder(text):  # --out: a folder for the novels' files (none a folder, nor a link leading out of it)
    from attn.common.destinations import folder_argument

    return folder_argument(*(f"{name}.txt" for name in TITLES), example="data/austen")(text)


_deb_file = deb_argument(PACKAGE, "about 1.6 MB")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=FETCH_COMMAND,
        description=f"Fetch Jane Austen's six novels from Debian's {PACKAGE} and write one text file per novel.")
    parser.add_argument("--out", type=_output_folder, default=CORPUS_FOLDER,
                        help="folder for the novels (default: data/austen at the repository's root)")
    parser.add_argument("--deb", type=_deb_file, default=None,
                        help=f"read this {PACKAGE} .deb instead of downloading one with apt-get")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        deb = args.deb or download_deb(scratch)
        try:
            novels = novels_from_deb(Path(deb).read_bytes())
        except (ValueError, OSError) as error:
            raise SystemExit(f"{deb} could not be read as {PACKAGE}: {error}") from None
    for path, (name, text) in zip(write_corpus(novels, args.out), novels.items(), strict=True):
        print(f"{path}: {TITLES[name]}, {len(text):,} characters, {text.count(chr(10)):,} paragraphs")
    print(f"Wrote {sum(map(len, novels.values())):,} characters in {len(novels)} files.", file=sys.stdout)


if __name__ == "__main__":
    main()
