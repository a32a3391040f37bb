"""Training lesson 13's language model: the data (five novels to train on, one held out), the baselines, the
seeded and resumable training loop with its progress bar, the files it writes, and the command line
(``python -m attn.lm train --out DIR``, whose code this is).
"""

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional

from attn.common.arguments import number_argument, steps_argument, threads_argument, whole_number_argument
from attn.common.destinations import file_problem, folder_argument, output_folder, write_text, write_through_temporary
from attn.common.progress import Progress
from attn.common.sizes import check_allocation
from attn.common.validate import (
    positive_int,
    require_module,
    require_token_ids,
    seed_value,
    type_name,
    whole_count,
)
from attn.data.corpus import TITLES, austen
from attn.data.tokenizer import Tokenizer, train_tokenizer
from attn.models.lm import (
    CHECKPOINT_NAME,
    HELD_OUT,
    LOG_NAME,
    SIZES,
    TOKENIZER_NAME,
    TRAIN_COMMAND,
    WEIGHTS_NAME,
    AustenLM,
    model_arguments,
)
from attn.models.lm_checks import (
    _check_state,
    _corpus_folder_argument,
    _corpus_or_error,
    check_config,
    load_checkpoint,
)
from attn.models.ngram import baseline_log


def split_novels(novels):
    """(training texts, held-out text): every novel but HELD_OUT, and HELD_OUT."""
    if not isinstance(novels, dict) or HELD_OUT not in novels or not all(isinstance(t, str) for t in novels.values()):
        raise TypeError(f"novels must be a dict of name -> text holding {HELD_OUT!r}, as attn.corpus.austen() gives")
    return [text for name, text in novels.items() if name != HELD_OUT], novels[HELD_OUT]


def token_tensor(tokenizer, texts):
    """One int64 tensor (N,) of the texts' tokens, one text after another."""
    if not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(f"tokenizer must be an attn.data.tokenizer.Tokenizer, got {type_name(tokenizer)}")
    if not isinstance(texts, list | tuple) or not all(isinstance(text, str) for text in texts):
        raise TypeError(f"texts must be a list of str, got {type_name(texts)}")
    return torch.tensor([token for text in texts for token in tokenizer.encode(text)], dtype=torch.long)


def random_batch(tokens, batch_size, length, generator):
    """Inputs and targets (B, length), windows starting at random places of ``tokens`` (N,)."""
    require_token_ids("tokens", tokens, 1)
    batch_size, length = positive_int("batch_size", batch_size), positive_int("length", length)
    if length >= len(tokens):
        raise ValueError(f"windows of {length} tokens need more than {length} tokens, got {len(tokens)}")
    check_allocation(f"a batch of {batch_size} x {length + 1} tokens", 16 * batch_size * (length + 1))
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type_name(generator)}")
    starts = torch.randint(0, len(tokens) - length, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(length + 1)  # (length + 1,)
    windows = tokens[starts[:, None] + offsets]  # (B, length + 1)
    return windows[:, :-1], windows[:, 1:]


def held_out_windows(tokens, length, count=None):
    """Non-overlapping windows of ``tokens`` (N,): inputs and targets (W, length); the first ``count`` or all."""
    require_token_ids("tokens", tokens, 1)
    length = positive_int("length", length)
    count = None if count is None else positive_int("count", count)
    if len(tokens) <= length:
        raise ValueError(f"a window of {length} tokens and its targets need more than {length} tokens, got {len(tokens)}")
    total = (len(tokens) - 1) // length
    count = total if count is None else min(count, total)
    inputs = tokens[:count * length].view(count, length)
    targets = tokens[1:count * length + 1].view(count, length)
    return inputs, targets


@torch.no_grad()
def mean_loss(model, inputs, targets, batch_size=32):
    """Mean next-token cross-entropy in nats over every target of ``inputs``, ``targets`` (W, T)."""
    require_module("model", model)
    require_token_ids("inputs", inputs, 2)
    require_token_ids("targets", targets, 2)
    if inputs.shape != targets.shape or targets.numel() == 0:
        raise ValueError(f"inputs and targets must both be (W, T), not empty, got {tuple(inputs.shape)}, {tuple(targets.shape)}")
    batch_size = positive_int("batch_size", batch_size)
    total = 0.0
    for start in range(0, len(inputs), batch_size):
        logits = model(inputs[start:start + batch_size])  # (b, T, V)
        chunk = targets[start:start + batch_size]
        total += functional.cross_entropy(logits.flatten(0, 1), chunk.flatten(), reduction="sum").item()
    return total / targets.numel()


def learning_rate_at(step, config):
    """Linear warm-up over warmup_steps, then a cosine fall to a tenth of the peak at the last step."""
    check_config(config)
    whole_count("step", step)
    peak, warmup, steps = config["learning_rate"], config["warmup_steps"], config["steps"]
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model, config):
    """AdamW, with weight decay on the weight matrices only (not on biases, norms)."""
    require_module("model", model)
    check_config(config)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": config["weight_decay"]}, {"params": others, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config["learning_rate"], betas=(0.9, 0.95))


