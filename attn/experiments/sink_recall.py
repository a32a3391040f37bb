"""Lesson 7's recall with keys that are not there (lesson 22): what each softmax does when it should say nothing.

    python -m attn.experiments.sink_recall --out lessons/records             # about 7 minutes, one thread
    python -m attn.experiments.sink_recall --out DIR --size tiny             # seconds

The task is lesson 7's: a context of (key, value) pairs, one token each (key embedding + value embedding),
and a query key that reads them with one attention layer, whose output a linear readout turns into scores
(no residual, no norm: what the layer outputs is all the readout sees). Here a share of the queries (0, 25%
or 50%, ``ABSENT_SHARES``) asks for a key that is not in the context; their target is one more class,
"absent". The layer is attn.gates.GatedAttention without positions or QK-norm, with one switch changed per
arm (``ARMS``): softmax; a learned sink logit per head (gpt-oss); the off-by-one softmax (the sink fixed at 0);
softpick; and the output gate (Qwen3-Next) over plain softmax. The query reads the pairs only (lesson 7's
cross-attention), so a softmax has no token of its own to park weight on.

Stopping rule (relative): every ``eval_every`` steps the loss on held-apart validation examples (drawn with the
same absent share) is measured; a run stops once that loss has not fallen below (1 - ``min_gain``) times its best
so far (``min_gain`` a share of the best loss: 0.02, 2%) for ``patience`` measurements in a row; or once it is
below ``floor`` (0.001 nats a query: at most that much is left to gain, and a loss that small falls only by the
logits growing, which changes no answer); or at ``max_steps`` (the record's ``ended`` says which of the three, and
``stopped`` is true for the first two; ``curves`` keeps every measurement, to 7 decimals, the values the rule
read). The model measured is the one of the lowest validation loss measured (``best_step``), not the last: the loss
of these runs rises in spikes, and the relative rule most often ends a run on one. The losses here are 0.001-0.03 nats, so
an absolute rule of 0.01 nats stopped runs whose loss was still halving every 400 steps; and with the relative rule
alone, a run with no absent query (a task it answers perfectly) kept halving its loss below 0.001 until the limit.

The gate here reads only the query's own token (sigmoid of W_G times the query key's embedding): whether the key
is in the context never reaches it in this one-layer model, so it cannot close for an absent key by construction
(Qiu et al.'s gate reads a hidden state that already carries context). The task gives no reward for a short
output either (no residual path: the readout sees the layer's output alone), and present-key accuracies sit near
1: the accuracies say little, the norms and the weight to nothing say more.

The record, ``sink_recall.json`` (schema):

- ``size``, ``settings`` (task, seeds, sizes, the stopping rule), ``arms``: {arm: the layer's options},
  ``absent_shares``: [0.0, 0.25, 0.5], ``text``: the conclusions in words, from the intervals;
- ``runs[arm][share]`` (share as "0.0", "0.25", "0.5"): lists with one entry per seed:
  ``present_accuracy`` (held-out queries whose key is there), ``absent_accuracy`` (held-out absent queries
  answered "absent"; trained for only when share > 0), ``present_norm`` and ``absent_norm`` (mean norm of the
  layer's output, E wide, for present and absent queries), ``present_nothing`` and ``absent_nothing`` (mean
  share of a head's weight sent to nothing, 1 - sum of the keys' weights: the sink's weight; 0 for softmax and
  the gate), ``present_gate`` and ``absent_gate`` (the gate arm: mean sigmoid of the gate; null for the others),
  ``steps``, ``ended`` ("rule", "floor" or "limit"), ``stopped`` (not the limit), ``best_step`` (the step of the
  weights measured), ``curves`` (validation losses), and ``parameters`` (one number);
- ``intervals[arm][share][metric]`` for every arm but softmax and the metrics ``present_accuracy``,
  ``absent_accuracy``, ``absent_norm_ratio`` (absent_norm / present_norm), ``present_norm``, ``absent_norm``:
  {"mean", "low", "high", "words"}, the arm minus softmax over seeds (attn.common.stats.paired_interval), words
  "higher than softmax", "lower than softmax" or "not distinguishable from softmax";
- ``absent_minus_present[arm][share][metric]`` for every arm and the metrics ``norm``, ``nothing`` and (the gate
  only) ``gate``: the absent-key value minus the present-key value of the same model, paired over seeds,
  {"mean", "low", "high", "words"}, words "larger for absent keys", "smaller for absent keys" or "not
  distinguishable between absent and present keys";
- ``seconds``, ``provenance``.
"""

