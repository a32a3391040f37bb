"""Seeded training runs over forked workers, each finished run kept on disk (lesson 22's sink_austen).

A command that trains many independent runs (arms x seeds) for an hour or more gives them to ``workers`` forked
processes of one math thread each, and keeps every finished run in a folder as it ends: run again after an
interruption, it reads back each run kept with the same settings instead of training it again. A run's numbers
must depend on its settings and seed alone (its own generator, its own starting weights, no dropout), so that
which process trains it, in which order, and whether it was read back, change nothing.
"""

import json
import multiprocessing
import re
from pathlib import Path

import torch

from attn.common.destinations import folder_problem
from attn.common.validate import require_callable, type_name, whole_number

_WORK = None  # (train, names, settings, parts): what the forked workers read, set before they start


def each_kept(train, names, settings, workers=1, parts=None, progress=print):
    """[train(0), train(1), ...] for every run, in order, trained over ``workers`` forked processes.

    train: a function of the run's index, returning a JSON-able dict; names: one file-safe name a run ("softmax-seed0");
    settings: one JSON-able dict a run, everything its numbers depend on (a run kept with other settings is trained
    again); parts: a folder that keeps each finished run as NAME.json, or None to keep nothing.
    """
    global _WORK
    _check(train, names, settings, workers, parts, progress)
    _WORK = (train, list(names), list(settings), None if parts is None else Path(parts))
    found = {index: _kept(index, progress) for index in range(len(names))}
    missing = [index for index, result in found.items() if result is None]
    if workers == 1 or len(missing) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        found.update({index: _train_and_keep(index) for index in missing})
    else:
        with multiprocessing.get_context("fork").Pool(min(workers, len(missing))) as pool:
            found.update(zip(missing, pool.map(_train_and_keep, missing, chunksize=1), strict=True))
    return [found[index] for index in range(len(names))]


def _check(train, names, settings, workers, parts, progress):
    require_callable("train", train)
    require_callable("progress", progress)
    whole_number("workers", workers, minimum=1, maximum=64)
    for label, value in (("names", names), ("settings", settings)):
        if not isinstance(value, list | tuple):
            raise TypeError(f"{label} must be a list with one entry a run, got {type_name(value)}")
    if len(names) != len(settings):
        raise ValueError(f"names and settings must have one entry a run each, got {len(names)} and {len(settings)}")
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name) or name.startswith("."):
            raise ValueError(f"each name must be a file-safe name such as 'softmax-seed0', got {name!r:.60}")
    if len(set(names)) != len(names):
        raise ValueError("names must differ: two runs would be kept in one file")
    for entry in settings:
        if not isinstance(entry, dict):
            raise TypeError(f"each run's settings must be a dict, got {type_name(entry)}")
    if parts is not None:
        if not isinstance(parts, str | Path):
            raise TypeError(f"parts must be a folder's path (a str or pathlib.Path) or None, got {type_name(parts)}")
        problem = folder_problem(parts)
        if problem:
            raise ValueError(problem)


def _kept(index, progress):
    """The result kept for run ``index`` if it was trained with the same settings; else None."""
    _, names, settings, parts = _WORK
    path = None if parts is None else parts / f"{names[index]}.json"
    if path is None or not path.is_file():
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept["settings"] == json.loads(json.dumps(settings[index])) and isinstance(kept["result"], dict):
            progress(f"{names[index]}: read back from {path.name}")
            return kept["result"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        progress(f"{path.name} is not a run this command kept: trained again")
    return None


def _train_and_keep(index):
    train, names, settings, parts = _WORK
    torch.set_num_threads(1)
    result = train(index)
    if parts is not None:
        parts.mkdir(parents=True, exist_ok=True)
        path = parts / f"{names[index]}.json"
        path.with_suffix(".part").write_text(json.dumps({"settings": settings[index], "result": result}), encoding="utf-8")
        path.with_suffix(".part").replace(path)  # whole or not at all
    return result
