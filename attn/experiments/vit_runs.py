"""Lesson 23's measurement: a small Vision Transformer trained on Fashion-MNIST, over seeds, beside two baselines.

    python -m attn.experiments.vit_runs --out lessons/records            # at most about 45 minutes of one thread
    python -m attn.experiments.vit_runs --out lessons/records --size tiny  # seconds: the machinery only

The model: attn.models.vit.VisionTransformer with 7 x 7 patches (a 4 x 4 grid of 16 patches and a class token),
width 64, 4 heads, 4 layers, an MLP twice as wide. Five arms, each trained with seeds 0, 1 and 2 (every arm
with one seed reads the same batches in the same order):

- "learned": learned 2D positions (one vector per patch), as ViT;
- "rotary_2d": no position vectors; the patches' queries and keys turned by their row and column (2D rotary in
  its axial form, RoPE-Axial of Heo et al. 2024, base 100, rows and columns counted in patches from the top-left;
  the class token and registers are not turned);
- "registers": "learned" with REGISTERS register tokens (Darcet et al. 2024);
- two baselines on the same data, batches and stopping rule: "logistic" (one linear layer on the 784 pixels) and
  "cnn" (two 3 x 3 convolutions with 8 and 16 channels, each followed by a ReLU and a 2 x 2 max pool, then a
  linear layer).

Data: the 60,000 training pictures split once (seed 0) into TRAIN_COUNT to train on and VALID_COUNT to decide
when to stop; the 10,000 test pictures, read only at the end. Pixels scaled to [0, 1]. The stopping rule: every
EVAL_EVERY steps (batches of BATCH_SIZE, AdamW at a constant LEARNING_RATE) the validation accuracy is measured; training stops
once it has not risen by MIN_GAIN above its best for PATIENCE measurements in a row, or at MAX_STEPS (the record
says which). The weights at the best validation accuracy are the ones tested.

Measured on the test set: accuracy of every run; for the ViT arms, the attention distance by layer and head
(attn.vision.attention_distance, in patches, over ANALYSIS_COUNT test pictures); the class token's attention rollout
(attn.vision.attention_rollout) over ROLLOUT_COUNT test pictures; and a larger grid: each of CANVAS_COUNT test
pictures pasted on a black canvas of CANVAS x CANVAS pixels at each of the OFFSETS (patch-aligned, so every patch
holds the same pixels as at 28 x 28 and only the positions change; learned positions are resized to the 8 x 8 grid
by bicubic interpolation, as ViT does for a larger picture; rotary positions simply count further). For
"learned" and "registers": the residual norm of each token after each block and the attention each token receives,
split into the class token, the registers, background patches (no pixel above BACKGROUND) and object patches.
"""

import copy
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from attn.common.stats import paired_interval
from attn.common.validate import require_callable, type_name
from attn.experiments.records import check_out, settings_for, sized_command, write_record
from attn.models.vit import VisionTransformer
from attn.vision import attention_distance, attention_rollout

RESULTS_NAME = "vit_runs.json"
COMMAND = "python -m attn.experiments.vit_runs"
IMAGE, PATCH, EMBED_DIM, NUM_HEADS, NUM_LAYERS, MLP_RATIO, REGISTERS = 28, 7, 64, 4, 4, 2, 4
ARMS = ("learned", "rotary_2d", "registers", "logistic", "cnn")
VIT_ARMS = ("learned", "rotary_2d", "registers")
CANVAS, OFFSETS = 56, (0, 14, 28)  # a 56 x 56 canvas: an 8 x 8 grid; the picture at 9 patch-aligned places
BACKGROUND = 0.05  # a patch with no pixel above this is background
SIZES = {
    "full": {"seeds": [0, 1, 2], "train_count": 55_000, "valid_count": 5_000, "test_count": 10_000,
             "batch_size": 64, "learning_rate": 1e-3, "eval_every": 200, "patience": 4, "min_gain": 0.002,
             "max_steps": 8_000, "analysis_count": 500, "rollout_count": 4, "canvas_count": 1_000},
    "tiny": {"seeds": [0, 1], "train_count": 512, "valid_count": 128, "test_count": 128, "batch_size": 32,
             "learning_rate": 1e-3, "eval_every": 2, "patience": 1, "min_gain": 0.002, "max_steps": 4,
             "analysis_count": 16, "rollout_count": 2, "canvas_count": 16},
}
EVAL_CHUNK = 500  # pictures read at once at evaluation