import copy
import math
import time

import torch
from torch import nn
from torch.nn import functional

from attn.common.stats import paired_interval
from attn.common.validate import require_callable, require_choice, whole_number
from attn.experiments.records import check_out, settings_for, sized_command, write_record
from attn.gates import GatedAttention
from attn.models.recall import make_recall_data

RESULTS_NAME = "sink_recall.json"
COMMAND = "python -m attn.experiments.sink_recall"
ARMS = {
    "softmax": {"normalize": "softmax", "gate": False},
    "sink": {"normalize": "sink", "gate": False},
    "off_by_one": {"normalize": "off_by_one", "gate": False},
    "softpick": {"normalize": "softpick", "gate": False},
    "gate": {"normalize": "softmax", "gate": True},
}
ABSENT_SHARES = (0.0, 0.25, 0.5)
METRICS = ("present_accuracy", "absent_accuracy", "absent_norm_ratio", "present_norm", "absent_norm")
WITHIN = ("norm", "nothing", "gate")  # absent minus present, within one arm
SIZES = {
    "full": {"n_pairs": 16, "n_keys": 48, "n_values": 32, "embed_dim": 32, "num_heads": 4, "seeds": 5,
             "batch": 64, "learning_rate": 3e-3, "train_examples": 20_000, "valid_examples": 1000,
             "test_examples": 1000, "eval_every": 200, "patience": 3, "min_gain": 0.02, "floor": 0.001,
             "max_steps": 6000},
    "tiny": {"n_pairs": 4, "n_keys": 12, "n_values": 8, "embed_dim": 8, "num_heads": 2, "seeds": 2,
             "batch": 16, "learning_rate": 3e-3, "train_examples": 200, "valid_examples": 50,
             "test_examples": 50, "eval_every": 5, "patience": 2, "min_gain": 0.02, "floor": 0.001,
             "max_steps": 10},
}
VALID_SEED, TEST_SEED = 2000, 1000  # validation and test examples are drawn with seed + these


