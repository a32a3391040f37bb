"""SmolLM2-135M read through caches that forget on purpose (lesson 21), at equal bytes. One seeded command:

    python -m attn.experiments.compressed_caches --out lessons/records        # about 30 CPU-minutes, one thread each
    python -m attn.experiments.compressed_caches --out DIR --size tiny       # seconds: a small random LlamaLM

reads the converted model, the corpus and lesson 16's record (``smollm2_reading.json``, its head types), and writes
``compressed_caches.json``. Every method is sized to hold 1/2 to 1/16 of the full (float32) cache's bytes where its
settings allow; the record gives the share it really held (mean over the scored steps: codes, scales, zero points and
KIVI's float32 residual counted), ``bytes_share_of_float16`` the share of a 16-bit full cache with the residual kept in
16 bits (``float16_share``, derived from the measured share), and ``bookkeeping_share``
the evicting caches' positions, scores and SnapKV's observation rows on the same scale, beside the bytes:
- ``kivi``: QuantizedKVCache at 16, 8, 4 and 2 bits, KIVI's layout, groups of 32, a residual of 32, float16 scales and
  zero points; ``fp8``: one scale for the keys and one for the values (transformers', vLLM's).
- ``h2o``, ``snapkv``, ``tova``, ``knorm``, ``streaming``: EvictingKVCache keeping ``budget = T * share`` entries per
  key/value head: H2O with a recent window of budget / 2 (its paper splits the budget equally between heavy hitters
  and recent tokens), SnapKV with an observation window of budget / 4, TOVA and K-norm with none, none of the four
  protecting the sink (whether a rule keeps it is measured); StreamingLLM with min(4, budget / 2) sinks.
- ``h2o_int8``: evict, then quantize (H2O, 8-bit codes, one group per entry), its budget set for 1/4, 1/8 and 1/16.
Four tasks, each T tokens whose last are scored one decode step at a time after the rest is read at once (the prompt,
which an evicting cache cuts down to its budget after reading it, as SnapKV does): 1. ``loss``: held-out loss on
Persuasion; 2. ``copy``: lesson 16's copying, T - 2P tokens then a passage of P = 3T / 8 tokens seen twice (96 of 256),
scored on the second copy; P sits between the budgets of 1/4 and 1/2, on none (at T / 2 the half budget's recent window
would reach the first copy's tokens exactly at its edge); 3. ``retrieval``: a secret number planted after
``plant_at`` tokens and asked for at the end, scored by the log-probability of the answer's tokens, the question read
after the cut (no rule chooses knowing it); 4. ``retrieval_aware``: the same sequences with the question inside the
prompt that is cut (SnapKV's and TOVA's setting), only the answer decoded. Each as paired differences from the full
cache with 95% intervals over passages. For the evicting caches, the share of each head's full-cache attention (the
copying task's last query) on entries still held, by lesson 16's head types, and how often position 0 survives.
Cost: ``seconds`` (wall) and ``cpu_seconds`` (all workers) in the record; ``workers`` forked processes of one thread.
8 passages a task: about 30 CPU-minutes at about 6 CPU-seconds a passage and cache on a quiet machine (28 compressed
caches and the full one). The record's derived fields (``text``, ``bytes_share_of_float16``) come from its measured
ones by ``derive``, so they can be written again without measuring (``derive`` of the shipped record is the record).
"""
import multiprocessing
import resource
import time

import torch
from torch.nn import functional

from attn.common.stats import paired_interval
from attn.common.validate import require_callable
from attn.compressed_cache import EvictingKVCache, QuantizedKVCache, caches_for
from attn.experiments.compressed_caches_record import FLOAT16_UNITS, RETRIEVAL_UNITS, derive, float16_share
from attn.experiments.records import RECORDS_FOLDER, check_out, settings_for, sized_command, write_record
from attn.experiments.smollm2_sparse import HEAD_TYPES, OTHER, _stand_in_reading, head_types
from attn.experiments.window_austen import held_out_streams
from attn.kvcache import KVCache

RESULTS_NAME = "compressed_caches.json"
COMMAND = "python -m attn.experiments.compressed_caches"
READING_NAME = "smollm2_reading.json"
SHARES = (2, 4, 8, 16)  # each method holds 1 / share of the full cache's bytes
RULES = ("h2o", "snapkv", "tova", "knorm", "streaming")
SIZES = {
    "full": {"passages": 8, "length": 256, "scored": 16, "plant_at": 32, "group_size": 32, "residual": 32, "seed": 0,
             "workers": 4},
    "tiny": {"passages": 2, "length": 32, "scored": 3, "plant_at": 4, "group_size": 4, "residual": 4, "seed": 0,
             "workers": 1},
}
TINY_MODEL = {"vocab_size": 64, "context_length": 64, "embed_dim": 16, "num_heads": 2, "num_kv_heads": 1,
              "num_layers": 2, "mlp_hidden_dim": 32, "rotary_base": 10000.0}
