"""SmolLM2-135M read with everything the course built (lesson 16): the heavy measurements, one seeded command.

    python -m attn.experiments.smollm2_reading --out lessons/records             # about 10 minutes, one thread
    python -m attn.experiments.smollm2_reading --out DIR --size tiny            # seconds: what the tests re-run

reads the converted model (``attn.pretrained.load()``, made by ``python -m attn.pretrained``), lesson 13's
Austen model and the corpus (``python -m attn.corpus``), and writes ``smollm2_reading.json``. Every text is
from the held-out novel, Persuasion, which the Austen model never saw (SmolLM2 may well have: it is public
domain and on the web). Each measure is made on several passages, so the lesson can print spreads:

- the sink: each head's mean weight on the first token; the first position's key and value norms against
  the others'; the loss when no later query may see the first token, and when it is replaced by another;
- lesson 14's StreamingLLM experiment: the loss at each position of long stretches read with full attention,
  with windows, and with windows plus sink tokens, the sinks at their absolute positions (lesson 14) or at
  their places in the cache (StreamingLLM, ``attn.streaming``); the same for the Austen model beside it;
- lesson 11's scores on every head (previous-token on real text; induction and duplicate-token on passages
  seen twice), the loss on each copy, and the second copy's loss with the top induction heads removed
  against as many heads drawn at random (several seeded draws);
- bits per character on the same passages for SmolLM2, the Austen model and count-based baselines (their
  tokenizers differ, so nats per token do not compare; characters do).
"""

import math
import time

import torch
from torch.nn import functional

from attn.common.stats import t_quantile
from attn.common.validate import positive_int, require_callable, require_text, type_name, whole_number
from attn.data.corpus import TITLES
from attn.experiments import austen_heads, window_austen
from attn.experiments import smollm2_reading_checks as checks
from attn.experiments.records import check_out, rounded, settings_for, sized_command, write_record
from attn.models.lm import HELD_OUT

RESULTS_NAME = "smollm2_reading.json"
COMMAND = "python -m attn.experiments.smollm2_reading"

# Sizes chosen so that "full" runs in about ten minutes on one thread of a 2-core CPU (SmolLM2 reads
# about 140 tokens a second there); "tiny" runs in seconds (its baselines count only the first 50,000
# characters of each training novel).
SIZES = {
    "full": {
        "sink_passages": 8, "sink_length": 256,
        "streams": 4, "stream_length": 1024, "windows": (64, 256), "sink_tokens": 4, "bin": 64,
        "austen_streams": 16, "austen_windows": (16, 64),
        "copy_passages": 16, "passage_length": 64, "top_heads": 10, "random_draws": 5,
        "chunks": 24, "chunk_characters": 640, "baseline_characters": None, "seed": 0,
    },
    "tiny": {
        "sink_passages": 2, "sink_length": 16,
        "streams": 2, "stream_length": 40, "windows": (8,), "sink_tokens": 2, "bin": 8,
        "austen_streams": 2, "austen_windows": (8,),
        "copy_passages": 2, "passage_length": 8, "top_heads": 2, "random_draws": 2,
        "chunks": 2, "chunk_characters": 120, "baseline_characters": 50_000, "seed": 0,
    },
}



def spaced_passages(tokens, count, length):
    """``count`` non-overlapping passages (count, length) of ``tokens`` (N,), evenly spread over it."""
    return window_austen.held_out_streams(tokens, length, count)


# The sink ---------------------------------------------------------------------------------------------


@torch.no_grad()
def passage_losses(model, passages, mask=None):
    """Each passage's mean loss (N,) over the targets 2 .. T - 1 (the predictions made from position 1 on, so
    that changing the first token changes what is read, never what is scored); passages (N, T)."""
    checks.check_passages(model, passages)
    losses = []
    for passage in passages:  # one at a time: a real model's activations are large
        logits = model(passage[None], mask=mask)[0]  # (T, V)
        losses.append(functional.cross_entropy(logits[1:-1], passage[2:]))
    return torch.stack(losses)