def _recall_with_absent(n_examples, share, n_pairs, n_keys, n_values, seed):
    """make_recall_data's examples, a ``share`` of them (the first round(share * n), the rest untouched) asking
    for a key absent from their context: their query is a key drawn from the others, their target ``n_values``
    (the class "absent") and their position -1. Returns the RecallData."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
        raise ValueError(f"share must be a number from 0 to 1 (the absent queries' share), got {share!r:.60}")
    if n_pairs >= n_keys:
        raise ValueError(f"an absent key needs n_keys > n_pairs, got n_pairs={n_pairs}, n_keys={n_keys}")
    data = make_recall_data(n_examples, n_pairs=n_pairs, n_keys=n_keys, n_values=n_values, seed=seed)
    absent = round(share * n_examples)
    if absent:
        generator = torch.Generator().manual_seed(seed + 1)
        present = torch.zeros(absent, n_keys, dtype=torch.bool).scatter_(1, data.keys[:absent], True)
        scores = torch.rand(absent, n_keys, generator=generator).masked_fill(present, -1.0)
        data.query[:absent] = scores.argmax(dim=1)  # a random key not in the context
        data.target[:absent] = n_values
        data.position[:absent] = -1
    return data


class _SinkRecall(nn.Module):
    """Key and value embeddings, one GatedAttention layer (no positions, no QK-norm) read by the query over the
    pairs only, and a readout to n_values + 1 classes (the last: "absent").

    forward(keys, values (B, P), query (B,)) -> logits (B, n_values + 1); ``inspect`` also returns the layer's
    output (B, E), the keys' weights (B, H, P) and the gate's sigmoid (B, H, d) or None.
    """

    def __init__(self, arm, n_keys, n_values, embed_dim, num_heads):
        super().__init__()
        options = ARMS[require_choice("arm", arm, tuple(ARMS))]
        self.key_embedding = nn.Embedding(n_keys, embed_dim)
        self.value_embedding = nn.Embedding(n_values, embed_dim)
        self.attention = GatedAttention(embed_dim, num_heads, qk_norm=False, rotary_base=None, **options)
        self.readout = nn.Linear(embed_dim, n_values + 1)

    def inspect(self, keys, values, query):
        layer = self.attention
        pairs = self.key_embedding(keys) + self.value_embedding(values)  # (B, P, E)
        x = torch.cat([pairs, self.key_embedding(query)[:, None]], dim=1)  # (B, P + 1, E)
        q, k, v, gate = layer.projections(x)  # (B, H, P + 1, d) x 3, gate (B, P + 1, H, d) or None
        scores = q[:, :, -1:] @ k[:, :, :-1].transpose(-2, -1) / math.sqrt(layer.head_dim)  # (B, H, 1, P)
        weights = layer._weights(scores)  # the layer's own normaliser: the one switch
        heads = (weights @ v[:, :, :-1])[:, :, 0]  # (B, H, d)
        opened = None if gate is None else torch.sigmoid(gate[:, -1])  # (B, H, d): the query token's gate
        if opened is not None:
            heads = heads * opened
        output = layer.out_proj(heads.flatten(1))  # (B, E)
        return self.readout(output), output, weights[:, :, 0], opened

    def forward(self, keys, values, query):
        return self.inspect(keys, values, query)[0]


def _loss(model, data):
    with torch.no_grad():
        return functional.cross_entropy(model(data.keys, data.values, data.query), data.target).item()


def _measure(model, data, absent):
    """Accuracy (of the right value, or of "absent"), mean output norm, weight sent to nothing, gate on ``data``."""
    with torch.no_grad():
        logits, output, weights, opened = model.inspect(data.keys, data.values, data.query)
    return {"accuracy": (logits.argmax(dim=-1) == data.target).double().mean().item(),
            "norm": output.norm(dim=-1).mean().item(), "nothing": (1 - weights.sum(dim=-1)).mean().item(),
            "gate": None if opened is None else opened.mean().item()}


def _train_arm(arm, share, seed, settings):
    """One arm at one absent share and seed, trained by the stopping rule; its held-out measurements (a dict)."""
    task = {name: settings[name] for name in ("n_pairs", "n_keys", "n_values")}
    torch.manual_seed(seed)
    model = _SinkRecall(arm, settings["n_keys"], settings["n_values"], settings["embed_dim"], settings["num_heads"])
    train = _recall_with_absent(settings["train_examples"], share, seed=seed, **task)
    valid = _recall_with_absent(settings["valid_examples"], share, seed=seed + VALID_SEED, **task)
    present = _recall_with_absent(settings["test_examples"], 0.0, seed=seed + TEST_SEED, **task)
    absent = _recall_with_absent(settings["test_examples"], 1.0, seed=seed + TEST_SEED, **task)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["learning_rate"])
    step, best, flat, curve = 0, math.inf, 0, []
    kept = (math.inf, 0, None)  # the lowest validation loss so far: (loss, step, the weights then)
    while _ended(step, flat, curve, settings) is None:
        for _ in range(min(settings["eval_every"], settings["max_steps"] - step)):
            batch = train.batch(torch.randint(len(train), (settings["batch"],), generator=generator))
            loss = functional.cross_entropy(model(batch.keys, batch.values, batch.query), batch.target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        curve.append(round(_loss(model, valid), 7))  # the rule reads what the record keeps
        best, flat = _stopping_step(curve[-1], best, flat, settings["min_gain"])
        if curve[-1] < kept[0]:
            kept = (curve[-1], step, copy.deepcopy(model.state_dict()))
    model.load_state_dict(kept[2])  # the weights of the lowest validation loss are the ones measured
    on_present, on_absent = _measure(model, present, False), _measure(model, absent, True)
    return {"present_accuracy": on_present["accuracy"], "absent_accuracy": on_absent["accuracy"],
            "present_norm": on_present["norm"], "absent_norm": on_absent["norm"],
            "present_nothing": on_present["nothing"], "absent_nothing": on_absent["nothing"],
            "present_gate": on_present["gate"], "absent_gate": on_absent["gate"],
            "steps": step, "ended": _ended(step, flat, curve, settings), "curve": curve, "best_step": kept[1],
            "parameters": sum(parameter.numel() for parameter in model.parameters())}


def _stopping_step(loss, best, flat, min_gain):
    """The relative rule's bookkeeping: (best, flat) after one validation loss. A loss below (1 - min_gain) * best
    is a gain (best becomes it, flat 0); any other adds 1 to flat, the measurements in a row without a gain."""
    return (loss, 0) if loss < best * (1 - min_gain) else (best, flat + 1)


def _ended(step, flat, curve, settings):
    """Why a run ends after ``step`` steps, its validation ``curve`` and ``flat`` measurements without a gain: "rule",
    "floor" or "limit" (the docstring's stopping rule, checked in that order), or None while it goes on."""
    if flat >= settings["patience"]:
        return "rule"
    if curve and curve[-1] < settings["floor"]:
        return "floor"
    return "limit" if step >= settings["max_steps"] else None


def _gathered(results):
    """One arm's per-seed results as lists (4 decimals), parameters once."""
    gathered = {name: [None if r[name] is None else round(r[name], 4) + 0.0 for r in results]
                for name in ("present_accuracy", "absent_accuracy", "present_norm", "absent_norm", "present_nothing",
                             "absent_nothing", "present_gate", "absent_gate")}
    gathered.update({"steps": [r["steps"] for r in results], "best_step": [r["best_step"] for r in results],
                     "ended": [r["ended"] for r in results],
                     "stopped": [r["ended"] != "limit" for r in results],
                     "curves": [r["curve"] for r in results], "parameters": results[0]["parameters"]})
    return gathered


def _metric(run, metric):
    if metric == "absent_norm_ratio":
        return [a / p if p > 0 else 0.0 for a, p in zip(run["absent_norm"], run["present_norm"], strict=True)]
    return run[metric]


def _words(mean, low, high, reference="softmax"):
    """An interval of arm - reference in words: higher, lower, or not distinguishable."""
    if low > 0:
        return f"higher than {reference}"
    if high < 0:
        return f"lower than {reference}"
    return f"not distinguishable from {reference}"


def _within_words(mean, low, high):
    """An interval of absent minus present (one arm) in words."""
    if low > 0:
        return "larger for absent keys"
    if high < 0:
        return "smaller for absent keys"
    return "not distinguishable between absent and present keys"


def _absent_minus_present(runs, shares):
    """{arm: {share: {metric: {mean, low, high, words}}}}: each arm's absent-key value minus its present-key value,
    paired over seeds, for the output norm, the weight to nothing and (the gate) the gate's mean opening."""
    found = {}
    for arm, by_share in runs.items():
        found[arm] = {}
        for share in shares:
            run, found[arm][share] = by_share[share], {}
            for metric in WITHIN:
                if run[f"absent_{metric}"][0] is None:
                    continue
                mean, low, high = paired_interval(run[f"absent_{metric}"], run[f"present_{metric}"])
                found[arm][share][metric] = {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4),
                                             "words": _within_words(mean, low, high)}
    return found


