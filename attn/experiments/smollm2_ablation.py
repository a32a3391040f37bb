"""Lesson 16's ablation of SmolLM2's induction heads, with the controls its first version lacked.

    python -m attn.experiments.smollm2_ablation --out lessons/records   # about 8 minutes, one thread
    python -m attn.experiments.smollm2_ablation --out DIR --size tiny   # seconds (needs SmolLM2 and the corpus)

``pretrained_reading`` removed the 10 heads with the highest induction scores and, against that, 10 heads drawn
at random from the other 260, five times. Its rival explanation is not ruled out by that control: the top heads
all sit in layers 17 to 24, and removing any 10 heads of those layers might hurt copying as much, whatever they
do. So this command draws two controls, many times each, on the same 16 passages seen twice:

- uniform: 10 heads drawn from the 260 others, as before (its first five draws are ``pretrained_reading``'s);
- layer-matched: for each removed top head, a head drawn from the other heads of the same layer, so that a draw
  removes as many heads from each layer as the top 10 do.

The record (``smollm2_ablation.json``): every draw's heads and its first- and second-copy losses by passage, and
for each control the top 10 minus the control's mean with a 95% interval that includes both sources of
variation, the passages and the draws (a two-way bootstrap: passages and draws resampled independently, seeded).
"""

import math
import time

import torch

from attn.common.validate import require_callable
from attn.experiments import austen_heads
from attn.experiments.records import check_out, settings_for, sized_command, write_record
from attn.experiments.smollm2_reading import top_heads

RESULTS_NAME = "smollm2_ablation.json"
COMMAND = "python -m attn.experiments.smollm2_ablation"
SIZES = {
    "full": {"copy_passages": 16, "passage_length": 64, "top_heads": 10, "draws": 20, "resamples": 4000, "seed": 0},
    "tiny": {"copy_passages": 2, "passage_length": 8, "top_heads": 2, "draws": 2, "resamples": 200, "seed": 0},
}


def _uniform_draw(top, num_layers, num_heads, generator):
    """As many heads as ``top``, drawn without replacement from all heads not in ``top``."""
    pool = [(layer, head) for layer in range(num_layers) for head in range(num_heads) if (layer, head) not in top]
    return [pool[index] for index in torch.randperm(len(pool), generator=generator)[:len(top)].tolist()]


def _layer_matched_draw(top, num_heads, generator):
    """For each head of ``top``, another head of its layer (not in ``top``), without replacement within a layer."""
    drawn = []
    for layer in sorted({layer for layer, _ in top}):
        wanted = sum(1 for top_layer, _ in top if top_layer == layer)
        others = [head for head in range(num_heads) if (layer, head) not in top]
        drawn += [(layer, others[index]) for index in torch.randperm(len(others), generator=generator)[:wanted].tolist()]
    return drawn


def _two_way_interval(top, control, resamples, seed):
    """Mean of top - control over passages and draws, and a 95% bootstrap interval resampling both; top (N,),
    control (D, N) losses."""
    generator = torch.Generator().manual_seed(seed)
    draws, passages = control.shape
    differences = top.double()[None] - control.double()  # (D, N)
    means = []
    for _ in range(resamples):
        rows = torch.randint(draws, (draws,), generator=generator)
        columns = torch.randint(passages, (passages,), generator=generator)
        means.append(differences[rows][:, columns].mean())
    means = torch.stack(means).sort().values
    low, high = means[int(0.025 * resamples)].item(), means[math.ceil(0.975 * resamples) - 1].item()
    return {"mean": round(differences.mean().item(), 4), "low": round(low, 4), "high": round(high, 4),
            "passages": passages, "draws": draws, "resamples": resamples}


def _rounded(values):
    return [[round(value, 4) for value in row] for row in values.tolist()] if values.dim() == 2 else [
        round(value, 4) for value in values.tolist()]


@torch.no_grad()
def _measure(model, tokens, settings, progress):
    started = time.perf_counter()

    def step(what):
        progress(f"[{time.perf_counter() - started:5.0f} s] {what}")

    repeated = austen_heads.repeated_passages(tokens, settings["copy_passages"], settings["passage_length"])  # (N, 2P)
    induction = []
    for passage in repeated:  # one at a time: the weights of 270 heads are large
        _, weights = model(passage[None], need_weights=True)
        induction.append(austen_heads.copy_scores(weights, settings["passage_length"])[0])
    top = top_heads(torch.stack(induction).mean(dim=0), settings["top_heads"])
    first, second = austen_heads.copy_losses_by_passage(model, repeated)
    with austen_heads.ablate_heads(model, top):
        top_first, top_second = austen_heads.copy_losses_by_passage(model, repeated)
    step(f"top {len(top)} removed: second copy {top_second.mean():.3f} (nothing removed {second.mean():.3f})")
    record = {"passages": f"the first {settings['copy_passages']} passages of {settings['passage_length']} tokens of "
                          "Persuasion, each seen twice",
              "settings": dict(settings), "top_induction_heads": [list(pair) for pair in top],
              "first_copy_loss": _rounded(first), "second_copy_loss": _rounded(second),
              "top_first_copy_loss": _rounded(top_first), "top_second_copy_loss": _rounded(top_second), "controls": {}}
    uniform = torch.Generator().manual_seed(settings["seed"])  # pretrained_reading's first draws
    matched = torch.Generator().manual_seed(settings["seed"] + 1)
    draw = {"uniform": lambda: _uniform_draw(set(top), len(model.blocks), model.num_heads, uniform),
            "layer-matched": lambda: _layer_matched_draw(set(top), model.num_heads, matched)}
    for name, drawing in draw.items():
        heads, firsts, seconds = [], [], []
        for index in range(settings["draws"]):
            heads.append(drawing())
            with austen_heads.ablate_heads(model, heads[-1]):
                losses = austen_heads.copy_losses_by_passage(model, repeated)
            firsts.append(losses[0])
            seconds.append(losses[1])
            step(f"{name} draw {index + 1}: second copy {seconds[-1].mean():.3f}")
        firsts, seconds = torch.stack(firsts), torch.stack(seconds)  # (D, N)
        record["controls"][name] = {
            "heads": [[list(pair) for pair in drawn] for drawn in heads],
            "first_copy_loss": _rounded(firsts), "second_copy_loss": _rounded(seconds),
            "top_minus_control_second_copy": _two_way_interval(top_second, seconds, settings["resamples"], settings["seed"]),
            "top_minus_control_first_copy": _two_way_interval(top_first, firsts, settings["resamples"], settings["seed"]),
        }
    return record



def run(out, size="full", progress=print):
    """Load SmolLM2 and the held-out novel, measure, write ``out``/RESULTS_NAME; returns the record."""

    from attn.data.corpus import austen
    from attn.models.lm import HELD_OUT
    from attn.pretrained import load

    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    text = austen()[HELD_OUT]  # the corpus first: a missing one costs nothing
    model, tokenizer = load()
    tokens = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    record = {"size": size, **_measure(model, tokens, settings, progress)}
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("Remove SmolLM2's top induction heads against many draws of random and layer-matched heads, with "
               "intervals over passages and draws.")


def main(argv=None):
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, {"full": "about 8 minutes", "tiny": "seconds"},
                                run, argv)
    matched = record["controls"]["layer-matched"]["top_minus_control_second_copy"]
    print(f"Wrote {out / RESULTS_NAME}: removing the top induction heads raises the second copy's loss by "
          f"{matched['mean']:.2f} nats a token more than removing as many heads of the same layers.")


if __name__ == "__main__":
    main()