@torch.no_grad()
def sink_measures(model, passages, replacement):
    """The attention sink on passages (N, T): weights, key and value norms and losses, a dict of tensors.

    first_token_weight and previous_token_score (N, L, H); key_norms and value_norms (N, L, 2): the first
    position's norm and the mean of the others', averaged over key/value heads; loss, loss_without_first_token
    and loss_first_token_replaced (N,), the last with the first token set to ``replacement``.
    """
    checks.check_passages(model, passages)
    whole_number("replacement", replacement, minimum=0, maximum=model.vocab_size - 1)
    first, previous, key_norms, value_norms = [], [], [], []
    for passage in passages:
        caches = model.new_caches()
        _, weights = model(passage[None], caches=caches, need_weights=True)  # weights (L, 1, H, T, T)
        first.append(austen_heads.first_token_weight(weights))
        previous.append(austen_heads.previous_token_score(weights))
        for norms, stored in ((key_norms, [cache.keys for cache in caches]), (value_norms, [cache.values for cache in caches])):
            lengths = torch.stack([tensor[0].norm(dim=-1) for tensor in stored])  # (L, H_kv, T): rotation keeps norms
            norms.append(torch.stack((lengths[:, :, 0].mean(dim=1), lengths[:, :, 1:].mean(dim=(1, 2))), dim=1))  # (L, 2)
    replaced = passages.clone()
    replaced[:, 0] = replacement
    return {
        "first_token_weight": torch.stack(first), "previous_token_score": torch.stack(previous),
        "key_norms": torch.stack(key_norms), "value_norms": torch.stack(value_norms),
        "loss": passage_losses(model, passages),
        "loss_without_first_token": passage_losses(model, passages, austen_heads.without_first_token(passages.shape[1])),
        "loss_first_token_replaced": passage_losses(model, replaced),
    }


# Heads: lesson 11's scores, copying and ablations -------------------------------------------------------


