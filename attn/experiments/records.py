"""A measurement command's record written to its folder: its provenance added, the JSON written whole.

The commands that measure for Part 3 (``attn.experiments.long_context``, ``smollm2_length``, ``smollm2_reading``,
``smollm2_sparse``) each end the same way: say how the record was made (the command, PyTorch, its thread count,
Python), then write the record through a temporary file renamed into place, so that an interrupted run never leaves
half a file. The three that read SmolLM2 also share their command line (``sized_command``).
"""

import argparse
import contextlib
import json
import numbers
import os
import platform
import sys
from pathlib import Path

import torch

from attn.common.destinations import folder_argument, folder_problem, write_text
from attn.common.validate import require_callable, require_computable, type_name

RECORDS_FOLDER = Path(__file__).resolve().parents[2] / "lessons" / "records"  # the records the lessons read


def rounded(values, digits=4):
    """A tensor, list, tuple or number as nested lists of floats rounded to ``digits`` decimals (for a record)."""
    if isinstance(values, torch.Tensor):
        require_computable("values", values)
        values = values.tolist()
    if isinstance(values, list | tuple):
        return [rounded(value, digits) for value in values]
    if isinstance(values, bool) or not isinstance(values, numbers.Real):
        raise TypeError(f"values must be numbers (a tensor, a list or a number), got {type_name(values)}")
    return round(float(values), digits)


def settings_for(sizes, size):
    """A copy of ``sizes[size]`` (a command's settings at one --size), or a ValueError naming the sizes there are."""
    if not isinstance(size, str) or size not in sizes:
        raise ValueError(f"size must be one of {', '.join(sizes)}, got {type_name(size)} {size!r:.60}")
    return dict(sizes[size])


def check_out(out):
    """Refuse, before any work, an ``out`` that is not a folder's path or that write_record could not write into."""
    if not isinstance(out, str | Path):
        raise TypeError(f"out must be a folder's path (a str or pathlib.Path), got {type_name(out)}")
    problem = folder_problem(out)
    if problem:
        raise ValueError(problem)


def machine():
    """What timed a record: the processor's name (from /proc/cpuinfo where there is one), cores, the system, and the
    load average over the last minute (tasks running or waiting for a core; None where the system does not say)."""
    processor = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    return {"processor": processor, "cores": os.cpu_count(), "system": platform.system(), "load": load}


def shipped_record(name):
    """The record ``name`` ("smollm2_reading.json") from lessons/records, which another command reads; a sentence
    naming the command that writes it if it is missing."""
    if not isinstance(name, str) or not name.endswith(".json") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"name must be a record's file name in lessons/records, such as 'smollm2_reading.json', "
                         f"got {type_name(name)} {name!r:.60}")
    path = RECORDS_FOLDER / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run python -m attn.experiments.{Path(name).stem} "
                                "--out lessons/records first")
    return json.loads(path.read_text(encoding="utf-8"))


def write_record(out, name, record, command, size="full"):
    """Add ``record["provenance"]`` and write ``record`` as JSON to ``out``/``name``; returns ``record``.

    out: a folder (str or Path; created with its parents); name: a file name such as "long_context.json";
    record: a dict; command: how the record is made ("python -m attn.experiments.long_context"); size: the command's
    --size ("full" is its default, so it is left out of the command shown).
    """
    check_out(out)
    for label, value in (("name", name), ("command", command), ("size", size)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{label} must be a non-empty str, got {type_name(value)} {value!r:.60}")
    if "/" in name or name in (".", ".."):
        raise ValueError(f"name must be a file name inside out, not a path, got {name!r:.60}")
    if not isinstance(record, dict):
        raise TypeError(f"record must be a dict, got {type_name(record)}")
    record["provenance"] = {"command": f"{command} --out DIR" + ("" if size == "full" else f" --size {size}"),
                            "torch": torch.__version__, "threads": torch.get_num_threads(),
                            "python": platform.python_version()}
    text = json.dumps(record, indent=1) + "\n"  # before the folder is made: a record JSON cannot hold fails here
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / name, text)
    return record


def sized_command(command, description, name, sizes, durations, run, argv=None):
    """The command line of a measurement with ``--out`` (checked before any work) and ``--size``: parses ``argv``,
    runs ``run(out, size, progress)`` on one math thread with progress on stderr, and returns (record, out).

    durations: {size: "about 14 minutes", ...} for the help; a FileNotFoundError or ValueError from ``run`` (the
    corpus, the model or a record it reads is missing or damaged: its sentence names the command that makes it again)
    becomes the parser's error: a sentence and exit status 2, never a traceback.
    """
    _check_command(command, description, name, sizes, durations, run, argv)
    parser = argparse.ArgumentParser(prog=command, description=description)
    parser.add_argument("--out", required=True, type=folder_argument(name), help=f"folder for {name}")
    parser.add_argument("--size", default="full", choices=sorted(sizes),
                        help=" or ".join(f"{size} ({durations[size]})" for size in sorted(sizes)))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    try:
        record = run(args.out, args.size, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    return record, Path(args.out)


def _check_command(command, description, name, sizes, durations, run, argv):
    for label, value in (("command", command), ("description", description), ("name", name)):
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            raise TypeError(f"{label} must be a non-empty str of printable characters, got {type_name(value)} {value!r:.60}")
    if not isinstance(sizes, dict) or not sizes or not all(isinstance(size, str) and size.isidentifier() for size in sizes):
        raise TypeError(f"sizes must be the command's dict of sizes, such as {{'full': ...}}, got {type_name(sizes)}")
    if not isinstance(durations, dict) or set(durations) != set(sizes) or not all(
            isinstance(words, str) and words.isprintable() for words in durations.values()):
        raise TypeError(f"durations must say, in words, how long each of {sorted(sizes)} takes, got {type_name(durations)}")
    require_callable("run", run)
    if argv is not None and (not isinstance(argv, list | tuple) or not all(isinstance(word, str) for word in argv)):
        raise TypeError(f"argv must be None or a list of str (the command's arguments), got {type_name(argv)}")
