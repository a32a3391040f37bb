"""Speculative decoding (lesson 19; Leviathan et al. 2023, Chen et al. 2023): a cheap draft guesses, the model checks.

A draft proposes k tokens; the model scores all of them in ONE pass over lesson 10's KV cache (the newest token
and the k guesses: k + 1 rows of logits), and keeps the guesses up to the first it disagrees with, then adds one
token of its own. Greedy: a guess is kept when it is the model's argmax, so the tokens are exactly the model's own
greedy decoding. Sampling: guess x, drawn by the draft with probability q(x), is kept with probability
min(1, p(x) / q(x)); at the first rejection a token is drawn from max(p - q, 0), renormalised. Every token then
follows the model's distribution p exactly, whatever the draft.

Drafts (a ``propose(tokens, count, temperature, generator)`` method, returning guesses and their draft
probabilities (count, V) or None): ``ModelDraft`` runs a small model of the same vocabulary (``FirstLayers``: the
model's own first layers with its final norm and readout); ``PromptLookupDraft`` (Saxena 2023) copies the tokens
that followed the latest n-gram's earlier occurrence in the text so far, and costs no model at all.
"""

import torch
from torch import nn

from attn.common.validate import non_negative_number, positive_int, type_name, whole_count
from attn.kvcache import KVCache
from attn.serving.scheduler import check_prompt

__all__ = ["FirstLayers", "ModelDraft", "PromptLookupDraft", "speculative_generate"]

class FirstLayers(nn.Module):
    """FirstLayers(model, num_layers): a draft that shares ``model``'s embedding, first ``num_layers`` blocks, final
    norm and readout (no copy, no training). It has the language-model interface of attn.lm.load()'s model."""

    def __init__(self, model, num_layers):
        super().__init__()
        _check_model("model", model)
        num_layers = positive_int("num_layers", num_layers)
        if num_layers > len(model.blocks):
            raise ValueError(f"num_layers={num_layers} is more than the model's {len(model.blocks)} blocks")
        self.token_embedding, self.norm, self.readout = model.token_embedding, model.norm, model.readout
        self.blocks = nn.ModuleList(model.blocks[:num_layers])
        if hasattr(model, "position_embedding"):
            self.position_embedding = model.position_embedding
        self.vocab_size, self.max_length = model.vocab_size, model.max_length

    def forward(self, tokens, caches=None):
        """tokens (B, T) -> logits (B, T, V); caches: one KVCache per block, as for the model."""
        start = len(caches[0]) if caches else 0
        x = self.token_embedding(tokens)  # (B, T, E)
        if hasattr(self, "position_embedding"):
            x = x + self.position_embedding(torch.arange(start, start + tokens.shape[1], device=tokens.device))
        for block, cache in zip(self.blocks, caches or [None] * len(self.blocks), strict=True):
            x = block(x, None, is_causal=True, cache=cache)
        return self.readout(self.norm(x))

    def new_caches(self):
        return [KVCache() for _ in self.blocks]


class ModelDraft:
    """A draft model of the same vocabulary, decoding with its own KV caches (rolled back to what was accepted)."""

    def __init__(self, model):
        self.model = _check_model("draft", model)
        self.caches, self.cached = model.new_caches(), []  # cached: the tokens whose keys the caches hold

    @torch.no_grad()
    def propose(self, tokens, count, temperature=0.0, generator=None):
        """``count`` guesses after ``tokens``, and their draft probabilities (count, V) (None when greedy)."""
        tokens = check_prompt(tokens, self.model.vocab_size)
        count = whole_count("count", count)
        if len(tokens) + count > self.model.max_length:
            raise ValueError(f"{len(tokens)} tokens and {count} guesses pass the draft's max_length")
        temperature = non_negative_number("temperature", temperature)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be None or a torch.Generator, got {type_name(generator)}")
        common = _common_prefix(self.cached, tokens[:-1])
        keep_first(self.caches, common)
        self.cached = self.cached[:common]
        fed, guesses, rows = tokens[common:], [], []
        for _ in range(count):
            logits = _finite_logits("the draft", self.model(torch.tensor([fed]), self.caches)[0, -1].double())  # (V,)
            self.cached += fed
            guess, probabilities = _choose(logits, temperature, generator)
            guesses.append(guess)
            rows.append(probabilities)
            fed = [guess]
        return guesses, (torch.stack(rows) if rows and temperature > 0 else None)


class PromptLookupDraft:
    """PromptLookupDraft(max_ngram=3): guesses copied from the text itself. The last n tokens (n from max_ngram
    down to 1) are looked for earlier in the text; the tokens after their earliest occurrence are the guesses."""

    def __init__(self, max_ngram=3):
        self.max_ngram = positive_int("max_ngram", max_ngram)

    def propose(self, tokens, count, temperature=0.0, generator=None):
        """Up to ``count`` guesses (maybe none), each with draft probability 1 (a one-hot row)."""
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TypeError(f"tokens must be a list of token ids (ints), got {type_name(tokens)}")
        count = whole_count("count", count)
        for size in range(min(self.max_ngram, len(tokens) - 1), 0, -1):
            tail = tokens[-size:]
            for start in range(len(tokens) - size):
                if tokens[start:start + size] == tail:
                    guesses = tokens[start + size:start + size + count]
                    return guesses, None
        return [], None


