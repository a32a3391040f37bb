"""What the Austen model's heads do, measured on the held-out novel (lesson 13).

Lesson 13 computes every measure here in the open on sentences written for the course; this
module makes the same measurements on held-out text (Persuasion, which training never saw), which
needs the corpus, and writes them to a JSON file that the lesson reads:

    python -m attn.experiments.austen_heads --out lessons/records     # reads lessons/weights, writes austen_heads.json

- head scores (lesson 11's measures, on real text): each head's mean weight on the previous token;
  and on passages repeated twice, for the queries of the second copy, its weight on the key after
  the query's counterpart in the first copy (induction) and on the counterpart itself (duplicate);
- the loss on each copy of a repeated passage (in-context copying on real English);
- the weight each head gives the first token of its window (the attention sink), and the held-out
  loss when no query but the first may attend to it;
- the held-out loss with one head removed at a time (ablation).
"""

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch
from torch.nn import functional

from attn.common.destinations import folder_argument, write_text
from attn.common.validate import (
    positive_int,
    require_computable,
    require_floating,
    require_token_ids,
    type_name,
    whole_number,
)
from attn.data.corpus import TITLES, austen
from attn.models.llama import LlamaLM
from attn.models.lm import HELD_OUT, WEIGHTS_FOLDER, AustenLM, load
from attn.models.lm_training import held_out_windows

HEADS_NAME = "austen_heads.json"
PROBE_WINDOWS = 32  # held-out windows of context_length tokens for the loss measures (8,192 tokens)
PASSAGE_LENGTH = 64  # tokens per passage in the repeated-passage measures (each passage seen twice)
PASSAGES = 64


def check_course_decoder(model):
    """``model`` must be a course decoder whose blocks hold lesson 6's attention: lesson 13's AustenLM or lesson 16's
    LlamaLM; returns it."""
    if not isinstance(model, AustenLM | LlamaLM):
        raise TypeError(f"model must be an attn.lm.AustenLM (from attn.lm.load()) or an attn.models.llama.LlamaLM "
                        f"(from attn.pretrained.load()), got {type_name(model)}")
    return model


_check_model = check_course_decoder


def _check_tokens(tokens, needed):
    """held-out tokens: a 1-D integer tensor of at least ``needed`` token ids."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
        got = f"{tuple(tokens.shape)} {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type_name(tokens)
        raise TypeError(f"held_out_tokens must be a 1-D tensor of token ids, got {got}")
    if len(tokens) < needed:
        raise ValueError(f"held_out_tokens holds {len(tokens)} tokens; these measures need at least {needed}")


def _check_weights(weights):
    if not isinstance(weights, torch.Tensor) or weights.dim() != 5 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type_name(weights)
        raise ValueError(f"weights must be a tensor (L, B, H, T, T), as model(tokens, need_weights=True) gives, got {shape}")
    require_computable("weights", weights)
    require_floating("weights", weights)
    if 0 in weights.shape[:3] or weights.shape[-1] < 2:
        raise ValueError(f"weights {tuple(weights.shape)} hold no query after the first to average over: these measures "
                         "need at least one layer, sequence and head, and T >= 2 positions")
    return weights


@contextlib.contextmanager
def ablate_head(model, layer, head):
    """Inside the ``with`` block, head ``head`` of layer ``layer`` adds nothing to the residual stream.

    Zeroes the d = E / H columns of that layer's out_proj.weight that read the head; restores them on exit.
    """
    _check_model(model)
    for name, value, count in (("layer", layer, len(model.blocks)), ("head", head, model.num_heads)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be a whole number, got {type_name(value)} {value!r}")
        if not 0 <= value < count:
            raise ValueError(f"{name} must be from 0 to {count - 1}, got {value}")
    attention = model.blocks[layer].attention
    weight = attention.out_proj.weight  # (E, E): out_features x in_features
    columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    saved = weight[:, columns].detach().clone()
    with torch.no_grad():
        weight[:, columns] = 0
    try:
        yield model
    finally:
        with torch.no_grad():
            weight[:, columns] = saved


@contextlib.contextmanager
def ablate_heads(model, heads):
    """Inside the ``with`` block, every (layer, head) pair in ``heads`` adds nothing (``ablate_head`` for each)."""
    if not isinstance(heads, list | tuple):
        raise TypeError(f"heads must be a list of (layer, head) pairs, got {type_name(heads)}")
    with contextlib.ExitStack() as stack:
        for pair in heads:
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise TypeError(f"heads must be a list of (layer, head) pairs, got the entry {pair!r}")
            stack.enter_context(ablate_head(model, *pair))
        yield model


def without_first_token(length):
    """Keep-mask (T, T): every query may attend to every key but the first, except the first query itself."""
    length = whole_number("length", length, minimum=1, maximum=2**16)
    keep = torch.ones(length, length, dtype=torch.bool)
    keep[1:, 0] = False
    return keep


@torch.no_grad()
def window_losses(model, inputs, targets, mask=None):
    """Mean next-token loss (nats) over ``inputs``, ``targets`` (W, T), with an optional keep-mask (T, T)."""
    _check_model(model)
    require_token_ids("inputs", inputs, 2)
    require_token_ids("targets", targets, 2)
    if inputs.shape != targets.shape or 0 in inputs.shape:
        raise ValueError(f"inputs and targets must both be (W, T) with W, T >= 1, got {tuple(inputs.shape)}, "
                         f"{tuple(targets.shape)}")
    for name, ids in (("inputs", inputs), ("targets", targets)):
        if int(ids.min()) < 0 or int(ids.max()) >= model.vocab_size:
            raise ValueError(f"{name} must be token ids 0 .. {model.vocab_size - 1} (the model's vocabulary), got "
                             f"{int(ids.min())} .. {int(ids.max())}")
    logits = model(inputs, mask=mask)  # (W, T, V)
    return functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


def first_token_weight(weights):
    """weights (L, B, H, T, T) -> (L, H): each head's mean weight on key 0, over queries 1 .. T - 1."""
    return _check_weights(weights)[..., 1:, 0].mean(dim=(1, 3))


