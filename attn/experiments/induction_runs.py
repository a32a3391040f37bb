"""Do the heads form at the drop, and does the drop come at the same step for every seed? (lesson 11)

Trains lesson 11's two-layer model (the settings of ``attn.models.induction``) with seeds 0, 1 and 2,
the seed choosing both the initial weights and the training data. Every ``CHECKPOINT_EVERY``
steps it measures every head's previous-token and induction scores (``attn.models.induction.head_scores``)
on ``PROBE_SEQUENCES`` held-out sequences; it keeps every step's second-copy loss, and the step
at which that loss has halved (``attn.models.induction.phase_change_step``). The result is a small JSON
file that the lesson reads and plots:

    python -m attn.experiments.induction_runs --out lessons/records

Seed 0 is the training of the shipped two-layer model, so its losses repeat the first
``RUN_STEPS`` of ``induction_training.json``. The tests re-derive the first checkpoints of one run.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch

from attn.common.destinations import file_problem, folder_problem, link_leaves_folder, write_text
from attn.models.induction import (
    TEST_SEED,
    AttentionOnlyTransformer,
    head_scores,
    make_repeat_data,
    phase_change_step,
    train,
)
from attn.models.induction.checks import check_int, check_seed

RUN_SEEDS = (0, 1, 2)
RUN_STEPS = 2000  # past the drop of every seed tried (the latest, seed 2, near step 1,300)
CHECKPOINT_EVERY = 25
PROBE_SEQUENCES = 200  # the first 200 of the lesson's held-out sequences, enough for a score to 0.01
RUNS_NAME = "induction_runs.json"


def probe_data():
    """The held-out sequences the scores are measured on: make_repeat_data(PROBE_SEQUENCES, seed=TEST_SEED)."""
    return make_repeat_data(PROBE_SEQUENCES, seed=TEST_SEED)


def _rounded(scores):
    """(layers, H) tensor -> nested lists of floats to 4 decimals."""
    return [[round(value, 4) for value in row] for row in scores.tolist()]


def run_with_checkpoints(seed, steps=RUN_STEPS, every=CHECKPOINT_EVERY):
    """Train a two-layer model with ``seed`` for ``steps`` steps, scoring its heads every ``every`` steps.

    Returns a dict: seed; drop_step (the step at which the second-copy loss has halved, None if it
    does not within ``steps``); second_copy_losses (every step's, 4 decimals); checkpoints, with
    step (0, every, 2 every, ...) and, at each, previous_token and induction scores as
    [layer][head] lists (layers and heads counted from 0).
    """
    seed = check_seed(seed)
    steps = check_int("steps", steps, minimum=1)
    every = check_int("every", every, minimum=1)
    probe = probe_data()
    checkpoints = {"step": [], "previous_token": [], "induction": []}

    def measure(step, model):
        if step % every:
            return
        previous, induction = head_scores(model, probe)  # (layers, H) each
        checkpoints["step"].append(step)
        checkpoints["previous_token"].append(_rounded(previous))
        checkpoints["induction"].append(_rounded(induction))

    model = AttentionOnlyTransformer(num_layers=2, seed=seed)
    measure(0, model)  # the seeded start
    log = train(model, steps=steps, seed=seed, on_step=measure)
    window = min(50, steps)
    return {
        "seed": seed,
        "drop_step": phase_change_step(log.second_copy_losses, window=window),
        "second_copy_losses": [round(value, 4) for value in log.second_copy_losses],
        "checkpoints": checkpoints,
    }


def run_all(out, seeds=RUN_SEEDS, steps=RUN_STEPS, every=CHECKPOINT_EVERY):
    """Every seed's run, timed, written to ``out``/RUNS_NAME; returns the record.

    Every argument, and the folder ``out``, is checked before the first step of training.
    """
    out = Path(output_folder(out))
    if isinstance(seeds, str) or not isinstance(seeds, list | tuple) or not seeds:
        raise TypeError(f"seeds must be a non-empty list of whole numbers, such as (0, 1, 2), got {seeds!r:.60}")
    seeds = [check_seed(seed) for seed in seeds]
    steps, every = check_int("steps", steps, minimum=1), check_int("every", every, minimum=1)
    record = {
        "steps": steps, "checkpoint_every": every, "probe": f"make_repeat_data({PROBE_SEQUENCES}, seed={TEST_SEED})",
        "torch": torch.__version__, "threads": torch.get_num_threads(), "runs": [],
    }
    for seed in seeds:
        started = time.perf_counter()
        run = run_with_checkpoints(seed, steps, every)
        run["seconds"] = round(time.perf_counter() - started, 1)
        record["runs"].append(run)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / RUNS_NAME, json.dumps(record, separators=(",", ":")) + "\n")
    return record


def output_folder(text):
    """``text`` as a Path, if it is a folder that is there, or can be made, where RUNS_NAME can be written."""
    if not isinstance(text, str | os.PathLike):
        raise TypeError(f"out must be a folder's path, such as 'lessons/records', got {type(text).__name__}")
    problem = folder_problem(text)
    if problem is None and (Path(text) / RUNS_NAME).is_dir():
        problem = f"{Path(text) / RUNS_NAME} is a folder, so the file of that name cannot be written; move it away"
    elif problem is None and (Path(text) / RUNS_NAME).exists():
        problem = file_problem(Path(text) / RUNS_NAME)
    problem = problem or link_leaves_folder(Path(text) / RUNS_NAME)
    if problem is not None:
        raise ValueError(problem)
    return Path(text)


def _output_folder(text):
    """--out: a folder that is there, or can be made, and can be written in; checked before training starts."""
    try:
        return output_folder(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.induction_runs",
        description="Train lesson 11's two-layer model with seeds 0-2, scoring its heads as they form.")
    parser.add_argument("--out", required=True, type=_output_folder, help=f"folder for {RUNS_NAME}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the same sums in the same order as the lesson's training log
    record = run_all(args.out)
    for run in record["runs"]:
        print(f"seed {run['seed']}: loss halved at step {run['drop_step']}, {run['seconds']} s")


if __name__ == "__main__":
    main()
