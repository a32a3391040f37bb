"""SmolLM2-135M read past its 8,192 trained positions (lesson 17), with and without a rotary scaling.

    python -m attn.experiments.smollm2_length --out lessons/records        # about 14 minutes, one thread
    python -m attn.experiments.smollm2_length --out DIR --size tiny       # seconds: a small random LlamaLM

reads the converted model (``attn.pretrained.load()``, made by ``python -m attn.pretrained``) and the held-out
novel, Persuasion (``python -m attn.corpus``), and writes ``smollm2_length.json``: the loss at each position of
evenly spread stretches longer than the model's trained length L = 8,192, by bin of positions and by stretch,
under each scheme of ``SCHEMES``:

- none: rotary as trained, positions past L at angles the model never saw;
- dynamic: dynamic NTK (``LlamaLM.set_rotary_scaling``, rope_type 'dynamic', factor 2): unchanged up to L, then the
  base raised for the length read so far;
- yarn: YaRN with factor 2, which changes every position, the first L too (so it reads each stretch again).

The trade, on a CPU: SmolLM2 reads about 100 tokens a second on one thread, and a stretch of 16,384 tokens three
times over would take a quarter of an hour, so the full size reads three stretches of 10,240 tokens (2,048 past L),
each the way generation does, CHUNK tokens at a time through the KV caches (the logits of a whole stretch would
take gigabytes). Up to L dynamic NTK changes nothing, so none and dynamic share one pass over the first L tokens and
continue from copies of its caches; past L, dynamic rotates each chunk with the frequencies of the length read so
far while the keys cached before keep theirs, as transformers' dynamic scaling does when it generates. That mismatch
is what a probe showed to cost most: over 512 tokens past L, 4.55 nats a token against 3.36 without scaling and
3.40 with YaRN (one stretch of 8,704 tokens: 97 s for none and dynamic, 213 s for none and YaRN). Three stretches
give a spread, not a precise one. Cost: about 280 s a stretch, 14 minutes in all on one thread.
"""

import copy
import time

import torch
from torch.nn import functional

from attn.common.validate import require_callable, require_choice, require_token_ids, type_name, whole_number
from attn.experiments.austen_heads import check_course_decoder
from attn.experiments.long_context import bin_means
from attn.experiments.records import check_out, settings_for, sized_command, write_record
from attn.experiments.window_austen import held_out_streams

RESULTS_NAME = "smollm2_length.json"
COMMAND = "python -m attn.experiments.smollm2_length"
SCHEMES = {
    "none": "rotary as trained: positions past L are angles the model never saw",
    "dynamic": "dynamic NTK, factor 2: unchanged up to L, then the base raised for the length read so far",
    "yarn": "YaRN, factor 2: each pair interpolated by how often it turns within L, temperature 0.1 ln 2 + 1",
}
FACTOR = 2.0
SIZES = {
    "full": {"streams": 3, "stream_length": 10240, "chunk": 512, "bin": 512, "schemes": ("none", "dynamic", "yarn")},
    "tiny": {"streams": 2, "stream_length": 48, "chunk": 8, "bin": 8, "schemes": ("none", "dynamic", "yarn")},
}
TINY_MODEL = {"vocab_size": 64, "context_length": 16, "embed_dim": 16, "num_heads": 2, "num_kv_heads": 1,
              "num_layers": 2, "mlp_hidden_dim": 32, "rotary_base": 10000.0}


def scheme_scaling(scheme, context_length):
    """The rotary scaling of ``scheme`` for a model trained on ``context_length`` positions: None or a rope_parameters dict."""
    require_choice("scheme", scheme, tuple(SCHEMES))
    context_length = whole_number("context_length", context_length, minimum=1, maximum=2**20)
    if scheme == "none":
        return None
    rope_type = "dynamic" if scheme == "dynamic" else "yarn"
    return {"rope_type": rope_type, "factor": FACTOR, "original_max_position_embeddings": context_length}


@torch.no_grad()
def read_on(model, stream, caches, start, end, chunk):
    """Losses (end - start,) of the predictions start .. end - 1 along ``stream`` (n,), read ``chunk`` tokens at a time
    through ``caches`` (which must hold the first ``start`` positions)."""
    _check_read_on(model, stream, caches, start, end, chunk)
    losses = []
    for first in range(start, end, chunk):
        last = min(first + chunk, end)
        logits = model(stream[None, first:last], caches=caches)[0]  # (t, V)
        losses.append(functional.cross_entropy(logits.float(), stream[first + 1:last + 1], reduction="none"))
    return torch.cat(losses)


def _check_read_on(model, stream, caches, start, end, chunk):
    """read_on's arguments: a course decoder, token ids, its caches holding ``start`` positions, 0 <= start < end < n."""
    from attn.kvcache import KVCache

    check_course_decoder(model)
    require_token_ids("stream", stream, 1)
    if not isinstance(caches, list) or len(caches) != len(model.blocks) or not all(isinstance(c, KVCache) for c in caches):
        raise TypeError(f"caches must be the model's caches (model.new_caches()), got {type_name(caches)}")
    start = whole_number("start", start, minimum=0, maximum=2**20)
    whole_number("end", end, minimum=start + 1, maximum=len(stream) - 1)
    whole_number("chunk", chunk, minimum=1, maximum=2**16)
    if len(caches[0]) != start:
        raise ValueError(f"the caches hold {len(caches[0])} positions, not the {start} read before start={start}")


