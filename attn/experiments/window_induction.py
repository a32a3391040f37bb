"""What a sliding window costs an induction head (lesson 14): copying a repeat at a distance, by stack.

    python -m attn.experiments.window_induction --out lessons/records

The task is lesson 11's: a random block of d tokens, then the same block again, at the end of a
sequence of LENGTH random tokens. Inside the second copy every next token can be read off the
first copy: the query at position p finds where its own token stood d positions back and copies
the token after it, which sits d - 1 positions back. That takes two steps, a previous-token head
and then an induction head, and the copied token must reach the query across d - 1 positions. A
local layer reaches WINDOW - 1 positions; whether a stack of local layers adds up its reach for a
two-step circuit, as it does for recall (attn.experiments.window_runs), is what the runs measure.

The stacks are window_runs' (the course's Decoder, two heads, learned positions, W = 8) but one
local layer alone, which cannot form an induction head (lesson 11). Each is trained on d drawn
uniformly from 2 to MAX_DISTANCE, the loss on the d - 1 copyable predictions of each sequence.
Every run trains until its loss has stopped falling: every EVAL_EVERY steps the loss on
VALID_SEQUENCES held-out sequences is measured, and training stops once it has not fallen by
MIN_GAIN nats below its best for PATIENCE measurements in a row (or at MAX_STEPS, which the record
then says). PATIENCE is larger than lesson 15's: an induction head forms suddenly, after a plateau.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from torch.nn import functional

from attn.common.arguments import refuse_repeats, whole_number_argument
from attn.common.destinations import folder_argument, write_text
from attn.common.validate import require_choice, require_module, require_tensor, require_token_ids, type_name, whole_number
from attn.experiments.window_runs import (
    BATCH_SIZE,
    EMBED_DIM,
    LEARNING_RATE,
    LENGTH,
    NUM_HEADS,
    SEEDS,
    STACKS,
    WINDOW,
    _stack,  # the same --stacks check as lesson 14's recall runs
)
from attn.models.decoder import Decoder

VOCAB_SIZE = 64  # lesson 11's: large enough that a random repeat of the current token is rare
MIN_DISTANCE, MAX_DISTANCE = 2, LENGTH // 2  # both copies fit in the sequence
EVAL_EVERY, PATIENCE, MIN_GAIN, MAX_STEPS = 250, 3, 0.01, 12_000  # the stopping rule: see the docstring
VALID_SEQUENCES, VALID_SEED, TEST_PER_DISTANCE, TEST_SEED = 512, 2000, 100, 12345
EVAL_CHUNK = 1024  # test sequences scored at once (the default 100 in one chunk): --per-distance 100,000 fits too
RESULTS_NAME = "window_induction.json"
INDUCTION_STACKS = tuple(name for name in STACKS if name != "1 local")  # one layer cannot copy (lesson 11)


def check_distances(distances, length=LENGTH):
    """``distances`` must be a 1-D integer tensor of values from MIN_DISTANCE to length // 2 (MAX_DISTANCE for LENGTH)."""
    require_tensor("distances", distances)
    if distances.dim() != 1 or distances.is_floating_point() or distances.is_complex() or distances.dtype == torch.bool:
        raise TypeError(f"distances must be a 1-D integer tensor, got {distances.dim()}-D {distances.dtype}")
    longest = whole_number("length", length, minimum=2 * MIN_DISTANCE, maximum=2**16) // 2
    if distances.numel() and not (int(distances.min()) >= MIN_DISTANCE and int(distances.max()) <= longest):
        raise ValueError(f"distances must lie from {MIN_DISTANCE} to {longest} (two copies in {length} tokens), "
                         f"got values from {int(distances.min())} to {int(distances.max())}")


def repeat_batch(distances, generator, length=LENGTH):
    """tokens (N, length) and copyable (N, length) bool: the last 2d tokens are a block of d twice over.

    copyable[n, p] marks the positions whose next token is the token d - 1 positions back:
    length - d <= p < length - 1. Lesson 17 reads sequences longer than lesson 14's LENGTH.
    """
    check_distances(distances, length)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type_name(generator)}")
    tokens = torch.randint(VOCAB_SIZE, (len(distances), length), generator=generator)  # (N, length)
    positions = torch.arange(length)  # (length,)
    second = positions >= length - distances[:, None]  # (N, length): the second copy
    source = (positions - distances[:, None]).clamp(min=0)  # (N, length): d positions back
    tokens = torch.where(second, tokens.gather(1, source), tokens)
    copyable = second & (positions < length - 1)
    return tokens, copyable


