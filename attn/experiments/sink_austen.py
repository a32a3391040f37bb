"""Lesson 13's Austen model, scaled down, with each design of lesson 22 in place of its attention (lesson 22).

    python -m attn.experiments.sink_austen --out lessons/records     # hours of CPU: see below
    python -m attn.experiments.sink_austen --out DIR --size tiny     # seconds (needs the corpus)

Lesson 13's recipe (attn.models.lm: tied embeddings, pre-norm blocks, rotary positions, AdamW with warm-up and a
cosine fall to a tenth, the shipped 4096-token tokenizer, Persuasion held out), scaled down to fit a CPU.

The ladder. The lesson's first record trained 2 layers of 4 heads at context 64 for 300 steps, and no softmax model
formed a sink (a head giving the first token SINK_WEIGHT of its weight on average, queries from FROM_POSITION on).
``SIZES['full']['ladder']`` trains softmax alone on each setting tried since, each more likely than the last to form
one: a beginning-of-text token (one more token id) at position 0 of every window, then a longer context and more
steps. The arms are trained at ``SIZES['full']``'s own settings, past the ladder's last rung (more layers, more and
narrower heads, five times the steps): the question is what it took for softmax to form a sink, and what each
design does then. The ladder does not separate which of those changes it took.
Cost: one run of the arms' settings takes 25 to 40 minutes of one thread (6,000 steps at 0.25 s; the sink logit's
explicit exponentials and QK-norm's norms take longer), 15 of them and the ladder about 7.5 thread-hours; ``workers``
forked processes share them, and every finished run is kept in
``out``/PARTS_FOLDER (attn.experiments.kept_runs), so an interrupted command, run again, goes on where it stopped.

Every arm is the same AustenLM with each block's attention replaced by one layer with one switch changed
(``ARMS``): attn.gates.GatedAttention as plain softmax, with the output gate, with a learned sink logit per
head, or with QK-norm; and attn.gates.DifferentialAttention (its H heads pair into H/2 differential heads of
the same parameters), with DiffLlama's per-layer lambda_init = 0.8 - 0.6 exp(-0.3 l) (transformers'
lambda_init_fn, l the 0-based layer index). The gate's query projection is twice as wide (E^2 more weights a
layer), so the gate arm's MLP is narrowed from 4 E to 3.5 E hidden features, which takes as many away: the gate arm
changes two things (a confound, said in the record's text); every arm's parameter count is within 1% of softmax's.

Measured for each arm and seed: the held-out loss (Persuasion); at checkpoints during training, the mean
weight each layer's queries (positions FROM_POSITION onward) give the first token and the largest attention
logit by layer, on PROBE held-out windows; at the end, the same by layer and head, the largest residual
activation (max |x| of the stream after each block) and the first position's residual norm over the median
position's, by layer. The sink arm's weight sent to its sink logit and the gate's mean opening are recorded too.
Differential attention's first-token weight is that of its combined map A1 - lambda A2 divided by its row sum
1 - lambda, so that it compares with the others'; its lambda per layer is recorded. Beside the losses: the unigram
and the add-k bigram with the same tokenizer, scored on the same held-out windows. The claims' words are held,
not held or not distinguishable, with when ("held: lower after N steps"); "no sink" is not held where a seed formed
one or a learned sink logit takes a sink's share, and a claim is "not testable" where the softmax baseline lacks the
thing removed (see attn.experiments.sink_austen_words, also for a weight divided by a row sum); the loss comparisons
are a family (Bonferroni).

The record, ``sink_austen.json`` (schema):

- ``size``, ``settings`` (with its ``ladder``), ``arms`` (each arm's layer options), ``parameters`` {arm: count},
  ``parameter_spread`` (largest |count / softmax's - 1|), ``sink_weight`` (the threshold), ``text``;
- ``from_position``, ``even_spread`` (the first-token weight of even rows over those queries: mean of 1 / (i + 1)),
  ``even_sink_share`` (a sink logit of 0 on even rows: mean of 1 / (i + 2) over every query), ``massive_ratio``;
- ``baseline``: {``unigram``, ``bigram``, ``k``, ``on``} (nats a token on the held-out windows);
- ``runs[arm]``: lists with one entry per seed: ``held_out_loss``; ``checkpoints`` {``step``: [...],
  ``held_out_loss``: [per checkpoint], ``first_token_weight``: [[per layer] per checkpoint], ``largest_logit``:
  [[per layer] per checkpoint], ``sink_share``, ``gate_mean`` ([[per layer] per checkpoint] or null)} per seed;
  ``lambda`` [layer] (differential; else null); ``first_token_weight`` (final, [layer][head]), ``largest_logit``
  [layer], ``largest_activation`` [layer], ``first_position_norm_ratio`` [layer], ``sink_share`` [layer] (sink arm;
  else null), ``gate_mean`` [layer] (gate arm; else null), ``sink_formed`` (bool), ``seconds``;
- ``ladder``: [{"what", "settings" (the rung's whole settings), "runs": {"softmax": as runs}}] in the order tried;
- ``intervals[arm]`` for every arm but softmax, arm minus softmax over seeds (attn.common.stats.paired_interval):
  ``held_out_loss``, ``first_token_weight`` (the largest head's), ``largest_logit`` and ``largest_activation``
  (their largest layer), each {"mean", "low", "high", "words"}; ``claims[arm]`` (``CLAIMS``); ``bonferroni``:
  {``family`` (the number of loss comparisons), ``level``, ``held_out_loss``: {arm: {mean, low, high, words}}};
- ``seconds`` (wall), ``cpu_seconds`` (this process and its workers: small where runs were read back),
  ``run_seconds`` (the runs' own wall times added up, read-back runs included), ``provenance``.
"""