class _SmallCNN(nn.Module):
    """The convolutional baseline: (B, 1, 28, 28) -> logits (B, 10)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(16 * 7 * 7, 10)

    def forward(self, images):
        return self.head(self.features(images).flatten(1))


class _Logistic(nn.Module):
    """Multinomial logistic regression on the pixels: (B, 1, 28, 28) -> logits (B, 10)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(IMAGE * IMAGE, 10)

    def forward(self, images):
        return self.linear(images.flatten(1))


def make_model(arm, seed):
    """The model of ``arm`` (one of ARMS), its weights drawn from ``seed``: pictures (B, 1, 28, 28) -> logits (B, 10)."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {', '.join(ARMS)}, got {type_name(arm)} {arm!r:.40}")
    torch.manual_seed(seed)
    if arm == "logistic":
        return _Logistic()
    if arm == "cnn":
        return _SmallCNN()
    return VisionTransformer(IMAGE, PATCH, EMBED_DIM, NUM_HEADS, NUM_LAYERS, 10, mlp_ratio=MLP_RATIO,
                             positions="rotary_2d" if arm == "rotary_2d" else "learned",
                             registers=REGISTERS if arm == "registers" else 0)


def _load_data(settings):
    """Fashion-MNIST as float tensors: {"train": (images (N, 1, 28, 28), labels (N,)), "valid": ..., "test": ...}."""
    from attn.data.fashion import fashion_mnist

    images, labels = fashion_mnist("train")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0)).numpy()
    train = order[:settings["train_count"]]
    valid = order[len(order) - settings["valid_count"]:]
    test_images, test_labels = fashion_mnist("test")

    def tensors(pixels, classes):  # only the pictures used are made floats
        return torch.from_numpy(np.ascontiguousarray(pixels)).float().div(255)[:, None], torch.from_numpy(classes).long()

    count = settings["test_count"]
    return {"train": tensors(images[train], labels[train]), "valid": tensors(images[valid], labels[valid]),
            "test": tensors(test_images[:count], test_labels[:count])}


def _predict(model, images):
    """Logits (N, 10) for images (N, 1, H, W), read EVAL_CHUNK at a time with no gradient."""
    model.eval()
    with torch.no_grad():
        return torch.cat([model(images[start:start + EVAL_CHUNK]) for start in range(0, len(images), EVAL_CHUNK)])


def _accuracy(model, images, labels):
    """The share of images whose largest logit is their label."""
    return (_predict(model, images).argmax(-1) == labels).float().mean().item()


def _train(arm, seed, data, settings, progress=print):
    """Train ``arm`` with ``seed`` to the stopping rule; returns (model at its best validation accuracy, a summary)."""
    model = make_model(arm, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["learning_rate"])
    images, labels = data["train"]
    generator = torch.Generator().manual_seed(1000 + seed)  # the same batches for every arm with this seed
    best, best_state, since, curve, step, started = -1.0, None, 0, [], 0, time.process_time()
    while step < settings["max_steps"]:
        model.train()
        batch = torch.randint(len(labels), (settings["batch_size"],), generator=generator)
        loss = functional.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % settings["eval_every"] == 0 or step == settings["max_steps"]:
            valid = _accuracy(model, *data["valid"])
            curve.append(round(valid, 4))
            if valid > best + settings["min_gain"]:
                best, best_state, since = valid, copy.deepcopy(model.state_dict()), 0
            else:
                since += 1
                if since >= settings["patience"]:
                    break
    seconds = time.process_time() - started  # CPU seconds, training and validation
    model.load_state_dict(best_state)
    stopped = since >= settings["patience"]
    progress(f"{arm}, seed {seed}: {step} steps ({'stopped' if stopped else 'at the step limit'}), validation "
             f"{best:.4f} ({seconds:.0f} CPU s)")
    return model.eval(), {"arm": arm, "seed": seed, "steps": step, "stopped": stopped, "curve": curve,
                          "valid_accuracy": round(best, 4), "test_accuracy": round(_accuracy(model, *data["test"]), 4),
                          "cpu_seconds": round(seconds, 1)}


def _canvas(images, row, col, size=CANVAS):
    """images (N, 1, 28, 28) pasted at (row, col) on black canvases (N, 1, size, size)."""
    out = images.new_zeros(images.shape[0], images.shape[1], size, size)
    out[..., row:row + images.shape[-2], col:col + images.shape[-1]] = images
    return out


def _canvas_accuracy(model, images, labels):
    """Accuracy at each of the OFFSETS x OFFSETS placements on the canvas: {"row,col": accuracy}."""
    return {f"{row},{col}": round(_accuracy(model, _canvas(images, row, col), labels), 4) for row in OFFSETS for col in OFFSETS}


def _background_patches(images):
    """(N, 16) bool: the patches of images (N, 1, 28, 28) with no pixel above BACKGROUND."""
    grid = images.reshape(images.shape[0], IMAGE // PATCH, PATCH, IMAGE // PATCH, PATCH)
    return grid.amax(dim=(2, 4)).flatten(1) <= BACKGROUND


def _split_by_token(values, background, prefix, registers):
    """values (N, T) per picture and token -> the mean over the class token, registers, background and object patches."""
    patches = values[:, prefix:]
    out = {"class": round(values[:, 0].mean().item(), 4)}
    if registers:
        out["registers"] = [round(value, 4) for value in values[:, 1:prefix].mean(0).tolist()]
    out["background"] = round(patches[background].mean().item(), 4)
    out["object"] = round(patches[~background].mean().item(), 4)
    return out


def _read_vit(model, images):
    """What lesson 23 reads from one trained ViT over ``images`` (N, 1, 28, 28): attention distance (layer, head), the
    residual norm and the attention received by token kind after each layer, and the largest patch norm's place."""
    registers = model.registers
    prefix = 1 + registers
    with torch.no_grad():
        _, weights = model(images, need_weights=True)  # (L, N, H, T, T)
        states = model.residual_stream(images)[1:]  # (L, N, T, E): after each block
    grid = IMAGE // PATCH
    distance = attention_distance(weights, grid, grid, prefix=prefix).mean(1)  # (L, H)
    background = _background_patches(images)
    norms = states.norm(dim=-1)  # (L, N, T)
    received = weights[..., prefix:, :].mean(dim=(2, 3))  # (L, N, T): what each token gets from the patch queries
    largest = norms[:, :, prefix:].argmax(-1)  # (L, N): the patch with the largest norm in each picture
    median = norms[:, :, prefix:].median(-1).values
    return {"distance": [[round(value, 3) for value in layer] for layer in distance.tolist()],
            "norm": [_split_by_token(layer, background, prefix, registers) for layer in norms],
            "received": [_split_by_token(layer, background, prefix, registers) for layer in received],
            "largest_patch_on_background": [round(background.gather(1, layer[:, None]).float().mean().item(), 4)
                                            for layer in largest],
            "largest_over_median_patch_norm": [round((norms[i, :, prefix:].amax(-1) / median[i]).mean().item(), 3)
                                               for i in range(len(norms))],
            "background_share": round(background.float().mean().item(), 4)}


