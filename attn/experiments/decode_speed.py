"""How fast the course's own model decodes (lesson 19): SmolLM2-135M on the course's layers against transformers'
LlamaForCausalLM holding the same weights, and against the memory bound of a decoding step.

    python -m attn.experiments.decode_speed --out lessons/records      # about 5 minutes on a quiet 2-core CPU
    python -m attn.experiments.decode_speed --out DIR --size tiny     # seconds: a small random LlamaLM

A decoding step of one sequence multiplies one vector by every weight matrix of the model: it reads each weight
once and does one multiply-add with it. A core does many multiply-adds in the time memory delivers one weight, so
the step lasts about as long as reading the weights: batch 1 is memory-bound. The bound measured here is the time
to read every weight tensor once (a sum over each, ``read_every_weight``); a step's share of the bound is that
time divided by the step's time.

Measured in one process, interleaved (each repeat runs every contestant once, the order turning from repeat to
repeat, so that a busy machine slows all alike), on one math thread and on two, in float32:

- greedy decoding of ``new_tokens`` tokens after a prompt of ``prompt_tokens`` tokens of Persuasion, by lesson 10's
  ``generate`` on the course's model (its checks at the door, the prompt's last logits only, preallocated caches),
  by the same model on lesson 16's path (``check_every_block``: every block checks its input and turns its own
  rotary angles, caches grown by torch.cat, logits for every prompt position: what this code did before), and by
  transformers' ``generate()``; all three must give the same tokens, or the command stops with a sentence;
- tokens per second of each (the new tokens over the whole call, prefill included), the time of one step (the
  difference between the call for ``new_tokens`` tokens and the call for one, the prefill alone, over
  ``new_tokens - 1`` steps) and its share of the bound;
- one forward pass over ``forward_tokens`` tokens (every position's logits), the course's against transformers' (sdpa);
- a profile of one decoding step on each of the course's two paths: PyTorch operator calls by name (the same on
  every machine for a given PyTorch) and the operators that took the most time (this machine's).

Each time is summarised by its median, quartiles and extremes over the repeats; ratios are paired repeat by repeat.
The record names the machine (processor, cores, load average before and after): rerun it on a quiet one.
"""

import os
import statistics
import time
import warnings
from pathlib import Path

import torch

from attn.common.validate import require_callable, type_name
from attn.experiments.records import machine, sized_command, write_record
from attn.models.decoder import decoding_caches, generate

RESULTS_NAME = "decode_speed.json"
COMMAND = "python -m attn.experiments.decode_speed"
SIZES = {
    "full": {"prompt_tokens": 256, "new_tokens": 64, "forward_tokens": 512, "repeats": 7, "threads": (1, 2)},
    "tiny": {"prompt_tokens": 12, "new_tokens": 6, "forward_tokens": 16, "repeats": 2, "threads": (1, 2)},
}
TINY_MODEL = {"vocab_size": 96, "context_length": 64, "embed_dim": 32, "num_heads": 4, "num_kv_heads": 2,
              "num_layers": 2, "mlp_hidden_dim": 64, "rotary_base": 10000.0}
CONTESTANTS = ("course", "course_checked", "transformers")
PROFILED = ("aten::isfinite", "aten::aminmax", "aten::cos", "aten::sin", "aten::cat", "aten::mm")