def top_heads(scores, count):
    """The ``count`` (layer, head) pairs of highest score in ``scores`` (L, H), highest first."""
    checks.check_head_scores(scores, count)
    order = scores.flatten().argsort(descending=True)[:count]
    return [(index // scores.shape[1], index % scores.shape[1]) for index in order.tolist()]


def random_heads(num_layers, num_heads, count, generator, excluded=()):
    """``count`` (layer, head) pairs drawn without replacement from those not in ``excluded``."""
    checks.check_draw(num_layers, num_heads, count, generator, excluded)
    pool = [(layer, head) for layer in range(num_layers) for head in range(num_heads) if (layer, head) not in excluded]
    if count > len(pool):
        raise ValueError(f"cannot draw {count} heads from the {len(pool)} left")
    return [pool[index] for index in torch.randperm(len(pool), generator=generator)[:count].tolist()]


@torch.no_grad()
def head_measures(model, repeated, top_count, draws, seed):
    """Lesson 11's scores and the copying loss on passages seen twice, repeated (N, 2P); then the copies' losses
    with the ``top_count`` highest induction heads removed, and with as many other heads drawn at random
    (``draws`` seeded draws)."""
    checks.check_head_arguments(model, repeated, top_count, draws, seed)
    passage_length = repeated.shape[1] // 2
    induction, duplicate = [], []
    for passage in repeated:  # one at a time: the weights of 270 heads are large
        _, weights = model(passage[None], need_weights=True)  # (L, 1, H, 2P, 2P)
        scores = austen_heads.copy_scores(weights, passage_length)
        induction.append(scores[0])
        duplicate.append(scores[1])
    induction, duplicate = torch.stack(induction), torch.stack(duplicate)  # (N, L, H)
    first_copy, second_copy = austen_heads.copy_losses_by_passage(model, repeated)  # (N,) each
    chosen = top_heads(induction.mean(dim=0), top_count)
    with austen_heads.ablate_heads(model, chosen):
        top_first, top_second = austen_heads.copy_losses_by_passage(model, repeated)
    generator = torch.Generator().manual_seed(seed)
    random_first, random_second, drawn = [], [], []
    for _ in range(draws):
        heads = random_heads(len(model.blocks), model.num_heads, top_count, generator, excluded=set(chosen))
        drawn.append(heads)
        with austen_heads.ablate_heads(model, heads):
            first, second = austen_heads.copy_losses_by_passage(model, repeated)
        random_first.append(first)
        random_second.append(second)
    return {
        "induction_score_by_passage": induction, "duplicate_token_score_by_passage": duplicate,
        "first_copy_loss": first_copy, "second_copy_loss": second_copy,
        "top_induction_heads": [list(pair) for pair in chosen],
        "ablated_top_first_copy_loss": top_first, "ablated_top_second_copy_loss": top_second,
        "random_heads": [[list(pair) for pair in heads] for heads in drawn],
        "ablated_random_first_copy_loss": torch.stack(random_first),
        "ablated_random_second_copy_loss": torch.stack(random_second),
    }


# Bits per character -------------------------------------------------------------------------------------


def text_chunks(text, count, characters):
    """``count`` stretches of about ``characters`` characters of ``text``, evenly spread, each starting after and
    ending before a space (whole words)."""
    require_text("text", text)
    count, characters = positive_int("count", count), positive_int("characters", characters)
    if len(text) < count * (characters + 200):
        raise ValueError(f"{count} chunks of {characters} characters need a longer text than {len(text)} characters")
    step = len(text) // count
    chunks = []
    for start in range(0, step * count, step):
        begin = text.find(" ", start) + 1
        end = text.rfind(" ", begin, begin + characters)
        if begin == 0 or end < 0:
            raise ValueError(f"the text has no space to cut a chunk of {characters} characters at, from character "
                             f"{start} on; the chunks are whole words, so the text must be words separated by spaces")
        chunks.append(text[begin:end])
    return chunks


@torch.no_grad()
def chunk_costs(model, tokenizer, chunks):
    """(nats (C,), characters (C,)): each chunk read from its start, the nats of every token after the first and
    the characters those tokens cover (the chunk's, less its first token's)."""
    encoded = checks.encoded_chunks(model, tokenizer, chunks)
    nats, characters = [], []
    for chunk, tokens in zip(chunks, encoded, strict=True):
        logits = model(tokens[None, :-1])[0]  # (n - 1, V)
        nats.append(functional.cross_entropy(logits.double(), tokens[1:], reduction="sum"))
        characters.append(len(chunk) - len(tokenizer.decode(tokens[:1].tolist())))
    return torch.stack(nats), torch.tensor(characters, dtype=torch.float64)


def baseline_chunk_costs(tokenizer, train_texts, chunks):
    """Nats (C,) of each chunk's tokens after the first under lesson 13's three baselines, counted on
    ``train_texts`` in ``tokenizer``'s tokens: the unigram, the bigram with its chosen prior and the Kneser-Ney
    trigram (``attn.models.ngram``): a dict name -> (C,), exact sums (each model is counted once)."""
    from attn.models.lm_training import token_tensor
    from attn.models.ngram import bigram_loss, kneser_ney

    train_tokens = token_tensor(tokenizer, train_texts)
    counts = torch.bincount(train_tokens, minlength=tokenizer.vocab_size).double() + 1.0  # (V,)
    unigram = counts / counts.sum()  # (V,)
    trigram = kneser_ney(train_tokens, tokenizer.vocab_size, order=3)
    costs = {"unigram": [], "bigram": [], "kneser_ney_trigram": []}
    for chunk in chunks:
        tokens = torch.tensor(tokenizer.encode(chunk), dtype=torch.long)
        costs["unigram"].append(-unigram[tokens[1:]].log().sum().item())
        costs["bigram"].append(bigram_loss(train_tokens, tokens, tokenizer.vocab_size) * (len(tokens) - 1))
        costs["kneser_ney_trigram"].append(-trigram.target_probabilities(tokens).log().sum().item())
    return {name: torch.tensor(values, dtype=torch.float64) for name, values in costs.items()}


def bits_per_character(nats, characters):
    """Bits per character of each chunk (C,) and of all together."""
    checks.check_costs(nats, characters)
    per_chunk = nats / characters / math.log(2)
    return per_chunk, (nats.sum() / characters.sum() / math.log(2)).item()


def paired_interval(first, second):
    """Mean of second - first over paired values (N,) and its 95% t interval (Student's t, N - 1 degrees)."""
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)) or first.dim() != 1 \
            or first.shape != second.shape or len(first) == 0:
        raise ValueError(f"first and second must be 1-D tensors of paired values, of one length, got "
                         f"{getattr(first, 'shape', type_name(first))} and {getattr(second, 'shape', type_name(second))}")
    checks.check_paired_values(first, second)
    differences = (second - first).double()
    count = len(differences)
    mean = differences.mean().item()
    if count < 2:
        return {"mean": round(mean, 4), "low": None, "high": None, "count": count}
    half = t_quantile(count - 1) * differences.std().item() / math.sqrt(count)
    return {"mean": round(mean, 4), "low": round(mean - half, 4), "high": round(mean + half, 4), "count": count}