def _interval(first, second):
    mean, low, high = paired_interval(first, second)
    return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}



def run(out, size="full", progress=print):
    """Train every arm with every seed, read the ViTs, write ``out``/RESULTS_NAME; returns the record."""
    settings = settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    data = _load_data(settings)
    runs = [summary for seed in settings["seeds"] for summary in _seed_runs(seed, data, settings, progress)]
    return write_record(out, RESULTS_NAME, _record(runs, settings, size), COMMAND, size)


def _seed_runs(seed, data, settings, progress=print):
    """Every arm trained with ``seed`` and read: a list of run summaries, in the order of ARMS."""
    return [_arm_run(arm, seed, data, settings, progress) for arm in ARMS]


def _arm_run(arm, seed, data, settings, progress=print):
    """One run: ``arm`` trained with ``seed`` and, for a ViT, read; its summary (a dict). Runs are independent: each
    seeds its own weights and batches, so any subset of them can be run apart and gives the same summaries."""
    test_images, test_labels = data["test"]
    model, summary = _train(arm, seed, data, settings, progress)
    if arm in VIT_ARMS:
        count = settings["canvas_count"]
        summary["canvas_accuracy"] = _canvas_accuracy(model, test_images[:count], test_labels[:count])
        summary.update(_read_vit(model, test_images[:settings["analysis_count"]]))
        with torch.no_grad():
            _, weights = model(test_images[:settings["rollout_count"]], need_weights=True)
        rollout = attention_rollout(weights)[:, 0, 1 + model.registers:]  # (R, 16): class token over patches
        summary["rollout"] = [[round(value, 4) for value in row] for row in rollout.tolist()]
    return summary


