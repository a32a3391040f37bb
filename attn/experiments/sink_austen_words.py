"""sink_austen's definitions and words (lesson 22): what counts as a sink or a massive activation, DiffLlama's
lambda_init schedule, the intervals against softmax, the claims' words, the Bonferroni family, the record's text.

The claims' words are "held", "not held" or "not distinguishable", each with when ("held: lower after N steps"):
these are small models, trained once through a fixed schedule. "No sink" is not held where any seed formed one
(unless that sink shows only in a weight divided by a row sum below 1, and the interval cannot tell it from softmax's),
nor where a learned sink logit takes a sink's share itself. A claim is "not testable" where the softmax baseline lacks
the thing the design removes.
"""

import math

from attn.common.stats import paired_interval, t_quantile_at
from attn.experiments.sink_recall import _words as words  # an interval of arm - softmax in words

MASSIVE_RATIO = 10.0  # a massive activation: the first position's norm this many times the median's (SmolLM2: 32-176)
MLP_RATIO, GATE_MLP_RATIO = 4, 3.5  # the gate's doubled query projection paid for by a narrower MLP
FROM_POSITION = 16  # first-token weight: queries from here on (the first ones have few keys to choose from)
SINK_WEIGHT = 0.3  # a head with at least this mean weight on the first token is a sink
INTERVAL_METRICS = ("held_out_loss", "first_token_weight", "largest_logit", "largest_activation")


def _lambda_init(layer_index):
    """DiffLlama's lambda_init for a layer (transformers' lambda_init_fn, layer index from 0): 0.8 - 0.6 exp(-0.3 l)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


def _summary(run, metric):
    """One number per seed: the loss, the largest head's first-token weight, the largest layer's logit or activation."""
    if metric == "held_out_loss":
        return run[metric]
    if metric == "first_token_weight":
        return [max(max(heads) for heads in layers) for layers in run[metric]]
    return [max(layers) for layers in run[metric]]


CLAIMS = {"held_out_loss": "a lower held-out loss than softmax",
          "first_token_weight": "no sink (no seed forms one, and the largest head gives the first token less than "
          "softmax's)",
          "largest_activation": "no massive activations (a smaller largest activation than softmax)"}


def _verdict(interval, steps):
    """A claim of "lower than softmax" in words, from the interval of arm - softmax after ``steps`` steps: held, not
    held, or not distinguishable, always with when (a small model, after so many steps)."""
    if interval["high"] < 0:
        return f"held: lower after {steps} steps"
    if interval["low"] > 0:
        return f"not held: higher after {steps} steps"
    return f"not distinguishable after {steps} steps"


NOT_TESTABLE = "not testable: the softmax baseline formed no sink"
NOT_TESTABLE_MASSIVE = ("not testable: the softmax baseline has no massive activation (first-position norm ratio below "
                        f"{MASSIVE_RATIO:g})")


def _sink_verdict(interval, formed, seeds, steps, sink_share=None, divided=False):
    """The claim "no sink" in words. A learned sink logit taking SINK_WEIGHT of the weight or more is itself a sink
    (moved, not removed); a seed with a first-token sink makes it not held, unless the weight is divided by a row sum
    below 1 (differential attention's 1 - lambda) and the interval cannot tell it from softmax's; else held only if the
    largest head's first-token weight is also lower than softmax's (a sink just under the threshold is not none)."""
    if sink_share is not None and sink_share >= SINK_WEIGHT:
        return (f"not held: the learned sink logit takes {sink_share:.3f} of the weight, itself a sink (moved from the "
                f"first token, where no seed formed one after {steps} steps)")
    if formed and divided and interval["low"] <= 0:
        return (f"not distinguishable: a sink in {formed} of {seeds} seeds only once the weight is divided by the row "
                f"sum 1 - lambda, and the largest head is not distinguishable from softmax's after {steps} steps")
    if formed:
        return f"not held: a sink in {formed} of {seeds} seeds after {steps} steps"
    if interval["high"] < 0:
        return f"held: no seed formed a sink, and the largest head's first-token weight is lower after {steps} steps"
    return (f"not distinguishable: no seed formed a sink, but the largest head's first-token weight is not "
            f"distinguishable from softmax's after {steps} steps")


def _divided(arms):
    """The arms (record["arms"]: {arm: layer options}) whose first-token weight is divided by a row sum below 1:
    differential attention's, by 1 - lambda."""
    return {arm for arm, options in arms.items() if options["layer"] == "DifferentialAttention"}


def _claims(found, baseline_sink, steps, baseline_massive=True, formed=None, sink_shares=None, divided=()):
    """{arm: {metric: words}} for CLAIMS; a claim is not testable where the baseline lacks what the design removes.
    ``formed``: {arm: [sink formed, per seed]} (needed once the baseline formed a sink); ``sink_shares``: {arm: the
    mean share a learned sink logit takes} for the arms that have one; ``divided``: the arms ``_divided`` names."""
    shares = sink_shares or {}

    def said(arm, metric, interval):
        if metric == "first_token_weight":
            if not baseline_sink:
                return NOT_TESTABLE
            return _sink_verdict(interval, sum(formed[arm]), len(formed[arm]), steps, shares.get(arm), arm in divided)
        if metric == "largest_activation" and not baseline_massive:
            return NOT_TESTABLE_MASSIVE
        return _verdict(interval, steps)

    return {arm: {metric: said(arm, metric, by[metric]) for metric in CLAIMS} for arm, by in found.items()}


def _sink_shares(runs):
    """{arm: mean share of the weight its learned sink logit takes, over seeds and layers} for arms that have one."""
    return {arm: _mean([_mean(layers) for layers in run["sink_share"] if layers is not None])
            for arm, run in runs.items() if any(layers is not None for layers in run.get("sink_share") or [])}


def _bonferroni(runs, metric="held_out_loss", alpha=0.05):
    """Arm - softmax intervals for ``metric``, each at level 1 - alpha / m for the m arms compared (a family)."""
    arms = [arm for arm in runs if arm != "softmax"]
    found = {"family": len(arms), "level": round(1 - alpha / max(len(arms), 1), 5), metric: {}}
    for arm in arms:
        differences = [a - b for a, b in zip(_summary(runs[arm], metric), _summary(runs["softmax"], metric), strict=True)]
        n = len(differences)
        mean = sum(differences) / n
        spread = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
        half = t_quantile_at(1 - alpha / (2 * len(arms)), n - 1) * spread / math.sqrt(n)
        found[metric][arm] = {"mean": round(mean, 4), "low": round(mean - half, 4), "high": round(mean + half, 4),
                              "words": words(mean, mean - half, mean + half)}
    return found


def _intervals(runs):
    found = {}
    for arm, run in runs.items():
        if arm == "softmax":
            continue
        found[arm] = {}
        for metric in INTERVAL_METRICS:
            mean, low, high = paired_interval(_summary(run, metric), _summary(runs["softmax"], metric))
            found[arm][metric] = {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4),
                                  "words": words(mean, low, high)}
    return found


