"""sink_austen's definitions and words (lesson 22): what counts as a sink or a massive activation, DiffLlama's
lambda_init schedule, the intervals against softmax, the claims' words, the Bonferroni family, the record's text.

The claims' words say when: "lower after N steps, early in training", "higher after ...", "not distinguishable
after ..."; never "held", since these models are too young to test a paper's claim about trained models. A claim
is "not testable" where the softmax baseline lacks the thing the design removes.
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


CLAIMS = {"held_out_loss": "a lower held-out loss than softmax", "first_token_weight": "no sink (less first-token weight "
          "than softmax)", "largest_activation": "no massive activations (a smaller largest activation than softmax)"}


def _verdict(interval, steps):
    """Words for "the arm's number is lower than softmax's", from the interval of arm - softmax, after ``steps``
    steps: these models are young, so the words say when, never "held"."""
    if interval["high"] < 0:
        return f"lower after {steps} steps, early in training"
    if interval["low"] > 0:
        return f"higher after {steps} steps, early in training"
    return f"not distinguishable after {steps} steps"


NOT_TESTABLE = "not testable: the softmax baseline formed no sink"
NOT_TESTABLE_MASSIVE = ("not testable: the softmax baseline has no massive activation (first-position norm ratio below "
                        f"{MASSIVE_RATIO:g})")


def _claims(found, baseline_sink, steps, baseline_massive=True):
    """{arm: {metric: words}} for CLAIMS; a claim is not testable where the baseline lacks what the design removes."""
    def said(metric, interval):
        if metric == "first_token_weight" and not baseline_sink:
            return NOT_TESTABLE
        if metric == "largest_activation" and not baseline_massive:
            return NOT_TESTABLE_MASSIVE
        return _verdict(interval, steps)

    return {arm: {metric: said(metric, by[metric]) for metric in CLAIMS} for arm, by in found.items()}


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
    bos = ", a beginning-of-text token at position 0 of every window" if settings["bos"] else ""
    lines = [f"The model is lesson 13's recipe scaled down to fit a CPU: embedding {settings['embed_dim']}, "
             f"{settings['num_layers']} layers, {settings['num_heads']} heads, context {settings['context_length']}, "
             f"{steps} steps of {settings['batch_size']} windows{bos}, {settings['seeds']} seeds; parameters equal within "
             f"{record['parameter_spread']:.2%}; {record['cpu_seconds'] / 60:.0f} CPU-minutes for the whole record.",
             f"Held-out losses from {min(losses.values()):.2f} to {max(losses.values()):.2f} nats a token, against "
             f"{record['baseline']['bigram']:.2f} for a count-based add-{record['baseline']['k']:g} bigram with the same "
             f"tokenizer (unigram {record['baseline']['unigram']:.2f}); the cosine schedule, not convergence, flattens "
             f"their loss at the end. Every comparison below is after {steps} steps of small models, early in training "
             "by a real model's measure; none tests a paper's claim about trained models."]
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
        share = [_mean(layers) for layers in runs["sink"]["sink_share"]]
        alike = abs(_mean(share) / record["even_sink_share"] - 1) < 0.2
        lines.append(f"The sink logit's share of the weight ends at {_mean(share):.3f}, against {record['even_sink_share']} "
                     "for a sink logit of 0 on even rows: " + ("the learned sink behaves much like the off-by-one softmax "
                                                               "here." if alike else "the learned sink moved from there."))
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
