"""Lesson 13's model past its trained length (lesson 17), measured beside ``long_context``'s losses in two more ways.

    python -m attn.experiments.long_context_recall --out lessons/records   # about 10 minutes, one thread
    python -m attn.experiments.long_context_recall --out DIR --size tiny   # seconds (needs the model and the corpus)

1. Log-n scaling on top of the frequency scalings: ``ntk+log-n`` and ``yarn+log-n`` read the same stretches of
   Persuasion as ``long_context.json`` (so their losses pair up with its schemes stretch by stretch). Without
   them, "the trouble is the angles, not dilution" rests on log-n tried only with the angles broken.
2. Recall, a measure perplexity cannot stand in for: a passage of K tokens (the stretch's own last K) is planted
   earlier in the stretch, far back (right after its first token, about n positions before its copy) or near
   (NEAR tokens before its copy), and the loss on the copy's last K - 1 tokens is compared with the same stretch
   with other passages planted at both places. The gain, control minus planted, is what the model takes from a
   passage it can see. The window's queries never see the far passage directly; through the model's 4 layers of
   256 keys each, what it wrote can reach at most about 1,020 positions on, so at 2,048 tokens the window's far gain
   is 0 by construction. Near, at a length past L, asks whether a scheme keeps the model's short-range copying at
   positions it never trained on.

Every stretch is read as ``long_context`` reads it (its first L tokens in one pass, then CHUNK at a time through
the caches). The record (``long_context_recall.json``): for each length, the combined schemes' losses past L by
stretch, and for each scheme (``long_context.SCHEMES`` and the two combined) the copy's loss by stretch in the
control, far and near readings, so the lesson pairs them.
"""

import contextlib
import time

import torch

from attn.common.validate import require_callable
from attn.experiments import long_context
from attn.experiments.records import check_out, settings_for, sized_command, write_record

RESULTS_NAME = "long_context_recall.json"
COMMAND = "python -m attn.experiments.long_context_recall"
COMBINED = {
    "ntk+log-n": ("ntk", "NTK-aware scaling, and the scores of the query at position p times log(p + 1) / log L past L"),
    "yarn+log-n": ("yarn", "YaRN (with its temperature), and log-n scaling of the scores past L"),
}
SIZES = {
    "full": {"lengths": (512, 2048), "streams": 12, "chunk": 32, "passage": 32, "near": 128},
    "tiny": {"lengths": (288,), "streams": 2, "chunk": 16, "passage": 8, "near": 16},
}


@contextlib.contextmanager
def _scheme(model, scheme, length):
    """``long_context.applied`` for its schemes; for a combined one its frequency scheme plus log-n's hooks."""
    if scheme not in COMBINED:
        with long_context.applied(model, scheme, length):
            yield model
        return
    hooks = []
    with long_context.applied(model, COMBINED[scheme][0], length):
        try:
            for block in model.blocks:
                hooks += long_context._log_n_hooks(block.attention, model.context_length)
            yield model
        finally:
            for hook in hooks:
                hook.remove()


def _planted(streams, passage, near):
    """Three copies of stretches (S, n + 1), each ending in its passage of ``passage`` tokens: control (other
    stretches' endings planted far and near), far (its own ending right after the first token) and near (its own
    ending ``near`` tokens before the copy starts); returns (control, far, near) and the first target scored."""
    count, length = streams.shape
    ending = streams[:, -passage:]  # (S, K): the passage each stretch ends with
    other = ending.roll(1, dims=0)  # another stretch's ending: a control with no match
    another = ending.roll(2 if count > 2 else 1, dims=0)
    far_place, near_place = slice(1, 1 + passage), slice(length - 2 * passage - near, length - passage - near)
    control = streams.clone()
    control[:, far_place], control[:, near_place] = other, another
    far, near_copy = control.clone(), control.clone()
    far[:, far_place], near_copy[:, near_place] = ending, ending
    return control, far, near_copy, length - passage  # the copy's first token is read, its next K - 1 are scored