import math
import resource
import shutil
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from attn.common.validate import require_callable
from attn.experiments.kept_runs import each_kept
from attn.experiments.records import check_out, settings_for, sized_command, write_record
from attn.experiments.sink_austen_words import (
    FROM_POSITION,
    GATE_MLP_RATIO,
    MASSIVE_RATIO,
    MLP_RATIO,
    SINK_WEIGHT,
    _bonferroni,
    _claims,
    _divided,
    _even_rows,
    _intervals,
    _lambda_init,
    _massive,
    _sink_shares,
    _text,
)
from attn.gates import DifferentialAttention, GatedAttention
from attn.gates.functional import _causal_scores, _differential_weights, _read
from attn.gates.layers import _pairs
from attn.multihead import split_heads
from attn.positions import apply_rotary

RESULTS_NAME = "sink_austen.json"
PARTS_FOLDER = "sink_austen_parts"  # finished runs, kept until the record is written
COMMAND = "python -m attn.experiments.sink_austen"
ARMS = {
    "softmax": {"layer": "GatedAttention", "gate": False, "qk_norm": False, "normalize": "softmax"},
    "gate": {"layer": "GatedAttention", "gate": True, "qk_norm": False, "normalize": "softmax"},
    "sink": {"layer": "GatedAttention", "gate": False, "qk_norm": False, "normalize": "sink"},
    "qk_norm": {"layer": "GatedAttention", "gate": False, "qk_norm": True, "normalize": "softmax"},
    "differential": {"layer": "DifferentialAttention"},
}
SIZES = {
    "full": {"embed_dim": 64, "num_heads": 8, "num_layers": 4, "context_length": 128, "batch_size": 16, "steps": 6000,
             "learning_rate": 2.5e-3, "warmup_steps": 100, "weight_decay": 0.1, "seeds": 3, "checkpoint_every": 500,
             "probe_windows": 8, "eval_windows": 64, "bos": True, "workers": 2,
             "ladder": [  # softmax alone, each rung more likely than the last to form a sink
                 {"what": "this lesson's first record: 2 layers of 4 heads, context 64, 300 steps", "num_layers": 2,
                  "num_heads": 4, "context_length": 64, "steps": 300, "warmup_steps": 30, "checkpoint_every": 50,
                  "bos": False, "seeds": 3},
                 {"what": "the same with a beginning-of-text token", "num_layers": 2, "num_heads": 4, "context_length": 64,
                  "steps": 300, "warmup_steps": 30, "checkpoint_every": 50, "seeds": 3},
                 {"what": "with the token, context 128 and 1,200 steps", "num_layers": 2, "num_heads": 4, "steps": 1200,
                  "warmup_steps": 30, "checkpoint_every": 200, "seeds": 1}]},
    "tiny": {"embed_dim": 16, "num_heads": 2, "num_layers": 2, "context_length": 24, "batch_size": 4, "steps": 6,
             "learning_rate": 2.5e-3, "warmup_steps": 2, "weight_decay": 0.1, "seeds": 2, "checkpoint_every": 3,
             "probe_windows": 2, "eval_windows": 4, "bos": True, "workers": 1,
             "ladder": [{"what": "no beginning-of-text token, 4 steps", "bos": False, "steps": 4, "seeds": 1}]},
}