def transformers_twin(model):
    """A transformers LlamaForCausalLM (sdpa attention, eval mode) holding the weights of ``model``, a LlamaLM whose
    layers transformers' Llama can express: the inverse of ``LlamaLM.from_transformers`` (each head's W_q and W_k
    rows put back in transformers' rotary layout by ``pairs_to_rotate_half``)."""
    from transformers import LlamaConfig, LlamaForCausalLM  # here: transformers is needed only for the comparison

    from attn.models.llama import LlamaLM, pairs_to_rotate_half

    if not isinstance(model, LlamaLM):
        raise TypeError(f"model must be an attn.models.llama.LlamaLM (attn.pretrained.load()), got {type_name(model)}")
    attention, block = model.blocks[0].attention, model.blocks[0]
    if attention.rotary_scaling is not None or attention.rotary_fraction != 1.0 or not model._runs_plain():
        raise ValueError("transformers_twin copies plain Llama layers only: this model has a rotary scaling, a partial "
                         "rotary, a window, learned sinks or hooks; undo them first")
    config = LlamaConfig(
        vocab_size=model.vocab_size, hidden_size=attention.embed_dim, intermediate_size=block.mlp.gate_proj.out_features,
        num_hidden_layers=len(model.blocks), num_attention_heads=attention.num_heads,
        num_key_value_heads=attention.num_kv_heads, max_position_embeddings=model.context_length,
        rope_theta=attention.rotary_base, rms_norm_eps=block.attention_norm.eps, tie_word_embeddings=True,
        attn_implementation="sdpa", bos_token_id=None, eos_token_id=None, pad_token_id=None)
    twin = LlamaForCausalLM(config).to(model.token_embedding.weight.dtype)
    state = {"model.embed_tokens.weight": model.token_embedding.weight, "model.norm.weight": model.norm.weight,
             "lm_head.weight": model.token_embedding.weight}
    for index, ours in enumerate(model.blocks):
        layer, heads = f"model.layers.{index}", (ours.attention.num_heads, ours.attention.num_kv_heads)
        state |= {
            f"{layer}.input_layernorm.weight": ours.attention_norm.weight,
            f"{layer}.self_attn.q_proj.weight": pairs_to_rotate_half(ours.attention.query_proj.weight, heads[0]),
            f"{layer}.self_attn.k_proj.weight": pairs_to_rotate_half(ours.attention.key_proj.weight, heads[1]),
            f"{layer}.self_attn.v_proj.weight": ours.attention.value_proj.weight,
            f"{layer}.self_attn.o_proj.weight": ours.attention.out_proj.weight,
            f"{layer}.post_attention_layernorm.weight": ours.mlp_norm.weight,
            **{f"{layer}.mlp.{name}.weight": getattr(ours.mlp, name).weight for name in ("gate_proj", "up_proj", "down_proj")},
        }
    with torch.no_grad():
        twin.load_state_dict({name: tensor.detach().clone() for name, tensor in state.items()})
    twin.generation_config.pad_token_id = 0  # no end token: every call generates exactly max_new_tokens
    return twin.to(model.token_embedding.weight.device).eval()


def read_every_weight(model):
    """Read every weight tensor of ``model`` (an nn.Module) once, by a sum over each: what one decoding step of
    batch 1 must read at least, so the time it takes bounds a step's time from below."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module whose weights to read, got {type_name(model)}")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.sum()


# The contestants -------------------------------------------------------------------------------------------


@torch.no_grad()
def _lesson16_generate(model, prompt, new_tokens):
    """Greedy decoding as this code did before lesson 19: every block checking its input (``check_every_block``),
    caches grown by torch.cat (``model.new_caches()``), logits for every position fed; prompt (1, T) -> (1, T + n)."""
    model.check_every_block = True
    try:
        caches, tokens, fed = model.new_caches(), prompt, prompt
        for _ in range(new_tokens):
            next_token = model(fed, caches)[:, -1].argmax(dim=-1, keepdim=True)  # (1, 1)
            tokens, fed = torch.cat((tokens, next_token), dim=1), next_token
        return tokens
    finally:
        model.check_every_block = False


def _decoders(model, twin):
    """name -> function(prompt, new_tokens) -> tokens (1, T + new_tokens), one per contestant."""
    def theirs(prompt, new_tokens):
        return twin.generate(prompt, max_new_tokens=new_tokens, do_sample=False, attention_mask=torch.ones_like(prompt))

    return {"course": lambda prompt, new_tokens: generate(model, prompt, new_tokens),
            "course_checked": lambda prompt, new_tokens: _lesson16_generate(model, prompt, new_tokens),
            "transformers": theirs}


def _forwards(model, twin):
    """name -> function(tokens) -> logits (1, T, V): one forward pass of the course's model and of its twin."""
    @torch.no_grad()
    def ours(tokens):
        return model(tokens)

    @torch.no_grad()
    def theirs(tokens):
        return twin(tokens).logits

    return {"course": ours, "transformers": theirs}


def _same_tokens(decoders, prompt, new_tokens):
    """The tokens every contestant generates, checked equal; a ValueError naming the first difference otherwise."""
    generated = {name: decode(prompt, new_tokens) for name, decode in decoders.items()}
    expected = generated["course"]
    for name, tokens in generated.items():
        if not torch.equal(tokens, expected):
            mismatch = (tokens[0, prompt.shape[1]:] != expected[0, prompt.shape[1]:]).nonzero()
            first = int(mismatch[0, 0]) if len(mismatch) and tokens.shape == expected.shape else 0
            raise ValueError(f"{name} generates other tokens than the course's model (from new token {first}): the "
                             "comparison would time different work; check that both hold the same weights")
    return expected


# Timing ------------------------------------------------------------------------------------------------------


