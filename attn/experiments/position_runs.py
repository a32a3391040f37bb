"""NoPE, rotary and partial rotary read past their trained length (lesson 17): lesson 11's copying task, over seeds.

    python -m attn.experiments.position_runs --out lessons/records      # 30-60 minutes, one thread: see below
    python -m attn.experiments.position_runs --out DIR --max-steps 20 --seeds 0 --per-distance 4   # seconds

The task is lesson 11's (``attn.experiments.window_induction.repeat_batch``): random tokens, and at the end a random
block of d tokens twice over; inside the second copy every next token can be read off the first copy, d - 1
positions back. It needs order and distance: a previous-token head, then an induction head. The model is lesson
13's decoder (``AustenLM``: token embeddings, no position table, two pre-norm blocks of the course's
MultiHeadAttention, two heads of 16 features) with each layer's positions set by its arm, its read-out a matrix of
its own rather than the token embedding's, and every weight drawn by PyTorch's defaults, as lesson 14's Decoder
starts (probes with lesson 13's tied read-out and GPT-2's small start left every arm on the task's plateau for
thousands of steps; with these, rotary formed its induction head in about 500 steps):

- ``nope``: no positions at all (rotary_base=None): only the causal mask tells order (Kazemnejad et al. 2023);
- ``rotary``: every feature pair of every head rotated (lesson 8; base 10,000);
- ``partial``: only the first quarter of each head's features rotated (rotary_fraction=0.25, as Qwen3-Next does),
  the rest carrying no position.

Each arm is trained with every seed on sequences of TRAIN_LENGTH = 40 tokens (d from 2 to 20) until its loss stops
falling: every EVAL_EVERY steps the loss on VALID_SEQUENCES held-out sequences is measured, and training stops once
it has not fallen by MIN_GAIN nats below its best for PATIENCE measurements in a row, but never before MIN_STEPS (an
induction head forms suddenly after a plateau, and a probe of the rotary arm stopped on that plateau at 3,000 steps
under lesson 14's rule), or at MAX_STEPS, which the record then says. Then it is scored at 40, 80 and 160 tokens:
the share of copyable predictions right at each d (at 80 and 160, d up to half the length: positions, and past 20
distances, that training never showed). Seeds pair the arms (seed s draws every arm's data alike), so the lesson can
print paired intervals (attn.common.stats).

Cost: a step takes 0.02-0.03 s of one thread on the course's 2-core machine. Probes with seed 0 (3,000 steps):
rotary 96% right at 40 tokens, partial 95% (its induction head formed after about 750 steps), NoPE 16% and still
falling slowly, so NoPE runs to MAX_STEPS. 15 runs (3 arms x 5 seeds): about half an hour on one thread.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn

from attn.common.arguments import refuse_repeats
from attn.common.destinations import folder_argument, write_text
from attn.common.validate import require_callable, require_choice, type_name, whole_number
from attn.experiments import window_induction
from attn.experiments.window_induction import (  # the same task, training loop and checks of its arguments
    BATCH_SIZE,
    EVAL_EVERY,
    LEARNING_RATE,
    MAX_STEPS_ARGUMENT,
    MIN_DISTANCE,
    MIN_GAIN,
    PER_DISTANCE_ARGUMENT,
    SEED_ARGUMENT,
    TEST_PER_DISTANCE,
    TEST_SEED,
    VALID_SEQUENCES,
    VOCAB_SIZE,
)
from attn.experiments.window_induction import LENGTH as TRAIN_LENGTH
from attn.models.lm import ROTARY_BASE, AustenLM
from attn.multihead import MultiHeadAttention

RESULTS_NAME = "position_runs.json"
ARMS = {  # MultiHeadAttention's position options, by arm
    "nope": {"rotary_base": None},
    "rotary": {"rotary_base": ROTARY_BASE},
    "partial": {"rotary_base": ROTARY_BASE, "rotary_fraction": 0.25},
}
EVAL_LENGTHS = (40, 80, 160)  # TRAIN_LENGTH (40, lesson 14's task), then twice and four times it
EMBED_DIM, NUM_HEADS, NUM_LAYERS = 32, 2, 2
PATIENCE, MIN_STEPS, MAX_STEPS = 4, 2000, 10_000  # this module's stopping rule (see the docstring); the rest is lesson 14's
SEEDS = (0, 1, 2, 3, 4)


def _check_run(arm, seed, max_steps, per_distance):
    require_choice("arm", arm, tuple(ARMS))
    whole_number("seed", seed, minimum=0, maximum=2**62)
    whole_number("max_steps", max_steps, minimum=1, maximum=10**6)
    whole_number("per_distance", per_distance, minimum=1, maximum=100_000)


def new_model(arm, seed):
    """Lesson 13's decoder at this task's size, each layer's attention with ``arm``'s positions, drawn from ``seed``."""
    require_choice("arm", arm, tuple(ARMS))
    whole_number("seed", seed, minimum=0, maximum=2**62)
    torch.manual_seed(seed)
    model = AustenLM(VOCAB_SIZE, TRAIN_LENGTH, EMBED_DIM, NUM_HEADS, NUM_LAYERS)
    for block in model.blocks:  # the block builds full rotary; each arm's attention replaces it
        block.attention = MultiHeadAttention(EMBED_DIM, NUM_HEADS, **ARMS[arm])
    model.readout = nn.Linear(EMBED_DIM, VOCAB_SIZE, bias=False)  # its own matrix, not the token embedding
    torch.manual_seed(seed)
    for module in model.modules():  # PyTorch's own start for every layer (see the docstring)
        if module is not model and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return model


def _check_model(model):
    if not isinstance(model, AustenLM) or model.vocab_size != VOCAB_SIZE or model.context_length != TRAIN_LENGTH:
        raise TypeError(f"model must be an AustenLM from attn.experiments.position_runs.new_model, got {type_name(model)}")


def copy_loss(model, tokens, copyable):
    """Mean cross-entropy of the copyable predictions of tokens (N, T); also their right/wrong (K,) bool."""
    _check_model(model)
    return window_induction.copy_loss(model, tokens, copyable)


def train(model, seed, max_steps=MAX_STEPS):
    """Adam until the validation loss stops falling (the docstring's rule); returns (steps, validation curve, stopped).

    Lesson 14's loop (``attn.experiments.window_induction``), with this module's patience and minimum steps."""
    _check_model(model)
    _check_run("nope", seed, max_steps, 1)
    return window_induction._train_until_flat(model, seed, max_steps, patience=PATIENCE, min_steps=MIN_STEPS)


def accuracy_by_distance(model, length, per_distance=TEST_PER_DISTANCE):
    """Share of copyable predictions right at each distance MIN_DISTANCE .. length // 2, on sequences of ``length``."""
    _check_model(model)
    length = whole_number("length", length, minimum=2 * MIN_DISTANCE, maximum=4096)
    _check_run("nope", 0, 1, per_distance)
    return [round(share, 3) for share in window_induction._accuracy(model, per_distance, length)]


def run(arm, seed, max_steps=MAX_STEPS, per_distance=TEST_PER_DISTANCE, lengths=EVAL_LENGTHS):
    """One arm trained with one seed: steps, validation curve, whether it stopped, accuracy by distance at each length."""
    _check_run(arm, seed, max_steps, per_distance)
    started = time.perf_counter()
    model = new_model(arm, seed)
    steps, curve, stopped = train(model, seed, max_steps)
    return {"arm": arm, "seed": seed, "steps": steps, "stopped": stopped, "curve": curve,
            "accuracy": {str(length): accuracy_by_distance(model, length, per_distance) for length in lengths},
            "seconds": round(time.perf_counter() - started, 1)}


def run_all(out, arms=tuple(ARMS), seeds=SEEDS, max_steps=MAX_STEPS, per_distance=TEST_PER_DISTANCE, progress=print):
    """Every arm with every seed, written to ``out``/RESULTS_NAME; returns the record."""
    require_callable("progress", progress)
    for name, values in (("arms", arms), ("seeds", seeds)):
        if not isinstance(values, list | tuple) or len(set(values)) != len(values):
            raise ValueError(f"{name} must be a list naming each once, got {values!r:.80}")
    record = {
        "task": {"vocab_size": VOCAB_SIZE, "train_length": TRAIN_LENGTH, "eval_lengths": list(EVAL_LENGTHS),
                 "embed_dim": EMBED_DIM, "num_heads": NUM_HEADS, "num_layers": NUM_LAYERS, "batch_size": BATCH_SIZE,
                 "learning_rate": LEARNING_RATE, "test_per_distance": per_distance, "test_seed": TEST_SEED},
        "arms": {arm: {key: value for key, value in ARMS[arm].items()} for arm in arms},
        "stopping": {"eval_every": EVAL_EVERY, "patience": PATIENCE, "min_gain": MIN_GAIN, "min_steps": MIN_STEPS,
                     "max_steps": max_steps,
                     "valid_sequences": VALID_SEQUENCES},
        "seeds": list(seeds), "trained_distances": [MIN_DISTANCE, TRAIN_LENGTH // 2],
        "distances": {str(length): list(range(MIN_DISTANCE, length // 2 + 1)) for length in EVAL_LENGTHS},
        "torch": torch.__version__, "threads": torch.get_num_threads(), "runs": [],
    }
    for arm in arms:
        for seed in seeds:
            result = run(arm, seed, max_steps, per_distance)
            record["runs"].append(result)
            means = ", ".join(f"{length}: {sum(values) / len(values):.2f}" for length, values in result["accuracy"].items())
            progress(f"{arm:>8}, seed {seed}: {result['steps']} steps, validation loss {result['curve'][-1]:.3f}, "
                     f"accuracy {means}, {result['seconds']} s")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RESULTS_NAME, json.dumps(record, separators=(",", ":")) + "\n")
    return record


def _arm(text):
    if text not in ARMS:
        raise argparse.ArgumentTypeError(f"unknown arm {text!r}; choose from {', '.join(map(repr, ARMS))}")
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.position_runs",
        description="Train NoPE, rotary and partial rotary on lesson 11's copying task at 40 tokens; score them at 40-160.")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    parser.add_argument("--arms", nargs="+", type=_arm, default=list(ARMS), help="arms to train (default: all)")
    parser.add_argument("--seeds", nargs="+", type=SEED_ARGUMENT, default=list(SEEDS), help="seeds (default: 0 1 2 3 4)")
    parser.add_argument("--max-steps", type=MAX_STEPS_ARGUMENT, default=MAX_STEPS,
                        help=f"most training steps per run (default {MAX_STEPS})")
    parser.add_argument("--per-distance", type=PER_DISTANCE_ARGUMENT, default=TEST_PER_DISTANCE,
                        help=f"test sequences per distance (default {TEST_PER_DISTANCE})")
    args = parser.parse_args(argv)
    refuse_repeats(parser, args, "arms", "seeds")
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    run_all(args.out, tuple(args.arms), tuple(args.seeds), args.max_steps, args.per_distance)


if __name__ == "__main__":
    main()