class _SwitchedAttention(nn.Module):
    """One of ARMS as a TransformerBlock's attention (``layer_index``, from 0, sets differential attention's
    lambda_init by DiffLlama's schedule): self-attention on ``query`` (the block passes the same
    normed x three times), causal, without caches or masks. With ``watch`` set it keeps its last weights
    (B, H', T, T), largest logit, sink share and gate opening in ``seen``."""

    def __init__(self, arm, embed_dim, num_heads, layer_index=0):
        super().__init__()
        options = dict(ARMS[arm])
        self.arm, self.embed_dim, self.num_heads, self.watch, self.seen = arm, embed_dim, num_heads, False, {}
        if options.pop("layer") == "DifferentialAttention":
            self.layer = DifferentialAttention(embed_dim, num_heads, lambda_init=_lambda_init(layer_index))
        else:
            self.layer = GatedAttention(embed_dim, num_heads, **options)

    def forward(self, query, key=None, value=None, mask=None, key_padding_mask=None, is_causal=True, cache=None,
                need_weights=False):
        if mask is not None or key_padding_mask is not None or cache is not None or not is_causal:
            raise ValueError("sink_austen's attention runs causal self-attention only (no mask, no cache)")
        if not self.watch:
            output = self.layer(query)
        elif isinstance(self.layer, DifferentialAttention):
            output = self._watched_differential(query)
        else:
            output = self._watched_gated(query)
        return (output, self.seen.get("weights")) if need_weights else output

    def _watched_gated(self, x):
        layer = self.layer
        q, k, v, gate = layer.projections(x)
        scores = _causal_scores(q, k, 1.0 / math.sqrt(layer.head_dim))  # (B, H, T, T)
        weights = layer._weights(scores)
        heads = _read(weights, v).transpose(1, 2)  # (B, T, H, d)
        if gate is not None:
            heads = heads * torch.sigmoid(gate)
        self.seen = {"weights": weights, "largest_logit": scores.amax().item(), "lambda": None,
                     "sink_share": (1 - weights.sum(dim=-1)).mean().item() if layer.normalize == "sink" else None,
                     "gate_mean": torch.sigmoid(gate).mean().item() if gate is not None else None}
        return layer.out_proj(heads.flatten(2))

    def _watched_differential(self, x):
        layer = self.layer
        batch, length, _ = x.shape
        lam = layer.lam()
        q = apply_rotary(split_heads(layer.query_proj(x), layer.num_heads), None, layer.rotary_base)
        k = apply_rotary(split_heads(layer.key_proj(x), layer.num_kv_heads), None, layer.rotary_base)
        v = split_heads(layer.value_proj(x), layer.num_kv_heads)
        scale = 1.0 / math.sqrt(layer.head_dim)
        weights = _differential_weights(_pairs(q), _pairs(k), lam, scale)  # (B, H/2, T, T), rows summing to 1 - lambda
        heads = _read(weights, _pairs(v))
        heads = functional.rms_norm(heads, (2 * layer.head_dim,), eps=layer.eps) * (1 - layer.lambda_init)
        self.seen = {"weights": weights / (1 - lam), "largest_logit": _causal_scores(q, k, scale).amax().item(),
                     "sink_share": None, "gate_mean": None, "lambda": lam.item()}
        return layer.out_proj(heads.transpose(1, 2).reshape(batch, length, -1))


