"""Part 3's designs side by side (lesson 18): recall and induction at equal keys read per query, over seeds.

    python -m attn.experiments.sparse_runs --out lessons/records

Two tasks, each lesson's own: lesson 15's recall (attn.experiments.compressed_recall: 24 (key, value) pairs, one
token each, then the query key; one mixer layer) and lesson 14's induction at a distance
(attn.experiments.window_induction: a block of d tokens twice over at the end of random tokens; two blocks of
lesson 10's Decoder, each with the arm's mixer in its attention's place), shortened to INDUCTION_LENGTH tokens.
The arms, each a token mixer at compressed_recall's sizes (E = 32, 4 heads of 8), causal:

- ``dense``: the course's MultiHeadAttention; every query reads every earlier key;
- ``window+sinks``: the same layer with a window of TOP_K - SINKS keys and SINKS sink tokens (lesson 14):
  every query from position TOP_K - 1 on reads exactly TOP_K keys, the first SINKS and its last TOP_K - SINKS;
- ``dsa``: DeepSeek Sparse Attention (attn.models.sparse_mixers.DSAMixer): a small lightning indexer scores every
  earlier key and the attention reads the TOP_K best; the indexer learns only from DeepSeek-V3.2's KL loss against
  the dense attention's weights, added to the task's loss (the top-k choice passes it no gradient);
- ``nsa``: Native Sparse Attention (attn.block_sparse.NativeSparseAttention): compressed blocks, selected blocks
  and a window. NSA always reads the query's own block, the one before it and the first (fla's rule and the
  paper's), so it chooses a block by its score only from its fourth selected block on: the smallest NSA that
  chooses anything here has blocks of 2 and 4 selected blocks and no window branch, 25 // 2 + 4 x 2 = 20 keys for
  recall's last query (``nsa_keys_read``), more than TOP_K: at these lengths NSA cannot read as few keys as the
  others and still choose;
- ``mla`` and ``delta``: lesson 15's latent attention and gated delta rule, exactly as lesson 15 sized them
  (compressed_recall.make_mixer and cache_numbers_per_token): MLA caches r + d_rope = 16 numbers per token, as
  many as multi-query attention; the delta rule caches no token at all, only its fixed 4 x 8 x 8 memory per layer.
  On recall the delta layer's query reads without writing (lesson 15's rule); on induction every token is a
  query and every token writes.

Keys read per query and cache numbers are recorded for each arm at each task's length (``keys_read``,
``cache_numbers``). Every run trains until its validation loss stops falling, through each lesson's own loop
(compressed_recall.train_and_test; window_induction._train_until_flat) and by lesson 15's rule for both: every 250
steps the validation loss is measured, and training stops once it has not fallen 0.01 below its best for PATIENCE
measurements in a row, or at the task's cap (RECALL_MAX_STEPS, INDUCTION_MAX_STEPS), which the record then says
(``steps``, ``stopped``). ``--update`` retrains only the arms named by ``--arms`` and keeps the others' runs from the
record already in ``--out`` (a run is seeded, so a run that stopped before a cap is the same under a higher cap);
it refuses to keep a run that reached an older, lower cap. Cost: see the record's ``seconds`` and ``workers``. The
same seeds draw the same data and the same embeddings for every arm, so arms are compared seed by seed: the
paired differences (each arm minus dense, and minus window+sinks) with 95% t-intervals (attn.common.stats).
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from torch import nn

from attn.block_sparse import NativeSparseAttention
from attn.common.arguments import whole_number_argument
from attn.common.destinations import folder_argument, write_text
from attn.common.stats import describe, paired_interval
from attn.common.validate import require_choice, type_name, whole_number
from attn.experiments import compressed_recall, window_induction
from attn.experiments.compressed_recall import CACHE_TASK, EMBED, HEAD_DIM, HEADS, RecallStack, cache_numbers_per_token
from attn.models.decoder import Decoder
from attn.models.sparse_mixers import INDEXER_DIM, INDEXER_HEADS, SINKS, TOP_K, DSAMixer, WindowSinksMixer

RESULTS_NAME = "sparse_runs.json"
ARMS = ("dense", "window+sinks", "dsa", "nsa", "mla", "delta")
TASKS = ("recall", "induction")
SEEDS = (0, 1, 2, 3, 4)
NSA_BLOCK, NSA_BLOCKS, NSA_WINDOW = 2, 4, None  # NSA: blocks of 2 tokens, 4 selected, no window branch (see nsa_keys_read)
RECALL_TASK = CACHE_TASK  # lesson 15's: 24 pairs from 48 keys and 32 values, 25 tokens
RECALL_LENGTH = RECALL_TASK["n_pairs"] + 1
INDUCTION_LENGTH = 24  # lesson 14's task, shortened from 40 tokens: d from 2 to 12
INDUCTION_LAYERS = 2  # an induction head needs two layers (lesson 11)
RECALL_MAX_STEPS = INDUCTION_MAX_STEPS = 10_000  # the slower arms (the delta rule, NSA) still fall at 3,000-4,000
TEST_PER_DISTANCE = 100
PATIENCE = compressed_recall.PATIENCE  # one stopping rule for both tasks: lesson 15's


def make_mixer(arm, task):
    """The token mixer of ``arm`` for ``task`` ("recall" or "induction"), at E = 32, 4 heads of 8."""
    require_choice("arm", arm, ARMS)
    require_choice("task", task, TASKS)
    if arm == "dense":
        return compressed_recall.make_mixer("mha")
    if arm == "window+sinks":
        return WindowSinksMixer(EMBED, HEADS)
    if arm == "dsa":
        return DSAMixer(EMBED, HEADS)
    if arm == "nsa":
        return NativeSparseAttention(EMBED, HEADS, HEADS, NSA_BLOCK, NSA_BLOCKS, NSA_WINDOW)
    if arm == "mla":
        return compressed_recall.make_mixer("mla")
    return compressed_recall.make_mixer("delta" if task == "recall" else "delta-write")


# What each arm reads and caches --------------------------------------------------------------------------------


def nsa_keys_read(length):
    """Keys NSA's last query reads in ``length`` tokens, counted as compressed blocks + selected blocks x block size
    + window: T // NSA_BLOCK block means and NSA_BLOCKS blocks (no window branch here). The blocks NSA must select
    come first (the query's own block, then the previous one and the first, fla's rule), so its fourth selected block
    is the first it chooses by score: with blocks of 2 that is 12 means + 8 keys = 20 keys at recall's 25 tokens."""
    length = whole_number("length", length, minimum=1, maximum=2**40)
    window = 0 if NSA_WINDOW is None else min(NSA_WINDOW, length)
    return length // NSA_BLOCK + NSA_BLOCKS * NSA_BLOCK + window