def _check_reading(model, stream, schemes, chunk):
    check_course_decoder(model)
    require_token_ids("stream", stream, 1)
    if not isinstance(schemes, list | tuple) or not schemes:
        raise TypeError(f"schemes must be a non-empty list of {', '.join(SCHEMES)}, got {type_name(schemes)}")
    for scheme in schemes:
        require_choice("each of schemes", scheme, tuple(SCHEMES))
    whole_number("chunk", chunk, minimum=1, maximum=2**16)
    if len(stream) <= model.context_length + 1:
        raise ValueError(f"a stretch of {len(stream)} tokens does not reach past the model's {model.context_length} "
                         "trained positions; give a longer one")
    if int(stream.min()) < 0 or int(stream.max()) >= model.vocab_size:
        raise ValueError(f"stream holds token ids outside the model's vocabulary 0..{model.vocab_size - 1}")


def stream_losses(model, stream, schemes, chunk):
    """Each scheme's losses (n - 1,) along ``stream`` (n,): a dict scheme -> tensor. None and dynamic share the pass
    over the first context_length tokens (dynamic changes nothing there); YaRN reads the whole stretch itself."""
    _check_reading(model, stream, schemes, chunk)
    trained, end = model.context_length, len(stream) - 1
    found = {}
    try:
        model.set_rotary_scaling(None)
        shared = model.new_caches()
        prefix = read_on(model, stream, shared, 0, trained, chunk)
        for scheme in schemes:
            model.set_rotary_scaling(scheme_scaling(scheme, trained))
            if scheme == "yarn":
                found[scheme] = read_on(model, stream, model.new_caches(), 0, end, chunk)
            else:
                found[scheme] = torch.cat((prefix, read_on(model, stream, copy.deepcopy(shared), trained, end, chunk)))
    finally:
        model.set_rotary_scaling(None)
    return found


def measure(model, streams, settings, progress=print):
    """The record for stretches (S, n): each scheme's loss by bin, by stretch and bin, and each stretch's mean past L."""
    check_course_decoder(model)
    require_token_ids("streams", streams, 2)
    require_callable("progress", progress)
    if not isinstance(settings, dict) or set(settings) != set(SIZES["full"]):
        raise TypeError(f"settings must be a dict with the keys of SIZES['full'], got {type_name(settings)}")
    started, each = time.perf_counter(), {scheme: [] for scheme in settings["schemes"]}
    for number, stream in enumerate(streams):
        for scheme, losses in stream_losses(model, stream, settings["schemes"], settings["chunk"]).items():
            each[scheme].append(losses)
        progress(f"[{time.perf_counter() - started:5.0f} s] stretch {number + 1} of {len(streams)} read")
    record = {"context_length": model.context_length, "stream_length": streams.shape[1] - 1, "streams": len(streams),
              "bin": settings["bin"], "chunk": settings["chunk"], "factor": FACTOR,
              "schemes": {scheme: SCHEMES[scheme] for scheme in settings["schemes"]}, "results": {}}
    for scheme, losses in each.items():
        losses = torch.stack(losses)  # (S, n - 1)
        record["results"][scheme] = {
            "loss_by_bin": bin_means(losses.mean(dim=0), settings["bin"]),
            "loss_by_stream_and_bin": bin_means(losses, settings["bin"]),
            "mean_within_context_by_stream": [round(v, 4) for v in losses[:, :model.context_length].mean(dim=1).tolist()],
            "mean_beyond_context_by_stream": [round(v, 4) for v in losses[:, model.context_length:].mean(dim=1).tolist()],
        }
    return record



def _tiny_model_and_streams(settings):
    """The tiny size's stand-ins: a small random LlamaLM (seeded) and random token stretches (S, n + 1)."""
    from attn.models.llama import LlamaLM

    torch.manual_seed(0)
    model = LlamaLM(**TINY_MODEL).eval()
    generator = torch.Generator().manual_seed(1)
    streams = torch.randint(TINY_MODEL["vocab_size"], (settings["streams"], settings["stream_length"] + 1), generator=generator)
    return model, streams


def run(out, size="full", progress=print):
    """Load SmolLM2 and the held-out novel (the tiny size: stand-ins), measure, write ``out``/RESULTS_NAME; returns it."""
    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    if size == "tiny":
        model, streams = _tiny_model_and_streams(settings)
        text = "random token ids (the tiny size checks the machinery only)"
    else:
        from attn.data.corpus import TITLES, austen
        from attn.models.lm import HELD_OUT
        from attn.pretrained import load

        novels = austen()
        model, tokenizer = load()
        tokens = torch.tensor(tokenizer.encode(novels[HELD_OUT]), dtype=torch.long)
        streams = held_out_streams(tokens, settings["stream_length"] + 1, settings["streams"])
        text = f"{settings['streams']} evenly spread stretches of {TITLES[HELD_OUT]}"
    record = {"size": size, "text": text, **measure(model, streams, settings, progress)}
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("Read SmolLM2-135M past its 8,192 trained positions, with and without dynamic NTK and "
               "YaRN scaling.")


def main(argv=None):
    durations = {"full": "about 14 minutes", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, durations, run, argv)
    means = {scheme: sum(values["mean_beyond_context_by_stream"]) / record["streams"]
             for scheme, values in record["results"].items()}
    print(f"Wrote {out / RESULTS_NAME}: past {record['context_length']} positions, "
          + ", ".join(f"{scheme} {value:.2f}" for scheme, value in means.items()) + " nats a token.")


if __name__ == "__main__":
    main()
