"""Lesson 13's model read past its trained length (lesson 17): each rotary scaling with no training, then fine-tuned.

    python -m attn.experiments.long_context --out lessons/records              # about 15 minutes, one thread
    python -m attn.experiments.long_context --out DIR --model DIR --size tiny  # seconds, on 'python -m attn.lm train --size tiny'

The model (context L = 256, rotary in every layer) reads evenly spread stretches of the held-out novel,
Persuasion, of n = 512, 1,024 and 2,048 tokens, under each scheme of ``SCHEMES`` with s = n / L:

- none: rotary as trained; pi: position interpolation (Chen et al. 2023); ntk: NTK-aware scaling (bloc97 2023),
  the base raised; dynamic: dynamic NTK with factor 1 (the base follows the length read so far, unchanged up to
  L); yarn and yarn-no-temperature: YaRN (Peng et al. 2023) with and without its temperature 0.1 ln s + 1;
  log-n: the scores of the query at position p times log(p + 1) / log L past L (``attn.softmax.log_n_scale``);
  window: lesson 14's sliding window of L keys, the simple baseline (every distance one the model trained on).

Every stretch is read the way generation reads it: its first L tokens in one pass, then CHUNK tokens at a time
through the KV caches. For every scheme but dynamic this equals one pass over the stretch; for dynamic it means
each chunk is rotated with the frequencies of the length read so far while the keys cached before keep theirs,
as transformers' dynamic scaling does when it generates. The record (``long_context.json``): for each length and
scheme, the loss of every stretch by bin of BIN positions (the stretches are the same for every scheme, so
differences pair up) and the mean weight on the first token by layer and bin (lesson 14's sink measure).

Then a copy of the model is fine-tuned under each scheme (but window) for ``fine_tune_steps`` AdamW steps on
stretches of the training novels of the fine-tune length (1,024, so s = 4; dynamic NTK, trained in whole passes,
trains as NTK at s = 4), seeded, and re-read at 1,024 and 2,048 tokens, each scheme set for the length read.
The fine-tune is short by design, a fixed budget, not trained until its loss stops falling: its training losses
are recorded so the lesson can say whether they were still falling, and the first bin (positions 0-255, where no
scheme changes anything but YaRN's temperature) shows what the extra training alone did.
Cost (full): about 3 minutes to read before fine-tuning, 7 x 50 steps of 4 x 1,024 tokens (about 1.5 s a step)
and the re-reading after: about 15 minutes on one thread of the course's 2-core machine.
"""

import argparse
import contextlib
import copy
import math
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional

from attn.common.arguments import whole_number_argument
from attn.common.destinations import folder_argument
from attn.common.validate import positive_int, require_callable, require_choice, require_token_ids, type_name, whole_number
from attn.experiments.austen_heads import check_course_decoder
from attn.experiments.records import check_out, settings_for, write_record
from attn.experiments.window_austen import held_out_streams, set_window
from attn.positions import ntk_aware_base

RESULTS_NAME = "long_context.json"
COMMAND = "python -m attn.experiments.long_context"
SCHEMES = {
    "none": "rotary as trained: positions past L are angles the model never saw",
    "pi": "position interpolation: every position divided by s = n / L (rope_type 'linear')",
    "ntk": "NTK-aware scaling: the rotary base raised to base * s^(d / (d - 2)), s = n / L",
    "dynamic": "dynamic NTK, factor 1: the base raised for the length read so far (unchanged up to L)",
    "yarn": "YaRN: each pair interpolated by how often it turns within L, s = n / L, temperature 0.1 ln s + 1",
    "yarn-no-temperature": "YaRN's frequencies without its temperature (attention_factor 1.0)",
    "log-n": "rotary as trained, the scores of the query at position p times log(p + 1) / log L past L",
    "window": "lesson 14's sliding window of L keys: every distance is one the model trained on",
}
FINE_TUNED = tuple(name for name in SCHEMES if name != "window")  # a window needs no training to read at length
SIZES = {
    "full": {"lengths": (512, 1024, 2048), "streams": 12, "bin": 256, "chunk": 32, "fine_tune_length": 1024,
             "fine_tune_steps": 50, "fine_tune_batch": 4, "learning_rate": 3e-4, "reread": (1024, 2048), "seed": 0},
    "tiny": {"lengths": (64, 128), "streams": 3, "bin": 32, "chunk": 8, "fine_tune_length": 64,
             "fine_tune_steps": 3, "fine_tune_batch": 2, "learning_rate": 1e-3, "reread": (64, 128), "seed": 0},
}


