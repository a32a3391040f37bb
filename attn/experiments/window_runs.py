"""What a sliding window costs in capability (lesson 14): recall of a token at a distance, by stack.

    python -m attn.experiments.window_runs --out lessons/records

The task: random filler tokens, one *value* token (one of VALUES) somewhere, and a query token at
the end; the model must name the value. The distance d is how far back the value sits from the
query. Every stack is the course's Decoder (lesson 10) with two heads and its layers "local"
(a window of WINDOW keys, itself included) or "global"; each is trained on distances drawn
uniformly from 1 to LENGTH - 1 with several seeds, then scored at every distance. A local layer
reaches WINDOW - 1 positions back, so a stack of L local layers can carry the value at most
L * (WINDOW - 1) positions; one global layer reaches everything.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from torch.nn import functional

from attn.common.arguments import MAX_STEPS, refuse_repeats, steps_argument, whole_number_argument
from attn.common.destinations import folder_argument, write_text
from attn.common.validate import require_choice, whole_number
from attn.models.decoder import Decoder

VALUES, FILLERS = 8, 16  # token ids 0..7 are values, 8..23 fillers, 24 the query
QUERY = VALUES + FILLERS
VOCAB_SIZE = QUERY + 1
LENGTH, WINDOW = 40, 8
EMBED_DIM, NUM_HEADS = 32, 2
STEPS, BATCH_SIZE, LEARNING_RATE = 300, 64, 3e-3
SEEDS = (0, 1, 2)
TEST_PER_DISTANCE, TEST_SEED = 100, 12345
FIRST_LOSSES = 10  # the losses of the first steps are recorded, for the test that re-runs them
STACKS = {
    "1 local": ("local",),
    "2 local": ("local", "local"),
    "3 local": ("local", "local", "local"),
    "local + global": ("local", "global"),
    "2 global": ("global", "global"),
}
RUNS_NAME = "window_runs.json"


def _check_sizes(**sizes):
    """Each size a whole number within its bounds (length >= 2: a value and the query), in the order given."""
    bounds = {"size": (1, 10**7), "length": (2, 2**16), "steps": (1, MAX_STEPS), "per_distance": (1, 100_000),
              "seed": (0, 2**62), "window": (1, 2**62)}
    return [whole_number(name, value, *bounds[name]) for name, value in sizes.items()]


def _check_model(model):
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be an attn.models.decoder.Decoder (from new_model), got {type(model).__name__}")


def check_distances(distances, length):
    """``distances`` must be None or a 1-D integer tensor of values from 1 to length - 1 (the query sits at the end)."""
    if distances is None:
        return
    if not isinstance(distances, torch.Tensor) or distances.dim() != 1 or distances.is_floating_point() or (
            distances.dtype == torch.bool):
        raise TypeError(f"distances must be None or a 1-D integer tensor, got {type(distances).__name__}")
    if distances.numel() and not (int(distances.min()) >= 1 and int(distances.max()) <= length - 1):
        raise ValueError(f"distances must lie from 1 to length - 1 = {length - 1} (the value before the query), "
                         f"got values from {int(distances.min())} to {int(distances.max())}")


def recall_batch(size, generator, distances=None, length=LENGTH):
    """tokens (N, length), values (N,), distances (N,): the value sits at length - 1 - distance."""
    size, length = _check_sizes(size=size, length=length)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    check_distances(distances, length)
    if distances is not None and len(distances) != size:
        raise ValueError(f"distances must hold one distance per example, {size}, got {len(distances)}")
    tokens = VALUES + torch.randint(FILLERS, (size, length), generator=generator)
    values = torch.randint(VALUES, (size,), generator=generator)
    if distances is None:
        distances = torch.randint(1, length, (size,), generator=generator)
    tokens[torch.arange(size), length - 1 - distances] = values
    tokens[:, -1] = QUERY
    return tokens, values, distances


def new_model(layer_types, seed, window=WINDOW, length=LENGTH):
    """The course's Decoder with these layer types, its weights drawn from ``seed``."""
    _check_sizes(seed=seed, window=window, length=length)
    if not isinstance(layer_types, list | tuple) or not layer_types:
        raise TypeError(f"layer_types must be a non-empty list of 'local' or 'global', got {type(layer_types).__name__}")
    torch.manual_seed(seed)
    return Decoder(VOCAB_SIZE, length, embed_dim=EMBED_DIM, num_heads=NUM_HEADS, num_layers=len(layer_types),
                   window=window, layer_types=list(layer_types))