def keys_read(arm, length):
    """Keys (or latents) the last query of a ``length``-token sequence reads in one layer; 0 for the delta rule,
    which reads its fixed memory instead. The dsa indexer also scores every earlier key (``index_keys``)."""
    require_choice("arm", arm, ARMS)
    length = whole_number("length", length, minimum=1, maximum=2**40)
    return {"dense": length, "window+sinks": min(TOP_K, length), "dsa": min(TOP_K, length),
            "nsa": nsa_keys_read(length), "mla": length, "delta": 0}[arm]


def cache_numbers(arm, length):
    """Numbers one layer caches for a ``length``-token sequence: (per token, in all).

    dense: 2 x 4 x 8 = 64 per token; window+sinks: 64 for each of its TOP_K tokens only; dsa: 64 and the indexer's
    key (INDEXER_DIM); nsa: 64 per token and one compressed key and value (64) per block; mla: lesson 15's 16;
    delta: none per token, a fixed 4 x 8 x 8 memory."""
    require_choice("arm", arm, ARMS)
    length = whole_number("length", length, minimum=1, maximum=2**40)
    full = cache_numbers_per_token("mha")
    per_token = {"dense": full, "window+sinks": full, "dsa": full + INDEXER_DIM, "nsa": full + full / NSA_BLOCK,
                 "mla": cache_numbers_per_token("mla"), "delta": 0}[arm]
    total = {"window+sinks": full * min(TOP_K, length), "delta": HEADS * HEAD_DIM * HEAD_DIM}.get(arm, per_token * length)
    return per_token, int(total)


# The two tasks -------------------------------------------------------------------------------------------------


class SparseRecallStack(RecallStack):
    """Lesson 15's recall stack with this lesson's mixers: kinds are arms (ARMS), on the recall task."""

    mixer_kinds = ARMS

    @staticmethod
    def new_mixer(kind):
        return make_mixer(kind, "recall")


class _AttentionSlot(nn.Module):
    """A mixer in a TransformerBlock's attention place: called as the block calls its attention, it runs
    the mixer on the query (self-attention, causal) and refuses what a mixer does not take."""

    def __init__(self, mixer):
        super().__init__()
        self.mixer, self.embed_dim = mixer, EMBED

    def forward(self, query, key, value, mask=None, key_padding_mask=None, is_causal=False, cache=None,
                need_weights=False):
        if not is_causal or mask is not None or key_padding_mask is not None or cache is not None or need_weights:
            raise ValueError("a sparse-runs mixer is causal self-attention only: no mask, padding, cache or weights")
        return self.mixer(query)