def _check_length(model, length):
    """A reading length: a whole number above the model's trained context (what this module is about)."""
    check_course_decoder(model)
    length = positive_int("length", length)
    if length <= model.context_length:
        raise ValueError(f"length={length} is not past the model's trained context of {model.context_length} tokens; "
                         "these schemes are for reading further")
    return length


def _check_scheme(scheme):
    require_choice("scheme", scheme, tuple(SCHEMES))
    return scheme


def scheme_settings(scheme, context_length, length, head_dim, base):
    """What ``scheme`` sets on each attention layer to read ``length`` tokens with a model trained on ``context_length``:
    a dict of rotary_base, scaling (transformers' rope_parameters form, or None), window and log_n."""
    _check_scheme(scheme)
    context_length, length, head_dim = (positive_int(name, value) for name, value in
                                        (("context_length", context_length), ("length", length), ("head_dim", head_dim)))
    factor = length / context_length  # s
    settings = {"rotary_base": base, "scaling": None, "window": None, "log_n": scheme == "log-n"}
    if scheme == "pi":
        settings["scaling"] = {"rope_type": "linear", "factor": factor}
    elif scheme == "ntk":
        settings["rotary_base"] = ntk_aware_base(head_dim, base, factor)
    elif scheme == "dynamic":
        settings["scaling"] = {"rope_type": "dynamic", "factor": 1.0, "original_max_position_embeddings": context_length}
    elif scheme.startswith("yarn"):
        settings["scaling"] = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": context_length}
        if scheme == "yarn-no-temperature":
            settings["scaling"]["attention_factor"] = 1.0
    elif scheme == "window":
        settings["window"] = context_length
    return settings


def log_n_factors(positions, context_length):
    """Log-n scaling's factor for the queries at ``positions`` (T,): log(p + 1) / log L where p + 1 > L, else 1; (T,)."""
    require_token_ids("positions", positions, 1)  # whole numbers from 0, on a device that holds numbers
    context_length = whole_number("context_length", context_length, minimum=2, maximum=2**31)  # log 1 = 0 cannot divide
    lengths = positions.double() + 1  # (T,): the keys each query sees
    factors = torch.where(lengths > context_length, lengths.log() / math.log(context_length), torch.ones_like(lengths))
    return factors.float()


def _log_n_hooks(attention, context_length):
    """Hooks that multiply the layer's projected queries (B, T, E) by ``log_n_factors`` (so its scores, as rotation
    keeps lengths): the layer's pre-hook reads where the queries stand (after the cached positions)."""
    cached = {"positions": 0}

    def remember(module, args, kwargs):
        cache = kwargs.get("cache")
        cached["positions"] = 0 if cache is None else len(cache)

    def scale(module, args, output):  # output (B, T, E)
        positions = torch.arange(output.shape[1], device=output.device) + cached["positions"]
        return output * log_n_factors(positions, context_length).to(output.dtype)[:, None]

    return [attention.register_forward_pre_hook(remember, with_kwargs=True), attention.query_proj.register_forward_hook(scale)]


