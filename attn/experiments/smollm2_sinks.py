"""Why SmolLM2's first token is a sink (lesson 22): its massive activation, its short key and value, the logits
QK-clip would touch, and what removing the activation does to the loss.

    python -m attn.experiments.smollm2_sinks --out lessons/records      # about 5 minutes, one thread
    python -m attn.experiments.smollm2_sinks --out DIR --size tiny      # seconds (needs SmolLM2 and the corpus)

On PASSAGES passages of Persuasion (evenly spread, ``length`` tokens each, no beginning-of-text token: the first
position is whatever token the passage starts with), SmolLM2-135M (attn.pretrained.load()) is read with hooks:

- the residual stream before the first block and after each block: each position's norm; the first position's
  norm over the median of the others, by layer; at the layer where that ratio is largest, the one feature that
  carries it (its share of the first position's squared norm) and the block that writes it (the largest rise of
  the first position's norm, split into what its attention and its MLP add);
- each block's attention input (after RMSNorm) and its keys and values: their norms at position 0 over the
  median of the other positions, by layer;
- each head's largest attention logit (scaled q . k, rotary applied, over every causal pair) beside its mean
  weight on the first token (queries from FROM_POSITION on), and, for each QK-clip threshold in THRESHOLDS, the
  heads whose largest logit passes it and their mean first-token weight against the others';
- the loss (nats a token, predictions from position 1 on, the changed position's own prediction left out) when the
  first position's residual after the writing block (i) is replaced by the mean residual of the other positions
  there, (ii) is replaced by the first position's residual of another passage, (iii) is replaced by the others' mean
  except the massive feature, which keeps its value, (iv) keeps everything but the massive feature, which is set to
  the others' mean; against the model untouched, and (i) made at a middle position as a control (against the
  untouched loss without that position's prediction); paired intervals over passages.

The record, ``smollm2_sinks.json`` (schema):

- ``size``, ``settings``, ``passages`` (a sentence), ``text`` (conclusions in words, from the intervals);
- ``residual_norm``: {``by_layer_first`` [L + 1], ``by_layer_median_others`` [L + 1], ``ratio_by_layer`` [L + 1]
  (means over passages), ``ratio_by_layer_by_passage`` [[L + 1] per passage], ``by_position_at_peak`` [T] (the
  mean norm at each position in the peak layer)}, index 0 the embeddings, index l the output of block l;
- ``massive``: {``peak_layer`` (index as above), ``feature``, ``feature_share``, ``feature_value`` (mean over
  passages at position 0), ``feature_median_others`` (median |value| at other positions), ``other_features_median``
  and ``other_features_largest`` (the other features' median and largest |value| at position 0, mean over passages),
  ``writer_block`` (block number, 1-based as the residual index), ``writer_layer`` (the same block as the lesson
  numbers layers, from 0: writer_block - 1), ``writer_attention_norm``, ``writer_mlp_norm`` (the norm each part adds at
  position 0, mean over passages), ``writer_mlp_norm_others`` (median over the other positions)};
- ``short_key``: {``attention_input_ratio``, ``key_ratio``, ``value_ratio``} [L] each: position 0's norm over the
  other positions' median, by block (mean over passages and key/value heads);
- ``heads``: {``largest_logit`` [L][H], ``first_token_weight`` [L][H], ``weights_check`` (largest difference
  between the softmax of these logits and the model's own weights)}; ``clip``: [{"threshold", "touched": [[layer,
  head], ...], "touched_first_token_weight", "others_first_token_weight"}];
- ``replacement``: {``layer`` (1-based block), ``after_layer`` (0-based, as the lesson), ``feature``, ``untouched`` [per
  passage], ``first_replaced``, ``first_swapped``, ``first_keep_feature``, ``first_feature_only`` [...],
  ``control_position``, ``untouched_control`` [...] (untouched, the control position's prediction left out),
  ``control_replaced`` [...], ``first_minus_untouched``, ``swapped_minus_untouched``, ``keep_feature_minus_untouched``,
  ``feature_only_minus_untouched``, ``control_minus_untouched``: {mean, low, high, words} (paired 95%), ``excluded``,
  ``donor`` (sentences)};
- ``seconds``, ``provenance``.
"""

import math
import time

import torch
from torch.nn import functional

from attn.common.stats import paired_interval
from attn.common.validate import require_callable
from attn.experiments.records import check_out, rounded, settings_for, sized_command, write_record