FACT = " The secret number is {number}."
QUESTION = " What is the secret number? The secret number is"
ANSWER = " {number}"
TASKS = ("loss", "copy", "retrieval", "retrieval_aware")


# The methods ----------------------------------------------------------------------------------------------------


def _methods(length, head_dim, group_size, residual):
    """The compressed caches measured: a list of dicts with name, family, target share, settings and ``make`` (a
    function returning one new cache for one layer)."""
    chosen = []
    for share, bits in zip(SHARES, (16, 8, 4, 2), strict=True):
        settings = {"bits": bits, "group_size": group_size, "residual": residual, "scale_dtype": "float16"}
        chosen.append({"name": "kivi", "family": "quantize", "target": 1 / share, "settings": settings,
                       "make": _maker(QuantizedKVCache, bits, group_size, residual, scale_dtype=torch.float16)})
    chosen.append({"name": "fp8", "family": "quantize", "target": 1 / 4, "settings": {"bits": "fp8", "residual": 0},
                   "make": _maker(QuantizedKVCache, "fp8", None, 0)})
    for rule in RULES:
        for share in SHARES:
            budget = max(1, length // share)
            sinks, window = _rule_protection(rule, budget)
            chosen.append({"name": rule, "family": "evict", "target": 1 / share,
                           "settings": {"budget": budget, "sink_tokens": sinks, "window": window},
                           "make": _maker(EvictingKVCache, budget, rule, sinks, window)})
    entry_share = (head_dim + 8) / (4 * head_dim)  # 8-bit codes and a float32 scale and zero point, over float32
    for share in SHARES[1:]:
        budget = min(length, max(1, round(length / share / entry_share)))
        sinks, window = _rule_protection("h2o", budget)
        chosen.append({"name": "h2o_int8", "family": "evict_then_quantize", "target": 1 / share,
                       "settings": {"budget": budget, "sink_tokens": sinks, "window": window, "bits": 8,
                                    "group_size": head_dim},
                       "make": _maker(EvictingKVCache, budget, "h2o", sinks, window, bits=8, group_size=head_dim)})
    return chosen


def _rule_protection(rule, budget):
    """(sink_tokens, window) each rule keeps whatever its score says."""
    if rule == "streaming":
        return min(4, budget // 2), 0
    if rule == "h2o":
        return 0, budget // 2  # H2O's paper: as many recent tokens as heavy hitters
    if rule == "snapkv":
        return 0, max(1, budget // 4)
    return 0, 0


def _maker(kind, *args, **kwargs):
    def make():
        return kind(*args, **kwargs)
    return make


# One sequence read through one kind of cache ---------------------------------------------------------------------


@torch.no_grad()
def _read_sequence(model, tokens, start, make=None):
    """Read ``tokens`` (T,) through caches from ``make`` (None: lesson 10's full KVCache): tokens 0 .. start - 1 at
    once (the prompt), then one decode step per token. Returns (log-probabilities (T - start,) of tokens start .. T - 1
    as each was predicted, the caches, the bytes they held after each decode step (a list of (keys and values,
    bookkeeping) pairs), the seconds per decode step)."""
    caches = caches_for(model, make or KVCache)
    logits = model(tokens[None, :start], caches=caches)[0, -1]
    log_probs = [functional.log_softmax(logits.double(), dim=-1)[tokens[start]]]
    held, began = [], time.perf_counter()
    for position in range(start, len(tokens) - 1):
        logits = model(tokens[None, position:position + 1], caches=caches)[0, -1]
        log_probs.append(functional.log_softmax(logits.double(), dim=-1)[tokens[position + 1]])
        held.append((sum(cache.nbytes for cache in caches),
                     sum(getattr(cache, "bookkeeping_nbytes", 0) for cache in caches)))
    steps = max(1, len(tokens) - 1 - start)
    return torch.stack(log_probs), caches, held, (time.perf_counter() - began) / steps


def _kept_positions(caches, num_heads):
    """For each layer, the positions each query head's key/value head still holds: a list of L lists of H sets."""
    kept = []
    for cache in caches:
        positions = cache.positions[0]  # (H_kv, S)
        group = num_heads // positions.shape[0]
        kept.append([set(positions[head // group].tolist()) for head in range(num_heads)])
    return kept


@torch.no_grad()
def _last_query_weights(model, tokens):
    """Every head's full-cache attention of the last query over all keys: (L, H, T)."""
    _, weights = model(tokens[None], need_weights=True)  # (L, 1, H, T, T)
    return weights[:, 0, :, -1, :].double()


# The tasks' sequences --------------------------------------------------------------------------------------------


def _retrieval_sequence(filler, fact, question, answer, length, plant_at):
    """(tokens (length,), where the question starts, where the answer starts): ``plant_at`` filler tokens, the fact,
    filler, the question, the answer."""
    rest = length - plant_at - len(fact) - len(question) - len(answer)
    if rest < 1 or len(filler) < plant_at + rest:
        raise ValueError(f"a retrieval sequence of {length} tokens cannot hold its fact, question and answer "
                         f"after {plant_at} tokens of filler")
    tokens = torch.cat((filler[:plant_at], fact, filler[plant_at:plant_at + rest], question, answer))
    return tokens, length - len(answer) - len(question), length - len(answer)


def copy_period(length):
    """The copying task's period P for sequences of ``length`` tokens: 3 * length // 8, between the budgets of 1/4
    and 1/2 of the length and on neither."""
    return 3 * length // 8


def _copy_sequence(stream, length):
    """(length,): the stream's first length - 2P tokens, then its next P tokens twice (P = copy_period(length))."""
    period = copy_period(length)
    lead = length - 2 * period
    return torch.cat((stream[:lead], stream[lead:lead + period], stream[lead:lead + period]))


def _task_sequences(streams, settings, encode, generator):
    """Per passage, the four tasks' (tokens (T,), tokens read at once, first scored position): loss, copy, retrieval
    with the question read after the cut, retrieval with the question inside the prompt that is cut.
    streams (3N, T): evenly spread stretches of held-out text; ``encode`` turns text into ids (None: random ids, the
    tiny size). Returns (the tasks, the secret numbers)."""
    count, length, scored = settings["passages"], settings["length"], settings["scored"]
    tasks = {task: [] for task in TASKS}
    numbers = []
    for index in range(count):
        tasks["loss"].append((streams[index], length - scored, length - scored))
        tasks["copy"].append((_copy_sequence(streams[count + index], length), length - scored, length - scored))
        number = int(torch.randint(1000, 10000, (1,), generator=generator))
        numbers.append(number)
        if encode is None:  # the tiny size: random ids stand for the fact, the question and the answer
            fact, question, answer = (torch.randint(1, 64, (size,), generator=generator) for size in (3, 3, 2))
        else:
            fact, question, answer = (torch.tensor(encode(text.format(number=number)), dtype=torch.long)
                                      for text in (FACT, QUESTION, ANSWER))
        tokens, asked, answered = _retrieval_sequence(streams[2 * count + index], fact, question, answer, length,
                                                      settings["plant_at"])
        tasks["retrieval"].append((tokens, asked, answered))
        tasks["retrieval_aware"].append((tokens, answered, answered))
    return tasks, numbers


# The record ------------------------------------------------------------------------------------------------------


def _interval(compressed, full):
    """compressed - full over passages: mean and 95% interval (a dict)."""
    mean, low, high = paired_interval(compressed, full)
    return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}


def _scores(log_probs, task):
    """A task's score of one passage: mean loss (nats a token) for loss and copy, summed log-probability for retrieval."""
    return float(log_probs.sum()) if task.startswith("retrieval") else float(-log_probs.mean())


def _held_by_type(weights, kept, types):
    """The share of each head's weight (L, H, T) on kept positions, averaged by head type: a dict type -> share."""
    shares = {}
    for layer, row in enumerate(types):
        for head, kind in enumerate(row):
            positions = sorted(kept[layer][head])
            share = float(weights[layer, head, positions].sum())
            shares.setdefault(kind, []).append(share)
            shares.setdefault("all", []).append(share)
    return {kind: sum(values) / len(values) for kind, values in shares.items()}


def _measure(model, tasks, types, settings, progress=print):
    """Every method of ``methods`` on every task's sequences (a dict task -> list of (tokens (T,), tokens read at once,
    first scored position)): a dict ready for JSON."""
    require_callable("progress", progress)
    began = time.perf_counter()

    def step(what):
        progress(f"[{time.perf_counter() - began:5.0f} s] {what}")

    attention = model.blocks[0].attention
    layers, kv_heads, head_dim = len(model.blocks), attention.num_kv_heads, attention.head_dim
    full_per_token = 2 * layers * kv_heads * head_dim * 4
    step("the full cache on every task, and its attention for the head types")
    full, full_seconds = {}, []
    for task, sequences in tasks.items():
        full[task] = []
        for tokens, start, scored in sequences:
            log_probs, _, _, seconds = _read_sequence(model, tokens, start)
            full[task].append(_scores(log_probs[scored - start:], task))
            full_seconds.append(seconds)
    copy_weights = [_last_query_weights(model, tokens) for tokens, _, _ in tasks["copy"]]
    chosen = _methods(settings["length"], head_dim, settings["group_size"], settings["residual"])
    context = {"model": model, "tasks": tasks, "types": types, "settings": settings, "full": full,
               "copy_weights": copy_weights, "full_per_token": full_per_token, "methods": chosen, "step": step}
    record_methods = _each_method(context, settings["workers"])
    counts = {}
    for row in types:
        for kind in row:
            counts[kind] = counts.get(kind, 0) + 1
    return {
        "shares": [round(1 / share, 4) for share in SHARES],
        "full_bytes_per_token": full_per_token,
        "full_bytes_per_token_float16": full_per_token // 2,
        "full": {**{task: [round(value, 4) for value in values] for task, values in full.items()},
                 "seconds_per_step": round(sum(full_seconds) / len(full_seconds), 4)},
        "units": {"loss": "nats a token over the scored tokens", "copy": "nats a token over the second copy's scored tokens",
                  "retrieval": RETRIEVAL_UNITS,
                  "retrieval_aware": "as retrieval, the question inside the prompt that is cut down (SnapKV's, TOVA's setting)",
                  "minus_full": "compressed minus full, mean over passages and its 95% interval (paired)",
                  "bytes_share": "keys and values held over the full (float32) cache's bytes at the same step, mean over the "
                                 "loss task's decode steps",
                  "bytes_share_of_float16": FLOAT16_UNITS,
                  "bookkeeping_share": "the evicting caches' positions, scores and SnapKV's observation rows, on the scale "
                                       "of bytes_share (add the two for everything the cache holds)",
                  "held_by_head_type": "share of each head's full-cache attention (copying task, last query) on entries "
                                       "still held, mean over heads of the type and passages",
                  "sink_kept": "share of (layer, task, passage) whose every key/value head still holds position 0 at the end"},
        "head_types": {"rule": [f"{name}: lesson 16's {part}.{key} above {threshold}" for name, (part, key), threshold
                                in HEAD_TYPES] + [f"{OTHER}: none of these"], "counts": counts},
        "methods": record_methods,
        "seconds": round(time.perf_counter() - began),
        "cpu_seconds": round(_cpu_seconds()),
    }


def _cpu_seconds():
    """CPU seconds of this process and of the workers it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _each_method(context, workers):
    """Every method's entry, in the order of ``methods``: in this process, or split over ``workers`` forked processes
    (each one math thread; a method's numbers do not depend on which process measures it, nor in which order)."""
    global _CONTEXT
    _CONTEXT = context
    indices = range(len(context["methods"]))
    if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_measure_method(index) for index in indices]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(_measure_method, indices, chunksize=1)


_CONTEXT = None  # what the forked workers read: set by _each_method before they start


def _measure_method(index):
    """One method's entry of the record: its scores on every task, intervals, bytes and the heads it starves."""
    context = _CONTEXT
    model, tasks, settings, full = context["model"], context["tasks"], context["settings"], context["full"]
    method, full_per_token, layers = context["methods"][index], context["full_per_token"], len(model.blocks)
    torch.set_num_threads(1)
    started = time.perf_counter()
    scores = {task: [] for task in tasks}
    held_shares, bookkeeping, seconds, sink_kept, heads = [], [], [], [], []
    for task, sequences in tasks.items():
        for number, (tokens, start, scored) in enumerate(sequences):
            log_probs, caches, held, step_seconds = _read_sequence(model, tokens, start, method["make"])
            scores[task].append(_scores(log_probs[scored - start:], task))
            seconds.append(step_seconds)
            if task == "loss":
                seen = range(start + 1, start + 1 + len(held))
                held_shares.append(sum(h / (full_per_token * t) for (h, _), t in zip(held, seen, strict=True)) / len(held))
                bookkeeping.append(sum(b / (full_per_token * t) for (_, b), t in zip(held, seen, strict=True)) / len(held))
            if method["family"] != "quantize":
                sink_kept.append(sum(bool((cache.positions == 0).any(dim=-1).all()) for cache in caches) / layers)
                if task == "copy":
                    kept = _kept_positions(caches, model.num_heads)
                    heads.append(_held_by_type(context["copy_weights"][number], kept, context["types"]))
    entry = {key: method[key] for key in ("name", "family", "target", "settings")}
    entry["target"] = round(entry["target"], 4)
    entry["bytes_share"] = round(sum(held_shares) / len(held_shares), 4)
    share_of_float16 = float16_share(entry, settings)  # None for an evicting cache: in float16 it halves too
    if share_of_float16 is not None:
        entry["bytes_share_of_float16"] = share_of_float16
    entry["bookkeeping_share"] = round(sum(bookkeeping) / len(bookkeeping), 4)
    entry["bytes_read_per_step"] = round(entry["bytes_share"] * full_per_token * settings["length"])
    entry["seconds_per_step"] = round(sum(seconds) / len(seconds), 4)
    for task in tasks:
        entry[task] = [round(value, 4) for value in scores[task]]
        entry[f"{task}_minus_full"] = _interval(scores[task], full[task])
    if heads:
        kinds = sorted({kind for table in heads for kind in table})
        entry["held_by_head_type"] = {kind: round(sum(t[kind] for t in heads if kind in t)
                                                  / sum(kind in t for t in heads), 4) for kind in kinds}
        entry["sink_kept"] = round(sum(sink_kept) / len(sink_kept), 4)
    context["step"](f"{method['name']} at 1/{round(1 / method['target'])}: {entry['bytes_share']:.3f} of the bytes, "
                    f"loss {entry['loss_minus_full']['mean']:+.3f}, copy {entry['copy_minus_full']['mean']:+.3f}, "
                    f"retrieval {entry['retrieval_minus_full']['mean']:+.3f}, aware "
                    f"{entry['retrieval_aware_minus_full']['mean']:+.3f} ({time.perf_counter() - started:.0f} s)")
    return entry



def run(out, size="full", progress=print):
    """Load SmolLM2, the corpus and lesson 16's record (the tiny size: stand-ins), measure, write ``out``/RESULTS_NAME."""
    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    torch.manual_seed(settings["seed"])
    generator = torch.Generator().manual_seed(settings["seed"])
    count = settings["passages"]
    if size == "tiny":
        from attn.models.llama import LlamaLM

        model = LlamaLM(**TINY_MODEL).eval()
        streams = torch.randint(TINY_MODEL["vocab_size"], (3 * count, settings["length"]), generator=generator)
        reading, encode = _stand_in_reading(len(model.blocks), model.num_heads), None
    else:
        import json

        from attn.data.corpus import austen
        from attn.models.lm import HELD_OUT
        from attn.pretrained import load

        reading_path = RECORDS_FOLDER / READING_NAME
        if not reading_path.exists():
            raise FileNotFoundError(f"{reading_path} is missing: run python -m attn.experiments.smollm2_reading "
                                    "--out lessons/records first")
        reading = json.loads(reading_path.read_text())
        model, tokenizer = load()
        tokens = torch.tensor(tokenizer.encode(austen()[HELD_OUT]), dtype=torch.long)
        streams, encode = held_out_streams(tokens, settings["length"], 3 * count), tokenizer.encode
    tasks, numbers = _task_sequences(streams, settings, encode, generator)
    record = {"size": size, "text": None, "seed": settings["seed"], "settings": settings,
              "retrieval": {"fact": FACT, "question": QUESTION, "answer": ANSWER, "numbers": numbers},
              **_measure(model, tasks, head_types(reading), settings, progress)}
    return write_record(out, RESULTS_NAME, derive(record), COMMAND, size)


DESCRIPTION = ("Read SmolLM2-135M through quantized and evicting KV caches at 1/2 to 1/16 of the full cache's bytes: "
               "held-out loss, copying and a retrieval probe.")


def main(argv=None):
    durations = {"full": "about 30 CPU-minutes", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, durations, run, argv)
    worst = min(record["methods"], key=lambda entry: entry["retrieval_minus_full"]["mean"])
    print(f"Wrote {out / RESULTS_NAME}: {len(record['methods'])} compressed caches; the retrieval probe loses most with "
          f"{worst['name']} at {worst['bytes_share']:.3f} of the bytes ({worst['retrieval_minus_full']['mean']:+.2f} nats).")


if __name__ == "__main__":
    main()
