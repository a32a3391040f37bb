"""Lesson 7's recall task for attention that compresses its cache (lesson 15), trained over several seeds.

Two experiments, one small model: each (key, value) pair is one token (key embedding + value
embedding), the query key is the last token, and pre-norm residual layers of one token mixer each
are followed by a readout of the last position. The mixers:

- ``mha``, ``gqa``, ``mqa``: the course's MultiHeadAttention with 4, 2 and 1 key/value heads, causal;
- ``mla``: attn.latent.LatentAttention, whose cache holds r + d_rope numbers per token;
- ``delta``: a gated delta rule layer (attn.linear), whose memory is a fixed d_k x d_v matrix per head.

Experiment ``cache``: one layer each of mha, gqa, mqa and mla, MLA's latent sized so that it caches
as many numbers per token as MQA. Experiment ``hybrid``: two layers, delta+delta, delta+full (the
last layer full attention, as in Qwen3-Next's 3:1 stacks), full+full and one full layer alone, on
more pairs than a delta head's memory has dimensions (three seeds: the delta layers are slow). A
delta layer's query token reads without writing (beta = 0, alpha = 1 there), as a recall query does:
writing first would overwrite the very slot it asks about.

Every run trains until its loss has stopped falling: every EVAL_EVERY steps the loss on VALID_EXAMPLES
examples drawn apart from the training and test data is measured, and training stops once it has not
fallen by MIN_GAIN nats below its best for PATIENCE measurements in a row (or at MAX_STEPS, which the
record then says). Every seed chooses the weights and the data; the result is one JSON file the
lesson reads and plots:

    python -m attn.experiments.compressed_recall --out lessons/records
"""

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from attn.common.arguments import steps_argument, whole_number_argument
from attn.common.destinations import folder_argument, write_text
from attn.common.layer_checks import check_parameters, check_sequence
from attn.common.validate import positive_int, require_choice, require_finite, type_name, whole_number
from attn.latent import LatentAttention
from attn.linear import gated_delta_rule_chunked
from attn.models.recall import make_recall_data
from attn.multihead import MultiHeadAttention

RESULTS_NAME = "compressed_recall.json"
EMBED, HEADS, HEAD_DIM = 32, 4, 8  # every mixer: E = 32, 4 heads of 8
SEEDS = (0, 1, 2, 3, 4)
TEST_SEED, VALID_SEED = 1000, 2000  # held-out test and validation examples are drawn with seed + these
CACHE_TASK = dict(n_pairs=24, n_keys=48, n_values=32)  # 24 pairs: enough to separate the caches on some seeds
HYBRID_TASK = dict(n_pairs=24, n_keys=48, n_values=32)  # 24 pairs: more than a delta head's d_k = 8 dimensions
CACHE_MIXERS = ("mha", "gqa", "mqa", "mla")
HYBRID_STACKS = (("delta", "delta"), ("delta", "full"), ("full", "full"), ("full",))
HYBRID_SEEDS = 3  # the hybrid stacks train on the first three seeds only: their delta layers are the slow part
BATCH, LEARNING_RATE, TRAIN_EXAMPLES, TEST_EXAMPLES, VALID_EXAMPLES = 64, 3e-3, 20_000, 1_000, 1_000
EVAL_EVERY, PATIENCE, MIN_GAIN, MAX_STEPS = 250, 2, 0.01, 3000  # the stopping rule: see the module's docstring
LONGEST_RUN = 20_000  # the most steps train_and_test allows (lesson 18's slower arms need more than MAX_STEPS)


class GatedDeltaMixer(nn.Module):
    """q, k, v projections per head, unit-length q and k (q also scaled by 1/sqrt(d_k)), beta = sigmoid(.),
    alpha = sigmoid(.) with a bias that starts it near 1 (keep almost everything), the gated delta rule,
    an output projection. x (B, T, E) -> (B, T, E). Unless ``query_writes``, the last token (the query)
    reads the memory without writing to it or fading it (beta = 0, alpha = 1 there)."""

    def __init__(self, embed_dim, num_heads, query_writes=False):
        super().__init__()
        embed_dim, num_heads = positive_int("embed_dim", embed_dim), positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        check_parameters(f"GatedDeltaMixer(embed_dim={embed_dim})", 4 * embed_dim * embed_dim + 2 * num_heads * embed_dim)
        if not isinstance(query_writes, bool):
            raise TypeError(f"query_writes must be True or False, got {type_name(query_writes)}")
        self.num_heads, self.query_writes = num_heads, query_writes
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
        self.rates = nn.Linear(embed_dim, 2 * num_heads)
        with torch.no_grad():
            self.rates.bias[num_heads:] = 4.0  # alpha = sigmoid(4) = 0.98 at the start
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        check_sequence("x", x, self.qkv.in_features, self.qkv.weight)
        require_finite("x", x)
        heads = self.qkv(x).unflatten(-1, (3, self.num_heads, -1)).permute(2, 0, 3, 1, 4)  # (3, B, H, T, d)
        q, k, v = heads[0], heads[1], heads[2]
        q = functional.normalize(q, dim=-1) / q.shape[-1] ** 0.5
        k = functional.normalize(k, dim=-1)
        beta, alpha = torch.sigmoid(self.rates(x)).transpose(1, 2).split(self.num_heads, dim=1)  # (B, H, T) each
        if not self.query_writes:  # the query only reads: no write, no fade at the last position
            beta = torch.cat([beta[..., :-1], torch.zeros_like(beta[..., -1:])], dim=-1)
            alpha = torch.cat([alpha[..., :-1], torch.ones_like(alpha[..., -1:])], dim=-1)
        output, _ = gated_delta_rule_chunked(q, k, v, alpha, beta, chunk_size=32)
        return self.out_proj(output.transpose(1, 2).flatten(2))