def _build(arm, settings, vocab_size, seed):
    """An AustenLM of the size's settings with every block's attention a SwitchedAttention of ``arm``, seeded."""
    from attn.models.lm import AustenLM, _initialise

    torch.manual_seed(seed)
    ratio = GATE_MLP_RATIO if arm == "gate" else MLP_RATIO
    model = AustenLM(vocab_size, settings["context_length"], settings["embed_dim"], settings["num_heads"],
                     settings["num_layers"], mlp_ratio=ratio)
    for index, block in enumerate(model.blocks):
        block.attention = _SwitchedAttention(arm, settings["embed_dim"], settings["num_heads"], index)
    torch.manual_seed(seed)
    model.apply(_initialise)  # GPT-2's start for every layer, the new ones included
    return model


def _config(settings, vocab_size):
    """lesson 13's training configuration (attn.models.lm_training's keys) for these settings."""
    return {"vocab_size": vocab_size, "embed_dim": settings["embed_dim"], "num_heads": settings["num_heads"],
            "num_layers": settings["num_layers"], "context_length": settings["context_length"],
            "batch_size": settings["batch_size"], "steps": settings["steps"], "learning_rate": settings["learning_rate"],
            "warmup_steps": settings["warmup_steps"], "weight_decay": settings["weight_decay"], "dropout": 0.0,
            "eval_every": settings["checkpoint_every"], "eval_windows": settings["eval_windows"], "seed": 0}


def _with_bos(windows, bos):
    """(W, T) token windows -> (W, T): the first token replaced by the beginning-of-text id ``bos``."""
    return torch.cat([torch.full_like(windows[:, :1], bos), windows[:, 1:]], dim=1)


@torch.no_grad()
def _watch(model, tokens):
    """Run ``model`` on tokens (B, T) watching every layer: per layer the first-token weight [head] (queries from
    FROM_POSITION on), largest logit, largest |residual| after the block, first position's norm / median norm,
    sink share and gate mean."""
    found = {name: [] for name in ("first_token_weight", "largest_logit", "largest_activation",
                                   "first_position_norm_ratio", "sink_share", "gate_mean", "lambda")}
    x = model.token_embedding(tokens)
    for block in model.blocks:
        block.attention.watch = True
        try:
            x = block(x, is_causal=True)
        finally:
            block.attention.watch = False
        seen = block.attention.seen
        found["first_token_weight"].append([round(w, 4) for w in seen["weights"][:, :, FROM_POSITION:, 0]
                                            .mean(dim=(0, 2)).tolist()])
        found["largest_logit"].append(round(seen["largest_logit"], 3))
        found["largest_activation"].append(round(x.abs().amax().item(), 3))
        norms = x.norm(dim=-1)  # (B, T)
        found["first_position_norm_ratio"].append(round((norms[:, 0] / norms[:, 1:].median(dim=1).values).mean().item(), 3))
        found["sink_share"].append(None if seen["sink_share"] is None else round(seen["sink_share"], 4))
        found["gate_mean"].append(None if seen["gate_mean"] is None else round(seen["gate_mean"], 4))
        found["lambda"].append(None if seen["lambda"] is None else round(seen["lambda"], 4))
    for name in ("sink_share", "gate_mean", "lambda"):
        if all(value is None for value in found[name]):
            found[name] = None
    return found


