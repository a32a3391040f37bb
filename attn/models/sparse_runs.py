"""Part 3's designs side by side (lesson 18): recall and induction at equal keys read per query, over seeds.

    python -m attn.models.sparse_runs --out lessons/models

Two tasks, each lesson's own: lesson 15's recall (attn.models.compressed_recall: 24 (key, value) pairs, one
token each, then the query key; one mixer layer) and lesson 14's induction at a distance
(attn.models.window_induction: a block of d tokens twice over at the end of random tokens; two blocks of
lesson 10's Decoder, each with the arm's mixer in its attention's place), shortened to INDUCTION_LENGTH tokens.
The arms, each a token mixer at compressed_recall's sizes (E = 32, 4 heads of 8), causal:

- ``dense``: the course's MultiHeadAttention; every query reads every earlier key;
- ``window+sinks``: the same layer with a window of TOP_K - SINKS keys and SINKS sink tokens (lesson 14):
  every query from position TOP_K - 1 on reads exactly TOP_K keys, the first SINKS and its last TOP_K - SINKS;
- ``dsa``: DeepSeek Sparse Attention (DeepSeek-V3.2): a small lightning indexer (attn.sparse.LightningIndexer,
  its query latent the layer's input itself) scores every earlier key and the attention reads the TOP_K best
  (attn.sparse.topk_attention, every head the same keys). The indexer learns as DeepSeek-V3.2 trains it: a KL
  divergence from the dense attention's weights (the same queries and keys over every earlier key, summed over
  the heads and renormalised, detached) to the softmax of its index scores, its input detached, added to the
  task's loss. Nothing else reaches the indexer: the top-k choice is a mask, so it passes no gradient back;
- ``nsa``: Native Sparse Attention (attn.block_sparse.NativeSparseAttention): compressed blocks, selected blocks
  and a window, sized so that the keys it reads come as close to TOP_K as its shapes allow: blocks of 4, one
  selected block, no window branch, 25 // 4 + 4 = 10 keys for recall's last query (``nsa_keys_read``);
- ``mla`` and ``delta``: lesson 15's latent attention and gated delta rule, exactly as lesson 15 sized them
  (compressed_recall.make_mixer and cache_numbers_per_token): MLA caches r + d_rope = 16 numbers per token, as
  many as multi-query attention; the delta rule caches no token at all, only its fixed 4 x 8 x 8 memory per layer.
  On recall the delta layer's query reads without writing (lesson 15's rule); on induction every token is a
  query and every token writes.

Keys read per query and cache numbers are recorded for each arm at each task's length (``keys_read``,
``cache_numbers``). Every run trains until its validation loss stops falling, through each lesson's own loop
(compressed_recall.train_and_test; window_induction._train_until_flat) and by lesson 15's rule for both: every 250
steps the validation loss is measured, and training stops once it has not fallen 0.01 below its best for PATIENCE
measurements in a row, or at the task's cap (3,000 steps for recall, INDUCTION_MAX_STEPS for induction), which the
record then says (``steps``, ``stopped``). Cost: see the record's ``seconds`` and ``workers``. The
same seeds draw the same data and the same embeddings for every arm, so arms are compared seed by seed: the
paired differences (each arm minus dense, and minus window+sinks) with 95% t-intervals (attn.common.stats).
"""

import argparse
import json
import math
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
from attn.common.layer_checks import check_sequence
from attn.common.stats import describe, paired_interval
from attn.common.validate import require_choice, require_finite, require_tensor, type_name, whole_number
from attn.models import compressed_recall, window_induction
from attn.models.compressed_recall import CACHE_TASK, EMBED, HEAD_DIM, HEADS, RecallStack, cache_numbers_per_token
from attn.models.decoder import Decoder
from attn.multihead import MultiHeadAttention, explicit_attention, merge_heads, split_heads
from attn.sparse import LightningIndexer, topk_attention

RESULTS_NAME = "sparse_runs.json"
ARMS = ("dense", "window+sinks", "dsa", "nsa", "mla", "delta")
TASKS = ("recall", "induction")
SEEDS = (0, 1, 2, 3, 4)
TOP_K, SINKS = 8, 2  # keys read per query; window+sinks: 2 sinks and the last 6 keys
INDEXER_HEADS, INDEXER_DIM = 2, 8  # the lightning indexer: 2 heads of 8, one shared key of 8 per token, no rotary
NSA_BLOCK, NSA_BLOCKS, NSA_WINDOW = 4, 1, None  # NSA: blocks of 4 tokens, 1 selected, no window branch (see nsa_keys_read)
RECALL_TASK = CACHE_TASK  # lesson 15's: 24 pairs from 48 keys and 32 values, 25 tokens
RECALL_LENGTH = RECALL_TASK["n_pairs"] + 1
INDUCTION_LENGTH = 24  # lesson 14's task, shortened from 40 tokens: d from 2 to 12
INDUCTION_LAYERS = 2  # an induction head needs two layers (lesson 11)
RECALL_MAX_STEPS, INDUCTION_MAX_STEPS = compressed_recall.MAX_STEPS, 4000
TEST_PER_DISTANCE = 100
PATIENCE = compressed_recall.PATIENCE  # one stopping rule for both tasks: lesson 15's