def induction_model(arm, seed, length=INDUCTION_LENGTH):
    """Lesson 14's Decoder (two blocks, learned positions) with ``arm``'s mixer in each block, drawn from ``seed``."""
    require_choice("arm", arm, ARMS)
    whole_number("seed", seed, minimum=0, maximum=2**62)
    length = whole_number("length", length, minimum=2 * window_induction.MIN_DISTANCE, maximum=4096)
    torch.manual_seed(seed)
    model = Decoder(window_induction.VOCAB_SIZE, length, embed_dim=EMBED, num_heads=HEADS, num_layers=INDUCTION_LAYERS)
    for block in model.blocks:
        block.attention = _AttentionSlot(make_mixer(arm, "induction"))
    return model


def recall_run(arm, seed, max_steps=RECALL_MAX_STEPS):
    """One arm on lesson 15's recall task: compressed_recall.train_and_test's result (accuracy, steps, stopped...)."""
    require_choice("arm", arm, ARMS)
    return compressed_recall.train_and_test((arm,), RECALL_TASK, seed, max_steps, stack=SparseRecallStack)


def induction_run(arm, seed, max_steps=INDUCTION_MAX_STEPS, per_distance=TEST_PER_DISTANCE, length=INDUCTION_LENGTH):
    """One arm on lesson 14's induction task at ``length`` tokens: accuracy (all copyable predictions, every d
    alike) and by distance, steps, validation curve, whether the loss stopped falling."""
    whole_number("max_steps", max_steps, minimum=1, maximum=10**6)
    whole_number("per_distance", per_distance, minimum=1, maximum=100_000)
    model = induction_model(arm, seed, length)
    steps, curve, stopped = window_induction._train_until_flat(model, seed, max_steps, patience=PATIENCE, length=length)
    by_distance = window_induction._accuracy(model, per_distance, length)
    model.train()
    return {"accuracy": round(sum(by_distance) / len(by_distance), 3),
            "by_distance": [round(value, 3) for value in by_distance],
            "parameters": sum(parameter.numel() for parameter in model.parameters()),
            "steps": steps, "curve": curve, "stopped": stopped}


# The record ----------------------------------------------------------------------------------------------------


def compare(runs, arms, against):
    """Paired differences of accuracy, each arm minus ``against``: {arm: {mean, low, high, words}} over the seeds."""
    require_choice("against", against, ARMS)
    if not isinstance(arms, list | tuple) or not all(isinstance(arm, str) and arm in ARMS for arm in arms):
        raise TypeError(f"arms must be a list of arm names from {', '.join(ARMS)}, got {type_name(arms)} {arms!r:.60}")
    if not isinstance(runs, dict) or not all(isinstance(run, dict) and "accuracy" in run for run in runs.values()):
        raise TypeError(f"runs must be a dict {{arm: {{'accuracy': [one per seed], ...}}}}, got {type_name(runs)}")
    if against not in runs:
        return {}
    comparisons = {}
    for arm in arms:
        if arm == against or arm not in runs:
            continue
        mean, low, high = paired_interval(runs[arm]["accuracy"], runs[against]["accuracy"])
        words = describe(mean, low, high)
        words = {"the first ahead": f"{arm} ahead", "the second ahead": f"{against} ahead"}.get(words, "not distinguished")
        comparisons[arm] = {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4), "words": words}
    return comparisons


def _gather(results, arm, length):
    per_token, total = cache_numbers(arm, length)
    gathered = {"accuracy": [r["accuracy"] for r in results], "steps": [r["steps"] for r in results],
                "stopped": [r["stopped"] for r in results], "parameters": results[0]["parameters"],
                "keys_read": keys_read(arm, length), "cache_numbers_per_token": per_token, "cache_numbers": total,
                "curves": [r["curve"] for r in results]}
    if "by_distance" in results[0]:
        gathered["by_distance"] = [r["by_distance"] for r in results]
    return gathered


def _job(arguments):
    """One run, in a worker: (task, arm, seed, max_steps, per_distance) -> its result. One thread, as in main."""
    task, arm, seed, max_steps, per_distance = arguments
    torch.set_num_threads(1)
    if task == "recall":
        return recall_run(arm, seed, max_steps)
    return induction_run(arm, seed, max_steps, per_distance)


