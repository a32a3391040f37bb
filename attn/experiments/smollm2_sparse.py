"""SmolLM2-135M read through top-k attention (lesson 18): how much of each head's weight its k best keys hold, what
the loss is when every layer reads only k keys, and a distilled lightning indexer. One seeded command:

    python -m attn.experiments.smollm2_sparse --out lessons/records        # 25 to 40 minutes, one thread (see below)
    python -m attn.experiments.smollm2_sparse --out DIR --size tiny       # seconds: a small random LlamaLM

reads the converted model (``attn.pretrained.load()``), the corpus (``python -m attn.corpus``) and lesson 16's record
(``smollm2_reading.json``, for its head types), and writes ``smollm2_sparse.json``. Held-out text: evenly spread
passages of Persuasion, the novel lessons 13 to 17 hold out. Three measures:

1. Oracle top-k mass. For every layer and head, the share of a query's attention weight held by its k highest-weight
   keys, averaged over the queries that see more than k keys (query p sees the p + 1 keys 0 .. p, so the queries
   p >= k count; the others hold all their weight in k keys). Beside it the share a window of k - 4 recent keys plus
   4 sink tokens holds (lesson 14's StreamingLLM shape, reading as many keys). Grouped by lesson 16's head types,
   with its own measures and thresholds (``HEAD_TYPES``).
2. Loss per key read: the held-out loss (nats a token) with every layer reading only k keys, chosen (a) per head by the
   true scores (the oracle: the k highest scores, softmax over those alone; the weights rank as the scores do),
   (b) as 4 sinks and k - 4 recent keys, against (c) dense attention. Per-passage losses, for paired intervals.
3. A distilled lightning indexer (DeepSeek-V3.2's warm-up stage): ``attn.sparse.LightningIndexer`` for a few layers,
   trained with the model frozen on the KL from the layer's dense weights (summed over heads, renormalised) to the
   softmax of its index scores, on training novels' passages; every run stops when the KL on validation passages
   (other passages of the training novels) has not fallen by MIN_GAIN for PATIENCE measurements (or at max_steps,
   which the record then says). SmolLM2 has no query latent: the indexer reads the layer's normed input for both its
   queries and its keys. Then, on the held-out passages, the share of the dense weight its top-k holds (one choice
   for all heads of the layer, as in DSA) against the per-head oracle's, the best shared choice's and the window's,
   and the loss when those layers (only) read the indexer's top-k, the oracle's top-k or a window plus sinks.

Cost: the shipped record took 2,497 s (42 minutes) on one thread of a 2-core CPU shared with other work (the process
had about 57% of a core, so roughly 24 minutes alone): 508 s for the indexers (their training data and training),
about 330 s for the dense reading, about 970 s for the oracle on every layer (it runs each layer twice: once for its
weights, once masked), 340 s for the window and 355 s for the indexers' losses.
"""

import time

import torch
from torch.nn import functional

from attn.common.stats import paired_interval
from attn.common.validate import is_whole_number, require_callable, require_token_ids, type_name
from attn.experiments.austen_heads import check_course_decoder
from attn.experiments.records import check_out, rounded, settings_for, shipped_record, sized_command, write_record
from attn.experiments.topk_reading import (
    MIN_GAIN,
    SINK_TOKENS,
    _check_top_ks,
    _layer_inputs_and_targets,
    _make_indexer,
    _topk_masses,
    _train_indexer,
    counted_queries,
    head_summed_target,
    indexer_kl,
    oracle_keep_mask,
    reader,
    token_losses,
    window_mask,
)
from attn.experiments.window_austen import held_out_streams
from attn.sparse import topk_keep_mask