class AttentionMixer(nn.Module):
    """The course's MultiHeadAttention, causal self-attention; num_kv_heads 4 (mha), 2 (gqa) or 1 (mqa)."""

    def __init__(self, embed_dim, num_heads, num_kv_heads):
        super().__init__()
        self.attention = MultiHeadAttention(embed_dim, num_heads, num_kv_heads=num_kv_heads)

    def forward(self, x):
        return self.attention(x, x, x, is_causal=True)


MIXER_KINDS = ("mha", "gqa", "mqa", "mla", "full", "delta")


def make_mixer(kind):
    """One token mixer by name, at the course's sizes (E = 32, H = 4, d = 8)."""
    if kind in ("mha", "full"):
        return AttentionMixer(EMBED, HEADS, HEADS)
    if kind == "gqa":
        return AttentionMixer(EMBED, HEADS, 2)
    if kind == "mqa":
        return AttentionMixer(EMBED, HEADS, 1)
    if kind == "mla":  # r + d_rope = 14 + 2 = 16 numbers per token, as many as MQA's 2 x 8
        return LatentAttention(EMBED, HEADS, latent_dim=14, nope_dim=HEAD_DIM, rope_dim=2, value_dim=HEAD_DIM)
    if kind in ("delta", "delta-write"):
        return GatedDeltaMixer(EMBED, HEADS, query_writes=kind == "delta-write")
    raise ValueError(f"unknown mixer {kind!r}; choose from mha, gqa, mqa, mla, full, delta, delta-write")


def cache_numbers_per_token(kind):
    """Numbers one layer caches per token (a delta layer: 0 per token, its fixed H x d_k x d_v memory instead)."""
    require_choice("kind", kind, MIXER_KINDS)
    return {"mha": 2 * HEADS * HEAD_DIM, "full": 2 * HEADS * HEAD_DIM, "gqa": 2 * 2 * HEAD_DIM, "mqa": 2 * HEAD_DIM,
            "mla": 14 + 2, "delta": 0, "delta-write": 0}[kind]


class RecallStack(nn.Module):
    """Embeddings, pre-norm residual mixer layers, a readout of the last token: keys, values (B, P), query (B,).

    ``mixer_kinds`` and ``new_mixer`` are the names it takes and how it builds each; lesson 18's stack
    (attn.experiments.sparse_runs) is a subclass that replaces both."""

    mixer_kinds = MIXER_KINDS

    @staticmethod
    def new_mixer(kind):
        return make_mixer(kind)

    def __init__(self, kinds, n_keys, n_values):
        super().__init__()
        if not isinstance(kinds, list | tuple) or not kinds:
            raise TypeError(f"kinds must be a non-empty list of mixer names ({', '.join(self.mixer_kinds)}), "
                            f"got {type_name(kinds)}")
        for kind in kinds:
            require_choice("each of kinds", kind, self.mixer_kinds)
        n_keys, n_values = positive_int("n_keys", n_keys), positive_int("n_values", n_values)
        check_parameters(f"RecallStack(n_keys={n_keys}, n_values={n_values})", (n_keys + 2 * n_values) * EMBED)
        self.key_embedding = nn.Embedding(n_keys, EMBED)
        self.value_embedding = nn.Embedding(n_values, EMBED)
        self.norms = nn.ModuleList(nn.LayerNorm(EMBED) for _ in kinds)
        self.mixers = nn.ModuleList(self.new_mixer(kind) for kind in kinds)
        self.final_norm = nn.LayerNorm(EMBED)
        self.readout = nn.Linear(EMBED, n_values)

    def forward(self, keys, values, query):
        pairs = self.key_embedding(keys) + self.value_embedding(values)  # (B, P, E)
        x = torch.cat([pairs, self.key_embedding(query)[:, None]], dim=1)  # (B, P + 1, E)
        for norm, mixer in zip(self.norms, self.mixers, strict=True):
            x = x + mixer(norm(x))
        return self.readout(self.final_norm(x[:, -1]))  # (B, n_values)


def _validation_loss(model, data):
    with torch.no_grad():
        return functional.cross_entropy(model(data.keys, data.values, data.query), data.target).item()