def _seconds(function, *arguments):
    start = time.perf_counter()
    function(*arguments)
    return time.perf_counter() - start


def _summary(values, digits=2):
    """Median, quartiles and extremes of a list of numbers, rounded."""
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    numbers = {"median": statistics.median(values), "q1": quartiles[0], "q3": quartiles[2],
               "min": min(values), "max": max(values)}
    return {key: round(value, digits) for key, value in numbers.items()}


def _time_threads(model, twin, prompt, forward_tokens, settings, progress):
    """One thread count's timings: every repeat runs each contestant once, in an order that turns each repeat."""
    decoders, forwards = _decoders(model, twin), _forwards(model, twin)
    new = settings["new_tokens"]
    for name in CONTESTANTS:  # warm-up, untimed
        decoders[name](prompt, 2)
    for forward in forwards.values():
        forward(forward_tokens)
    runs = {name: {"long": [], "short": []} for name in CONTESTANTS}
    reads, passes = [], {name: [] for name in forwards}
    for repeat in range(settings["repeats"]):
        turn = repeat % len(CONTESTANTS)
        for name in CONTESTANTS[turn:] + CONTESTANTS[:turn]:
            runs[name]["long"].append(_seconds(decoders[name], prompt, new))
            runs[name]["short"].append(_seconds(decoders[name], prompt, 1))  # the prefill and its one token
            reads.append(_seconds(read_every_weight, model))
        for name in (list(forwards) if repeat % 2 == 0 else list(forwards)[::-1]):
            passes[name].append(_seconds(forwards[name], forward_tokens))
        progress(f"  {torch.get_num_threads()} thread(s): repeat {repeat + 1} of {settings['repeats']} done")
    return _threads_record(runs, reads, passes, new)


def _threads_record(runs, reads, passes, new_tokens):
    """The record of one thread count from its raw times (seconds): summaries, shares of the bound, paired ratios."""
    read = [statistics.median(reads[i:i + len(CONTESTANTS)]) for i in range(0, len(reads), len(CONTESTANTS))]
    record = {"weights_read_ms": _summary([1e3 * s for s in read])}
    speeds = {}
    for name, times in runs.items():
        steps = [(long - short) / (new_tokens - 1) for long, short in zip(times["long"], times["short"], strict=True)]
        speeds[name] = [new_tokens / long for long in times["long"]]
        record[name] = {
            "tokens_per_second": _summary(speeds[name]),
            "step_ms": _summary([1e3 * step for step in steps]),
            "prefill_ms": _summary([1e3 * short for short in times["short"]], 1),
            "bound_share": _summary([r / step for r, step in zip(read, steps, strict=True)], 3),
        }
    for name in ("course", "course_checked"):
        record[f"{name}_over_transformers"] = _summary(
            [ours / theirs for ours, theirs in zip(speeds[name], speeds["transformers"], strict=True)], 3)
    record["forward_ms"] = {name: _summary([1e3 * s for s in times], 1) for name, times in passes.items()}
    record["forward_ms"]["course_over_transformers"] = _summary(
        [ours / theirs for ours, theirs in zip(passes["course"], passes["transformers"], strict=True)], 3)
    return record


# Profile -----------------------------------------------------------------------------------------------------


@torch.no_grad()
def _profile_step(model, prompt, checked):
    """One decoding step after ``prompt``, profiled: operator calls (all, and those of PROFILED), the operators' time
    (ms, each counted once) and the five with the most time of their own, on lesson 16's path (``checked``) or the
    door's."""
    from torch.profiler import ProfilerActivity, profile

    model.check_every_block = checked
    try:
        caches = model.new_caches() if checked else decoding_caches(model, prompt.shape[1] + 2)
        model(prompt, caches)
        step = prompt[:, -1:]
        model(step, caches, last_only=not checked)  # one step untimed: the first call of each operator is slower
        with warnings.catch_warnings(), profile(activities=[ProfilerActivity.CPU]) as run:
            warnings.simplefilter("ignore")
            model(step, caches, last_only=not checked)
    finally:
        model.check_every_block = False
    events = run.key_averages()
    top = sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:5]
    return {"operator_calls": sum(event.count for event in events),
            "calls": {name: sum(event.count for event in events if event.key == name) for name in PROFILED},
            "total_ms": round(sum(event.self_cpu_time_total for event in events) / 1e3, 2),
            "self_ms": {event.key: round(event.self_cpu_time_total / 1e3, 2) for event in top}}


# The command -------------------------------------------------------------------------------------------------