# The mixers --------------------------------------------------------------------------------------------------


class WindowSinksMixer(nn.Module):
    """The course's MultiHeadAttention with a window of ``top_k - sinks`` keys and ``sinks`` sink tokens, causal.
    x (B, T, E) -> (B, T, E); the query at position p >= top_k - 1 reads exactly top_k keys."""

    def __init__(self, embed_dim, num_heads, top_k=TOP_K, sinks=SINKS):
        super().__init__()
        top_k = whole_number("top_k", top_k, minimum=1, maximum=2**20)
        sinks = whole_number("sinks", sinks, minimum=0, maximum=top_k - 1)
        self.attention = MultiHeadAttention(embed_dim, num_heads, window=top_k - sinks, sink_tokens=sinks)

    def forward(self, x):
        return self.attention(x, x, x, is_causal=True)


class _WithLoss(torch.autograd.Function):
    """``output`` unchanged; in the backward pass ``loss`` receives gradient 1, as if it had been added to the
    training loss (the way DeepSeek's released MoE code attaches its balance loss to a layer's output)."""

    @staticmethod
    def forward(ctx, output, loss):
        ctx.save_for_backward(loss)
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output):
        (loss,) = ctx.saved_tensors
        return grad_output, torch.ones_like(loss)


def indexer_kl(index_scores, attention_weights):
    """KL(p || softmax(I)) averaged over queries: DeepSeek-V3.2's loss for its lightning indexer.

    index_scores (B, T, T): the indexer's scores for every (query, key), causal keys only are used;
    attention_weights (B, H, T, T): the dense attention's causal weights. p, the target, is the weights summed over
    heads and renormalised (each row sums to 1), detached. Returns a scalar; 0 when softmax(I) equals p.
    """
    require_tensor("index_scores", index_scores)
    require_tensor("attention_weights", attention_weights)
    if (index_scores.dim() != 3 or attention_weights.dim() != 4 or attention_weights.shape[2:] != index_scores.shape[1:]
            or attention_weights.shape[0] != index_scores.shape[0] or index_scores.shape[1] != index_scores.shape[2]):
        raise ValueError(f"index_scores must be (B, T, T) and attention_weights (B, H, T, T), got "
                         f"{tuple(index_scores.shape)} and {tuple(attention_weights.shape)}")
    require_finite("attention_weights", attention_weights)
    if index_scores.is_floating_point() and bool((index_scores.isnan() | (index_scores == math.inf)).any()):
        raise ValueError("index_scores hold NaN or +inf: the loss would be NaN (-inf is allowed: a key given no chance)")
    if not index_scores.is_floating_point() or attention_weights.dtype != index_scores.dtype:
        raise TypeError(f"index_scores and attention_weights must share one floating dtype, got {index_scores.dtype} "
                        f"and {attention_weights.dtype}")
    length = index_scores.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=index_scores.device).tril()  # (T, T)
    target = attention_weights.detach().sum(dim=1)  # (B, T, T): summed over the heads
    target = target.masked_fill(~causal, 0.0)
    target = target / target.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(target.dtype).tiny)
    log_index = torch.log_softmax(index_scores.masked_fill(~causal, -math.inf), dim=-1)  # (B, T, T)
    log_index = log_index.masked_fill(~causal, 0.0)  # 0 * -inf would be NaN: the future keys hold no target
    return (torch.xlogy(target, target) - target * log_index).sum(dim=-1).mean()