def train_and_test(kinds, task, seed, max_steps=MAX_STEPS, stack=RecallStack):
    """Train a RecallStack (or ``stack``, a subclass of it) of ``kinds`` on ``task`` with ``seed`` until its
    validation loss stops falling.

    Returns {"accuracy": held-out accuracy, "parameters", "steps": steps trained, "curve": validation losses
    every EVAL_EVERY steps, "stopped": True if the loss stopped falling, False if max_steps came first}.
    """
    if not isinstance(task, dict) or not {"n_keys", "n_values"} <= set(task):
        raise TypeError(f"task must be a dict of n_keys, n_values and n_pairs (make_recall_data's sizes), got {type_name(task)}")
    whole_number("seed", seed, minimum=0, maximum=2**62)
    whole_number("max_steps", max_steps, minimum=1, maximum=LONGEST_RUN)
    if not (isinstance(stack, type) and issubclass(stack, RecallStack)):
        raise TypeError(f"stack must be RecallStack or a subclass of it (the class itself), got {type_name(stack)}")
    torch.manual_seed(seed)
    model = stack(kinds, task["n_keys"], task["n_values"])
    train_data = make_recall_data(TRAIN_EXAMPLES, seed=seed, **task)
    test_data = make_recall_data(TEST_EXAMPLES, seed=seed + TEST_SEED, **task)
    valid_data = make_recall_data(VALID_EXAMPLES, seed=seed + VALID_SEED, **task)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    step, best, flat, curve = 0, float("inf"), 0, []
    while step < max_steps and flat < PATIENCE:
        for _ in range(min(EVAL_EVERY, max_steps - step)):
            batch = train_data.batch(torch.randint(len(train_data), (BATCH,), generator=generator))
            loss = functional.cross_entropy(model(batch.keys, batch.values, batch.query), batch.target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        curve.append(round(_validation_loss(model, valid_data), 4))
        best, flat = (curve[-1], 0) if curve[-1] < best - MIN_GAIN else (best, flat + 1)
    with torch.no_grad():
        predicted = model(test_data.keys, test_data.values, test_data.query).argmax(dim=-1)
    accuracy = (predicted == test_data.target).double().mean().item()
    return {"accuracy": round(accuracy, 3), "parameters": sum(parameter.numel() for parameter in model.parameters()),
            "steps": step, "curve": curve, "stopped": flat >= PATIENCE}


def _runs(results):
    """The per-seed results of one arm, gathered: lists of accuracy, steps, stopped; parameters once; curves."""
    return {"accuracy": [r["accuracy"] for r in results], "parameters": results[0]["parameters"],
            "steps": [r["steps"] for r in results], "stopped": [r["stopped"] for r in results],
            "curves": [r["curve"] for r in results]}


def run_all(out, seeds=SEEDS, max_steps=MAX_STEPS, progress=print):
    """Both experiments over ``seeds``; writes ``out``/RESULTS_NAME and returns the record."""
    record = {"seeds": list(seeds), "max_steps": max_steps, "eval_every": EVAL_EVERY, "patience": PATIENCE,
              "min_gain": MIN_GAIN, "batch": BATCH, "learning_rate": LEARNING_RATE,
              "embed_dim": EMBED, "heads": HEADS, "head_dim": HEAD_DIM, "torch": torch.__version__,
              "cache": {"task": CACHE_TASK, "runs": {}},
              "hybrid": {"task": HYBRID_TASK, "seeds": list(seeds[:HYBRID_SEEDS]), "runs": {}}}
    started = time.perf_counter()
    for kinds in HYBRID_STACKS:
        name = "+".join(kinds)
        run = _runs([train_and_test(kinds, HYBRID_TASK, seed, max_steps) for seed in seeds[:HYBRID_SEEDS]])
        record["hybrid"]["runs"][name] = run
        progress(f"hybrid {name:>23}: accuracy {run['accuracy']} after {run['steps']} steps "
                 f"({time.perf_counter() - started:.0f} s)")
    for kind in CACHE_MIXERS:
        run = _runs([train_and_test((kind,), CACHE_TASK, seed, max_steps) for seed in seeds])
        record["cache"]["runs"][kind] = {**run, "cache_numbers_per_token": cache_numbers_per_token(kind)}
        progress(f"cache  {kind:>5}: accuracy {run['accuracy']} after {run['steps']} steps "
                 f"({time.perf_counter() - started:.0f} s)")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RESULTS_NAME, json.dumps(record, indent=1) + "\n")
    return record




SEEDS_ARGUMENT = whole_number_argument("--seeds", 1, 1000, "each seed trains every arm again")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.compressed_recall",
        description="Train lesson 15's recall comparisons (cache: MHA, GQA, MQA, MLA; hybrid: delta and full stacks).")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    parser.add_argument("--seeds", type=SEEDS_ARGUMENT, default=len(SEEDS), help="how many seeds, 0, 1, ... (default 5)")
    parser.add_argument("--max-steps", type=steps_argument("--max-steps"), default=MAX_STEPS,
                        help=f"most training steps per run, if its loss is still falling (default {MAX_STEPS})")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    run_all(args.out, seeds=tuple(range(args.seeds)), max_steps=args.max_steps)


if __name__ == "__main__":
    main()
