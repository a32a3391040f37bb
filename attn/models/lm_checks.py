"""The checks of the Austen model's training (lesson 13): its configuration, its state, the tokens its baselines
count, and the checkpoints it resumes from (read with ``weights_only=True``, so a crafted file cannot run code).

Kept apart from ``attn.models.lm_training``, which imports them, so that each module reads as one concern.
"""

import argparse
from pathlib import Path

import torch

from attn.common.destinations import name_problem
from attn.common.validate import type_name
from attn.data.corpus import austen

CONFIG_KEYS = ("vocab_size", "context_length", "embed_dim", "num_heads", "num_layers", "dropout", "seed", "steps",
               "learning_rate", "warmup_steps", "weight_decay")


def check_config(config):
    """``config`` must be a training configuration: a dict with every setting of attn.lm.SIZES['full']."""
    missing = [key for key in CONFIG_KEYS if not isinstance(config, dict) or key not in config]
    if missing:
        raise TypeError(f"config must be a training configuration (a dict such as attn.lm.SIZES['full']); "
                        f"{type_name(config)} lacks {', '.join(missing)}")
    return config


def _check_state(state):
    missing = [key for key in ("model", "optimizer", "generator", "step", "curve", "seconds")
               if not isinstance(state, dict) or key not in state]
    if missing:
        raise TypeError(f"state must be a training state from new_state() or resume_state(); it lacks {', '.join(missing)}")


CHECKPOINT_KEYS = ("config", "model", "optimizer", "generator", "rng", "step", "curve", "seconds")


def load_checkpoint(path):
    """The checkpoint at ``path``, read with ``weights_only=True`` (tensors, numbers, text, lists and dicts: never code).

    A file that needs more than that to load (a pickle that would run code: crafted, or not this course's) or that
    lacks a checkpoint's entries is refused with a sentence, and nothing in it is run.
    """
    if not isinstance(path, str | Path):
        raise TypeError(f"path must be a str or pathlib.Path, got {type_name(path)}")
    problem = name_problem(path)
    if problem is not None:
        raise ValueError(problem)
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint file (it does not exist, or is a folder or a pipe)")
    try:
        saved = torch.load(path, weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch.load fails in many ways on a file that is not its own
        reason = " ".join(str(error).split())[:160]
        raise ValueError(
            f"{path} is not a checkpoint this course wrote, or it holds more than tensors and numbers "
            f"({type(error).__name__}: {reason}); it was not loaded (loading it could run code): remove it, or give another --out"
        ) from None
    missing = [key for key in CHECKPOINT_KEYS if not isinstance(saved, dict) or key not in saved]
    if missing:
        raise ValueError(f"{path} is not a checkpoint of python -m attn.lm train (it lacks {', '.join(missing)}); remove it")
    return saved


def _corpus_folder_argument(text):
    """--corpus: a folder name the file system can hold (the novels in it are looked for after parsing)."""
    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _corpus_or_error(parser, folder):
    """argparse's error (exit status 2), naming the command that fetches the novels, if they are not in ``folder``
    (or one of them is not UTF-8 text)."""
    try:
        austen(folder)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