@torch.no_grad()
def speculative_generate(model, draft, prompt, max_new_tokens, draft_tokens=4, temperature=0.0, generator=None):
    """``max_new_tokens`` new token ids after ``prompt`` (a list of ids or a 1-D integer tensor), drafted and checked.

    draft: a model with the interface of attn.lm.load()'s (wrapped in ModelDraft), a ModelDraft or a
    PromptLookupDraft; draft_tokens: guesses per round. temperature=0: the model's own greedy decoding, token for
    token; temperature > 0: samples from softmax(logits / temperature) exactly (the rejection rule), with
    ``generator`` for draws that repeat. ``speculative_generate.rounds`` after a call: the model's passes."""
    _check_model("model", model)
    draft = draft if isinstance(draft, ModelDraft | PromptLookupDraft) else ModelDraft(draft)
    if isinstance(draft, ModelDraft) and draft.model.vocab_size != model.vocab_size:
        raise ValueError(f"the draft has {draft.model.vocab_size} tokens and the model {model.vocab_size}: "
                         "a draft must share the model's tokenizer")
    tokens = check_prompt(prompt, model.vocab_size)
    max_new_tokens, draft_tokens = whole_count("max_new_tokens", max_new_tokens), positive_int("draft_tokens", draft_tokens)
    temperature = non_negative_number("temperature", temperature)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type_name(generator)}")
    if len(tokens) + max_new_tokens > model.max_length:
        raise ValueError(f"a prompt of {len(tokens)} tokens and {max_new_tokens} new ones pass the model's "
                         f"max_length = {model.max_length}")
    caches, prompt_length, rounds = model.new_caches(), len(tokens), 0
    if len(tokens) > 1:
        model(torch.tensor([tokens[:-1]]), caches)  # the prefill: every position but the newest
    while len(tokens) - prompt_length < max_new_tokens:
        room = max_new_tokens - (len(tokens) - prompt_length) - 1  # guesses that may still be used
        guesses, draft_probabilities = draft.propose(tokens, min(draft_tokens, room), temperature, generator)
        guesses = list(guesses)[:min(draft_tokens, room)]
        logits = _finite_logits("the model", model(torch.tensor([tokens[-1:] + guesses]), caches)[0].double())  # (1 + k, V)
        kept = accept(logits, guesses, draft_probabilities, temperature, generator)
        tokens += kept
        keep_first(caches, len(tokens) - 1)  # the rejected guesses' keys leave the cache
        rounds += 1
    speculative_generate.rounds = rounds
    return tokens[prompt_length:]


def accept(logits, guesses, draft_probabilities, temperature, generator=None):
    """The tokens a round adds: the guesses kept, then one token of the model's (at least one token in all).

    logits (k + 1, V): the model's after the newest token and after each guess; draft_probabilities (k, V) the
    draft's (None: each guess had draft probability 1)."""
    if temperature == 0:
        choices = logits.argmax(dim=-1).tolist()  # (k + 1,): the model's own greedy tokens
        kept = 0
        while kept < len(guesses) and guesses[kept] == choices[kept]:
            kept += 1
        return guesses[:kept] + [choices[kept]]
    target = _probabilities(logits, temperature)  # (k + 1, V): p
    for index, guess in enumerate(guesses):
        p = target[index]
        q = torch.zeros_like(p)
        if draft_probabilities is None:
            q[guess] = 1.0
        else:
            q = draft_probabilities[index]
        if torch.rand((), generator=generator, dtype=torch.float64) * q[guess] < p[guess]:  # probability min(1, p/q)
            continue
        residual = (p - q).clamp(min=0)  # (V,): what p has that q over-drew
        residual = residual if residual.sum() > 0 else p
        return guesses[:index] + [int(torch.multinomial(residual / residual.sum(), 1, generator=generator))]
    return list(guesses) + [int(torch.multinomial(target[len(guesses)], 1, generator=generator))]


def keep_first(caches, length):
    """Cut every KVCache back to its first ``length`` positions (the guesses the model rejected leave)."""
    for cache in caches:
        if len(cache) > length:
            keys, values = cache.keys[:, :, :length], cache.values[:, :, :length]
            cache.reset()
            if length:
                cache.append(keys, values)


def _choose(logits, temperature, generator):
    """The draft's token from logits (V,) and its probabilities (None when greedy)."""
    if temperature == 0:
        return int(logits.argmax()), None
    probabilities = _probabilities(logits, temperature)
    return int(torch.multinomial(probabilities, 1, generator=generator)), probabilities


def _probabilities(logits, temperature):
    """softmax(logits / temperature) over the last axis, the largest logit subtracted first: a temperature so small
    that a logit divided by it overflows (5e-324, say) gives the greedy one-hot row, not NaN."""
    return torch.softmax((logits - logits.max(dim=-1, keepdim=True).values) / temperature, dim=-1)


def _finite_logits(who, logits):
    """``logits`` if they hold no NaN or inf (one check of V numbers a row), else a sentence naming ``who``."""
    if not torch.isfinite(logits).all():
        raise ValueError(f"{who}'s logits hold NaN or inf, so no token can be chosen from them: are its weights finite?")
    return logits


def _common_prefix(a, b):
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return length


def _check_model(name, model):
    needed = ("blocks", "token_embedding", "norm", "readout", "vocab_size", "max_length", "new_caches")
    if not isinstance(model, nn.Module) or not all(hasattr(model, attribute) for attribute in needed):
        raise TypeError(f"{name} must be a language model with the interface of attn.lm.load()'s (token_embedding, "
                        f"blocks, norm, readout, vocab_size, max_length, new_caches), got {type_name(model)}")
    return model