def _record(runs, settings, size):
    """The record of ``runs`` (every arm and seed), before write_record adds its provenance."""
    stopped = sum(run["stopped"] for run in runs)
    minutes = sum(run["cpu_seconds"] for run in runs) / 60
    return {"size": size, "settings": settings, "arms": list(ARMS), "model": {
        "image": IMAGE, "patch": PATCH, "embed_dim": EMBED_DIM, "num_heads": NUM_HEADS, "num_layers": NUM_LAYERS,
        "mlp_ratio": MLP_RATIO, "registers": REGISTERS}, "canvas": {"size": CANVAS, "offsets": list(OFFSETS)},
        "background_threshold": BACKGROUND, "runs": runs, "comparisons": _comparisons(runs, settings["seeds"]),
        "text": ("Fashion-MNIST from Debian's dataset-fashion-mnist. Each run trains until its validation accuracy "
                 "stops rising (the stopping rule above), at a constant learning rate (AdamW, no warm-up and no "
                 "decay, so that a schedule cannot end a run); the step limit is a guard, set so that the whole "
                 "record fits in about 45 minutes of one CPU thread (a ViT step of 64 pictures takes 0.03 to 0.05 CPU "
                 "seconds; 7 x 7 patches make a 4 x 4 grid). The validation pictures were raised to 5,000 so that "
                 "the rule is not ended by a lucky measurement. "
                 f"{stopped} of the {len(runs)} runs were ended by the rule and {len(runs) - stopped} by the step limit "
                 f"(each run's 'stopped'); training took {minutes:.0f} CPU minutes in all (each run's 'cpu_seconds').")}


def _comparisons(runs, seeds):
    """Paired intervals over seeds: test accuracy of each pair of arms that the lesson compares, and the canvas."""
    def values(arm, key="test_accuracy"):
        chosen = {run["seed"]: run for run in runs if run["arm"] == arm}
        if key == "canvas":
            return [sum(chosen[seed]["canvas_accuracy"].values()) / len(chosen[seed]["canvas_accuracy"]) for seed in seeds]
        return [chosen[seed][key] for seed in seeds]

    return {"learned_minus_logistic": _interval(values("learned"), values("logistic")),
            "learned_minus_cnn": _interval(values("learned"), values("cnn")),
            "rotary_minus_learned": _interval(values("rotary_2d"), values("learned")),
            "rotary_minus_learned_canvas": _interval(values("rotary_2d", "canvas"), values("learned", "canvas")),
            "registers_minus_learned": _interval(values("registers"), values("learned"))}


DESCRIPTION = ("Train a small Vision Transformer on Fashion-MNIST (learned or 2D rotary positions, with or without "
               "registers) beside logistic regression and a small CNN, over seeds, and read its attention.")


def main(argv=None):
    durations = {"full": "at most about 45 minutes of one thread", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, durations, run, argv)
    mean = {arm: sum(r["test_accuracy"] for r in record["runs"] if r["arm"] == arm) / len(record["settings"]["seeds"])
            for arm in ARMS}
    print(f"Wrote {out / RESULTS_NAME}: test accuracy " + ", ".join(f"{arm} {mean[arm]:.3f}" for arm in ARMS) + ".")


if __name__ == "__main__":
    main()