def previous_token_score(weights):
    """weights (L, B, H, T, T) -> (L, H): each head's mean weight of query i on key i - 1, over i >= 1."""
    return _check_weights(weights).diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))


def copy_scores(weights, passage_length):
    """Repeated passages (the second copy starts at ``passage_length``): (induction, duplicate), each (L, H).

    Induction: the mean weight of query i in the second copy on key i - P + 1, the token after its
    counterpart in the first copy; duplicate: on key i - P, the counterpart itself (P = passage_length).
    Counterparts, not "the previous occurrence": in real text a token such as ' the' occurs many times.
    """
    weights = _check_weights(weights)
    passage_length = whole_number("passage_length", passage_length, minimum=1)
    if weights.shape[-1] != 2 * passage_length:
        raise ValueError(f"the weights cover {weights.shape[-1]} positions, not a passage of {passage_length} twice")
    queries = torch.arange(passage_length, 2 * passage_length)  # (P,): the second copy
    induction = weights[..., queries[:-1], queries[:-1] - passage_length + 1]  # (L, B, H, P - 1)
    duplicate = weights[..., queries, queries - passage_length]  # (L, B, H, P)
    return induction.mean(dim=(1, 3)), duplicate.mean(dim=(1, 3))


@torch.no_grad()
def copy_losses(model, passages):
    """passages (B, 2P), each a passage twice -> (first copy's mean loss, second copy's), in nats.

    The first copy's targets are positions 1 .. P - 1; the second copy's P + 1 .. 2P - 1 (its first token
    cannot be foreseen from the first copy, so it is left out, as the first copy's first token is).
    """
    check_repeated_passages(model, passages)
    length = passages.shape[1] // 2
    logits = model(passages[:, :-1])  # (B, 2P - 1, V)
    losses = functional.cross_entropy(logits.transpose(1, 2), passages[:, 1:], reduction="none")  # (B, 2P - 1)
    return losses[:, :length - 1].mean().item(), losses[:, length:].mean().item()


@torch.no_grad()
def copy_losses_by_passage(model, passages):
    """passages (B, 2P), each a passage twice -> (first copy's loss (B,), second copy's (B,)), in nats, each
    passage's mean over the targets ``copy_losses`` scores."""
    check_repeated_passages(model, passages)
    length = passages.shape[1] // 2
    logits = model(passages[:, :-1])  # (B, 2P - 1, V)
    losses = functional.cross_entropy(logits.transpose(1, 2), passages[:, 1:], reduction="none")  # (B, 2P - 1)
    return losses[:, :length - 1].mean(dim=1), losses[:, length:].mean(dim=1)


def check_repeated_passages(model, passages):
    """A course decoder and passages (B, 2P) of token ids, each a passage twice: B >= 1, an even 2P >= 4."""
    _check_model(model)
    if not isinstance(passages, torch.Tensor) or passages.dim() != 2 or passages.is_floating_point() or (
            passages.dtype == torch.bool):
        raise TypeError(f"passages must be a 2-D tensor of token ids (B, 2P), got {type_name(passages)}")
    if passages.shape[0] == 0 or passages.shape[1] < 4 or passages.shape[1] % 2:
        raise ValueError(f"passages must be (B, 2P) with B >= 1 and an even length 2P >= 4 (each copy needs a token after "
                         f"its first), got {tuple(passages.shape)}")