@contextlib.contextmanager
def applied(model, scheme, length):
    """Inside the ``with`` block, every attention layer of ``model`` reads ``length`` tokens under ``scheme``; restored after."""
    length, scheme = _check_length(model, length), _check_scheme(scheme)
    attentions = [block.attention for block in model.blocks]
    first = attentions[0]
    settings = scheme_settings(scheme, model.context_length, length, first.head_dim, first.rotary_base)
    saved = [(attention.rotary_base, attention.rotary_scaling) for attention in attentions]
    hooks = []
    try:
        for attention in attentions:
            attention.rotary_base = settings["rotary_base"]
            attention.set_rotary_scaling(settings["scaling"])
            if settings["log_n"]:
                hooks += _log_n_hooks(attention, model.context_length)
        set_window(model, settings["window"])
        yield model
    finally:
        for hook in hooks:
            hook.remove()
        for attention, (base, scaling) in zip(attentions, saved, strict=True):
            attention.rotary_base, attention.rotary_scaling = base, scaling
        set_window(model, None)


@torch.no_grad()
def read_stream(model, stream, chunk):
    """Losses (n - 1,) and the weight on the first token by layer (L, n - 1) of the predictions along ``stream`` (n,):
    its first context_length tokens read in one pass, then ``chunk`` at a time through KV caches."""
    check_course_decoder(model)
    require_token_ids("stream", stream, 1)
    chunk = whole_number("chunk", chunk, minimum=1, maximum=2**20)
    if len(stream) < 2 or int(stream.max()) >= model.vocab_size:
        raise ValueError(f"stream must hold 2 or more token ids of the model's vocabulary 0..{model.vocab_size - 1}")
    inputs, targets = stream[:-1], stream[1:]
    edges = [0, *range(min(model.context_length, len(inputs)), len(inputs), chunk), len(inputs)]
    caches, losses, weights = model.new_caches(), [], []
    for start, end in zip(edges[:-1], edges[1:], strict=True):
        logits, chunk_weights = model(inputs[None, start:end], caches=caches, need_weights=True)  # (1, t, V), (L, 1, H, t, T_k)
        losses.append(functional.cross_entropy(logits[0], targets[start:end], reduction="none"))
        weights.append(chunk_weights[:, 0, :, :, 0].mean(dim=1))  # (L, t): heads averaged
    return torch.cat(losses), torch.cat(weights, dim=1)


def bin_means(values, size, skip_first=False):
    """Means of consecutive bins of ``size`` along the last axis of ``values`` (..., n), as nested lists rounded to 4
    decimals; ``skip_first`` leaves position 0 out of the first bin (the first query sees only the first token)."""
    if not isinstance(values, torch.Tensor) or not values.is_floating_point() or values.dim() == 0 or values.shape[-1] < 2:
        raise TypeError(f"values must be a floating-point tensor (..., n) with n >= 2, got {type_name(values)}")
    if values.device.type == "meta":
        raise ValueError("values are on the meta device, which holds no numbers to average")
    size = whole_number("size", size, minimum=1, maximum=2**31)
    means = []
    for start in range(0, values.shape[-1], size):
        part = values[..., max(start, 1 if skip_first else 0):start + size]
        means.append(part.mean(dim=-1) if part.shape[-1] else torch.full(values.shape[:-1], math.nan))
    return torch.stack(means, dim=-1).double().round(decimals=4).tolist()


def read_all(model, streams, scheme, chunk, bin_size):
    """The record of one scheme on stretches (S, n + 1): loss by stretch and bin, first-token weight by layer and bin."""
    streams = _check_streams(model, streams)
    length = streams.shape[1] - 1
    losses, weights = [], []
    with applied(model, scheme, length):
        for stream in streams:
            loss, weight = read_stream(model, stream, chunk)
            losses.append(loss)
            weights.append(weight)
    losses, weights = torch.stack(losses), torch.stack(weights).mean(dim=0)  # (S, n), (L, n)
    past = losses[:, model.context_length:]
    return {"loss_by_bin": bin_means(losses.mean(dim=0), bin_size), "loss_by_stream_and_bin": bin_means(losses, bin_size),
            "mean_beyond_context_by_stream": [round(value, 4) for value in past.mean(dim=1).tolist()],
            "first_token_weight_by_layer_and_bin": bin_means(weights, bin_size, skip_first=True)}