def _pool(workers):
    """``workers`` processes (spawned: each imports the course afresh), or None: this process alone."""
    if workers == 1:
        return contextlib.nullcontext()
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def run_all(out, arms=ARMS, seeds=SEEDS, recall_max_steps=RECALL_MAX_STEPS, induction_max_steps=INDUCTION_MAX_STEPS,
            per_distance=TEST_PER_DISTANCE, workers=1, progress=print, previous=None):
    """Every arm on both tasks with every seed; writes ``out``/RESULTS_NAME and returns the record.

    Each run is seeded and single-threaded, so ``workers`` processes give the same record as one, sooner. With
    ``previous`` (a record from ``kept_runs``), the arms not in ``arms`` keep their runs from it."""
    record = {"arms": list(arms), "seeds": list(seeds), "top_k": TOP_K, "sinks": SINKS,
              "indexer": {"heads": INDEXER_HEADS, "head_dim": INDEXER_DIM, "rope_dim": 0},
              "nsa": {"block_size": NSA_BLOCK, "block_count": NSA_BLOCKS, "window": NSA_WINDOW},
              "mixer": {"embed_dim": EMBED, "heads": HEADS, "head_dim": HEAD_DIM}, "torch": torch.__version__,
              "tasks": {
                  "recall": {"task": RECALL_TASK, "length": RECALL_LENGTH, "max_steps": recall_max_steps,
                             "stopping": {"eval_every": compressed_recall.EVAL_EVERY, "patience": compressed_recall.PATIENCE,
                                          "min_gain": compressed_recall.MIN_GAIN}, "runs": {}},
                  "induction": {"length": INDUCTION_LENGTH, "layers": INDUCTION_LAYERS, "vocab_size": window_induction.VOCAB_SIZE,
                                "distances": list(range(window_induction.MIN_DISTANCE, INDUCTION_LENGTH // 2 + 1)),
                                "per_distance": per_distance, "max_steps": induction_max_steps,
                                "stopping": {"eval_every": window_induction.EVAL_EVERY, "patience": PATIENCE,
                                             "min_gain": window_induction.MIN_GAIN}, "runs": {}}}}
    jobs = [(task, arm, seed) for task in reversed(TASKS) for arm in arms for seed in seeds]  # the longer runs first
    caps = {"recall": recall_max_steps, "induction": induction_max_steps}
    results, started = {}, time.perf_counter()
    with _pool(workers) as pool:
        each = map if pool is None else pool.map
        for job, result in zip(jobs, each(_job, [(*job, caps[job[0]], per_distance) for job in jobs]), strict=True):
            results[job] = result
            progress(f"{job[0]:>9} {job[1]:>12} seed {job[2]}: accuracy {result['accuracy']:.3f} after "
                     f"{result['steps']} steps ({time.perf_counter() - started:.0f} s)")
    every_arm = [arm for arm in ARMS if arm in arms or (previous and arm in previous["arms"])]
    record["arms"] = every_arm
    for task, length in (("recall", RECALL_LENGTH), ("induction", INDUCTION_LENGTH)):
        runs = record["tasks"][task]["runs"]
        for arm in every_arm:
            runs[arm] = (_gather([results[task, arm, seed] for seed in seeds], arm, length) if arm in arms
                         else previous["tasks"][task]["runs"][arm])
        arms_compared = every_arm
        if len(seeds) >= 2:
            record["tasks"][task]["versus_dense"] = compare(runs, arms_compared, "dense")
            record["tasks"][task]["versus_window"] = compare(runs, arms_compared, "window+sinks")
    record["seconds"], record["workers"] = round(time.perf_counter() - started), workers
    if previous:
        record["seconds"] += previous["seconds"]
        record["updates"] = [*previous.get("updates", []), {"arms": list(arms), "seconds": round(time.perf_counter() - started)}]
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RESULTS_NAME, json.dumps(record, indent=1) + "\n")
    return record


def kept_runs(path, arms, seeds):
    """The record at ``path``, checked to be one whose other arms can be kept: same seeds and settings, every kept
    run stopped before its cap (a run cut off by a lower cap would differ now). Raises a sentence otherwise."""
    if not isinstance(path, str | Path):
        raise TypeError(f"path must be the record's path (a str or Path), got {type_name(path)}")
    if not Path(path).is_file():  # a folder, a pipe or nothing at all: nothing to keep (and nothing to block on)
        raise FileNotFoundError(f"--update keeps the other arms of {path}, which is not a record file; run without "
                                "--update first")
    try:
        previous = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"--update could not read {path} as a record of this command: {error}") from None
    if not isinstance(previous, dict) or not isinstance(previous.get("tasks"), dict) or "arms" not in previous:
        raise ValueError(f"{path} is not a record of this command (no arms and tasks)")
    if previous.get("seeds") != list(seeds):
        raise ValueError(f"{path} holds seeds {previous.get('seeds')}, this run {list(seeds)}: pair them by running all arms")
    settings = {"top_k": TOP_K, "sinks": SINKS, "mixer": {"embed_dim": EMBED, "heads": HEADS, "head_dim": HEAD_DIM}}
    for name, value in settings.items():
        if previous.get(name) != value:
            raise ValueError(f"{path} was made with {name} = {previous.get(name)}, this code has {value}: run all arms")
    for arm, setting in (("dsa", "indexer"), ("nsa", "nsa")):
        current = {"indexer": {"heads": INDEXER_HEADS, "head_dim": INDEXER_DIM, "rope_dim": 0},
                   "nsa": {"block_size": NSA_BLOCK, "block_count": NSA_BLOCKS, "window": NSA_WINDOW}}[setting]
        if arm in previous["arms"] and arm not in arms and previous.get(setting) != current:
            raise ValueError(f"{path}'s {arm} runs were made with {setting} = {previous.get(setting)}, this code has "
                             f"{current}: add {arm} to --arms")
    for task, entry in previous["tasks"].items():
        for arm in previous["arms"]:
            if arm not in arms and not all(entry["runs"][arm]["stopped"]):
                raise ValueError(f"{path}'s {arm} runs on {task} reached the cap of {entry['max_steps']} steps still "
                                 f"falling: add {arm} to --arms")
    return previous