class DSAMixer(nn.Module):
    """Top-k attention whose keys a lightning indexer chooses, the indexer trained by ``indexer_kl``.

    x (B, T, E) -> (B, T, E), causal. In training (with gradients on) the KL term rides on the output
    (``_WithLoss``) and ``last_kl`` keeps its value; the indexer sees x detached, and the top-k mask passes no
    gradient, so only the KL term trains the indexer and the KL term trains nothing else.
    """

    def __init__(self, embed_dim, num_heads, top_k=TOP_K, indexer_heads=INDEXER_HEADS, indexer_dim=INDEXER_DIM):
        super().__init__()
        self.top_k = whole_number("top_k", top_k, minimum=1, maximum=2**20)
        self.attention = MultiHeadAttention(embed_dim, num_heads)  # its projections; its forward is not used
        self.indexer = LightningIndexer(embed_dim, embed_dim, indexer_heads, indexer_dim, rope_dim=0)
        self.last_kl = None

    def heads(self, x):
        """x (B, T, E) -> q, k, v (B, H, T, d): the layer's projections, split into heads."""
        attention = self.attention
        check_sequence("x", x, attention.embed_dim, attention.query_proj.weight)
        require_finite("x", x)
        q = split_heads(attention.query_proj(x), attention.num_heads)
        k = split_heads(attention.key_proj(x), attention.num_kv_heads)
        v = split_heads(attention.value_proj(x), attention.num_kv_heads)
        return q, k, v

    def read(self, x):
        """x (B, T, E) -> output (B, T, E), the top-k attention's weights (B, H, T, T) and index scores (B, T, T)."""
        q, k, v = self.heads(x)
        index_scores = self.indexer(x.detach(), x.detach())  # (B, T, T): the indexer's input is detached
        heads, weights = topk_attention(q, k, v, index_scores.detach(), self.top_k)  # (B, H, T, d), (B, H, T, T)
        return self.attention.out_proj(merge_heads(heads)), weights, index_scores

    def forward(self, x):
        output, _, index_scores = self.read(x)
        if not (self.training and torch.is_grad_enabled()):
            return output
        with torch.no_grad():
            _, dense = explicit_attention(*self.heads(x), is_causal=True)  # (B, H, T, T): every earlier key
        kl = indexer_kl(index_scores, dense)
        self.last_kl = kl.detach()
        return _WithLoss.apply(output, kl)


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
    + window: T // NSA_BLOCK block means and NSA_BLOCKS blocks (no window branch here). The fewest NSA allows near
    TOP_K: its compressed branch alone sees T / block_size means, and the blocks it must select come first (the
    query's own block, then the previous one and the first, fla's rule), so with one selected block that block is the
    query's own (its tokens up to the query: 1 to NSA_BLOCK of them) and no block is chosen by its score."""
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


class _InProcess:
    """A pool of no worker processes: map runs the jobs here, one after another."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def map(function, items):
        return map(function, items)


def _pool(workers):
    """``workers`` processes (spawned: each imports the course afresh), or this process alone for 1."""
    if workers == 1:
        return _InProcess()
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def run_all(out, arms=ARMS, seeds=SEEDS, recall_max_steps=RECALL_MAX_STEPS, induction_max_steps=INDUCTION_MAX_STEPS,
            per_distance=TEST_PER_DISTANCE, workers=1, progress=print):
    """Every arm on both tasks with every seed; writes ``out``/RESULTS_NAME and returns the record.

    Each run is seeded and single-threaded, so ``workers`` processes give the same record as one, sooner."""
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
        for job, result in zip(jobs, pool.map(_job, [(*job, caps[job[0]], per_distance) for job in jobs]), strict=True):
            results[job] = result
            progress(f"{job[0]:>9} {job[1]:>12} seed {job[2]}: accuracy {result['accuracy']:.3f} after "
                     f"{result['steps']} steps ({time.perf_counter() - started:.0f} s)")
    for task, length in (("recall", RECALL_LENGTH), ("induction", INDUCTION_LENGTH)):
        runs = record["tasks"][task]["runs"]
        for arm in arms:
            runs[arm] = _gather([results[task, arm, seed] for seed in seeds], arm, length)
        if len(seeds) >= 2:
            record["tasks"][task]["versus_dense"] = compare(runs, arms, "dense")
            record["tasks"][task]["versus_window"] = compare(runs, arms, "window+sinks")
    record["seconds"], record["workers"] = round(time.perf_counter() - started), workers
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RESULTS_NAME, json.dumps(record, indent=1) + "\n")
    return record


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
        prog="python -m attn.models.sparse_runs",
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
    parser.add_argument("--workers", type=WORKERS_ARGUMENT, default=1,
                        help="processes that train runs side by side, one thread each (default 1; the record is the same)")
    args = parser.parse_args(argv)
    if len(set(args.arms)) != len(args.arms):
        parser.error(f"--arms names an arm twice: {' '.join(args.arms)}")
    if args.max_steps is not None and args.max_steps > RECALL_MAX_STEPS:
        parser.error(f"--max-steps must be at most {RECALL_MAX_STEPS} (the recall task's cap), got {args.max_steps}")
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    recall_cap = RECALL_MAX_STEPS if args.max_steps is None else args.max_steps
    induction_cap = INDUCTION_MAX_STEPS if args.max_steps is None else args.max_steps
    run_all(args.out, tuple(args.arms), tuple(range(args.seeds)), recall_cap, induction_cap, args.per_distance, args.workers)


if __name__ == "__main__":
    main()