def _said(found):
    return f"{found['words']} ({found['mean']:+.3f}, {found['low']:+.3f} to {found['high']:+.3f})"


def _mean(values):
    values = [value for value in values if value is not None]
    return sum(values) / len(values)


def _text(record):
    settings, runs = record["settings"], record["runs"]
    steps = settings["steps"]
    losses = {arm: _mean(run["held_out_loss"]) for arm, run in runs.items()}
    tokens = steps * settings["batch_size"] * settings["context_length"]
    params = record["parameters"]["softmax"]
    span, fall = _last_fall(runs, steps)
    bos = ", a beginning-of-text token at position 0 of every window" if settings["bos"] else ""
    lines = [f"The model is lesson 13's recipe scaled down to fit a CPU: embedding {settings['embed_dim']}, "
             f"{settings['num_layers']} layers, {settings['num_heads']} heads, context {settings['context_length']}, "
             f"{steps} steps of {settings['batch_size']} windows{bos}, {settings['seeds']} seeds; parameters equal within "
             f"{record['parameter_spread']:.2%}; its runs' wall times add up to {record['run_seconds'] / 3600:.1f} hours "
             "of one thread.",
             f"Held-out losses from {min(losses.values()):.2f} to {max(losses.values()):.2f} nats a token, against "
             f"{record['baseline']['bigram']:.2f} for a count-based add-{record['baseline']['k']:g} bigram with the same "
             f"tokenizer (unigram {record['baseline']['unigram']:.2f}). Over the last {span} steps, under the cosine "
             f"schedule's lowest rates, they still fell by {fall:.3f} on average: the comparisons are at one point of "
             f"training, not at convergence. Each model read {tokens:,} tokens, about {tokens / params:.3g} a "
             f"parameter. Every comparison below is of these small models after {steps} steps; the papers' claims are "
             "about models thousands of times larger."]
    for arm, found in record["intervals"].items():
        lines.append(f"{arm}: held-out loss {_said(found['held_out_loss'])}; first-token weight (largest head) "
                     f"{found['first_token_weight']['words']}; largest logit {_said(found['largest_logit'])}; largest "
                     f"residual activation {found['largest_activation']['words']}. Claims: "
                     + "; ".join(f"{claim}: {record['claims'][arm][metric]}" for metric, claim in CLAIMS.items()) + ".")
    family = record["bonferroni"]
    lines.append(f"The {family['family']} loss comparisons are a family: Bonferroni-adjusted ({family['level']:.2%} each), "
                 + "; ".join(f"{arm} {_said(found)}" for arm, found in family["held_out_loss"].items()) + ".")
    if "gate" in runs:
        gate = [_mean(layers) for layers in runs["gate"]["gate_mean"]]
        moved = "stayed near where it began, not sparse" if abs(_mean(gate) - 0.5) < 0.1 else "moved from where it began"
        lines.append(f"The gate's mean opening ends at {_mean(gate):.2f} (sigmoid(0) = 0.5 at the start): it {moved}. "
                     "The gate arm changes two things, not one: the gate's weights and, to "
                     f"keep the parameters equal, an MLP narrowed to {GATE_MLP_RATIO} E from {MLP_RATIO} E (a confound).")
    if "sink" in runs:
        share = _sink_shares(runs)["sink"]
        lines.append(f"The sink logit's share of the weight ends at {share:.3f} on average over every query (a sink "
                     f"logit of 0 would take {record['even_sink_share']} from even rows): weight no key receives; at "
                     f"{SINK_WEIGHT} or more the logit is itself a sink, moved from the first token.")
    if "differential" in runs:
        lams = runs["differential"]["lambda"]
        lines.append("Differential attention uses DiffLlama's lambda_init by layer ("
                     + ", ".join(f"{_lambda_init(i):.2f}" for i in range(settings["num_layers"])) + "); its lambda ends at "
                     + ", ".join(f"{_mean([seed[i] for seed in lams]):.2f}" for i in range(settings["num_layers"]))
                     + " by layer; its first-token weight is that of A1 - lambda A2 divided by the row sum 1 - lambda.")
    ratio = max(max(layers) for layers in runs["softmax"]["first_position_norm_ratio"])
    lines.append(f"Even rows give the first token {record['even_spread']} of the weight (queries from position "
                 f"{record['from_position']} on); softmax's first position's residual norm is at most {ratio:.2f} times "
                 "the median's (SmolLM2: 32 to 176 in its deep layers).")
    formed = {arm: sum(run["sink_formed"]) for arm, run in runs.items()}
    lines.append("Seeds whose model formed a sink (a head with at least "
                 f"{SINK_WEIGHT} of its weight on the first token): "
                 + ", ".join(f"{arm} {count} of {len(runs[arm]['sink_formed'])}" for arm, count in formed.items()) + ".")
    rungs = [f"{rung['what']}: {_formed(rung['runs']['softmax'])}" for rung in record["ladder"]]
    lines.append("Before the arms, softmax alone was trained on a ladder of settings, each more likely than the last to "
                 "form a sink: " + "; ".join(rungs) + f". At the arms' settings, softmax: {_formed(runs['softmax'])}.")
    return lines