RESULTS_NAME = "smollm2_sinks.json"
COMMAND = "python -m attn.experiments.smollm2_sinks"
SIZES = {"full": {"passages": 12, "length": 256}, "tiny": {"passages": 2, "length": 24}}
FROM_POSITION = 8  # first-token weight: queries from here on
THRESHOLDS = (5.0, 10.0, 15.0, 20.0)  # SmolLM2 on Persuasion: largest logits by head from about 5 to 20



def _ratio(norms):
    """norms (..., T) -> position 0's over the median of positions 1 .. T-1, (...)."""
    return norms[..., 0] / norms[..., 1:].median(dim=-1).values


def _words(mean, low, high):
    if low > 0:
        return "raises the loss"
    if high < 0:
        return "lowers the loss"
    return "no change distinguishable"


@torch.no_grad()
def _read_passage(model, tokens):
    """One passage (T,) read with hooks: residual streams (L + 1, T, E), attention inputs (L, T, E), what each
    block's attention and MLP add (L, T, E) each, logits by layer (L, H, T, T), the model's weights (L, H, T, T)."""
    blocks = model.blocks
    seen = {"inputs": [], "attended": [], "mlp": [], "normed": []}
    hooks = []
    for block in blocks:
        hooks.append(block.register_forward_pre_hook(lambda module, args: seen["inputs"].append(args[0][0])))
        hooks.append(block.attention_norm.register_forward_hook(lambda module, args, out: seen["normed"].append(out[0])))
        hooks.append(block.mlp.register_forward_hook(lambda module, args, out: seen["mlp"].append(out[0])))
    hooks.append(blocks[-1].register_forward_hook(lambda module, args, out: seen["inputs"].append(
        (out[0] if isinstance(out, tuple) else out)[0])))
    try:
        _, weights = model(tokens[None], need_weights=True)  # (L, 1, H, T, T)
    finally:
        for hook in hooks:
            hook.remove()
    stream = torch.stack(seen["inputs"])  # (L + 1, T, E)
    mlp = torch.stack(seen["mlp"])
    attended = stream[1:] - stream[:-1] - mlp  # what each block's attention added
    logits = []
    for block, normed in zip(blocks, seen["normed"], strict=True):
        attention = block.attention
        q = attention.query_proj(normed).view(len(tokens), attention.num_heads, -1).transpose(0, 1)[None]
        k = attention.key_proj(normed).view(len(tokens), attention.num_kv_heads, -1).transpose(0, 1)[None]
        q, k = attention._rotate(q, k, None)
        k = k.repeat_interleave(attention.num_heads // attention.num_kv_heads, dim=1)
        scores = (q @ k.transpose(-2, -1))[0] / math.sqrt(attention.head_dim)  # (H, T, T)
        causal = torch.ones(len(tokens), len(tokens), dtype=torch.bool).tril()
        logits.append(scores.masked_fill(~causal, -math.inf))
    return {"stream": stream, "normed": torch.stack(seen["normed"]), "attended": attended, "mlp": mlp,
            "logits": torch.stack(logits), "weights": weights[:, 0]}


ARMS = ("first_replaced", "first_swapped", "first_keep_feature", "first_feature_only")  # position 0's arms


@torch.no_grad()
def _passage_loss(model, tokens, replace_at=None, position=0, how="mean", feature=None, donor=None):
    """Mean next-token loss of the predictions made from position 1 on, leaving out the one made at ``position``
    (so that a replaced position's own prediction never counts, and the untouched loss it is compared with leaves
    out the same one). With ``replace_at`` (a 0-based block index), ``position``'s residual after that block is
    changed, ``how``:

    - "mean": replaced by the mean of the other positions' residuals there;
    - "swap": replaced by ``donor`` (E,), another passage's residual at the same position and block;
    - "keep_feature": replaced by the others' mean except ``feature``, which keeps its own value;
    - "feature_only": only ``feature`` set to the others' mean there, every other feature kept.
    """
    if how not in ("mean", "swap", "keep_feature", "feature_only"):
        raise ValueError(f"how must be 'mean', 'swap', 'keep_feature' or 'feature_only', got {how!r:.60}")
    hook = None
    if replace_at is not None:
        def replace(module, args, out):
            out = out.clone()
            others = torch.cat([out[:, :position], out[:, position + 1:]], dim=1).mean(dim=1)  # (1, E)
            own = out[:, position].clone()
            if how == "swap":
                out[:, position] = donor
            elif how == "feature_only":
                out[:, position, feature] = others[:, feature]
            else:
                out[:, position] = others
                if how == "keep_feature":
                    out[:, position, feature] = own[:, feature]
            return out
        hook = model.blocks[replace_at].register_forward_hook(replace)
    try:
        logits = model(tokens[None])[0]  # (T, V)
    finally:
        if hook is not None:
            hook.remove()
    losses = functional.cross_entropy(logits[:-1], tokens[1:], reduction="none")  # (T - 1,): the prediction at t
    kept = torch.ones_like(losses, dtype=torch.bool)
    kept[0] = False
    if position < len(kept):
        kept[position] = False
    return losses[kept].mean().item()


def _interval(a, b):
    mean, low, high = paired_interval(a, b)
    return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4), "words": _words(mean, low, high)}


