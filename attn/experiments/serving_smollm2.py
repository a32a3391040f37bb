"""Lesson 19's batching on the real model: static batches against continuous batching on SmolLM2-135M.

    python -m attn.experiments.serving_smollm2 --out lessons/records      # about 8 minutes, one thread
    python -m attn.experiments.serving_smollm2 --out DIR --size tiny      # seconds (needs SmolLM2 and the corpus)

The requests are drawn as ``serving_runs`` draws its batching requests from *Persuasion* (16 paragraphs cut to 48
tokens, each asking for 4 to 48 new tokens, seed 0), here in SmolLM2's tokens, and measured as it measures them
(``serving_runs.batching``): passes, tokens decoded, timed runs in pairs with the order alternating, each kind of
pass's median time, the longest prompt read alone and the model's own forward pass by its rows, on one thread.
Lesson 13's model has 2.6 million weights and SmolLM2 135 million: the record says what continuous batching gains
on the larger model, and what a pass's rows cost it.

The record, ``serving_smollm2.json``: ``size``, ``settings``, ``model`` (what was served, and its ``parameters``),
``batching`` (as ``serving_runs``' record has it), ``seconds`` (the command's wall time).
"""

import time

from attn.common.validate import require_callable
from attn.experiments.records import check_out, settings_for, sized_command, write_record
from attn.experiments.serving_runs import SETTINGS, austen_paragraphs, batch_requests, batching
from attn.serving.runner import check_servable

RESULTS_NAME = "serving_smollm2.json"
COMMAND = "python -m attn.experiments.serving_smollm2"
BATCHING = {name: SETTINGS[name] for name in ("batch_requests", "batch_size", "batch_prompt", "batch_new_tokens", "seed")}
SIZES = {"full": {**BATCHING, "repeats": 10},
         "tiny": {**BATCHING, "batch_requests": 4, "batch_size": 2, "batch_prompt": 8, "batch_new_tokens": [2, 3],
                  "repeats": 2}}
DESCRIPTION = ("Static batches against continuous batching on SmolLM2-135M (lesson 19): passes, tokens decoded, and "
               "timed pairs of runs on one thread.")


def run(out, size="full", progress=print):
    """Time SmolLM2 serving the batching requests and write the record to ``out``/RESULTS_NAME (returned too).
    A folder it cannot write, an unknown size or a progress that is not a function is refused before any loading."""
    check_out(out)
    settings = settings_for(SIZES, size)
    require_callable("progress", progress)
    from attn.pretrained import load

    started = time.perf_counter()
    model, tokenizer = load()
    requests = batch_requests(austen_paragraphs(tokenizer), settings)
    dtype = str(model.token_embedding.weight.dtype).replace("torch.", "")
    record = {"size": size, "settings": settings,
              "model": {"name": f"SmolLM2-135M (attn.pretrained.load()), {dtype}",
                        "parameters": sum(parameter.numel() for parameter in model.parameters())},
              "batching": batching(check_servable(model), requests, settings, progress)}
    record["seconds"] = time.perf_counter() - started
    write_record(out, RESULTS_NAME, record, COMMAND, size)
    return record


def main(argv=None):
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, {"full": "about 8 minutes", "tiny": "seconds"},
                                run, argv)
    print(f"Wrote {out / RESULTS_NAME} in {record['seconds']:.0f} s.")


if __name__ == "__main__":
    main()