def _copy_losses(model, streams, scheme, chunk, first_target):
    """Each stretch's mean loss (S,) on the targets from ``first_target`` on (the copy's tokens after its first)."""
    losses = []
    with _scheme(model, scheme, streams.shape[1] - 1):
        for stream in streams:
            loss, _ = long_context.read_stream(model, stream, chunk)  # (n,): loss of predicting token i + 1
            losses.append(loss[first_target:].mean())
    return [round(value, 4) for value in torch.stack(losses).tolist()]


def _past_losses(model, streams, scheme, chunk):
    """Each stretch's mean loss (S,) past the trained context, as ``long_context.read_all`` computes it."""
    losses = []
    with _scheme(model, scheme, streams.shape[1] - 1):
        for stream in streams:
            loss, _ = long_context.read_stream(model, stream, chunk)
            losses.append(loss[model.context_length:].mean())
    return [round(value, 4) for value in torch.stack(losses).tolist()]


def _measure(model, held_out_tokens, settings, progress):
    started = time.perf_counter()

    def step(what):
        progress(f"[{time.perf_counter() - started:5.0f} s] {what}")

    schemes = [*long_context.SCHEMES, *COMBINED]
    record = {"settings": {name: list(value) if isinstance(value, tuple) else value for name, value in settings.items()},
              "context_length": model.context_length,
              "schemes": {**long_context.SCHEMES, **{name: words for name, (_, words) in COMBINED.items()}},
              "combined_reading": {}, "recall": {}}
    for length in settings["lengths"]:
        streams = long_context.held_out_streams(held_out_tokens, length + 1, settings["streams"])  # (S, n + 1)
        record["combined_reading"][str(length)] = {}
        for scheme in COMBINED:
            past = _past_losses(model, streams, scheme, settings["chunk"])
            record["combined_reading"][str(length)][scheme] = {"mean_beyond_context_by_stream": past}
            step(f"read {length} tokens, {scheme:>10}: loss past {model.context_length} {sum(past) / len(past):.3f}")
        control, far, near, first_target = _planted(streams, settings["passage"], settings["near"])
        record["recall"][str(length)] = {}
        for scheme in schemes:
            losses = {name: _copy_losses(model, copies, scheme, settings["chunk"], first_target)
                      for name, copies in (("control", control), ("far", far), ("near", near))}
            record["recall"][str(length)][scheme] = losses
            gain = [c - f for c, f in zip(losses["control"], losses["far"], strict=True)]
            step(f"recall at {length}, {scheme:>19}: far gain {sum(gain) / len(gain):+.3f}")
    return record



def run(out, size="full", progress=print):
    """Load lesson 13's model and the held-out novel, measure, write ``out``/RESULTS_NAME; returns the record."""

    from attn.data.corpus import TITLES, austen
    from attn.models.lm import HELD_OUT, load
    from attn.models.lm_training import split_novels, token_tensor

    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    _, held_out_text = split_novels(austen())  # the corpus first: a missing one costs nothing
    model, tokenizer = load()
    record = {"size": size, "held_out_novel": TITLES[HELD_OUT]}
    record.update(_measure(model, token_tensor(tokenizer, [held_out_text]), settings, progress))
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("Read lesson 13's model past its trained length with log-n on top of NTK and YaRN, and measure what "
               "each scheme lets it recall from a passage planted near or far back.")


def main(argv=None):
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, {"full": "about 10 minutes", "tiny": "seconds"},
                                run, argv)
    longest = str(max(record["settings"]["lengths"]))
    losses = record["recall"][longest]["none"]
    gain = sum(c - f for c, f in zip(losses["control"], losses["far"], strict=True)) / len(losses["far"])
    print(f"Wrote {out / RESULTS_NAME}: read as trained at {longest} tokens, a passage planted far back lowers its "
          f"copy's loss by {gain:.3f} nats a token.")


if __name__ == "__main__":
    main()
