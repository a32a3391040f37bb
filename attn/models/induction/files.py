"""Training the lesson's models once and saving them; loading them back; the command line.
"""

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch

from attn.common import destinations
from attn.common.destinations import folder_argument, write_text, write_through_temporary
from attn.models.induction.checks import check_int
from attn.models.induction.data import (
    BATCH_SIZE,
    EMBED_DIM,
    LEARNING_RATE,
    MAX_LENGTH,
    NUM_HEADS,
    SEED,
    STEPS,
    TRAIN_BLOCK_LENGTHS,
    VOCAB_SIZE,
    make_repeat_data,
)
from attn.models.induction.model import AttentionOnlyTransformer
from attn.models.induction.training import copy_metrics, phase_change_step, train

SETTINGS = dict(vocab_size=VOCAB_SIZE, embed_dim=EMBED_DIM, num_heads=NUM_HEADS, max_length=MAX_LENGTH,
                block_lengths=list(TRAIN_BLOCK_LENGTHS), steps=STEPS, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE,
                seed=SEED, positions="query_key", layer_norm=False)


TEST_SEED = 1000  # the held-out sequences every reported accuracy is measured on


LOG_NAME = "induction_training.json"


def weights_path(folder, num_layers):
    return Path(folder) / f"induction_{num_layers}layer.pt"


def train_and_save(out, num_layers_options=(1, 2)):
    """Train the lesson's models (default settings, seed SEED); save their weights and a JSON log in ``out``.

    The log holds the settings, every step's losses, the phase-change step, the training time
    and the accuracies on ``make_repeat_data(2000, seed=TEST_SEED)``. The folder is checked before
    training starts; each file is written through a temporary file renamed into place.
    """
    out = output_folder(out)
    if isinstance(num_layers_options, str) or not isinstance(num_layers_options, list | tuple) or not num_layers_options:
        raise TypeError(f"num_layers_options must be a non-empty list of layer counts, such as (1, 2), "
                        f"got {num_layers_options!r:.60}")
    num_layers_options = [check_int("every entry of num_layers_options", layers, minimum=1) for layers in num_layers_options]
    out.mkdir(parents=True, exist_ok=True)
    record = {"settings": SETTINGS, "torch": torch.__version__, "models": {}}
    for num_layers in num_layers_options:
        model = AttentionOnlyTransformer(num_layers=num_layers, seed=SEED)
        started = time.perf_counter()
        log = train(model)
        seconds = time.perf_counter() - started
        write_through_temporary(weights_path(out, num_layers), lambda path, model=model: torch.save(model.state_dict(), path))
        record["models"][str(num_layers)] = {
            "train_seconds": round(seconds, 1),
            "phase_change_step": phase_change_step(log.second_copy_losses),
            "test_metrics": copy_metrics(model, make_repeat_data(2000, seed=TEST_SEED)),
            **{name: [round(value, 4) for value in values] for name, values in asdict(log).items()},
        }
    write_text(out / LOG_NAME, json.dumps(record, indent=1) + "\n")
    return record


def load_trained(folder, num_layers):
    """The model saved by ``train_and_save`` in ``folder``, in eval mode.

    Every problem (no such folder or file, a file that is not one of these models) is a
    FileNotFoundError, NotADirectoryError or ValueError saying which file was expected and how to make it.
    """
    num_layers = check_int("num_layers", num_layers, minimum=1)
    path = _weights_file(folder, num_layers)
    remake = f"make it with python -m attn.models.induction --out {folder}"
    try:
        state = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - torch.load fails in many ways on a file that is not its own; its advice is unsafe
        raise ValueError(
            f"{path} is not a weights file saved by attn.models.induction (damaged, or something else); {remake}"
        ) from None
    model = AttentionOnlyTransformer(num_layers=num_layers)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError, KeyError):
        raise ValueError(f"{path} holds another model's weights, not the lesson's {num_layers}-layer one; {remake}") from None
    return model.eval()


def _weights_file(folder, num_layers):
    """The path of ``num_layers``' weights in ``folder``, after checking that the folder and the file are there."""
    if not isinstance(folder, str | os.PathLike) or str(folder) == "":
        raise TypeError(f"folder must be a path such as 'lessons/weights' (text or a pathlib.Path), got {folder!r:.60}")
    folder, path = Path(folder), weights_path(folder, num_layers)
    remake = f"python -m attn.models.induction --out {folder} trains and saves the lesson's models there"
    if not folder.exists():
        raise FileNotFoundError(f"there is no folder {folder}, so no {path.name} in it; {remake}")
    if not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder; give the folder that holds {path.name}")
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no {path.name} (the {num_layers}-layer model's weights); {remake}")
    return path


OUTPUT_NAMES = (*(weights_path("", layers).name for layers in (1, 2)), LOG_NAME)  # what --out will hold


def output_folder(text):
    """``text`` as a Path, if it is a folder that is there, or can be made, where the weights and log can be written."""
    return destinations.output_folder(text, OUTPUT_NAMES)


_out_folder = folder_argument(*OUTPUT_NAMES)  # --out, checked before three thousand steps of training


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attn.models.induction",
                                     description="Train lesson 11's one- and two-layer models and save them.")
    parser.add_argument("--out", required=True, type=_out_folder, help="folder for the weights and the training log")
    args = parser.parse_args(argv)  # --out is checked here, before three thousand steps of training
    record = train_and_save(args.out)
    for num_layers, result in record["models"].items():
        metrics = ", ".join(f"{name} {value:.3f}" for name, value in result["test_metrics"].items())
        step = result["phase_change_step"]
        print(f"{num_layers} layer(s): trained in {result['train_seconds']} s, phase change at step {step}; {metrics}")
