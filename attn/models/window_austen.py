"""Lesson 13's Austen model read with a sliding window at inference, with and without sink tokens (lesson 14).

    python -m attn.models.window_austen --out lessons/models

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
from attn.window import check_window_arguments

WINDOWS = (16, 64)
SINK_COUNTS = (0, 4)
STREAM_LENGTH = 1024
STREAMS = 16
BIN = 32
RESULTS_NAME = "window_austen.json"


def set_window(model, window, sink_tokens=0):
    """Give every attention layer of ``model`` (its ``blocks``) this window and these sinks; None: full attention."""
    window, sink_tokens = check_window_arguments(window, sink_tokens)
    for block in model.blocks:
        block.attention.window, block.attention.sink_tokens = window, sink_tokens
    return model


def held_out_streams(tokens, length=STREAM_LENGTH, count=STREAMS):
    """``count`` non-overlapping stretches (count, length) of the token ids ``tokens`` (N,), evenly spread."""
    if len(tokens) < count * length:
        raise ValueError(f"{count} stretches of {length} tokens need {count * length} tokens, the text has {len(tokens)}")
    step = len(tokens) // count
    return torch.stack([tokens[start:start + length] for start in range(0, step * count, step)])


@torch.no_grad()
def stream_losses(model, streams):
    """Next-token cross-entropy (S, length - 1) at each position of each stream (S, length)."""
    losses = []
    for stream in streams:  # one at a time: the scores of a long stretch are large
        logits = model(stream[None, :-1])[0]  # (length - 1, V)
        losses.append(functional.cross_entropy(logits, stream[1:], reduction="none"))
    return torch.stack(losses)


def binned(values, size=BIN):
    """Means of consecutive bins of ``size`` values (the last bin may be shorter), rounded to 4 decimals."""
    return [round(chunk.mean().item(), 4) for chunk in values.split(size)]


def conditions(windows=WINDOWS, sink_counts=SINK_COUNTS):
    """(name, window, sink_tokens): full attention, then each window with each number of sinks."""
    found = [("full attention", None, 0)]
    for window in windows:
        for sinks in sink_counts:
            name = f"window {window}" + (f" + {sinks} sink{'s' if sinks > 1 else ''}" if sinks else "")
            found.append((name, window, sinks))
    return found


@torch.no_grad()
def first_token_weight(model, streams, skip=BIN):
    """Mean attention weight on position 0, by layer (L,), of the queries from ``skip`` to the training
    context's end (full attention): how much of its attention the model gives the first token."""
    length = min(model.context_length, streams.shape[1])
    _, weights = model(streams[:, :length], need_weights=True)  # weights (L, S, H, T, T)
    return [round(value, 4) for value in weights[:, :, :, skip:, 0].mean(dim=(1, 2, 3)).tolist()]


def measure(model, streams, windows=WINDOWS, sink_counts=SINK_COUNTS, bin_size=BIN, progress=print):
    """The record: for each condition, the loss by bin of positions and the means beyond the window and the
    training context; and the weight the model gives the first token, by layer."""
    set_window(model, None)
    record = {"windows": list(windows), "sink_counts": list(sink_counts), "stream_length": streams.shape[1],
              "streams": streams.shape[0], "bin": bin_size, "context_length": model.context_length,
              "first_token_weight_by_layer": first_token_weight(model, streams, bin_size), "conditions": []}
    for name, kept, sinks in conditions(windows, sink_counts):
        started = time.perf_counter()
        set_window(model, kept, sinks)
        each = stream_losses(model, streams)  # (S, length - 1)
        losses = each.mean(dim=0)  # (length - 1,)
        record["conditions"].append({
            "name": name, "window": kept, "sink_tokens": sinks, "loss_by_bin": binned(losses, bin_size),
            "first_stream_loss_by_bin": binned(each[0], bin_size),
            "mean_beyond_window": None if kept is None else round(losses[kept:].mean().item(), 4),
            "mean_beyond_context": round(losses[model.context_length:].mean().item(), 4),
        })
        progress(f"{name:>22}: mean loss beyond the training context "
                 f"{record['conditions'][-1]['mean_beyond_context']:.3f}, {time.perf_counter() - started:.0f} s")
    set_window(model, None)
    return record


@torch.no_grad()
def loss_by_position(model, tokens, batch_size=32):
    """Mean next-token loss at each position 0 .. context_length - 1 over every held-out window of ``tokens`` (N,)."""
    from attn.models.lm_training import held_out_windows

    inputs, targets = held_out_windows(tokens, model.context_length)  # (W, T) each
    total = torch.zeros(model.context_length, dtype=torch.float64)
    for start in range(0, len(inputs), batch_size):
        logits = model(inputs[start:start + batch_size])  # (b, T, V)
        chunk = targets[start:start + batch_size]
        total += functional.cross_entropy(logits.transpose(1, 2), chunk, reduction="none").double().sum(dim=0)
    return (total / len(inputs)).tolist()


def run(out, corpus=None, models=None, windows=WINDOWS, sink_counts=SINK_COUNTS, length=STREAM_LENGTH, count=STREAMS):
    """Load lesson 13's model and the held-out novel, measure, write ``out``/RESULTS_NAME; returns the record."""
    from attn.models.corpus import austen
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
        prog="python -m attn.models.window_austen",
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
