"""The file readers (R's serialisation, the lazy-load database, the .deb container) end every damaged, truncated or
crafted input in a sentence, in bounded time and memory: property-based fuzzing with hypothesis (issue 38).

Each call runs under a two-second alarm; an input that sends a reader back to an earlier position (a negative
length), a chunk that inflates to gigabytes, or a member of negative size must be refused, never looped on.
"""

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attn.data import corpus, debian
from tests.data.test_austen import SHORT_NOVELS, a_deb, lazy_load_files, r_character_vector, r_header, xdr_int
from tests.hostile_sweep import raised_by_the_course, time_limit

RDX, RDB = lazy_load_files({"emma": ["Emma Woodhouse,", None, "handsome"], "persuasion": ["x"] * 3})
SERIALISED = r_header() + r_character_vector(["Emma Woodhouse,", None, "handsome £"])
SHORT_RDX, SHORT_RDB = lazy_load_files(SHORT_NOVELS)
DEB = a_deb({corpus.DATA_PATH + ".rdx": SHORT_RDX, corpus.DATA_PATH + ".rdb": SHORT_RDB})


def sentence_or_result(call):
    """Run ``call`` under a time limit: a result, or a ValueError/TypeError raised by the course with a sentence."""
    with time_limit(2.0):
        try:
            return call()
        except (ValueError, TypeError) as error:
            assert raised_by_the_course(error), f"{type(error).__name__} from a library: {error}"
            assert len(str(error).split()) >= 4, str(error)
            return error


def damaged(data, cut, flips):
    data = bytearray(data[:cut])
    for position, byte in flips:
        if data:
            data[position % len(data)] = byte
    return bytes(data)


FLIPS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6)


@given(cut=st.integers(0, len(SERIALISED)), flips=FLIPS)
def test_a_damaged_r_serialisation_ends_in_a_sentence(cut, flips):
    sentence_or_result(lambda: corpus.read_r_object(damaged(SERIALISED, cut, flips)))


@given(cut=st.integers(0, len(RDX)), flips=FLIPS, rdb_cut=st.integers(0, len(RDB)))
def test_a_damaged_lazy_load_database_ends_in_a_sentence(cut, flips, rdb_cut):
    sentence_or_result(lambda: corpus.read_lazy_load(damaged(RDX, cut, flips), RDB[:rdb_cut]))


@given(cut=st.integers(0, len(DEB)), flips=FLIPS)
def test_a_damaged_deb_ends_in_a_sentence(cut, flips):
    sentence_or_result(lambda: corpus.deb_member(damaged(DEB, cut, flips), corpus.DATA_PATH + ".rdx"))


@given(length=st.one_of(st.integers(-(2**31), -2), st.integers(2**20, 2**31 - 1)))
def test_crafted_string_and_vector_lengths_are_refused(length):
    string = r_header() + xdr_int(corpus.STRSXP) + xdr_int(1) + xdr_int(corpus.CHARSXP) + xdr_int(length) + b"abcd" * 4
    vector = r_header() + xdr_int(corpus.STRSXP) + xdr_int(length) + b"abcd" * 4
    for data in (string, vector):
        error = sentence_or_result(lambda data=data: corpus.read_r_object(data))
        assert isinstance(error, ValueError), error


def test_a_negative_string_length_never_sends_the_reader_backwards():
    looping = r_header() + xdr_int(corpus.STRSXP) + xdr_int(2) + xdr_int(corpus.CHARSXP) + xdr_int(-12) + b"\0" * 8
    with pytest.raises(ValueError, match="announces a length of -12 bytes"):
        corpus.read_r_object(looping)


@pytest.mark.parametrize("upper, lower", [(-1, 0), (0, -5), (1, 0)])
def test_long_vector_lengths_are_refused(upper, lower):
    data = r_header() + xdr_int(corpus.INTSXP) + xdr_int(-1) + xdr_int(upper) + xdr_int(lower) + bytes(16)
    with pytest.raises(ValueError, match="items"):
        corpus.read_r_object(data)