def _measure(model, passages, progress=print):
    """Every measure on passages (N, T); the record without size, settings and provenance."""
    started = time.perf_counter()
    per = {name: [] for name in ("norms", "feature0", "attn_add", "mlp_add", "mlp_others", "normed", "key", "value",
                                 "largest", "first_weight", "check")}
    streams = []
    for index, tokens in enumerate(passages):
        read = _read_passage(model, tokens)
        norms = read["stream"].norm(dim=-1)  # (L + 1, T)
        per["norms"].append(norms)
        streams.append(read["stream"][:, 0])  # (L + 1, E): position 0
        per["attn_add"].append(read["attended"][:, 0].norm(dim=-1))  # (L,)
        mlp_norms = read["mlp"].norm(dim=-1)  # (L, T)
        per["mlp_add"].append(mlp_norms[:, 0])
        per["mlp_others"].append(mlp_norms[:, 1:].median(dim=-1).values)
        per["normed"].append(_ratio(read["normed"].norm(dim=-1)))
        keys, values = [], []
        for block, normed in zip(model.blocks, read["normed"], strict=True):
            attention = block.attention
            k = attention.key_proj(normed).view(len(tokens), attention.num_kv_heads, -1).norm(dim=-1)  # (T, H_kv)
            v = attention.value_proj(normed).view(len(tokens), attention.num_kv_heads, -1).norm(dim=-1)
            keys.append(_ratio(k.T).mean())
            values.append(_ratio(v.T).mean())
        per["key"].append(torch.stack(keys))
        per["value"].append(torch.stack(values))
        per["largest"].append(read["logits"].flatten(2).amax(dim=-1))  # (L, H)
        per["first_weight"].append(read["weights"][:, :, FROM_POSITION:, 0].mean(dim=-1))  # (L, H)
        per["check"].append((torch.softmax(read["logits"], dim=-1) - read["weights"]).abs().amax())
        progress(f"[{time.perf_counter() - started:5.0f} s] passage {index + 1} of {len(passages)} read")
    norms = torch.stack(per["norms"])  # (N, L + 1, T)
    ratios = _ratio(norms)  # (N, L + 1)
    peak = int(ratios.mean(dim=0).argmax())
    first = torch.stack(streams)  # (N, L + 1, E)
    feature = int(first[:, peak].abs().mean(dim=0).argmax())
    share = (first[:, peak, feature] ** 2 / (first[:, peak] ** 2).sum(dim=-1)).mean()
    rise = norms[:, 1:, 0].mean(dim=0) - norms[:, :-1, 0].mean(dim=0)  # (L,): block l + 1's rise at position 0
    writer = int(rise.argmax())  # a 0-based block index
    largest, first_weight = torch.stack(per["largest"]).amax(dim=0), torch.stack(per["first_weight"]).mean(dim=0)
    record = {
        "residual_norm": {"by_layer_first": rounded(norms[:, :, 0].mean(dim=0), 2),
                          "by_layer_median_others": rounded(norms[:, :, 1:].median(dim=-1).values.mean(dim=0), 2),
                          "ratio_by_layer": rounded(ratios.mean(dim=0), 2), "ratio_by_layer_by_passage": rounded(ratios, 2),
                          "by_position_at_peak": rounded(norms[:, peak].mean(dim=0), 2)},
        "massive": {"peak_layer": peak, "feature": feature, "feature_share": round(share.item(), 4),
                    "feature_value": round(first[:, peak, feature].mean().item(), 2),
                    "feature_median_others": None, "other_features_median": round(_other_features(first[:, peak], feature)
                                                                                  .median(dim=-1).values.mean().item(), 2),
                    "other_features_largest": round(_other_features(first[:, peak], feature).amax(dim=-1).mean().item(), 2),
                    "writer_block": writer + 1, "writer_layer": writer,
                    "writer_attention_norm": round(torch.stack(per["attn_add"])[:, writer].mean().item(), 2),
                    "writer_mlp_norm": round(torch.stack(per["mlp_add"])[:, writer].mean().item(), 2),
                    "writer_mlp_norm_others": round(torch.stack(per["mlp_others"])[:, writer].mean().item(), 2)},
        "short_key": {"attention_input_ratio": rounded(torch.stack(per["normed"]).mean(dim=0)),
                      "key_ratio": rounded(torch.stack(per["key"]).mean(dim=0)),
                      "value_ratio": rounded(torch.stack(per["value"]).mean(dim=0))},
        "heads": {"largest_logit": rounded(largest, 2), "first_token_weight": rounded(first_weight),
                  "weights_check": float(f"{max(per['check']).item():.2e}")},
        "clip": [_clipped(largest, first_weight, threshold) for threshold in THRESHOLDS],
    }
    others = []
    for tokens in passages:  # the massive feature's size at the other positions, at the peak layer
        read_stream = _stream_at(model, tokens, peak)
        others.append(read_stream[1:, feature].abs().median())
    record["massive"]["feature_median_others"] = round(torch.stack(others).mean().item(), 3)
    control = passages.shape[1] // 2
    donors = [_stream_at(model, tokens, writer + 1)[0] for tokens in passages]  # position 0 after the writing block
    untouched = [_passage_loss(model, tokens) for tokens in passages]
    arms = {"first_replaced": [_passage_loss(model, tokens, writer, 0) for tokens in passages],
            "first_swapped": [_passage_loss(model, tokens, writer, 0, "swap", donor=donors[(index + 1) % len(passages)])
                              for index, tokens in enumerate(passages)],
            "first_keep_feature": [_passage_loss(model, tokens, writer, 0, "keep_feature", feature) for tokens in passages],
            "first_feature_only": [_passage_loss(model, tokens, writer, 0, "feature_only", feature) for tokens in passages]}
    untouched_control = [_passage_loss(model, tokens, None, control) for tokens in passages]
    controlled = [_passage_loss(model, tokens, writer, control) for tokens in passages]
    progress(f"[{time.perf_counter() - started:5.0f} s] replacement: {sum(untouched) / len(untouched):.3f} untouched, "
             f"{sum(arms['first_replaced']) / len(passages):.3f} first position replaced after layer {writer}")
    record["replacement"] = {
        "layer": writer + 1, "after_layer": writer, "feature": feature, "untouched": rounded(untouched),
        **{name: rounded(losses) for name, losses in arms.items()},
        "control_position": control, "untouched_control": rounded(untouched_control),
        "control_replaced": rounded(controlled),
        **{f"{name.removeprefix('first_')}_minus_untouched" if name != "first_replaced" else "first_minus_untouched":
           _interval(losses, untouched) for name, losses in arms.items()},
        "control_minus_untouched": _interval(controlled, untouched_control),
        "excluded": "every loss leaves out the prediction made at the changed position (position 0's, or the control "
                    "position's in both the control and the untouched loss it is paired with)",
        "donor": "first_swapped: position 0's residual from the next passage (the last passage takes the first's)"}
    return record