def _intervals(runs, shares):
    """{arm: {share: {metric: {mean, low, high, words}}}} for every arm against softmax (paired over seeds)."""
    found = {}
    for arm in runs:
        if arm == "softmax":
            continue
        found[arm] = {}
        for share in shares:
            found[arm][share] = {}
            for metric in METRICS:
                mean, low, high = paired_interval(_metric(runs[arm][share], metric), _metric(runs["softmax"][share], metric))
                found[arm][share][metric] = {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4),
                                             "words": _words(mean, low, high)}
    return found


def _said(found):
    return f"{found['words']} ({found['mean']:+.3f}, {found['low']:+.3f} to {found['high']:+.3f})"


def _text(record):
    """The conclusions, following the intervals' words: the stopping rule, then per arm and share the comparisons with
    softmax and the absent-minus-present differences within the arm."""
    settings = record["settings"]
    ended = [value for by_share in record["runs"].values() for run in by_share.values() for value in run["ended"]]
    lines = [f"Stopping: of {len(ended)} runs, {ended.count('rule')} stopped by the rule (no validation loss "
             f"{settings['min_gain']:.0%} below the best for {settings['patience']} measurements of "
             f"{settings['eval_every']} steps), {ended.count('floor')} once their validation loss was below "
             f"{settings['floor']} nats, and {ended.count('limit')} reached {settings['max_steps']} steps with the loss "
             "still falling by the rule's measure.",
             "The gate reads only the query's own token: in this one-layer model it is blind to whether the key is in "
             "the context, by construction, so it cannot close for an absent key; its arm also differs from softmax "
             "by the gate's weights alone (same width)."]
    for arm, by_share in record["absent_minus_present"].items():
        for share, within in by_share.items():
            line = f"{arm}, {float(share):.0%} absent: absent minus present, output norm {_said(within['norm'])}"
            if "nothing" in within and arm not in ("softmax", "gate"):
                line += f"; weight to nothing {_said(within['nothing'])}"
            if "gate" in within:
                line += f"; gate's mean opening {_said(within['gate'])}"
            if arm in record["intervals"]:
                found = record["intervals"][arm][share]
                line += (f". Against softmax: present-key accuracy {found['present_accuracy']['words']}; absent keys "
                         f"answered 'absent' {found['absent_accuracy']['words']}; output norm for a present key "
                         f"{_said(found['present_norm'])}, for an absent key {_said(found['absent_norm'])}")
            lines.append(line + ".")
    return lines