def test_references_to_objects_never_defined_are_refused():
    for index in (0, 5):
        data = r_header() + xdr_int(corpus.REFSXP) + xdr_int(index)
        with pytest.raises(ValueError, match="refers to object"):
            corpus.read_r_object(data)


def test_objects_nested_thousands_deep_are_refused():
    data = r_header() + (xdr_int(corpus.VECSXP) + xdr_int(1)) * 100_000 + xdr_int(corpus.NILVALUE_SXP)
    with pytest.raises(ValueError, match="nests objects thousands deep"):
        corpus.read_r_object(data)


def test_a_chunk_announcing_100_bytes_is_never_inflated_further():
    packer, megabyte = zlib.compressobj(1), bytes(2**20)
    bomb = b"".join(packer.compress(megabyte) for _ in range(100)) + packer.flush()  # 100 MB of zeros in 100 kB
    rdb = struct.pack(">I", 100) + bomb
    with time_limit(2.0), pytest.raises(ValueError, match="unpacks to more than the 100 bytes announced"):
        corpus.inflate(rdb[4:], 15, "emma", announced=100)
    with time_limit(2.0), pytest.raises(ValueError, match="far more than the package holds"):
        corpus.inflate(rdb[4:], 15, "emma", announced=1_500_000_000)


def ar_member(name, size_field, content):
    return f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{size_field:<10}`\n".encode() + content


@pytest.mark.parametrize("size_field, message", [("-60", "not a number"), ("x", "not a number"), ("999999", "truncated")])
def test_ar_members_of_negative_wrong_or_huge_size_are_refused(size_field, message):
    deb = b"!<arch>\n" + ar_member("debian-binary", size_field, b"2.0\n") * 3
    with time_limit(2.0), pytest.raises(ValueError, match=message):
        corpus.deb_member(deb, "Rdata.rdx")


def zstd_deb(tmp_path):
    import shutil
    import subprocess

    if shutil.which("zstd") is None:
        pytest.skip("the zstd tool is not installed here")
    xz_deb = DEB
    position, members = 8, []
    while position + 60 <= len(xz_deb):
        name = xz_deb[position:position + 16].decode().strip().rstrip("/")
        size = int(xz_deb[position + 48:position + 58].decode().strip())
        members.append((name, xz_deb[position + 60:position + 60 + size]))
        position += 60 + size + size % 2
    import lzma

    tar = lzma.decompress(members[2][1])
    packed = subprocess.run(["zstd", "-q", "-c"], input=tar, capture_output=True, check=True).stdout
    deb = b"!<arch>\n"
    for name, content in [members[0], members[1], ("data.tar.zst", packed)]:
        deb += ar_member(name, len(content), content) + (b"\n" if len(content) % 2 else b"")
    return deb


def test_a_deb_packed_with_zstd_is_read_with_the_zstd_tool(tmp_path):
    deb = zstd_deb(tmp_path)
    novels = corpus.novels_from_deb(deb)
    assert novels == corpus.novels_from_deb(DEB)


def test_a_deb_packed_with_zstd_without_the_tool_gets_a_sentence(tmp_path, monkeypatch):
    deb = zstd_deb(tmp_path)
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match=r"compressed with Zstandard .* install the zstd tool"):
        corpus.novels_from_deb(deb)


@given(cut=st.integers(0, len(DEB)), flips=FLIPS)
def test_the_corpus_command_ends_every_damaged_deb_in_one_sentence(tmp_path_factory, cut, flips):
    folder = tmp_path_factory.mktemp("deb")
    (folder / "damaged.deb").write_bytes(damaged(DEB, cut, flips))
    with time_limit(2.0), pytest.raises(SystemExit) as exit_info:
        corpus.main(["--deb", str(folder / "damaged.deb"), "--out", str(folder / "austen")])
    assert isinstance(exit_info.value.code, str) and "could not be read as r-cran-janeaustenr" in exit_info.value.code
