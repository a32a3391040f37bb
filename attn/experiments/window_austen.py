"""Lesson 13's Austen model read with a sliding window at inference, with and without sink tokens (lesson 14).

    python -m attn.experiments.window_austen --out lessons/records

The StreamingLLM experiment (Xiao et al. 2024) on the course's own model: stretches of the held-out
novel, several times longer than the model's training context, are read with full causal attention,
with a window of each size in WINDOWS in every layer, and with the same windows plus the first few
tokens kept (sink tokens). The loss at each position, averaged over the stretches and over bins of
positions, how much attention the model gives its first token, and the model's loss at each position
of its training context (full attention, over every held-out window), are written to window_austen.json,
so the lesson plots them without the corpus. The window is set on the
model's own layers (``set_window``), so the full pass is exactly what decoding through RingKVCaches
gives (the tests check that).
"""

import argparse
import json
import time
from pathlib import Path

import torch
from torch.nn import functional

from attn.common.destinations import folder_argument, write_text
from attn.common.validate import positive_int, require_callable, require_choice, type_name, whole_number
from attn.streaming import SINK_POSITIONS, check_sink_positions
from attn.window import check_window_arguments

WINDOWS = (16, 64)
SINK_COUNTS = (0, 4)
STREAM_LENGTH = 1024
STREAMS = 16
BIN = 32
RESULTS_NAME = "window_austen.json"


def _check_model(model):
    from attn.experiments.austen_heads import check_course_decoder  # lesson 13's AustenLM or lesson 16's LlamaLM

    check_course_decoder(model)


def _check_streams(streams, model):
    """streams (S, length): a 2-D tensor of token ids of the model's vocabulary, S >= 1 and length >= 2."""
    if not isinstance(streams, torch.Tensor) or streams.dim() != 2 or streams.is_floating_point() or (
            streams.dtype == torch.bool):
        raise TypeError(f"streams must be a 2-D tensor of token ids (S, length), got {type_name(streams)}")
    if streams.shape[0] < 1 or streams.shape[1] < 2:
        raise ValueError(f"streams must hold at least one stream of 2 or more tokens, got {tuple(streams.shape)}")
    if int(streams.min()) < 0 or int(streams.max()) >= model.vocab_size:
        raise ValueError(f"streams hold token ids outside the model's vocabulary 0..{model.vocab_size - 1}")


def _check_sizes(windows, sink_counts):
    for name, values, least in (("windows", windows, 1), ("sink_counts", sink_counts, 0)):
        if not isinstance(values, list | tuple):
            raise TypeError(f"{name} must be a list or tuple of whole numbers, got {type_name(values)}")
        for value in values:
            whole_number(f"each of {name}", value, minimum=least)


def _check_placements(sink_positions):
    """``sink_positions``: a non-empty list or tuple of 'absolute' and 'cache' (attn.streaming.SINK_POSITIONS)."""
    if not isinstance(sink_positions, list | tuple) or not sink_positions:
        raise TypeError(f"sink_positions must be a non-empty list or tuple of {' and '.join(map(repr, SINK_POSITIONS))}, "
                        f"got {type_name(sink_positions)} {sink_positions!r:.60}")
    for placement in sink_positions:
        require_choice("each of sink_positions", placement, SINK_POSITIONS)


def set_window(model, window, sink_tokens=0, sink_positions="absolute"):
    """Give every attention layer of ``model`` (its ``blocks``) this window and these sinks; None: full attention.

    sink_positions: 'absolute' (lesson 14: keys rotated where they stand) or 'cache' (lesson 16: StreamingLLM's
    places in the cache, attn.streaming)."""
    _check_model(model)
    window, sink_tokens = check_window_arguments(window, sink_tokens)
    sink_positions = check_sink_positions(sink_positions, window) if window is not None else "absolute"
    for block in model.blocks:
        attention = block.attention
        attention.window, attention.sink_tokens, attention.sink_positions = window, sink_tokens, sink_positions
    return model