def _model_and_tokens(size, settings):
    """The model, the prompt (1, prompt_tokens), the forward pass's tokens (1, forward_tokens) and what they are."""
    length = max(settings["prompt_tokens"], settings["forward_tokens"])
    if size == "tiny":
        from attn.models.llama import LlamaLM

        torch.manual_seed(0)
        model = LlamaLM(**TINY_MODEL).eval()
        tokens = torch.randint(TINY_MODEL["vocab_size"], (1, length), generator=torch.Generator().manual_seed(1))
        return model, None, tokens, "a small random LlamaLM (the tiny size checks the machinery only)", "random ids"
    from attn.data.corpus import TITLES, austen
    from attn.models.lm import HELD_OUT
    from attn.pretrained import load

    novel = austen()[HELD_OUT]
    model, tokenizer = load()
    tokens = torch.tensor([tokenizer.encode(novel[:20 * length])[:length]])
    return model, tokenizer, tokens, "SmolLM2-135M (attn.pretrained.load()), float32", f"the start of {TITLES[HELD_OUT]}"


def run(out, size="full", progress=print):
    """Load the model and its transformers twin, measure, write ``out``/RESULTS_NAME; returns the record."""
    if not isinstance(size, str) or size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {type_name(size)} {size!r:.60}")
    if not isinstance(out, str | Path):
        raise TypeError(f"out must be a folder's path (a str or pathlib.Path), got {type_name(out)}")
    require_callable("progress", progress)
    settings, started, threads = SIZES[size], time.perf_counter(), torch.get_num_threads()
    load_before = os.getloadavg()
    model, tokenizer, tokens, what, text = _model_and_tokens(size, settings)
    prompt, forward_tokens = tokens[:, :settings["prompt_tokens"]], tokens[:, :settings["forward_tokens"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on generation settings
        twin = transformers_twin(model)
        progress(f"[{time.perf_counter() - started:4.0f} s] models ready; checking that all three give the same tokens")
        generated = _same_tokens(_decoders(model, twin), prompt, settings["new_tokens"])
        profiles = {"course": _profile_step(model, prompt, checked=False),
                    "course_checked": _profile_step(model, prompt, checked=True)}
        timings = {}
        try:
            for count in settings["threads"]:
                torch.set_num_threads(count)
                timings[str(count)] = _time_threads(model, twin, prompt, forward_tokens, settings, progress)
        finally:
            torch.set_num_threads(threads)
    import transformers

    continuation = generated[0, prompt.shape[1]:].tolist()
    record = {
        "size": size, "model": what, "text": text, "dtype": str(model.token_embedding.weight.dtype).replace("torch.", ""),
        **{key: settings[key] for key in ("prompt_tokens", "new_tokens", "forward_tokens", "repeats")},
        "weights": {"tensors": len(list(model.parameters())), "bytes": sum(p.nbytes for p in model.parameters())},
        "machine": {**machine(), "load_average_before": [round(v, 2) for v in load_before],
                    "load_average_after": [round(v, 2) for v in os.getloadavg()]},
        "transformers": transformers.__version__, "same_tokens": True,
        "continuation": tokenizer.decode(continuation) if tokenizer else continuation,
        "contestants": {
            "course": "lesson 10's generate on LlamaLM: checks at the door, rotary angles once per call, the prompt's "
                      "last logits only, preallocated caches",
            "course_checked": "lesson 16's path (check_every_block): every block checks its input and turns its own "
                              "rotary angles, caches grown by torch.cat, logits for every prompt position",
            "transformers": f"transformers {transformers.__version__} LlamaForCausalLM.generate(), sdpa attention, "
                            "the same weights (transformers_twin)",
        },
        "profile_of_one_step": profiles, "threads": timings,
        "seconds": round(time.perf_counter() - started),
    }
    progress(f"[{time.perf_counter() - started:4.0f} s] done")
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("Time greedy decoding of SmolLM2-135M on the course's layers against transformers and against the "
               "memory bound of a decoding step.")


def main(argv=None):
    durations = {"full": "about 5 minutes on a quiet 2-core CPU", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, durations, run, argv)
    one = record["threads"]["1"]
    print(f"Wrote {out / RESULTS_NAME}: one thread, the course {one['course']['tokens_per_second']['median']:.1f} "
          f"tokens/s, transformers {one['transformers']['tokens_per_second']['median']:.1f}; a step at "
          f"{100 * one['course']['bound_share']['median']:.0f}% of the memory bound.")


if __name__ == "__main__":
    main()
