"""Lesson 19's measurements: what pages, shared prefixes, speculation and continuous batching buy.

    python -m attn.experiments.serving_runs --out lessons/records

Requests are drawn from the held-out novel (lesson 13's *Persuasion*): a paragraph is a prompt, the next
paragraph's length is how many tokens it asks for, and lesson 13's model (``attn.lm.load()``) serves them.
Four measurements go to serving_runs.json, so that the lesson reads them without the corpus:

- memory: positions reserved against positions used, for a contiguous cache preallocated to the longest a request
  may grow and for pages of 1 to 64 positions (counted by PagedKVCache itself), with the waste per sequence;
- shared prefixes: pages held by many requests that start with the same paragraph or the same chapter opening,
  with and without the prefix cache;
- speculative decoding: acceptance rate and tokens per model pass against draft length and temperature, for
  drafts made of the model's first layers and for prompt lookup;
- batching: forward passes (those that read a prompt among them), tokens decoded, and useful tokens a second, for
  static batches against continuous batching on the same requests (a timing on one thread: ``repeats`` pairs, one
  serve of each in a pair, the order alternating from pair to pair, after one untimed serve of each; the paired
  difference and ratio with their 95% intervals), the median time of each kind of pass and of the longest prompt
  read alone (a pass with no padding), the model's own forward pass over 1 to ``batch_size`` + 1 rows of one token
  (outside the server: what a row costs), and the machine that timed them (processor, cores, the load average over the
  minute before, ``load``, and after).
"""

import argparse
import math
import statistics
import time

import torch

from attn.common.destinations import folder_argument
from attn.common.stats import paired_interval
from attn.common.validate import non_negative_number, positive_int, require_callable, type_name
from attn.experiments.records import machine
from attn.serving.pages import PagedKVCache
from attn.serving.runner import check_servable, model_shape
from attn.serving.scheduler import Scheduler
from attn.serving.speculative import FirstLayers, ModelDraft, PromptLookupDraft, speculative_generate

RESULTS_NAME = "serving_runs.json"
COMMAND = "python -m attn.experiments.serving_runs"
SETTINGS = {
    "max_length": 256,  # lesson 13's trained context: the longest a request may grow
    "requests": 64, "max_prompt": 192,  # the memory mix
    "page_sizes": [1, 2, 4, 8, 16, 32, 64],
    "shared_page_size": 16, "shared_counts": [1, 2, 4, 8, 16, 32], "system_prompt": 48, "chapter": 192,
    "own_tokens": 32, "shared_new_tokens": 32,
    "draft_lengths": [1, 2, 4, 8], "temperatures": [0.0, 0.5, 1.0], "draft_prompts": 4, "draft_prompt_length": 64,
    "draft_new_tokens": 48, "draft_layers": [1, 2],
    "batch_requests": 16, "batch_size": 4, "batch_prompt": 48, "batch_new_tokens": [4, 48], "repeats": 20,
    "seed": 0,
}
MIN_PARAGRAPH = 8  # tokens: shorter paragraphs (chapter headings, one-word replies) are not prompts


__all__ = ["austen_paragraphs", "main", "measure"]  # the pieces below are measure's, checked by it

def _check_paragraphs(paragraphs, least):
    """paragraphs: a list of lists of token ids; at least ``least`` of them long enough to be prompts."""
    if not isinstance(paragraphs, list) or not all(isinstance(p, list) for p in paragraphs):
        raise TypeError(f"paragraphs must be a list of lists of token ids, got {type_name(paragraphs)}")
    usable = [p for p in paragraphs if len(p) >= MIN_PARAGRAPH]
    if len(usable) < least:
        raise ValueError(f"paragraphs must hold at least {least} paragraphs of {MIN_PARAGRAPH} tokens or more, "
                         f"got {len(usable)}")
    return usable


def request_mix(paragraphs, count, max_prompt, max_length):
    """``count`` requests (prompt tokens, new tokens asked): paragraph i is a prompt (cut to ``max_prompt``), the
    length of paragraph i + 1 the tokens it asks for (cut so that the request fits ``max_length``, at least 1)."""
    usable = _check_paragraphs(paragraphs, count + 1)
    return [(usable[i][:max_prompt], max(1, min(len(usable[i + 1]), max_length - min(len(usable[i]), max_prompt))))
            for i in range(count)]