def prepare(config, corpus=None):
    """Tokenizer trained on the training novels, and the training and held-out tokens (N,), (M,)."""
    check_config(config)
    novels = austen(corpus)
    training_texts, held_out_text = split_novels(novels)
    tokenizer = train_tokenizer(training_texts, config["vocab_size"])
    return tokenizer, token_tensor(tokenizer, training_texts), token_tensor(tokenizer, [held_out_text])


def new_state(config):
    """The seeded start: model, optimizer, batch generator, step 0, empty curve."""
    check_config(config)
    seed_value(config["seed"])
    torch.manual_seed(config["seed"])
    model = AustenLM(**model_arguments(config))
    generator = torch.Generator().manual_seed(config["seed"])
    curve = {"step": [], "train_loss": [], "held_out_loss": []}
    return {"model": model, "optimizer": make_optimizer(model, config), "generator": generator, "step": 0,
            "curve": curve, "seconds": 0.0}


def save_checkpoint(path, state, config):
    """The training ``state`` and its ``config`` into the file ``path`` (read back by load_checkpoint)."""
    _check_state(state)
    check_config(config)
    problem = file_problem(path) if isinstance(path, str | Path) else f"path must be a file's path, got {type_name(path)}"
    if problem is not None:
        raise ValueError(problem)
    saved = {
        "config": config, "model": state["model"].state_dict(), "optimizer": state["optimizer"].state_dict(),
        "generator": state["generator"].get_state(), "rng": torch.get_rng_state(), "step": state["step"],
        "curve": state["curve"], "seconds": state["seconds"],
        "command": _command(), "threads": torch.get_num_threads(),
    }
    write_through_temporary(path, lambda temporary: torch.save(saved, temporary))  # a kill mid-write keeps the last one


def resume_state(path, config):
    """The state saved at ``path``, or a ValueError sentence if it was trained with other settings."""
    saved = load_checkpoint(path)
    if saved["config"] != config:
        raise ValueError(f"{path} holds a training with other settings; remove it, or give another --out")
    state = new_state(config)
    state["model"].load_state_dict(saved["model"])
    state["optimizer"].load_state_dict(saved["optimizer"])
    state["generator"].set_state(saved["generator"])
    torch.set_rng_state(saved["rng"])
    state.update(step=saved["step"], curve=saved["curve"], seconds=saved["seconds"])
    return state