# The whole record ---------------------------------------------------------------------------------------


def _stream_record(model, streams, windows, sink_tokens, bin_size, progress):
    sinks = (0, sink_tokens)
    record = window_austen.measure(model, streams, windows, sinks, bin_size, progress=progress,
                                   sink_positions=("absolute", "cache"), weight_length=256)
    return record


def measure(model, tokenizer, austen_model, austen_tokenizer, novels, size="full", progress=print):
    """Every measure of this module, a dict ready for JSON; ``novels`` as attn.corpus.austen() gives."""
    settings = settings_for(SIZES, size)
    austen_heads.check_course_decoder(model)
    austen_heads.check_course_decoder(austen_model)
    text = novels[HELD_OUT]
    tokens = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    austen_tokens = torch.tensor(austen_tokenizer.encode(text), dtype=torch.long)
    record = {"size": size, "settings": {name: list(value) if isinstance(value, tuple) else value
                                         for name, value in settings.items()},
              "held_out_novel": TITLES[HELD_OUT], "num_layers": len(model.blocks), "num_heads": model.num_heads}
    started = time.perf_counter()

    def step(what):
        progress(f"[{time.perf_counter() - started:5.0f} s] {what}")

    step("the sink: weights, norms and losses")
    replacement = tokenizer.encode("\n")[0]
    passages = spaced_passages(tokens, settings["sink_passages"], settings["sink_length"])
    sink = sink_measures(model, passages, replacement)
    record["sink"] = {
        "passages": f"{settings['sink_passages']} passages of {settings['sink_length']} tokens, evenly spread",
        "replacement": tokenizer.decode([replacement]),
        "first_token_weight": rounded(sink["first_token_weight"].mean(dim=0)),
        "first_token_weight_by_passage_and_layer": rounded(sink["first_token_weight"].mean(dim=2)),
        "previous_token_score": rounded(sink["previous_token_score"].mean(dim=0)),
        "key_norms": rounded(sink["key_norms"].mean(dim=0), 3), "value_norms": rounded(sink["value_norms"].mean(dim=0), 3),
        "loss": rounded(sink["loss"]), "loss_without_first_token": rounded(sink["loss_without_first_token"]),
        "loss_first_token_replaced": rounded(sink["loss_first_token_replaced"]),
        "without_first_token_minus_loss": paired_interval(sink["loss"], sink["loss_without_first_token"]),
        "replaced_minus_loss": paired_interval(sink["loss"], sink["loss_first_token_replaced"]),
    }
    step("lesson 14's experiment: windows and sinks, SmolLM2")
    streams = spaced_passages(tokens, settings["streams"], settings["stream_length"])
    record["streaming"] = _stream_record(model, streams, settings["windows"], settings["sink_tokens"],
                                         settings["bin"], lambda line: step("  " + line))
    step("lesson 14's experiment: windows and sinks, the Austen model")
    austen_streams = spaced_passages(austen_tokens, settings["austen_streams"], settings["stream_length"])
    record["austen_streaming"] = _stream_record(austen_model, austen_streams, settings["austen_windows"],
                                                settings["sink_tokens"], settings["bin"], lambda line: step("  " + line))
    step("heads: lesson 11's scores, copying, ablations")
    repeated = austen_heads.repeated_passages(tokens, settings["copy_passages"], settings["passage_length"])
    heads = head_measures(model, repeated, settings["top_heads"], settings["random_draws"], settings["seed"])
    random_second = heads["ablated_random_second_copy_loss"]  # (draws, N)
    record["heads"] = {
        "passages": f"the first {settings['copy_passages']} passages of {settings['passage_length']} tokens, each seen twice",
        "induction_score": rounded(heads["induction_score_by_passage"].mean(dim=0)),
        "duplicate_token_score": rounded(heads["duplicate_token_score_by_passage"].mean(dim=0)),
        "first_copy_loss": rounded(heads["first_copy_loss"]), "second_copy_loss": rounded(heads["second_copy_loss"]),
        "second_minus_first_copy": paired_interval(heads["first_copy_loss"], heads["second_copy_loss"]),
        "top_induction_heads": heads["top_induction_heads"],
        "ablated_top_first_copy_loss": rounded(heads["ablated_top_first_copy_loss"]),
        "ablated_top_second_copy_loss": rounded(heads["ablated_top_second_copy_loss"]),
        "random_heads": heads["random_heads"],
        "ablated_random_first_copy_loss": rounded(heads["ablated_random_first_copy_loss"]),
        "ablated_random_second_copy_loss": rounded(random_second),
        "top_minus_random_second_copy": paired_interval(random_second.mean(dim=0), heads["ablated_top_second_copy_loss"]),
    }
    step("bits per character on the same chunks")
    chunks = text_chunks(text, settings["chunks"], settings["chunk_characters"])
    costs = {"SmolLM2-135M": chunk_costs(model, tokenizer, chunks),
             "Austen model": chunk_costs(austen_model, austen_tokenizer, chunks)}
    austen_characters = costs["Austen model"][1]
    kept = settings["baseline_characters"]  # None: the whole of each training novel
    training_texts = [novel[:kept] for name, novel in novels.items() if name != HELD_OUT]
    for name, nats in baseline_chunk_costs(austen_tokenizer, training_texts, chunks).items():
        costs[f"{name} (Austen tokens)"] = (nats, austen_characters)
    per_chunk = {name: bits_per_character(*cost) for name, cost in costs.items()}
    record["bits_per_character"] = {
        "chunks": f"{settings['chunks']} stretches of about {settings['chunk_characters']} characters, evenly spread, "
                  "each read from its start",
        "characters": int(austen_characters.sum().item()),
        "overall": {name: round(value[1], 4) for name, value in per_chunk.items()},
        "by_chunk": {name: rounded(value[0]) for name, value in per_chunk.items()},
        "smollm2_minus_austen": paired_interval(per_chunk["Austen model"][0], per_chunk["SmolLM2-135M"][0]),
    }
    step("done")
    return record