def memory(lengths, page_sizes, max_length, bytes_per_position):
    """Positions (and bytes) reserved and used for requests of ``lengths`` positions each: a contiguous cache
    preallocated to ``max_length`` per request, and paged pools (pages counted by a PagedKVCache)."""
    used = sum(lengths)
    rows = [{"layout": "contiguous", "page_size": None, "reserved": len(lengths) * max_length, "used": used,
             "waste_per_sequence": (len(lengths) * max_length - used) / len(lengths)}]
    for page_size in page_sizes:
        pool = PagedKVCache(sum(-(-length // page_size) for length in lengths), page_size, 1, 1)
        for seq, length in enumerate(lengths):
            pool.add_sequence(seq)
            pool.reserve(seq, length)
        reserved = (pool.num_pages - pool.num_free_pages) * page_size
        rows.append({"layout": "paged", "page_size": page_size, "reserved": reserved, "used": used,
                     "waste_per_sequence": (reserved - used) / len(lengths), "expected_waste": (page_size - 1) / 2})
    for row in rows:
        row["reserved_bytes"], row["used_bytes"] = row["reserved"] * bytes_per_position, used * bytes_per_position
    return rows


def shared_pages(prefix, own_parts, new_tokens, page_size, prefix_caching):
    """Pages held when each request is ``prefix`` + its own part and then asks for ``new_tokens``, all at once."""
    lengths = [len(prefix) + len(own) + new_tokens for own in own_parts]
    pool = PagedKVCache(sum(-(-length // page_size) for length in lengths), page_size, 1, 1)
    for seq, own in enumerate(own_parts):
        prompt = prefix + own
        found = pool.add_sequence(seq, prompt if prefix_caching else ())
        pool.reserve(seq, len(prompt) - found, prompt[found:])
        pool.reserve(seq, new_tokens)  # the generated tokens (never shared)
    return pool.num_pages - pool.num_free_pages


def prefixes(paragraphs, settings, bytes_per_position):
    """Pages and bytes for 1..n requests sharing a system prompt (one paragraph) or a chapter's opening."""
    usable = _check_paragraphs(paragraphs, max(settings["shared_counts"]) + 1)
    opening = [token for paragraph in usable for token in paragraph]  # the text from its first paragraph on
    shared = {"system prompt": opening[:settings["system_prompt"]], "chapter": opening[:settings["chapter"]]}
    own_parts = [paragraph[:settings["own_tokens"]] for paragraph in usable[-max(settings["shared_counts"]):]]
    size, rows = settings["shared_page_size"], []
    for name, prefix in shared.items():
        for count in settings["shared_counts"]:
            pages = {caching: shared_pages(prefix, own_parts[:count], settings["shared_new_tokens"], size, caching)
                     for caching in (False, True)}
            rows.append({"prefix": name, "prefix_tokens": len(prefix), "requests": count, "pages_alone": pages[False],
                         "pages_shared": pages[True], "bytes_saved": (pages[False] - pages[True]) * size * bytes_per_position})
    return rows


class _CountingDraft:
    """Counts the guesses a draft proposes (speculative_generate keeps the draft's own class, so subclass it)."""

    proposed = 0

    def propose(self, tokens, count, temperature=0.0, generator=None):
        guesses, probabilities = super().propose(tokens, count, temperature, generator)
        self.proposed += len(guesses)
        return guesses, probabilities


class CountingModelDraft(_CountingDraft, ModelDraft):
    pass


class CountingLookupDraft(_CountingDraft, PromptLookupDraft):
    pass


def speculation(model, prompts, settings, progress=print):
    """Acceptance rate and tokens per model pass, for each draft, draft length and temperature."""
    drafts = {f"first {n} layer{'s' * (n > 1)}": (lambda n=n: CountingModelDraft(FirstLayers(model, n)))
              for n in settings["draft_layers"]}
    drafts["prompt lookup"] = CountingLookupDraft
    rows, new_tokens = [], settings["draft_new_tokens"]
    for name, make in drafts.items():
        for temperature in settings["temperatures"]:
            for length in settings["draft_lengths"]:
                proposed = accepted = passes = 0
                for index, prompt in enumerate(prompts):
                    draft = make()
                    generator = torch.Generator().manual_seed(settings["seed"] + index)
                    speculative_generate(model, draft, prompt, new_tokens, length, temperature, generator)
                    passes += speculative_generate.rounds
                    accepted += new_tokens - speculative_generate.rounds  # each pass adds its kept guesses + 1
                    proposed += draft.proposed
                rows.append({"draft": name, "temperature": temperature, "draft_length": length, "proposed": proposed,
                             "accepted": accepted, "passes": passes, "acceptance": accepted / max(proposed, 1),
                             "tokens_per_pass": new_tokens * len(prompts) / passes})
            progress(f"speculation: {name}, temperature {temperature}: tokens per pass "
                     + ", ".join(f"{row['tokens_per_pass']:.2f}" for row in rows[-len(settings['draft_lengths']):]))
    return rows


def _serve(model, requests, batch_size, static):
    """Serve ``requests`` (prompt, new tokens) as static batches of ``batch_size`` in arrival order, each decoding
    until its longest request is done, or as one continuous batch: (steps, seconds), steps a list of
    (requests in the pass, its longest chunk, its seconds), seconds the passes' time. Making each batch's pool and
    scheduler is not timed: static batches make four where the continuous batch makes one, and a scheduler checks
    the model's weights at its door, which on SmolLM2 takes about as long as a pass."""
    layers, kv_heads, head_dim, dtype = model_shape(model)
    groups = [requests[i:i + batch_size] for i in range(0, len(requests), batch_size)] if static else [requests]
    steps = []
    for group in groups:
        pages = sum(-(-(len(prompt) + max(n for _, n in group)) // 16) for prompt, _ in group)
        cache = PagedKVCache(pages, 16, kv_heads, head_dim, dtype, num_layers=layers)
        scheduler = Scheduler(model, cache, batch_size, chunk_size=256, prefix_caching=False)
        for prompt, asked in group:  # a static batch runs every request to the group's longest
            scheduler.add(prompt, max(n for _, n in group) if static else asked)
        while scheduler.has_work:
            begun = time.perf_counter()
            scheduler.step()
            steps.append((scheduler.batch_sizes[-1], scheduler.widths[-1], time.perf_counter() - begun))
    return steps, sum(seconds for _, _, seconds in steps)


def _prompt_alone_seconds(model, prompt):
    """Seconds of the pass that reads ``prompt`` alone: asking for one token, its run is that one pass."""
    steps, _ = _serve(model, [(prompt, 1)], 1, static=False)
    (_, _, seconds), = steps  # its one pass
    return seconds


@torch.no_grad()
def _forward_ms(model, most_rows, repeats):
    """{rows: median milliseconds} of the model's own forward pass over 1 to ``most_rows`` rows of one token each
    (no cache, no server): what a pass costs by its number of rows, outside the scheduler."""
    times = {}
    for rows in range(1, most_rows + 1):
        tokens = torch.ones(rows, 1, dtype=torch.int64)
        model(tokens)  # untimed, as the runs' first serve
        seconds = []
        for _ in range(repeats):
            begun = time.perf_counter()
            model(tokens)
            seconds.append(time.perf_counter() - begun)
        times[str(rows)] = 1000 * statistics.median(seconds)
    return times


def _step_costs(steps):
    """Passes by kind and their median milliseconds, over every timed serve of one arm: passes that read a prompt
    (the longest chunk is a prompt) and decoding passes by their number of requests."""
    kinds = {}
    for rows, width, seconds in steps:
        kinds.setdefault("prompt" if width > 1 else f"decode {rows}", []).append(1000 * seconds)
    return {kind: {"median_ms": statistics.median(times), "count": len(times)} for kind, times in sorted(kinds.items())}


def batching(model, requests, settings, progress=print):
    """Static against continuous batching on ``requests``, on one thread: forward passes (those that read a prompt
    among them), tokens decoded (a static batch decodes every request to its group's longest), useful tokens a second
    timed in pairs with alternating order, and each kind of pass's median time."""
    useful = sum(asked for _, asked in requests)
    size = settings["batch_size"]
    groups = [requests[i:i + size] for i in range(0, len(requests), size)]
    decoded = {"static": sum(len(group) * max(n for _, n in group) for group in groups), "continuous": useful}
    threads, before = torch.get_num_threads(), machine()
    torch.set_num_threads(1)  # the timing is one thread's, whoever calls
    try:
        for name in ("static", "continuous"):  # untimed: a run's first serves tend to be slower
            _serve(model, requests, size, name == "static")
        passes, rates, steps = {}, {"static": [], "continuous": []}, {"static": [], "continuous": []}
        for pair in range(settings["repeats"]):
            # Alternating which goes first in a pair: a machine that slows or speeds up within a pair favours neither.
            for name in ("static", "continuous") if pair % 2 == 0 else ("continuous", "static"):
                served, seconds = _serve(model, requests, size, name == "static")
                passes[name] = served
                steps[name] += served
                rates[name].append(useful / seconds)
        # The longest prompt read alone, in a pass of its own width (no padding): what a prompt pass costs unpadded.
        longest = max((prompt for prompt, _ in requests), key=len)
        alone = [_prompt_alone_seconds(model, longest) for _ in range(settings["repeats"])]
        forward = _forward_ms(model, size + 1, settings["repeats"])
    finally:
        torch.set_num_threads(threads)
    record = {"requests": len(requests), "batch_size": size, "useful_tokens": useful, "pairs": settings["repeats"],
              "machine": {**before, "load_after": machine()["load"]}}
    for name in ("static", "continuous"):
        record[name] = {"passes": len(passes[name]), "prompt_passes": sum(width > 1 for _, width, _ in passes[name]),
                        "decoded_tokens": decoded[name], "tokens_per_second": rates[name],
                        "median": statistics.median(rates[name]), "spread": [min(rates[name]), max(rates[name])],
                        "pass_ms": _step_costs(steps[name])}
        progress(f"batching: {name}: {len(passes[name])} passes, median {record[name]['median']:.0f} useful tokens/s")
    record["prompt_alone"] = {"tokens": len(longest), "median_ms": 1000 * statistics.median(alone)}
    record["forward_ms"] = forward
    mean, low, high = paired_interval(rates["continuous"], rates["static"])
    record["continuous_minus_static"] = {"mean": mean, "low": low, "high": high}
    ratios = [c / s for c, s in zip(rates["continuous"], rates["static"], strict=True)]
    logs = paired_interval([math.log(rate) for rate in rates["continuous"]], [math.log(rate) for rate in rates["static"]])
    record["speed_up"] = {"median": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
                          "geometric_mean": math.exp(logs[0]), "low": math.exp(logs[1]), "high": math.exp(logs[2])}
    return record


def batch_requests(paragraphs, settings):
    """Requests for the batching timing: prompts cut to batch_prompt tokens, new tokens spread over a range."""
    usable = _check_paragraphs(paragraphs, settings["batch_requests"])
    generator = torch.Generator().manual_seed(settings["seed"])
    low, high = settings["batch_new_tokens"]
    asked = torch.randint(low, high + 1, (settings["batch_requests"],), generator=generator).tolist()
    return [(paragraph[:settings["batch_prompt"]], n) for paragraph, n in zip(usable, asked, strict=False)]


def measure(model, paragraphs, settings=None, progress=print):
    """The record: memory, shared prefixes, speculation and batching of ``model`` on ``paragraphs`` (token lists)."""
    check_servable(model)
    require_callable("progress", progress)
    settings = {**SETTINGS, **(settings or {})}
    for name in ("max_length", "requests", "max_prompt", "repeats", "batch_size"):
        positive_int(name, settings[name])
    if settings["repeats"] < 2:
        raise ValueError(f"repeats must be at least 2 (the timing's paired interval needs two pairs), "
                         f"got {settings['repeats']}")
    for temperature in settings["temperatures"]:
        non_negative_number("each of temperatures", temperature)
    torch.manual_seed(settings["seed"])
    layers, kv_heads, head_dim, dtype = model_shape(model)
    bytes_per_position = 2 * layers * kv_heads * head_dim * dtype.itemsize  # keys and values, every layer
    mix = request_mix(paragraphs, settings["requests"], settings["max_prompt"], settings["max_length"])
    lengths = [len(prompt) + asked for prompt, asked in mix]
    record = {"settings": settings, "bytes_per_position": bytes_per_position,
              "request_lengths": {"prompt": [len(p) for p, _ in mix], "new": [n for _, n in mix]}}
    record["memory"] = memory(lengths, settings["page_sizes"], settings["max_length"], bytes_per_position)
    progress(f"memory: {len(mix)} requests, {sum(lengths):,} positions used; contiguous reserves "
             f"{record['memory'][0]['reserved']:,}")
    record["prefixes"] = prefixes(paragraphs, settings, bytes_per_position)
    progress(f"shared prefixes: {len(record['prefixes'])} rows")
    usable = _check_paragraphs(paragraphs, settings["draft_prompts"])
    prompts = [paragraph[:settings["draft_prompt_length"]] for paragraph in usable[:settings["draft_prompts"]]]
    record["speculation"] = speculation(model, prompts, settings, progress)
    record["batching"] = batching(model, batch_requests(paragraphs, settings), settings, progress)
    return record


def austen_paragraphs(tokenizer):
    """The held-out novel's paragraphs as token lists (lesson 13's tokenizer, or any with ``encode(text)``)."""
    if not callable(getattr(tokenizer, "encode", None)) or isinstance(tokenizer, str | bytes):
        raise TypeError(f"tokenizer must be a tokenizer with encode(text) (attn.lm.load()'s second value), "
                        f"got {type(tokenizer).__name__}")
    from attn.data.corpus import austen
    from attn.models.lm import HELD_OUT

    return [tokenizer.encode(line) for line in austen()[HELD_OUT].split("\n") if line.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(prog=COMMAND, description="Measure lesson 19's paged cache, shared prefixes, "
                                     "speculative decoding and batching on lesson 13's model (about 2 minutes).")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    args = parser.parse_args(argv)
    from attn.experiments.records import write_record
    from attn.models.lm import load

    torch.set_num_threads(1)  # the same sums in the same order, and timings of one thread
    started = time.perf_counter()
    model, tokenizer = load()
    record = measure(model, austen_paragraphs(tokenizer),
                     progress=lambda line: print(f"[{time.perf_counter() - started:5.0f} s] {line}", flush=True))
    write_record(args.out, RESULTS_NAME, record, COMMAND)
    print(f"wrote {args.out}/{RESULTS_NAME}")


if __name__ == "__main__":
    main()