def _measure_all(size="full", progress=print, arms=tuple(ARMS), shares=ABSENT_SHARES):
    """Every arm at every absent share over the size's seeds; the record without its provenance."""
    settings = settings_for(SIZES, size)
    require_callable("progress", progress)
    for arm in arms:
        require_choice("each of arms", arm, tuple(ARMS))
    started = time.perf_counter()
    runs = {}
    for arm in arms:
        runs[arm] = {}
        for share in shares:
            results = [_train_arm(arm, share, seed, settings) for seed in range(whole_number("seeds", settings["seeds"]))]
            runs[arm][str(share)] = _gathered(results)
            run = runs[arm][str(share)]
            progress(f"[{time.perf_counter() - started:5.0f} s] {arm:>10} {share:.0%} absent: present accuracy "
                     f"{run['present_accuracy']}, absent norm {run['absent_norm']}, to nothing {run['absent_nothing']}, "
                     f"steps {run['steps']}")
    record = {"size": size, "settings": settings, "arms": {arm: ARMS[arm] for arm in arms},
              "absent_shares": list(shares), "runs": runs}
    record["intervals"] = _intervals(runs, [str(share) for share in shares]) if "softmax" in runs else {}
    record["absent_minus_present"] = _absent_minus_present(runs, [str(share) for share in shares])
    record["text"] = _text(record)
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def run(out, size="full", progress=print):
    """Measure and write ``out``/RESULTS_NAME; returns the record. ``out`` and ``size`` are checked before any work."""
    check_out(out)
    settings_for(SIZES, size)
    return write_record(out, RESULTS_NAME, _measure_all(size, progress), COMMAND, size)


DESCRIPTION = ("Lesson 7's recall with absent keys, for softmax, a sink logit, the off-by-one softmax, softpick and the "
               "output gate, over seeds.")


def main(argv=None):
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, {"full": "about 7 minutes", "tiny": "seconds"},
                                run, argv)
    print(f"Wrote {out / RESULTS_NAME} in {record['seconds']:.0f} s.")


if __name__ == "__main__":
    main()