def held_out_streams(tokens, length=STREAM_LENGTH, count=STREAMS):
    """``count`` non-overlapping stretches (count, length) of the token ids ``tokens`` (N,), evenly spread."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point():
        raise TypeError(f"tokens must be a 1-D tensor of token ids, got {type_name(tokens)}")
    length, count = positive_int("length", length), positive_int("count", count)
    if len(tokens) < count * length:
        raise ValueError(f"{count} stretches of {length} tokens need {count * length} tokens, the text has {len(tokens)}")
    step = len(tokens) // count
    return torch.stack([tokens[start:start + length] for start in range(0, step * count, step)])


@torch.no_grad()
def stream_losses(model, streams):
    """Next-token cross-entropy (S, length - 1) at each position of each stream (S, length)."""
    _check_model(model)
    _check_streams(streams, model)
    losses = []
    for stream in streams:  # one at a time: the scores of a long stretch are large
        logits = model(stream[None, :-1])[0]  # (length - 1, V)
        losses.append(functional.cross_entropy(logits, stream[1:], reduction="none"))
    return torch.stack(losses)


def binned(values, size=BIN):
    """Means of consecutive bins of ``size`` values (the last bin may be shorter), rounded to 4 decimals."""
    if not isinstance(values, torch.Tensor) or values.dim() != 1 or not values.is_floating_point():
        raise TypeError(f"values must be a 1-D floating-point tensor, got {type_name(values)}")
    if values.device.type == "meta":
        raise ValueError("values are on the meta device, which holds no numbers to average")
    size = whole_number("size", size, minimum=1, maximum=2**31)
    return [round(chunk.mean().item(), 4) for chunk in values.split(size)]


def conditions(windows=WINDOWS, sink_counts=SINK_COUNTS, sink_positions=("absolute",)):
    """(name, window, sink_tokens, sink_positions): full attention, then each window with each number of sinks,
    the sinks at each placement (lesson 16 adds 'cache': StreamingLLM's places in the cache)."""
    _check_sizes(windows, sink_counts)
    _check_placements(sink_positions)
    found = [("full attention", None, 0, "absolute")]
    for window in windows:
        for sinks in sink_counts:
            name = f"window {window}" + (f" + {sinks} sink{'s' if sinks > 1 else ''}" if sinks else "")
            for placement in sink_positions if sinks else ("absolute",):
                suffix = " (cache places)" if placement == "cache" else ""
                found.append((name + suffix, window, sinks, placement))
    return found


@torch.no_grad()
def first_token_weight(model, streams, skip=BIN, weight_length=None):
    """Mean attention weight on position 0, by layer (L,), of the queries from ``skip`` to the training
    context's end, or to ``weight_length`` (full attention): how much of its attention the model gives the first token."""
    _check_model(model)
    _check_streams(streams, model)
    if weight_length is not None:
        positive_int("weight_length", weight_length)
    length = min(model.context_length, streams.shape[1], weight_length or streams.shape[1])
    if whole_number("skip", skip, minimum=1) >= length:
        raise ValueError(f"skip={skip} leaves no query among the first {length} positions to average over")
    _, weights = model(streams[:, :length], need_weights=True)  # weights (L, S, H, T, T)
    return [round(value, 4) for value in weights[:, :, :, skip:, 0].mean(dim=(1, 2, 3)).tolist()]


def measure(model, streams, windows=WINDOWS, sink_counts=SINK_COUNTS, bin_size=BIN, progress=print,
            sink_positions=("absolute",), weight_length=None):
    """The record: for each condition, the loss by bin of positions and the means beyond the window and the
    training context (None where the stretches are not longer), each stream's mean beyond the window (for
    spreads); and the weight the model gives the first token, by layer, over the first ``weight_length``
    positions (default: the training context)."""
    _check_model(model)
    _check_streams(streams, model)
    _check_sizes(windows, sink_counts)
    _check_placements(sink_positions)
    bin_size = positive_int("bin_size", bin_size)
    require_callable("progress", progress)
    if streams.shape[1] - 1 <= max(windows, default=0):
        raise ValueError(f"streams of {streams.shape[1]} tokens leave nothing beyond the longest window "
                         f"({max(windows)}) to measure; use longer streams")
    set_window(model, None)
    record = {"windows": list(windows), "sink_counts": list(sink_counts), "stream_length": streams.shape[1],
              "streams": streams.shape[0], "bin": bin_size, "context_length": model.context_length,
              "first_token_weight_by_layer": first_token_weight(model, streams, bin_size, weight_length),
              "conditions": []}
    for name, kept, sinks, placement in conditions(windows, sink_counts, sink_positions):
        started = time.perf_counter()
        set_window(model, kept, sinks, placement)
        each = stream_losses(model, streams)  # (S, length - 1)
        losses = each.mean(dim=0)  # (length - 1,)
        beyond_context = losses[model.context_length:]
        record["conditions"].append({
            "name": name, "window": kept, "sink_tokens": sinks, "loss_by_bin": binned(losses, bin_size),
            "first_stream_loss_by_bin": binned(each[0], bin_size),
            "mean_beyond_window": None if kept is None else round(losses[kept:].mean().item(), 4),
            "mean_beyond_context": round(beyond_context.mean().item(), 4) if len(beyond_context) else None,
        })
        if placement != "absolute":
            record["conditions"][-1]["sink_positions"] = placement
        if len(sink_positions) > 1 or placement != "absolute":  # lesson 16: each stretch's bins, for spreads
            record["conditions"][-1]["loss_by_bin_by_stream"] = [binned(stream, bin_size) for stream in each]
        progress(f"{name:>34}: mean loss beyond the window "
                 f"{record['conditions'][-1]['mean_beyond_window'] or float('nan'):.3f}, {time.perf_counter() - started:.0f} s")
    set_window(model, None)
    return record


@torch.no_grad()
def _check_language_model(model):
    """A model that reads (B, T) token ids: a torch.nn.Module with a whole context_length (lesson 13's AustenLM)."""
    if not isinstance(model, torch.nn.Module) or isinstance(getattr(model, "context_length", None), bool) or not isinstance(
            getattr(model, "context_length", None), int):
        raise TypeError(f"model must be a language model with a context_length, such as lesson 13's (attn.lm.load()), "
                        f"got {type_name(model)}")


def loss_by_position(model, tokens, batch_size=32):
    """Mean next-token loss at each position 0 .. context_length - 1 over every held-out window of ``tokens`` (N,)."""
    from attn.models.lm_training import held_out_windows

    _check_language_model(model)
    batch_size = positive_int("batch_size", batch_size)
    inputs, targets = held_out_windows(tokens, model.context_length)  # (W, T) each
    total = torch.zeros(model.context_length, dtype=torch.float64)
    for start in range(0, len(inputs), batch_size):
        logits = model(inputs[start:start + batch_size])  # (b, T, V)
        chunk = targets[start:start + batch_size]
        total += functional.cross_entropy(logits.transpose(1, 2), chunk, reduction="none").double().sum(dim=0)
    return (total / len(inputs)).tolist()


def run(out, corpus=None, models=None, windows=WINDOWS, sink_counts=SINK_COUNTS, length=STREAM_LENGTH, count=STREAMS):
    """Load lesson 13's model and the held-out novel, measure, write ``out``/RESULTS_NAME; returns the record."""
    from attn.data.corpus import austen
    from attn.models.lm import HELD_OUT, load
    from attn.models.lm_training import token_tensor

    model, tokenizer = load(models)
    tokens = token_tensor(tokenizer, [austen(corpus)[HELD_OUT]])
    streams = held_out_streams(tokens, length, count)
    record = measure(model, streams, windows, sink_counts)
    set_window(model, None)
    record["loss_by_position"] = [round(value, 4) for value in loss_by_position(model, tokens)]
    record.update({"held_out": HELD_OUT, "torch": torch.__version__, "threads": torch.get_num_threads()})
    Path(out).mkdir(parents=True, exist_ok=True)
    write_text(Path(out) / RESULTS_NAME, json.dumps(record, indent=1) + "\n")
    return record



def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m attn.experiments.window_austen",
        description="Read the held-out novel with lesson 13's model: full attention, a window, a window with sinks.")
    parser.add_argument("--out", required=True, type=folder_argument(RESULTS_NAME), help=f"folder for {RESULTS_NAME}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the same sums in the same order on every machine
    try:
        run(args.out)
    except FileNotFoundError as error:  # the corpus or the model is missing: say which command makes it
        parser.error(str(error))


if __name__ == "__main__":
    main()