def _other_features(vectors, feature):
    """vectors (N, E) -> |value| of every feature but ``feature``, (N, E - 1)."""
    return torch.cat([vectors[:, :feature], vectors[:, feature + 1:]], dim=1).abs()


@torch.no_grad()
def _stream_at(model, tokens, layer):
    """The residual stream (T, E) at ``layer`` (0: the embeddings, l: after block l)."""
    kept = []
    target = model.blocks[layer - 1] if layer else model.blocks[0]
    hook = (target.register_forward_hook(lambda module, args, out: kept.append(out[0])) if layer
            else target.register_forward_pre_hook(lambda module, args: kept.append(args[0][0])))
    try:
        model(tokens[None])
    finally:
        hook.remove()
    return kept[0]


def _clipped(largest, first_weight, threshold):
    touched = largest > threshold  # (L, H)

    def mean(values):
        return round(values.mean().item(), 4) if values.numel() else None

    return {"threshold": threshold, "touched": [list(pair) for pair in touched.nonzero().tolist()],
            "touched_first_token_weight": mean(first_weight[touched]),
            "others_first_token_weight": mean(first_weight[~touched])}


def _text(record):
    massive, replacement = record["massive"], record["replacement"]
    ratio = record["residual_norm"]["ratio_by_layer"][massive["peak_layer"]]
    layer = replacement["after_layer"]

    def said(name):
        found = replacement[name]
        return f"{found['words']} ({found['mean']:+.3f} nats a token, {found['low']:+.3f} to {found['high']:+.3f})"

    return [
        f"The first position's residual norm is {ratio:.0f} times the median position's after layer "
        f"{massive['peak_layer'] - 1} (the residual stream's index {massive['peak_layer']}); feature {massive['feature']} "
        f"carries {massive['feature_share']:.0%} of its square ({massive['feature_value']:,.0f} against a median "
        f"{massive['other_features_median']:.0f} for the other features there, the largest of them "
        f"{massive['other_features_largest']:,.0f}); layer {massive['writer_layer']} writes it (its MLP adds "
        f"{massive['writer_mlp_norm']:,.0f} at position 0, a median {massive['writer_mlp_norm_others']:.1f} elsewhere).",
        f"After layer {layer}, on {len(replacement['untouched'])} passages (paired 95% intervals; every loss leaves out the "
        f"changed position's own prediction): position 0's residual replaced by the other positions' mean "
        f"{said('first_minus_untouched')}; by position 0's residual from another passage {said('swapped_minus_untouched')}; "
        f"by the others' mean but feature {replacement['feature']} kept {said('keep_feature_minus_untouched')}; only "
        f"feature {replacement['feature']} set to the others' mean {said('feature_only_minus_untouched')}; the whole "
        f"replacement at position {replacement['control_position']} {said('control_minus_untouched')}.",
        _reading(replacement),
    ]