def copy_loss(model, tokens, copyable):
    """Mean cross-entropy of the copyable predictions; also their right/wrong (K,) bool."""
    require_module("model", model)
    require_token_ids("tokens", tokens, 2)
    if not (isinstance(copyable, torch.Tensor) and copyable.dtype == torch.bool and copyable.shape == tokens.shape):
        raise TypeError(f"copyable must be a bool tensor shaped like tokens {tuple(tokens.shape)} (from repeat_batch), "
                        f"got {type_name(copyable) if not isinstance(copyable, torch.Tensor) else copyable.dtype}")
    if not copyable[:, :-1].any():
        raise ValueError("copyable marks no position before the last: there is nothing to score")
    logits = model(tokens)[:, :-1][copyable[:, :-1]]  # (K, V)
    targets = tokens[:, 1:][copyable[:, :-1]]  # (K,)
    return functional.cross_entropy(logits, targets), logits.argmax(dim=-1) == targets


def _check_model(model):
    if not isinstance(model, Decoder) or model.vocab_size != VOCAB_SIZE or model.max_length < LENGTH:
        raise TypeError(f"model must be an attn.models.decoder.Decoder from new_model, got {type_name(model)}")


def _check_run(stack, seed, max_steps, per_distance):
    require_choice("stack", stack, tuple(STACKS))
    whole_number("seed", seed, minimum=0, maximum=2**62)
    whole_number("max_steps", max_steps, minimum=1, maximum=10**6)
    whole_number("per_distance", per_distance, minimum=1, maximum=100_000)


def new_model(stack, seed):
    """The course's Decoder with ``stack``'s layer types, its weights drawn from ``seed``."""
    require_choice("stack", stack, tuple(STACKS))
    whole_number("seed", seed, minimum=0, maximum=2**62)
    torch.manual_seed(seed)
    return Decoder(VOCAB_SIZE, LENGTH, embed_dim=EMBED_DIM, num_heads=NUM_HEADS, num_layers=len(STACKS[stack]),
                   window=WINDOW, layer_types=list(STACKS[stack]))