def _check_streams(model, streams):
    check_course_decoder(model)
    require_token_ids("streams", streams, 2)
    if streams.shape[0] < 1:
        raise ValueError("streams must hold at least one stretch of text")
    _check_length(model, streams.shape[1] - 1)
    return streams


def fine_tune(model, scheme, tokens, length, steps, batch_size, learning_rate, seed):
    """A copy of ``model`` trained for ``steps`` AdamW steps under ``scheme`` on random stretches of ``length`` tokens
    of ``tokens`` (N,), seeded; returns (the copy in eval mode, its training losses)."""
    from attn.models.lm_training import random_batch

    length, scheme = _check_length(model, length), _check_scheme(scheme)
    require_token_ids("tokens", tokens, 1)
    steps, batch_size = positive_int("steps", steps), positive_int("batch_size", batch_size)
    seed = whole_number("seed", seed, minimum=0, maximum=2**62)
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, float | int) or not 0 < learning_rate <= 1:
        raise ValueError(f"learning_rate must be a number in (0, 1], got {learning_rate!r:.60}")
    if len(tokens) <= length:
        raise ValueError(f"tokens hold {len(tokens)} tokens, too few for stretches of {length}")
    torch.manual_seed(seed)
    tuned, generator, losses = copy.deepcopy(model).train(), torch.Generator().manual_seed(seed), []
    matrices = [p for p in tuned.parameters() if p.dim() >= 2]
    others = [p for p in tuned.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
                                  lr=learning_rate, betas=(0.9, 0.95))  # as lesson 13 trained it
    warmup = max(1, steps // 10)
    with applied(tuned, scheme, length):
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate * min(1.0, (step + 1) / warmup)
            inputs, targets = random_batch(tokens, batch_size, length, generator)  # (B, length) each
            loss = functional.cross_entropy(tuned(inputs).flatten(0, 1), targets.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(round(loss.item(), 4))
    return tuned.eval(), losses



def measure(model, held_out_tokens, training_tokens, settings, progress=print):
    """Every reading and fine-tune of this module: a dict ready for JSON. held_out_tokens (N,) and training_tokens (M,)
    are token ids; settings a dict like SIZES['full']."""
    check_course_decoder(model)
    require_token_ids("held_out_tokens", held_out_tokens, 1)
    require_callable("progress", progress)
    if not isinstance(settings, dict) or set(settings) != set(SIZES["full"]):
        raise TypeError(f"settings must be a dict with the keys of SIZES['full'], got {type_name(settings)}")
    started = time.perf_counter()

    def step(what):
        progress(f"[{time.perf_counter() - started:5.0f} s] {what}")

    attention = model.blocks[0].attention
    record = {"settings": {name: list(value) if isinstance(value, tuple) else value for name, value in settings.items()},
              "context_length": model.context_length, "head_dim": attention.head_dim, "rotary_base": attention.rotary_base,
              "num_layers": len(model.blocks), "schemes": dict(SCHEMES), "reading": {}, "fine_tuned": {}}
    streams = {length: held_out_streams(held_out_tokens, length + 1, settings["streams"])
               for length in sorted({*settings["lengths"], *settings["reread"]})}  # (S, n + 1): n predictions each
    for length in settings["lengths"]:
        record["reading"][str(length)] = {}
        for scheme in SCHEMES:
            result = read_all(model, streams[length], scheme, settings["chunk"], settings["bin"])
            record["reading"][str(length)][scheme] = result
            step(f"read {length} tokens, {scheme:>19}: loss past {model.context_length} "
                 f"{_mean(result['mean_beyond_context_by_stream']):.3f}")
    for scheme in FINE_TUNED:
        tuned, losses = fine_tune(model, scheme, training_tokens, settings["fine_tune_length"], settings["fine_tune_steps"],
                                  settings["fine_tune_batch"], settings["learning_rate"], settings["seed"])
        record["fine_tuned"][scheme] = {"training_loss": losses, "reading": {}}
        for length in settings["reread"]:
            result = read_all(tuned, streams[length], scheme, settings["chunk"], settings["bin"])
            record["fine_tuned"][scheme]["reading"][str(length)] = result
            step(f"fine-tuned {scheme:>19}, read {length}: loss past {model.context_length} "
                 f"{_mean(result['mean_beyond_context_by_stream']):.3f}")
    return record


def _mean(values):
    return sum(values) / len(values)


def run(out, size="full", models=None, corpus=None, fine_tune_steps=None, progress=print):
    """Load lesson 13's model (from ``models``, default lessons/weights) and the novels, measure, write
    ``out``/RESULTS_NAME; returns the record."""
    from attn.data.corpus import TITLES, austen
    from attn.models.lm import HELD_OUT, load
    from attn.models.lm_training import split_novels, token_tensor

    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    if fine_tune_steps is not None:
        settings["fine_tune_steps"] = positive_int("fine_tune_steps", fine_tune_steps)
    training_texts, held_out_text = split_novels(austen(corpus))  # the corpus first: a missing one costs nothing
    model, tokenizer = load(models)
    record = {"size": size, "held_out_novel": TITLES[HELD_OUT]}
    record.update(measure(model, token_tensor(tokenizer, [held_out_text]), token_tensor(tokenizer, training_texts),
                          settings, progress))
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


def _model_folder(text):
    from attn.common.destinations import name_problem
    from attn.models.lm import TOKENIZER_NAME, WEIGHTS_NAME

    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    missing = [name for name in (WEIGHTS_NAME, TOKENIZER_NAME) if not (Path(text) / name).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"{text} lacks {', '.join(missing)}: give a folder 'python -m attn.lm train' wrote")
    return text


STEPS_ARGUMENT = whole_number_argument("--fine-tune-steps", 1, 100_000, "each step reads a batch of long stretches")


def main(argv=None):
    from attn.models.lm_checks import _corpus_folder_argument, _corpus_or_error

    parser = argparse.ArgumentParser(prog=COMMAND, description="Read lesson 13's model past its trained length under "
                                     "each rotary scaling, then after a short fine-tune at the longer length.")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    parser.add_argument("--size", default="full", choices=sorted(SIZES), help="full (about 15 minutes) or tiny (seconds)")
    parser.add_argument("--model", default=None, type=_model_folder, help="folder of the model (default lessons/weights)")
    parser.add_argument("--corpus", default=None, type=_corpus_folder_argument, help="folder of the novels")
    parser.add_argument("--fine-tune-steps", default=None, type=STEPS_ARGUMENT,
                        help=f"steps of each fine-tune (default {SIZES['full']['fine_tune_steps']} for full)")
    args = parser.parse_args(argv)
    _corpus_or_error(parser, args.corpus)  # before the model is loaded
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    try:
        record = run(args.out, args.size, args.model, args.corpus, args.fine_tune_steps,
                     progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (FileNotFoundError, ValueError) as error:  # the corpus or the model is missing or damaged: a sentence
        parser.error(str(error))
    longest = str(max(record["settings"]["lengths"]))
    print(f"Wrote {Path(args.out) / RESULTS_NAME}: at {longest} tokens the loss past the trained length is "
          f"{_mean(record['reading'][longest]['none']['mean_beyond_context_by_stream']):.2f} nats without scaling, "
          f"{_mean(record['reading'][longest]['yarn']['mean_beyond_context_by_stream']):.2f} with YaRN.")


if __name__ == "__main__":
    main()