def _last_fall(runs, steps, span=1000):
    """(span, mean fall of the held-out loss over the last ``span`` steps, every arm and seed): from the last
    checkpoint at or before ``steps`` - span to the end (a shorter span where training was shorter)."""
    falls = []
    for run in runs.values():
        for checkpoints in run["checkpoints"]:
            at = max(index for index, step in enumerate(checkpoints["step"]) if step <= max(steps - span, 0))
            falls.append(checkpoints["held_out_loss"][at] - checkpoints["held_out_loss"][-1])
    return min(span, steps), _mean(falls)


def _formed(run):
    """'a sink in k of n seeds (largest head's first-token weight w)' for one setting's runs."""
    largest = max(max(max(heads) for heads in layers) for layers in run["first_token_weight"])
    return f"a sink in {sum(run['sink_formed'])} of {len(run['sink_formed'])} seeds (largest head {largest:.3f})"


def _even_rows(length):
    """The values even rows give at context ``length``: the first-token weight over queries from FROM_POSITION on
    (mean of 1 / (i + 1)) and a sink logit of 0's share over every query (mean of 1 / (i + 2))."""
    queries = range(FROM_POSITION, length)
    return {"even_spread": round(sum(1 / (i + 1) for i in queries) / max(len(queries), 1), 4),
            "even_sink_share": round(sum(1 / (i + 2) for i in range(length)) / length, 4)}


def _massive(run):
    """Whether any seed's first position grew MASSIVE_RATIO times the median position's norm in some layer."""
    return max(max(layers) for layers in run["first_position_norm_ratio"]) >= MASSIVE_RATIO