def _arm(text):
    if text not in ARMS:
        raise argparse.ArgumentTypeError(f"--arms takes names from {', '.join(ARMS)}, got {text!r}")
    return text


SEEDS_ARGUMENT = whole_number_argument("--seeds", 1, 100, "each seed trains every arm on both tasks again")
STEPS_ARGUMENT = whole_number_argument("--max-steps", 1, 100_000, "a run stops earlier once its loss stops falling")
WORKERS_ARGUMENT = whole_number_argument("--workers", 1, os.cpu_count() or 1, f"this machine has {os.cpu_count() or 1} cores")
PER_DISTANCE_ARGUMENT = whole_number_argument("--per-distance", 1, 10_000, "test sequences per distance")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.sparse_runs",
        description="Train lesson 18's side-by-side runs: dense, window+sinks, DSA, NSA, MLA and the delta rule "
                    "on recall and induction, seeds 0, 1, ...")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    parser.add_argument("--arms", nargs="+", type=_arm, default=list(ARMS), help="arms to train (default: all)")
    parser.add_argument("--seeds", type=SEEDS_ARGUMENT, default=len(SEEDS), help="how many seeds (default 5)")
    parser.add_argument("--max-steps", type=STEPS_ARGUMENT, default=None,
                        help=f"cap on each run's steps (default {RECALL_MAX_STEPS} for recall, {INDUCTION_MAX_STEPS} "
                             "for induction)")
    parser.add_argument("--per-distance", type=PER_DISTANCE_ARGUMENT, default=TEST_PER_DISTANCE,
                        help=f"induction test sequences per distance (default {TEST_PER_DISTANCE})")
    parser.add_argument("--update", action="store_true",
                        help="retrain only --arms and keep the other arms' runs from the record already in --out")
    parser.add_argument("--workers", type=WORKERS_ARGUMENT, default=1,
                        help="processes that train runs side by side, one thread each (default 1; the record is the same)")
    args = parser.parse_args(argv)
    if len(set(args.arms)) != len(args.arms):
        parser.error(f"--arms names an arm twice: {' '.join(args.arms)}")
    if args.max_steps is not None and args.max_steps > compressed_recall.LONGEST_RUN:
        parser.error(f"--max-steps must be at most {compressed_recall.LONGEST_RUN} (the most the recall task's training "
                     f"allows), got {args.max_steps}")
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    recall_cap = RECALL_MAX_STEPS if args.max_steps is None else args.max_steps
    induction_cap = INDUCTION_MAX_STEPS if args.max_steps is None else args.max_steps
    seeds = tuple(range(args.seeds))
    previous = None
    if args.update:
        try:
            previous = kept_runs(Path(args.out) / RESULTS_NAME, args.arms, seeds)
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
    run_all(args.out, tuple(args.arms), seeds, recall_cap, induction_cap, args.per_distance, args.workers,
            previous=previous)


if __name__ == "__main__":
    main()