def train(config, out, corpus=None, stream=None):
    """Train (or resume) into folder ``out``; returns the log written to out/LOG_NAME."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer, train_tokens, held_out_tokens = prepare(config, corpus)
    checkpoint = out / CHECKPOINT_NAME
    state = resume_state(checkpoint, config) if checkpoint.exists() else new_state(config)
    if state["step"]:
        print(f"Resuming from step {state['step']} ({checkpoint})", file=stream or sys.stderr, flush=True)
    probe = held_out_windows(held_out_tokens, config["context_length"], config["eval_windows"])
    model, optimizer, generator = state["model"], state["optimizer"], state["generator"]
    tokens_per_step = config["batch_size"] * config["context_length"]
    progress = Progress(config["steps"], state["step"], stream)
    started = time.perf_counter() - state["seconds"]
    while state["step"] < config["steps"]:
        step = state["step"]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, config)
        model.train()
        inputs, targets = random_batch(train_tokens, config["batch_size"], config["context_length"], generator)
        loss = functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        state["step"] = step + 1
        held_out = None
        if state["step"] % config["eval_every"] == 0 or state["step"] == config["steps"]:
            model.eval()
            held_out = mean_loss(model, *probe)
            state["curve"]["step"].append(state["step"])
            state["curve"]["train_loss"].append(round(loss.item(), 4))
            state["curve"]["held_out_loss"].append(round(held_out, 4))
            state["seconds"] = time.perf_counter() - started
            save_checkpoint(checkpoint, state, config)
        progress.show(state["step"], loss.item(), tokens_per_step, held_out)
    progress.close()
    model.eval()
    log = final_log(config, state, tokenizer, train_tokens, held_out_tokens)
    log["provenance"]["seconds"] = round(time.perf_counter() - started, 1)
    write_outputs(out, model, tokenizer, config, log)
    checkpoint.unlink()
    return log


def export(out, corpus=None):
    """Ship the last checkpoint in folder ``out`` as if training had ended there; returns the log.

    For a training that cannot run to its last step: weights, tokenizer and log are written from the
    checkpoint, the log saying at which step of how many it stopped; the checkpoint stays, so the
    same ``train`` command can still finish the run.
    """
    checkpoint = Path(out) / CHECKPOINT_NAME
    if not checkpoint.is_file():
        raise FileNotFoundError(f"{checkpoint} does not exist: there is no interrupted training in {out} to export")
    saved = load_checkpoint(checkpoint)
    config = saved["config"]
    tokenizer, train_tokens, held_out_tokens = prepare(config, corpus)
    state = resume_state(checkpoint, config)
    state["model"].eval()
    log = final_log(config, state, tokenizer, train_tokens, held_out_tokens)
    log["provenance"]["seconds"] = round(state["seconds"], 1)
    log["provenance"]["command"] = saved.get("command", f"{TRAIN_COMMAND} --out {out}")
    log["provenance"]["threads"] = saved.get("threads", "not recorded in the checkpoint")
    log["provenance"]["stopped"] = (
        f"stopped at step {state['step']} of {config['steps']}, its last checkpoint, and shipped with "
        f"'python -m attn.lm export --out {out}'; the train command resumes it from there")
    write_outputs(Path(out), state["model"], tokenizer, config, log)
    return log


def refresh_baselines(out, corpus=None):
    """Recount the baselines of the log in folder ``out`` (its tokenizer retrained, as training does); returns the log.

    For a shipped model whose log predates a baseline: the weights and the network's numbers stay as they are.
    """
    path = Path(out) / LOG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: train a model there first ('{TRAIN_COMMAND} --out {out}')")
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
        config = log["config"]
    except (ValueError, KeyError, TypeError):  # not JSON, not UTF-8, or not a training log
        raise ValueError(f"{path} is not a training log of '{TRAIN_COMMAND}': train a model there again") from None
    tokenizer, train_tokens, held_out_tokens = prepare(config, corpus)
    if tokenizer.backend.to_str() != Tokenizer.load(Path(out) / TOKENIZER_NAME).backend.to_str():
        raise ValueError(f"the tokenizer trained now differs from {Path(out) / TOKENIZER_NAME}: not the same corpus?")
    _, targets = held_out_windows(held_out_tokens, config["context_length"])
    log["baselines"] = baseline_log(train_tokens, held_out_tokens[:targets.numel() + 1], config, tokenizer.vocab_size)
    write_text(path, json.dumps(log, indent=1) + "\n")
    return log


def final_log(config, state, tokenizer, train_tokens, held_out_tokens):
    """The JSON log: settings, curve, held-out loss and perplexity beside the baselines, provenance."""
    check_config(config)
    _check_state(state)
    if not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(f"tokenizer must be an attn.data.tokenizer.Tokenizer, got {type_name(tokenizer)}")
    inputs, targets = held_out_windows(held_out_tokens, config["context_length"])
    loss = mean_loss(state["model"], inputs, targets)
    measured = {"held_out_loss": round(loss, 4), "held_out_perplexity": round(math.exp(loss), 2)}
    base = baseline_log(train_tokens, held_out_tokens[:targets.numel() + 1], config, tokenizer.vocab_size)
    parameters = sum(p.numel() for p in state["model"].parameters())
    return {
        "config": config,
        "held_out_novel": TITLES[HELD_OUT],
        "training_novels": [TITLES[name] for name in TITLES if name != HELD_OUT],
        "training_tokens": len(train_tokens), "held_out_tokens": len(held_out_tokens),
        "parameters": parameters, "tokenizer_vocab_size": tokenizer.vocab_size,
        "steps_done": state["step"], "curve": state["curve"], **measured, "baselines": base,
        "provenance": {
            "command": _command(),
            "seed": config["seed"], "python": platform.python_version(), "torch": torch.__version__,
            "tokenizers": _tokenizers_version(), "threads": torch.get_num_threads(),
            "finished": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "weights": "stored as float16 (half the bytes); loaded as float32",
        },
    }


def _command():
    """The training command as typed, when this process runs it; else the bare command."""
    return " ".join([TRAIN_COMMAND, *sys.argv[2:]]) if sys.argv[1:2] == ["train"] else TRAIN_COMMAND


def _tokenizers_version():
    import tokenizers

    return tokenizers.__version__


def write_outputs(out, model, tokenizer, config, log):
    """Weights (16-bit), tokenizer and log into folder ``out``."""
    out = output_folder(out, [WEIGHTS_NAME, TOKENIZER_NAME, LOG_NAME])
    require_module("model", model)
    check_config(config)
    if not callable(getattr(tokenizer, "save", None)) or not isinstance(log, dict):
        raise TypeError(f"tokenizer must be a Tokenizer and log a dict, got {type_name(tokenizer)}, {type_name(log)}")
    weights = {name: tensor.half() for name, tensor in model.state_dict().items() if name != "readout.weight"}
    torch.save({"config": config, "weights": weights}, out / WEIGHTS_NAME)
    tokenizer.save(out / TOKENIZER_NAME)
    write_text(out / LOG_NAME, json.dumps(log, indent=1) + "\n")



CORPUS_HELP = "folder of the novels (default: where python -m attn.corpus writes)"
SEED_ARGUMENT = whole_number_argument("--seed", 0, 2**64 - 1, "what PyTorch's generator takes")
DROPOUT_ARGUMENT = number_argument("--dropout", 0.0, 1.0, "a probability of dropping", below_maximum=True)
RATE_ARGUMENT = number_argument("--learning-rate", 1e-6, 1.0, "larger steps than 1 diverge")
OUTPUT_FOLDER = folder_argument(WEIGHTS_NAME, TOKENIZER_NAME, LOG_NAME, CHECKPOINT_NAME)  # --out, checked first


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attn.lm", description="The course's Austen language model.")
    commands = parser.add_subparsers(dest="command", required=True)
    trainer = commands.add_parser("train", help="train the model (seeded; resumes after an interruption)")
    trainer.add_argument("--out", required=True, type=OUTPUT_FOLDER, help="folder for weights, tokenizer and log")
    trainer.add_argument("--size", choices=sorted(SIZES), default="full", help="full (the shipped model) or tiny (seconds)")
    trainer.add_argument("--steps", type=steps_argument(), default=None, help="training steps (default: the size's)")
    trainer.add_argument("--seed", type=SEED_ARGUMENT, default=None, help="seed (default 0)")
    trainer.add_argument("--dropout", type=DROPOUT_ARGUMENT, default=None, help="dropout (default: the size's)")
    trainer.add_argument("--learning-rate", type=RATE_ARGUMENT, default=None,
                         help="peak learning rate (default: the size's)")
    trainer.add_argument("--corpus", type=_corpus_folder_argument, default=None, help=CORPUS_HELP)
    trainer.add_argument("--threads", type=threads_argument(), default=1, help="math threads (default 1: same sums everywhere)")
    refresher = commands.add_parser("baselines", help="recount the baselines in a trained model's log")
    refresher.add_argument("--out", required=True, type=OUTPUT_FOLDER, help="folder holding austen_training.json")
    refresher.add_argument("--corpus", type=_corpus_folder_argument, default=None, help=CORPUS_HELP)
    exporter = commands.add_parser("export", help="ship the last checkpoint of a training that could not finish")
    exporter.add_argument("--out", required=True, type=OUTPUT_FOLDER, help="folder holding austen_checkpoint.pt")
    exporter.add_argument("--corpus", type=_corpus_folder_argument, default=None, help=CORPUS_HELP)
    args = parser.parse_args(argv)
    _corpus_or_error(parser, args.corpus)
    if args.command in ("baselines", "export"):
        try:
            log = (refresh_baselines if args.command == "baselines" else export)(args.out, args.corpus)
        except (ValueError, FileNotFoundError) as error:
            raise SystemExit(str(error)) from None
        base = log["baselines"]
        print(f"Baselines: unigram {base['unigram_perplexity']:.1f}, bigram {base['bigram_perplexity']:.1f}, "
              f"Kneser-Ney trigram {base['kneser_ney_trigram_perplexity']:.1f} (perplexity on the held-out novel)."
              if args.command == "baselines" else
              f"Exported step {log['steps_done']} of {log['config']['steps']}: held-out loss {log['held_out_loss']:.3f}.")
        return
    config = dict(SIZES[args.size])
    config.update({key: value for key, value in (("steps", args.steps), ("seed", args.seed), ("dropout", args.dropout),
                                                     ("learning_rate", args.learning_rate)) if value is not None})
    torch.set_num_threads(args.threads)
    try:
        log = train(config, args.out, args.corpus)
    except (ValueError, FileNotFoundError) as error:  # a checkpoint of other settings, or not one at all
        raise SystemExit(str(error)) from None
    print(f"Held-out loss on {log['held_out_novel']}: {log['held_out_loss']:.3f} nats per token "
          f"(perplexity {log['held_out_perplexity']:.1f}); unigram {log['baselines']['unigram_perplexity']:.1f}, "
          f"bigram {log['baselines']['bigram_perplexity']:.1f}, "
          f"Kneser-Ney trigram {log['baselines']['kneser_ney_trigram_perplexity']:.1f}. "
          f"{log['provenance']['seconds'] / 60:.1f} min. "
          f"Wrote {args.out / WEIGHTS_NAME}, {args.out / TOKENIZER_NAME}, {args.out / LOG_NAME}.")


if __name__ == "__main__":
    main()