def _reading(replacement):
    """What the position-0 arms say together, in words that follow their intervals."""
    feature = replacement["feature"]
    swapped = replacement["swapped_minus_untouched"]["words"] != "raises the loss"
    first = "Another passage's first vector serves as well as the passage's own" if swapped else (
        "Another passage's first vector does not serve as well as the passage's own")
    kept, whole = replacement["keep_feature_minus_untouched"]["mean"], replacement["first_minus_untouched"]["mean"]
    alone = replacement["feature_only_minus_untouched"]
    if kept < whole / 4 and alone["words"] == "raises the loss" and alone["mean"] > whole:
        return (f"{first}; keeping feature {feature} at its size takes back most of the whole replacement's cost, and "
                f"setting that feature alone to the mean costs more than the whole replacement: the model leans on one "
                f"feature of the first position{', used as a constant bias' if swapped else ''}.")
    return f"{first}; feature {feature} alone does not carry the replacement's cost as clearly."



def run(out, size="full", progress=print):
    """Load SmolLM2 and the held-out novel, measure, write ``out``/RESULTS_NAME; returns the record. ``out`` and
    ``size`` are checked before any work."""
    check_out(out)
    from attn.data.corpus import austen
    from attn.experiments.window_austen import held_out_streams
    from attn.models.lm import HELD_OUT
    from attn.pretrained import load

    settings = settings_for(SIZES, size)
    require_callable("progress", progress)
    started = time.perf_counter()
    text = austen()[HELD_OUT]  # the corpus first: a missing one costs nothing
    model, tokenizer = load()
    tokens = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    passages = held_out_streams(tokens, settings["length"], settings["passages"])
    record = {"size": size, "settings": {**settings, "from_position": FROM_POSITION, "thresholds": list(THRESHOLDS)},
              "passages": f"{settings['passages']} passages of {settings['length']} tokens evenly spread through "
                          "Persuasion, no beginning-of-text token",
              **_measure(model, passages, progress)}
    record["text"] = _text(record)
    record["seconds"] = round(time.perf_counter() - started, 1)
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("SmolLM2's first-token sink: its massive activation, short key and value, each head's largest logit "
               "and sink weight, and the loss with the activation replaced.")


def main(argv=None):
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, {"full": "about 5 minutes", "tiny": "seconds"},
                                run, argv)
    print(f"Wrote {out / RESULTS_NAME} in {record['seconds']:.0f} s.")


if __name__ == "__main__":
    main()