def run(out, size="full", progress=print):
    """Load both models and the corpus, measure, write ``out``/RESULTS_NAME; returns the record."""
    from attn.data.corpus import austen
    from attn.lm import load as load_austen
    from attn.pretrained import load

    settings_for(SIZES, size)
    check_out(out)
    require_callable("progress", progress)
    novels = austen()
    model, tokenizer = load()
    austen_model, austen_tokenizer = load_austen()
    torch.manual_seed(SIZES[size]["seed"])
    record = measure(model, tokenizer, austen_model, austen_tokenizer, novels, size, progress)
    return write_record(out, RESULTS_NAME, record, COMMAND, size)


DESCRIPTION = ("Read SmolLM2-135M with the course's measures (sinks, windows, heads, bits per character) "
               "beside lesson 13's model.")


def main(argv=None):
    durations = {"full": "about 10 minutes", "tiny": "seconds"}
    record, out = sized_command(COMMAND, DESCRIPTION, RESULTS_NAME, SIZES, durations, run, argv)
    first, second = (torch.tensor(record["heads"][name]).mean().item() for name in ("first_copy_loss", "second_copy_loss"))
    print(f"Wrote {out / RESULTS_NAME}: a passage's second copy costs {second:.2f} nats a token, "
          f"its first {first:.2f}.")


if __name__ == "__main__":
    main()