def train(model, seed, steps=STEPS, length=LENGTH):
    """Adam on the cross-entropy of the last position's prediction; returns the losses."""
    _check_model(model)
    _check_sizes(seed=seed, steps=steps, length=length)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(1000 + seed)
    losses = []
    model.train()
    for _ in range(steps):
        tokens, values, _ = recall_batch(BATCH_SIZE, generator, length=length)
        loss = functional.cross_entropy(model(tokens)[:, -1], values)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def accuracy_by_distance(model, per_distance=TEST_PER_DISTANCE, length=LENGTH):
    """Fraction of test examples named right at each distance 1 .. length - 1, a list."""
    _check_model(model)
    per_distance, length = _check_sizes(per_distance=per_distance, length=length)
    distances = torch.arange(1, length).repeat_interleave(per_distance)
    tokens, values, _ = recall_batch(len(distances), torch.Generator().manual_seed(TEST_SEED), distances, length)
    right = model(tokens)[:, -1].argmax(dim=-1) == values
    return right.float().view(length - 1, per_distance).mean(dim=1).tolist()


def run(stack, seed, steps=STEPS, per_distance=TEST_PER_DISTANCE, length=LENGTH):
    """One stack trained with one seed: its accuracy by distance, first losses and final loss."""
    require_choice("stack", stack, tuple(STACKS))
    _check_sizes(seed=seed, steps=steps, per_distance=per_distance, length=length)
    started = time.perf_counter()
    model = new_model(STACKS[stack], seed, length=length)
    losses = train(model, seed, steps, length)
    return {
        "stack": stack, "seed": seed,
        "accuracy": [round(value, 3) for value in accuracy_by_distance(model, per_distance, length)],
        "first_losses": [round(value, 5) for value in losses[:FIRST_LOSSES]],
        "final_loss": round(losses[-1], 4), "seconds": round(time.perf_counter() - started, 1),
    }


def run_all(out, stacks=tuple(STACKS), seeds=SEEDS, steps=STEPS, per_distance=TEST_PER_DISTANCE, length=LENGTH,
            progress=print):
    """Every stack with every seed, written to ``out``/RUNS_NAME; returns the record."""
    record = {
        "task": {"values": VALUES, "fillers": FILLERS, "length": length, "window": WINDOW,
                 "embed_dim": EMBED_DIM, "num_heads": NUM_HEADS, "batch_size": BATCH_SIZE,
                 "learning_rate": LEARNING_RATE, "test_per_distance": per_distance, "test_seed": TEST_SEED},
        "steps": steps, "seeds": list(seeds), "stacks": {name: list(STACKS[name]) for name in stacks},
        "distances": list(range(1, length)), "torch": torch.__version__, "threads": torch.get_num_threads(), "runs": [],
    }
    for stack in stacks:
        for seed in seeds:
            result = run(stack, seed, steps, per_distance, length)
            record["runs"].append(result)
            progress(f"{stack:>15}, seed {seed}: final loss {result['final_loss']:.3f}, {result['seconds']} s")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RUNS_NAME, json.dumps(record, separators=(",", ":")) + "\n")
    return record



def _stack(text):
    if text not in STACKS:
        raise argparse.ArgumentTypeError(f"unknown stack {text!r}; choose from {', '.join(map(repr, STACKS))}")
    return text


def _seed(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a whole number from 0 to 2**31 - 1, got {text!r}") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"a seed is a whole number from 0 to 2**31 - 1, got {text!r}")
    return value

PER_DISTANCE_ARGUMENT = whole_number_argument("--per-distance", 1, 100_000, "more would not fit in memory")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.window_runs",
        description="Train each stack of local and global layers on recall at a distance, with seeds 0-2.")
    parser.add_argument("--out", required=True, type=folder_argument(RUNS_NAME), help=f"folder for {RUNS_NAME}")
    parser.add_argument("--stacks", nargs="+", type=_stack, default=list(STACKS), help="stacks to train (default: all)")
    parser.add_argument("--seeds", nargs="+", type=_seed, default=list(SEEDS), help="seeds (default: 0 1 2)")
    parser.add_argument("--steps", type=steps_argument(), default=STEPS, help=f"training steps (default {STEPS})")
    parser.add_argument("--per-distance", type=PER_DISTANCE_ARGUMENT, default=TEST_PER_DISTANCE,
                        help=f"test examples per distance (default {TEST_PER_DISTANCE})")
    args = parser.parse_args(argv)
    refuse_repeats(parser, args, "stacks", "seeds")
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    run_all(args.out, tuple(args.stacks), tuple(args.seeds), args.steps, args.per_distance)


if __name__ == "__main__":
    main()