RESULTS_NAME = "smollm2_sparse.json"
COMMAND = "python -m attn.experiments.smollm2_sparse"
READING_NAME = "smollm2_reading.json"
# Lesson 16's head types: its measures in smollm2_reading.json and the thresholds its notebook counts heads with.
# A head takes the first type it passes, in this order; a head that passes none is "other".
HEAD_TYPES = (
    ("induction", ("heads", "induction_score"), 0.3),
    ("previous-token", ("sink", "previous_token_score"), 0.3),
    ("sink", ("sink", "first_token_weight"), 0.5),
)
OTHER = "other"
SIZES = {
    "full": {"passages": 6, "length": 1024, "top_ks": (8, 16, 32, 64, 128, 256),
             "indexer_layers": (1, 11, 17, 18, 23), "indexer_top_ks": (16, 64),
             "indexer_heads": 4, "indexer_head_dim": 32, "indexer_rope_dim": 16,
             "train_passages": 24, "valid_passages": 4, "eval_every": 25, "patience": 3, "max_steps": 1000,
             "learning_rate": 1e-3, "seed": 0},
    "tiny": {"passages": 3, "length": 24, "top_ks": (6, 12),
             "indexer_layers": (1,), "indexer_top_ks": (6,),
             "indexer_heads": 2, "indexer_head_dim": 8, "indexer_rope_dim": 4,
             "train_passages": 4, "valid_passages": 2, "eval_every": 5, "patience": 2, "max_steps": 30,
             "learning_rate": 1e-2, "seed": 0},
}
TINY_MODEL = {"vocab_size": 64, "context_length": 32, "embed_dim": 16, "num_heads": 2, "num_kv_heads": 1,
              "num_layers": 2, "mlp_hidden_dim": 32, "rotary_base": 10000.0}



# Head types ------------------------------------------------------------------------------------------------------


def head_types(reading):
    """Lesson 16's type of each head (L lists of H names) from its record (``smollm2_reading.json`` as a dict)."""
    if not isinstance(reading, dict):
        raise TypeError(f"reading must be lesson 16's record (a dict), got {type_name(reading)}")
    tables = []
    for name, (part, key), threshold in HEAD_TYPES:
        table = reading.get(part, {}).get(key) if isinstance(reading.get(part), dict) else None
        if not isinstance(table, list) or not table or not all(isinstance(row, list) for row in table):
            raise ValueError(f"lesson 16's record has no {part}.{key} table (layers x heads) for the {name} heads")
        tables.append((name, torch.tensor(table, dtype=torch.float64), threshold))
    shape = tables[0][1].shape
    if any(table.shape != shape for _, table, _ in tables):
        raise ValueError("lesson 16's record's head tables differ in shape")
    types = [[OTHER] * shape[1] for _ in range(shape[0])]
    for layer in range(shape[0]):
        for head in range(shape[1]):
            for name, table, threshold in tables:
                if table[layer, head] > threshold:
                    types[layer][head] = name
                    break
    return types


def _stand_in_reading(num_layers, num_heads):
    """The tiny size's stand-in for lesson 16's record: one head of each type."""
    def table(layer, head):
        rows = [[0.0] * num_heads for _ in range(num_layers)]
        rows[layer][head] = 0.9
        return rows

    return {"heads": {"induction_score": table(num_layers - 1, 0)},
            "sink": {"previous_token_score": table(0, 0), "first_token_weight": table(0, num_heads - 1)}}


# The whole record ----------------------------------------------------------------------------------------------



@torch.no_grad()
def _dense_measures(model, passages, top_ks, indexers):
    """One dense reading of each held-out passage (N, T), layer by layer with its weights: the per-head mass sums of
    the top-k and the window, the dense losses, and for each indexer's layer the masses its choices hold and its KL."""
    length, num_layers, heads = passages.shape[1], len(model.blocks), model.num_heads
    counted = {k: counted_queries(length, k) for k in top_ks}
    windows = {k: window_mask(length, k) for k in top_ks}  # (T, T) each
    topk_sum = torch.zeros(num_layers, heads, len(top_ks), dtype=torch.float64)
    window_sum = torch.zeros_like(topk_sum)
    shared = {layer: {name: torch.zeros(len(top_ks), dtype=torch.float64) for name in ("indexer", "shared_oracle")}
              for layer in indexers}
    kl, losses = {layer: [] for layer in indexers}, []
    for tokens in passages:
        x = model.token_embedding(tokens[None])
        for layer, block in enumerate(model.blocks):
            normed = block.attention_norm(x)
            x, weights = block(x, need_weights=True)  # weights (1, H, T, T)
            weights = weights[0]  # (H, T, T)
            masses = _topk_masses(weights, top_ks)  # (H, T, K)
            for index, k in enumerate(top_ks):
                topk_sum[layer, :, index] += masses[:, counted[k], index].sum(dim=-1)
                window_sum[layer, :, index] += (weights * windows[k]).double().sum(dim=-1)[:, counted[k]].sum(dim=-1)
            if layer in indexers:
                scores = indexers[layer](normed, normed)[0]  # (T, T)
                target = head_summed_target(weights)  # (T, T)
                kl[layer].append(indexer_kl(scores[None].double(), target[None].double()).item())
                for index, k in enumerate(top_ks):
                    for name, keep in (("indexer", topk_keep_mask(scores, k)), ("shared_oracle", oracle_keep_mask(target, k))):
                        held = (weights * keep).double().sum(dim=-1).mean(dim=0)  # (T,): mean over heads
                        shared[layer][name][index] += held[counted[k]].sum()
        logits = model.readout(model.norm(x))[0]
        losses.append(functional.cross_entropy(logits[:-1], tokens[1:], reduction="none"))
    queries = torch.tensor([len(passages) * int(counted[k].sum()) for k in top_ks], dtype=torch.float64)
    return {"topk": topk_sum / queries, "window": window_sum / queries,
            "shared": {layer: {name: sums / queries for name, sums in parts.items()} for layer, parts in shared.items()},
            "kl": kl, "losses": torch.stack(losses)}