def _sequences(count, seed, length=LENGTH):
    generator = torch.Generator().manual_seed(seed)
    return repeat_batch(torch.randint(MIN_DISTANCE, length // 2 + 1, (count,), generator=generator), generator, length)


def train(model, seed, max_steps=MAX_STEPS):
    """Adam until the validation loss stops falling; returns (steps, validation curve, stopped)."""
    _check_model(model)
    _check_run("2 local", seed, max_steps, 1)
    return _train_until_flat(model, seed, max_steps)


def _train_until_flat(model, seed, max_steps, patience=PATIENCE, min_steps=0, length=LENGTH):
    """The training loop of ``train`` for a model and arguments already checked; lesson 17's position runs share it
    (with their own model, a larger ``patience`` and ``min_steps`` before the rule may stop a run), and lesson 18's
    sparse runs (with sequences of ``length`` tokens, d from MIN_DISTANCE to length // 2)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(1000 + seed)
    valid = _sequences(VALID_SEQUENCES, VALID_SEED + seed, length)
    step, best, flat, curve = 0, float("inf"), 0, []
    while step < max_steps and (flat < patience or step < min_steps):
        model.train()
        for _ in range(min(EVAL_EVERY, max_steps - step)):
            distances = torch.randint(MIN_DISTANCE, length // 2 + 1, (BATCH_SIZE,), generator=generator)
            loss, _ = copy_loss(model, *repeat_batch(distances, generator, length))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        model.eval()
        with torch.no_grad():
            curve.append(round(copy_loss(model, *valid)[0].item(), 4))
        best, flat = (curve[-1], 0) if curve[-1] < best - MIN_GAIN else (best, flat + 1)
    return step, curve, flat >= patience


@torch.no_grad()
def accuracy_by_distance(model, per_distance=TEST_PER_DISTANCE):
    """Fraction of copyable predictions right at each distance MIN_DISTANCE .. MAX_DISTANCE, a list."""
    _check_model(model)
    _check_run("2 local", 0, 1, per_distance)
    return _accuracy(model, per_distance, LENGTH)


def _accuracy(model, per_distance, length):
    """``accuracy_by_distance`` on sequences of ``length`` (d up to length // 2), for arguments already checked."""
    model.eval()
    generator = torch.Generator().manual_seed(TEST_SEED)
    accuracy = []
    for distance in range(MIN_DISTANCE, length // 2 + 1):
        tokens, copyable = repeat_batch(torch.full((per_distance,), distance), generator, length)
        right = [copy_loss(model, tokens[start:start + EVAL_CHUNK], copyable[start:start + EVAL_CHUNK])[1]
                 for start in range(0, per_distance, EVAL_CHUNK)]  # scored a chunk at a time: any count fits in memory
        accuracy.append(torch.cat(right).double().mean().item())
    return accuracy


def run(stack, seed, max_steps=MAX_STEPS, per_distance=TEST_PER_DISTANCE):
    """One stack trained with one seed: accuracy by distance, steps, validation curve, whether it stopped."""
    _check_run(stack, seed, max_steps, per_distance)
    started = time.perf_counter()
    model = new_model(stack, seed)
    steps, curve, stopped = train(model, seed, max_steps)
    return {"stack": stack, "seed": seed, "steps": steps, "stopped": stopped, "curve": curve,
            "accuracy": [round(value, 3) for value in accuracy_by_distance(model, per_distance)],
            "seconds": round(time.perf_counter() - started, 1)}


def run_all(out, stacks=INDUCTION_STACKS, seeds=SEEDS, max_steps=MAX_STEPS, per_distance=TEST_PER_DISTANCE,
            progress=print):
    """Every stack with every seed, written to ``out``/RESULTS_NAME; returns the record."""
    record = {
        "task": {"vocab_size": VOCAB_SIZE, "length": LENGTH, "window": WINDOW, "embed_dim": EMBED_DIM,
                 "num_heads": NUM_HEADS, "batch_size": BATCH_SIZE, "learning_rate": LEARNING_RATE,
                 "test_per_distance": per_distance, "test_seed": TEST_SEED},
        "stopping": {"eval_every": EVAL_EVERY, "patience": PATIENCE, "min_gain": MIN_GAIN, "max_steps": max_steps,
                     "valid_sequences": VALID_SEQUENCES},
        "seeds": list(seeds), "stacks": {name: list(STACKS[name]) for name in stacks},
        "distances": list(range(MIN_DISTANCE, MAX_DISTANCE + 1)), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "runs": [],
    }
    for stack in stacks:
        for seed in seeds:
            result = run(stack, seed, max_steps, per_distance)
            record["runs"].append(result)
            progress(f"{stack:>15}, seed {seed}: {result['steps']} steps, validation loss {result['curve'][-1]:.3f}, "
                     f"{result['seconds']} s")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RESULTS_NAME, json.dumps(record, separators=(",", ":")) + "\n")
    return record


SEED_ARGUMENT = whole_number_argument("--seeds", 0, 2**31 - 1, "what the course's seeds take")
MAX_STEPS_ARGUMENT = whole_number_argument("--max-steps", 1, 10**6, "a run stops earlier when its loss stops falling")
PER_DISTANCE_ARGUMENT = whole_number_argument("--per-distance", 1, 100_000, "more would not fit in memory")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.window_induction",
        description="Train each stack of local and global layers on induction at a distance, with seeds 0-2.")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    parser.add_argument("--stacks", nargs="+", type=_stack, default=list(INDUCTION_STACKS),
                        help="stacks to train (default: all but one local layer, which cannot form an induction head)")
    parser.add_argument("--seeds", nargs="+", type=SEED_ARGUMENT, default=list(SEEDS), help="seeds (default: 0 1 2)")
    parser.add_argument("--max-steps", type=MAX_STEPS_ARGUMENT, default=MAX_STEPS,
                        help=f"most training steps per run (default {MAX_STEPS})")
    parser.add_argument("--per-distance", type=PER_DISTANCE_ARGUMENT, default=TEST_PER_DISTANCE,
                        help=f"test sequences per distance (default {TEST_PER_DISTANCE})")
    args = parser.parse_args(argv)
    refuse_repeats(parser, args, "stacks", "seeds")
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    run_all(args.out, tuple(args.stacks), tuple(args.seeds), args.max_steps, args.per_distance)


if __name__ == "__main__":
    main()