def _train_arm(arm, seed, settings, data, bos=None):
    """Train one arm with one seed on ``data`` (training tokens, held-out tokens, vocabulary size); its measurements."""
    from attn.models.lm_training import held_out_windows, learning_rate_at, make_optimizer, mean_loss, random_batch

    train_tokens, held_out, vocab_size = data
    started = time.perf_counter()
    model = _build(arm, settings, vocab_size + (bos is not None), seed)
    config = _config(settings, vocab_size)
    optimizer = make_optimizer(model, config)
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = held_out_windows(held_out, settings["context_length"], settings["eval_windows"])
    if bos is not None:
        inputs = _with_bos(inputs, bos)
    probe = inputs[:settings["probe_windows"]]
    checkpoints = {"step": [], "held_out_loss": [], "first_token_weight": [], "largest_logit": [], "sink_share": [],
                   "gate_mean": []}
    model.train()
    for step in range(settings["steps"]):
        if step % settings["checkpoint_every"] == 0:
            _checkpoint(model, probe, step, checkpoints, (inputs, targets))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, config)
        batch, batch_targets = random_batch(train_tokens, settings["batch_size"], settings["context_length"], generator)
        if bos is not None:
            batch = _with_bos(batch, bos)
        loss = functional.cross_entropy(model(batch).flatten(0, 1), batch_targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    _checkpoint(model, probe, settings["steps"], checkpoints, (inputs, targets))
    for name in ("sink_share", "gate_mean"):
        if all(value is None for value in checkpoints[name]):
            checkpoints[name] = None
    model.eval()
    final = _watch(model, probe)
    return {"held_out_loss": round(mean_loss(model, inputs, targets), 4), "checkpoints": checkpoints, **final,
            "sink_formed": max(max(heads) for heads in final["first_token_weight"]) >= SINK_WEIGHT,
            "parameters": sum(parameter.numel() for parameter in model.parameters()),
            "seconds": round(time.perf_counter() - started, 1)}


def _checkpoint(model, probe, step, checkpoints, held_out):
    from attn.models.lm_training import mean_loss

    was_training = model.training
    model.eval()
    seen = _watch(model, probe)
    with torch.no_grad():
        loss = mean_loss(model, *held_out)
    model.train(was_training)
    checkpoints["step"].append(step)
    checkpoints["held_out_loss"].append(round(loss, 4))
    checkpoints["sink_share"].append(seen["sink_share"])
    checkpoints["gate_mean"].append(seen["gate_mean"])
    checkpoints["first_token_weight"].append([round(sum(heads) / len(heads), 4) for heads in seen["first_token_weight"]])
    checkpoints["largest_logit"].append(seen["largest_logit"])


def _gathered(results):
    names = ("held_out_loss", "checkpoints", "first_token_weight", "largest_logit", "largest_activation",
             "first_position_norm_ratio", "sink_share", "gate_mean", "lambda", "sink_formed", "seconds")
    return {name: [result[name] for result in results] for name in names}



def _load_data():
    """(training tokens, held-out tokens, vocabulary size) with lesson 13's shipped tokenizer."""
    from attn.data.corpus import austen
    from attn.data.tokenizer import Tokenizer
    from attn.models.lm import TOKENIZER_NAME, WEIGHTS_FOLDER
    from attn.models.lm_training import split_novels, token_tensor

    training_texts, held_out_text = split_novels(austen())  # the corpus first: a missing one costs nothing
    path = WEIGHTS_FOLDER / TOKENIZER_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; it ships with the course (python -m attn.lm train makes it)")
    tokenizer = Tokenizer.load(path)
    return token_tensor(tokenizer, training_texts), token_tensor(tokenizer, [held_out_text]), tokenizer.vocab_size


def _measure(size="full", progress=print, data=None, arms=tuple(ARMS), parts=None):
    """The ladder's softmax runs, then every arm over the size's seeds at the size's settings; the record."""
    settings = settings_for(SIZES, size)
    require_callable("progress", progress)
    started = time.perf_counter()
    data = _load_data() if data is None else data
    progress(f"[{time.perf_counter() - started:5.0f} s] corpus tokenised: {len(data[0]):,} training tokens")
    from attn.models.lm_training import held_out_windows
    from attn.models.ngram import add_k_baseline

    baseline = add_k_baseline(data[0], *held_out_windows(data[1], settings["context_length"], settings["eval_windows"]),
                              data[2])
    progress(f"[{time.perf_counter() - started:5.0f} s] count baseline: unigram {baseline['unigram']}, add-{baseline['k']} "
             f"bigram {baseline['bigram']}")
    rungs = [_rung(settings, rung) for rung in settings["ladder"]]
    arm_jobs = [(("arm", arm), arm, seed, settings) for arm in arms for seed in range(settings["seeds"])]
    jobs = [job for job in arm_jobs if job[1] == "softmax"]  # softmax first: does it form a sink at all?
    jobs += [(("ladder", index), "softmax", seed, rung) for index, rung in enumerate(rungs) for seed in range(rung["seeds"])]
    jobs += [job for job in arm_jobs if job[1] != "softmax"]
    found = {}
    for (where, arm, seed, _), result in zip(jobs, _each_job(jobs, data, settings["workers"], parts, progress), strict=True):
        found.setdefault(where, []).append(result)
        label = arm if where[0] == "arm" else f"ladder {where[1]}"
        progress(f"[{time.perf_counter() - started:5.0f} s] {label:>12} seed {seed}: held-out loss "
                 f"{result['held_out_loss']}, first-token weight {result['first_token_weight']}")
    runs = {arm: _gathered(found["arm", arm]) for arm in arms}
    parameters = {arm: found["arm", arm][0]["parameters"] for arm in arms}
    record = {"size": size, "settings": settings, "arms": {arm: ARMS[arm] for arm in arms}, "parameters": parameters,
              "parameter_spread": round(max(abs(count / parameters["softmax"] - 1) for count in parameters.values()), 5),
              "sink_weight": SINK_WEIGHT, "from_position": FROM_POSITION, **_even_rows(settings["context_length"]),
              "massive_ratio": MASSIVE_RATIO, "baseline": baseline, "runs": runs, "intervals": _intervals(runs),
              "ladder": [{"what": rung["what"], "settings": rung, "runs": {"softmax": _gathered(found["ladder", index])}}
                         for index, rung in enumerate(rungs)]}
    record["claims"] = _claims(record["intervals"], any(runs["softmax"]["sink_formed"]), settings["steps"],
                              _massive(runs["softmax"]), {arm: run["sink_formed"] for arm, run in runs.items()},
                              _sink_shares(runs), _divided(record["arms"]))
    record["bonferroni"] = _bonferroni(runs)
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["cpu_seconds"] = round(_cpu_seconds())
    record["run_seconds"] = round(sum(result["seconds"] for results in found.values() for result in results))
    record["text"] = _text(record)
    return record


def _rung(settings, rung):
    """One rung of the ladder: the size's settings with the rung's own (a smaller model, fewer steps, no BOS...)."""
    return {**{name: value for name, value in settings.items() if name not in ("ladder", "workers")}, **rung}


def _cpu_seconds():
    """CPU seconds of this process and of the workers it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


TRAINING_KEYS = ("embed_dim", "num_heads", "num_layers", "context_length", "batch_size", "steps", "learning_rate",
                 "warmup_steps", "weight_decay", "checkpoint_every", "probe_windows", "eval_windows", "bos")


def _each_job(jobs, data, workers, parts=None, progress=print):
    """Every job's result, in order (attn.experiments.kept_runs: over forked workers, each finished run kept in
    ``parts`` so that an interrupted command goes on where it stopped)."""
    def train(index):
        _, arm, seed, settings = jobs[index]
        return _train_arm(arm, seed, settings, data, bos=data[2] if settings["bos"] else None)

    names = [f"{kind}-{name}-seed{seed}" for (kind, name), _, seed, _ in jobs]
    settings = [{**{key: job[3][key] for key in TRAINING_KEYS}, "seed": job[2], "arm": job[1]} for job in jobs]
    return each_kept(train, names, settings, workers, parts, progress)


def run(out, size="full", progress=print):
    """Measure and write ``out``/RESULTS_NAME; returns the record. ``out`` and ``size`` are checked before any work.
    Finished runs are kept in ``out``/PARTS_FOLDER until the record is written (a second call goes on from them)."""
    check_out(out)
    settings_for(SIZES, size)
    parts = Path(out) / PARTS_FOLDER
    record = write_record(out, RESULTS_NAME, _measure(size, progress, parts=parts), COMMAND, size)
    shutil.rmtree(parts, ignore_errors=True)
    return record


DESCRIPTION = ("Lesson 13's Austen model scaled down, with softmax, the output gate, a sink logit, QK-norm and "
               "differential attention over seeds: loss, first-token weight, largest logit and activation.")


def main(argv=None):
    cost = {"full": "about 7.5 thread-hours over its workers; run again, it goes on", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, cost, run, argv)
    print(f"Wrote {out / RESULTS_NAME} in {record['seconds']:.0f} s.")


if __name__ == "__main__":
    main()