def _by_type(table, types):
    """Means over the heads of each type of a (L, H, K) table: a dict type -> (K,) list, and the head counts."""
    flat = [name for row in types for name in row]
    values = table.flatten(0, 1)  # (L * H, K)
    names = [name for name, _, _ in HEAD_TYPES] + [OTHER]
    means, counts = {}, {}
    for name in names:
        rows = [index for index, kind in enumerate(flat) if kind == name]
        counts[name] = len(rows)
        if rows:
            means[name] = rounded(values[rows].mean(dim=0))
    means["all"] = rounded(values.mean(dim=0))
    return means, counts


def _losses_summary(per_passage, dense, late_from):
    """Per-passage means over all predictions and over the predictions from position ``late_from`` on."""
    return {"all": rounded(per_passage.mean(dim=1)), f"from_{late_from}": rounded(per_passage[:, late_from:].mean(dim=1)),
            "minus_dense": _interval(dense.mean(dim=1), per_passage.mean(dim=1))}


def _interval(first, second):
    """Paired interval of second - first over passages (a dict), or the mean alone for one passage."""
    mean, low, high = paired_interval(second.tolist(), first.tolist()) if len(first) > 1 else (
        (second - first).mean().item(), None, None)
    return {"mean": round(mean, 4), "low": None if low is None else round(low, 4),
            "high": None if high is None else round(high, 4)}