def repeated_passages(tokens, count=PASSAGES, length=PASSAGE_LENGTH):
    """(count, 2 length): consecutive passages of ``tokens`` (N,), each followed by itself."""
    require_token_ids("tokens", tokens, 1)
    count, length = positive_int("count", count), positive_int("length", length)
    if count * length > len(tokens):
        raise ValueError(f"{count} passages of {length} tokens need {count * length} tokens, got {len(tokens)}")
    passages = tokens[:count * length].view(count, length)
    return torch.cat((passages, passages), dim=1)


def _rounded(table):
    return [[round(value, 4) for value in row] for row in table.tolist()]


@torch.no_grad()
def measure(model, held_out_tokens, windows=PROBE_WINDOWS, passages=PASSAGES, passage_length=PASSAGE_LENGTH):
    """Every measure of this module on held-out tokens (N,): a dict ready for JSON."""
    _check_model(model)
    windows, passages = positive_int("windows", windows), positive_int("passages", passages)
    if positive_int("passage_length", passage_length) < 2:
        raise ValueError(f"passage_length must be at least 2 (a copy needs a token after its first), got {passage_length}")
    _check_tokens(held_out_tokens, max(model.context_length * windows, 2 * passage_length * passages) + 1)
    inputs, targets = held_out_windows(held_out_tokens, model.context_length, windows)  # (W, T) each
    _, weights = model(inputs, need_weights=True)  # (L, W, H, T, T)
    loss = window_losses(model, inputs, targets)
    no_sink = window_losses(model, inputs, targets, mask=without_first_token(inputs.shape[1]))
    ablated = torch.zeros(len(model.blocks), model.num_heads)  # (L, H)
    for layer in range(len(model.blocks)):
        for head in range(model.num_heads):
            with ablate_head(model, layer, head):
                ablated[layer, head] = window_losses(model, inputs, targets)
    repeated = repeated_passages(held_out_tokens, passages, passage_length)  # (B, 2P)
    _, passage_weights = model(repeated, need_weights=True)
    induction, duplicate = copy_scores(passage_weights, passage_length)
    first_copy, second_copy = copy_losses(model, repeated)
    return {
        "held_out_novel": TITLES[HELD_OUT],
        "probe": f"the first {windows} windows of {model.context_length} held-out tokens",
        "passages": f"the first {passages} passages of {passage_length} held-out tokens, each repeated once",
        "loss": round(loss, 4),
        "loss_without_first_token": round(no_sink, 4),
        "first_token_weight": _rounded(first_token_weight(weights)),
        "previous_token_score": _rounded(previous_token_score(weights)),
        "induction_score": _rounded(induction),
        "duplicate_token_score": _rounded(duplicate),
        "first_copy_loss": round(first_copy, 4),
        "second_copy_loss": round(second_copy, 4),
        "ablated_loss": _rounded(ablated),
    }


def _model_folder(text):
    from attn.common.destinations import name_problem
    from attn.models.lm import TOKENIZER_NAME, WEIGHTS_NAME

    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    folder = Path(text)
    missing = [name for name in (WEIGHTS_NAME, TOKENIZER_NAME) if not (folder / name).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"{folder} lacks {', '.join(missing)}: give the folder 'python -m attn.lm train' wrote")
    from attn.common.destinations import file_problem, link_leaves_folder

    problem = file_problem(folder / HEADS_NAME, example=HEADS_NAME) or link_leaves_folder(folder / HEADS_NAME)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return folder


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attn.experiments.austen_heads",
                                     description="Measure the Austen model's heads on the held-out novel.")
    parser.add_argument("--out", required=True, type=folder_argument(HEADS_NAME), help=f"folder for {HEADS_NAME}")
    parser.add_argument("--model", default=str(WEIGHTS_FOLDER), type=_model_folder,
                        help="folder with the trained model (default lessons/weights)")
    parser.add_argument("--corpus", default=None, help="folder of the novels (default: where python -m attn.corpus writes)")
    args = parser.parse_args(argv)
    try:
        novels = austen(args.corpus)
    except FileNotFoundError as error:
        parser.error(str(error))
    torch.set_num_threads(1)
    try:  # damaged weights, or a held-out novel too short to measure on: a sentence, not a traceback
        model, tokenizer = load(args.model)
        held_out = torch.tensor(tokenizer.encode(novels[HELD_OUT]), dtype=torch.long)
        record = measure(model, held_out)
    except ValueError as error:
        parser.error(str(error))
    write_text(args.out / HEADS_NAME, json.dumps(record, indent=1) + "\n")
    print(f"held-out loss {record['loss']:.3f}, without the first token {record['loss_without_first_token']:.3f}; "
          f"copies: first {record['first_copy_loss']:.3f}, second {record['second_copy_loss']:.3f}. "
          f"Wrote {args.out / HEADS_NAME}.", file=sys.stdout)


if __name__ == "__main__":
    main()