def measure(model, passages, train_passages, valid_passages, types, settings, progress=print):
    """Every measure of this module on held-out passages (N, T), the indexers trained on train_passages and validated on
    valid_passages (M, T): a dict ready for JSON."""
    _check_measure(model, passages, train_passages, valid_passages, types, settings)
    require_callable("progress", progress)
    top_ks, late_from = _check_top_ks(settings["top_ks"]), max(settings["top_ks"])
    started = time.perf_counter()

    def step(what):
        progress(f"[{time.perf_counter() - started:5.0f} s] {what}")

    torch.manual_seed(settings["seed"])
    generator = torch.Generator().manual_seed(settings["seed"])
    layers = tuple(settings["indexer_layers"])
    step(f"indexers: the dense weights of layers {', '.join(map(str, layers))} on {len(train_passages)} + "
         f"{len(valid_passages)} training passages")
    train_data = _layer_inputs_and_targets(model, train_passages, layers)
    valid_data = _layer_inputs_and_targets(model, valid_passages, layers)
    indexers, training = {}, {}
    for layer in layers:
        indexer = _make_indexer(model, settings, layer)
        steps, curve, flat = _train_indexer(indexer, train_data[layer], valid_data[layer], settings, generator)
        indexers[layer] = indexer.eval().requires_grad_(False)
        training[str(layer)] = {"steps": steps, "validation_kl": curve, "stopped_flat": flat}
        step(f"  layer {layer}: {steps} steps, validation KL {curve[0]:.3f} -> {curve[-1]:.3f}"
             + ("" if flat else " (reached max_steps)"))
    del train_data, valid_data
    step(f"dense reading of {len(passages)} held-out passages with every layer's weights")
    dense = _dense_measures(model, passages, top_ks, indexers)
    dense_losses = dense["losses"].double()
    mass_by_type, counts = _by_type(dense["topk"], types)
    window_by_type, _ = _by_type(dense["window"], types)
    record = {
        "top_ks": top_ks, "sink_tokens": SINK_TOKENS, "passages": len(passages), "length": passages.shape[1],
        "num_layers": len(model.blocks), "num_heads": model.num_heads,
        "head_types": {"rule": [f"{name}: lesson 16's {part}.{key} above {threshold}" for name, (part, key), threshold
                                in HEAD_TYPES] + [f"{OTHER}: none of these (a head takes the first type it passes)"],
                       "counts": counts, "by_layer_and_head": types},
        "mass": {"queries": "each query that sees more than k keys (positions k .. T - 1 of every passage)",
                 "topk_by_type": mass_by_type, "window_by_type": window_by_type,
                 "topk_by_layer_and_head": rounded(dense["topk"]), "window_by_layer_and_head": rounded(dense["window"])},
    }
    losses = {"dense": {"all": rounded(dense_losses.mean(dim=1)),
                        f"from_{late_from}": rounded(dense_losses[:, late_from:].mean(dim=1))}}
    for arm in ("oracle", "window"):
        losses[arm] = {}
        for k in top_ks:
            per_passage = torch.stack([token_losses(model, tokens, reader(arm, k)) for tokens in passages]).double()
            losses[arm][str(k)] = _losses_summary(per_passage, dense_losses, late_from)
            step(f"every layer, {arm} top-{k}: {per_passage.mean():.3f} nats a token (dense {dense_losses.mean():.3f})")
        if arm == "window":
            for k in top_ks:
                oracle_all = torch.tensor(losses["oracle"][str(k)]["all"], dtype=torch.float64)
                window_all = torch.tensor(losses["window"][str(k)]["all"], dtype=torch.float64)
                losses["window"][str(k)]["minus_oracle"] = _interval(oracle_all, window_all)
    record["loss"] = {"unit": "nats a token, mean over a passage's predictions (all, and from position max(top_ks) on)",
                      **losses}
    indexer_losses = {arm: {} for arm in ("indexer", "oracle", "window")}
    for k in settings["indexer_top_ks"]:
        for arm in indexer_losses:
            per_passage = torch.stack([token_losses(model, tokens, reader(arm, k, layers, indexers))
                                       for tokens in passages]).double()
            indexer_losses[arm][str(k)] = _losses_summary(per_passage, dense_losses, late_from)
        indexed = torch.tensor(indexer_losses["indexer"][str(k)]["all"], dtype=torch.float64)
        for arm in ("oracle", "window"):
            other = torch.tensor(indexer_losses[arm][str(k)]["all"], dtype=torch.float64)
            indexer_losses["indexer"][str(k)][f"minus_{arm}"] = _interval(other, indexed)
        step(f"layers {', '.join(map(str, layers))} only, top-{k}: indexer {indexed.mean():.3f}, "
             f"oracle {torch.tensor(indexer_losses['oracle'][str(k)]['all']).mean():.3f}, "
             f"window {torch.tensor(indexer_losses['window'][str(k)]['all']).mean():.3f}")
    record["indexer"] = {
        "layers": list(layers),
        "settings": {name: settings[name] for name in ("indexer_heads", "indexer_head_dim", "indexer_rope_dim",
                                                      "eval_every", "patience", "max_steps", "learning_rate")},
        "min_gain": MIN_GAIN, "input": "the layer's normed input (SmolLM2 has no query latent): queries and keys both",
        "training": training,
        "held_out_kl_by_passage": {str(layer): rounded(values) for layer, values in dense["kl"].items()},
        "mass": {str(layer): {"indexer": rounded(parts["indexer"]), "shared_oracle": rounded(parts["shared_oracle"]),
                              "per_head_oracle": rounded(dense["topk"][layer].mean(dim=0)),
                              "window": rounded(dense["window"][layer].mean(dim=0))}
                 for layer, parts in dense["shared"].items()},
        "top_ks": list(settings["indexer_top_ks"]), "loss": indexer_losses,
    }
    step("done")
    return record


def _check_measure(model, passages, train_passages, valid_passages, types, settings):
    """measure's arguments: a course decoder, token passages (N, T) of its vocabulary, the head types (L x H names) and
    settings with the keys of SIZES['full'] whose indexer layers are the model's."""
    check_course_decoder(model)
    if not isinstance(settings, dict) or set(settings) != set(SIZES["full"]):
        raise TypeError(f"settings must be a dict with the keys of SIZES['full'], got {type_name(settings)}")
    for name, value in (("passages", passages), ("train_passages", train_passages), ("valid_passages", valid_passages)):
        require_token_ids(name, value, 2)
        if len(value) == 0 or value.shape[1] < 2 or int(value.min()) < 0 or int(value.max()) >= model.vocab_size:
            raise ValueError(f"{name} must hold at least one passage of 2 or more ids of the model's vocabulary "
                             f"0..{model.vocab_size - 1}, got shape {tuple(value.shape)}")
    if len({passages.shape[1], train_passages.shape[1], valid_passages.shape[1]}) != 1:
        raise ValueError("passages, train_passages and valid_passages must share one length T")
    names = {name for name, _, _ in HEAD_TYPES} | {OTHER}
    if (not isinstance(types, list) or len(types) != len(model.blocks)
            or not all(isinstance(row, list) and len(row) == model.num_heads and set(row) <= names for row in types)):
        raise ValueError(f"types must be {len(model.blocks)} lists of {model.num_heads} head types (head_types gives them)")
    layers = settings["indexer_layers"]
    if not isinstance(layers, list | tuple) or not layers or not all(
            is_whole_number(n) and 0 <= n < len(model.blocks) for n in layers):
        raise ValueError(f"settings['indexer_layers'] must be layer numbers of the model (0..{len(model.blocks) - 1})")


def _tiny_model_and_passages(settings):
    """The tiny size's stand-ins: a small random LlamaLM (seeded) and random token passages."""
    from attn.models.llama import LlamaLM

    torch.manual_seed(0)
    model = LlamaLM(**TINY_MODEL).eval()
    generator = torch.Generator().manual_seed(1)
    count = settings["passages"] + settings["train_passages"] + settings["valid_passages"]
    tokens = torch.randint(TINY_MODEL["vocab_size"], (count, settings["length"]), generator=generator)
    first, second = settings["passages"], settings["passages"] + settings["train_passages"]
    return model, tokens[:first], tokens[first:second], tokens[second:]


def _training_passages(tokenizer, novels, settings):
    """Training and validation passages (M, T) from the training novels (all but the held-out one), evenly spread over
    their tokens laid end to end; every fifth of them (the validation ones) set apart, up to valid_passages."""
    from attn.models.lm import HELD_OUT

    tokens = torch.cat([torch.tensor(tokenizer.encode(text), dtype=torch.long)
                        for name, text in novels.items() if name != HELD_OUT])
    count = settings["train_passages"] + settings["valid_passages"]
    passages = held_out_streams(tokens, settings["length"], count)
    step = count // settings["valid_passages"]
    valid = list(range(step - 1, count, step))[:settings["valid_passages"]]
    train = [index for index in range(count) if index not in valid]
    return passages[train], passages[valid]


def run(out, size="full", progress=print):
    """Load SmolLM2, the corpus and lesson 16's record (the tiny size: stand-ins), measure, write ``out``/RESULTS_NAME."""
    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    if size == "tiny":
        model, passages, train, valid = _tiny_model_and_passages(settings)
        reading = _stand_in_reading(len(model.blocks), model.num_heads)
        text = "random token ids (the tiny size checks the machinery only)"
    else:
        from attn.data.corpus import TITLES, austen
        from attn.models.lm import HELD_OUT
        from attn.pretrained import load

        reading = shipped_record(READING_NAME)
        novels = austen()
        model, tokenizer = load()
        tokens = torch.tensor(tokenizer.encode(novels[HELD_OUT]), dtype=torch.long)
        passages = held_out_streams(tokens, settings["length"], settings["passages"])
        train, valid = _training_passages(tokenizer, novels, settings)
        text = (f"{settings['passages']} evenly spread passages of {TITLES[HELD_OUT]}; the indexers trained on "
                f"{settings['train_passages']} and validated on {settings['valid_passages']} passages of the other novels")
    types = head_types(reading)
    record = {"size": size, "text": text, "seed": settings["seed"],
              **measure(model, passages, train, valid, types, settings, progress)}
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("Read SmolLM2-135M through top-k attention: the oracle's mass, the loss per key read, "
               "and a distilled lightning indexer.")


def main(argv=None):
    durations = {"full": "25 to 40 minutes", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, durations, run, argv)
    k = str(record["top_ks"][0])
    dense = sum(record["loss"]["dense"]["all"]) / record["passages"]
    oracle = sum(record["loss"]["oracle"][k]["all"]) / record["passages"]
    window = sum(record["loss"]["window"][k]["all"]) / record["passages"]
    print(f"Wrote {out / RESULTS_NAME}: dense {dense:.3f} nats a token; every layer reading {k} keys, "
          f"oracle top-k {oracle:.3f}, window and sinks {window:.3f}.")


if __name__ == "__main__":
    main()
