"""Count-based language models: interpolated Kneser-Ney n-grams, the strongest baseline lesson 13 sets beside its
network (Kneser and Ney 1995; the interpolated form and its discount, Chen and Goodman 1999).

    model = kneser_ney(train_tokens, vocab_size, order=3)   # counted once, in seconds
    model.probability(history, targets)    # (N,) p(target | the order - 1 tokens before it)
    model.distribution(context)            # (V,) p(every token | context), sums to 1
    kneser_ney_loss(train_tokens, held_out_tokens, vocab_size, order=3)   # nats per token

Level k of an order-n model scores a token from the k - 1 tokens before it. The top level counts n-grams; every
lower level counts, for each k-gram, how many different tokens came before it (its continuation count: a token
that follows many different words is a likely continuation of a context never seen). Each level takes a fixed
discount D_k off every count it has seen and gives the mass taken away to the level below, in proportion to how
many different tokens it saw after the context:

    p_k(w | h) = max(c_k(h w) - D_k, 0) / c_k(h) + D_k * N_k(h) / c_k(h) * p_{k-1}(w | h without its first token)

with c_k(h) = sum_w c_k(h w) and N_k(h) the number of w with c_k(h w) > 0; a context never seen hands all its
mass down (p_k = p_{k-1}); below level 1 is the uniform 1 / V. D_k = n1 / (n1 + 2 n2), from the numbers of
k-grams counted once and twice. The first targets of a text, with fewer than n - 1 tokens before them, are
scored by the level their history reaches.
"""

import math

import torch

from attn.common.sizes import check_allocation
from attn.common.validate import is_whole_number, positive_int, positive_number, require_computable, type_name

MAX_ORDER = 4  # V ** order keys must fit in an int64 for a vocabulary of up to 2 ** 15
BIGRAM_PRIOR = 64.0  # the bigram baseline's pseudo-counts, spread as the unigram distribution (see BIGRAM_PRIORS)
BIGRAM_PRIORS = (4.0, 16.0, 32.0, 64.0, 128.0, 256.0)  # tried on the training novels' last 15%, counted on the rest
ADD_K_VALUES = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)  # add_k_baseline's k, tried on the training tokens' last tenth



def _check_tokens(name, tokens, vocab_size, minimum):
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type_name(tokens)}")
    if tokens.dim() != 1 or tokens.dtype != torch.long:
        raise ValueError(f"{name} must be one row of int64 token ids (N,), got shape {tuple(tokens.shape)} {tokens.dtype}")
    if len(tokens) < minimum:
        raise ValueError(f"{name} must hold at least {minimum} tokens, got {len(tokens)}")
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"{name} holds ids outside 0 .. {vocab_size - 1} (the vocabulary)")


def _grams(tokens, k, vocab_size):
    """The keys (N - k + 1,) of every k-gram of ``tokens`` (N,): sum of token_i * V ** (k - 1 - i)."""
    keys = torch.zeros(len(tokens) - k + 1, dtype=torch.long)
    for i in range(k):
        keys = keys * vocab_size + tokens[i:len(tokens) - k + 1 + i]
    return keys


def _lookup(sorted_keys, values, queries):
    """values[j] where sorted_keys[j] == queries[i], else 0; queries (N,) -> (N,) float64."""
    if len(sorted_keys) == 0:
        return torch.zeros(len(queries), dtype=torch.float64)
    place = torch.searchsorted(sorted_keys, queries).clamp(max=len(sorted_keys) - 1)
    return torch.where(sorted_keys[place] == queries, values[place], torch.zeros((), dtype=torch.float64))


class _Level:
    """One level: counts of its k-grams, and per context (k - 1 tokens) the total and the number of types."""

    def __init__(self, keys, counts, vocab_size):
        self.keys, self.counts = keys, counts.double()  # (G,) sorted, (G,)
        self.contexts, inverse = torch.unique(keys // vocab_size, return_inverse=True)  # (C,)
        self.totals = torch.zeros(len(self.contexts), dtype=torch.float64).index_add_(0, inverse, self.counts)
        self.types = torch.bincount(inverse, minlength=len(self.contexts)).double()
        once, twice = (counts == 1).sum().item(), (counts == 2).sum().item()
        self.discount = once / (once + 2 * twice) if once + twice else 0.5


class KneserNey:
    """An interpolated Kneser-Ney model of order n counted on training tokens; see the module's docstring."""

    def __init__(self, tokens, vocab_size, order=3):
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.order = positive_int("order", order)
        if self.order > MAX_ORDER or self.vocab_size ** self.order >= 2 ** 62:
            raise ValueError(f"order {order} with {vocab_size} tokens is too large: keys of V ** order must fit in int64")
        _check_tokens("tokens", tokens, self.vocab_size, self.order)
        self.levels = [None] * (self.order + 1)  # levels[k] for k = 1 .. order
        keys, counts = torch.unique(_grams(tokens, self.order, self.vocab_size), return_counts=True)
        for k in range(self.order, 0, -1):
            self.levels[k] = _Level(keys, counts, self.vocab_size)
            # the level below counts, for each (k - 1)-gram, the different tokens seen before it
            keys, counts = torch.unique(keys % self.vocab_size ** (k - 1), return_counts=True)

    def probability(self, history, targets):
        """p(targets | history): history (N, n - 1) token ids, the last column the token just before; -> (N,).

        A history entry of -1 means no token there (the start of a text): such rows use the levels it reaches.
        """
        self._check_query(history, targets)
        n = len(targets)
        probabilities = torch.full((n,), 1.0 / self.vocab_size, dtype=torch.float64)  # level 0: uniform
        reached = torch.ones(n, dtype=torch.bool)
        for k in range(1, self.order + 1):
            level = self.levels[k]
            context = history[:, history.shape[1] - (k - 1):] if k > 1 else history[:, :0]  # (N, k - 1)
            if k > 1:
                reached &= context[:, 0] >= 0
            context_key = torch.zeros(n, dtype=torch.long)
            for column in range(k - 1):
                context_key = context_key * self.vocab_size + context[:, column].clamp(min=0)
            gram_key = context_key * self.vocab_size + targets
            count = _lookup(level.keys, level.counts, gram_key)
            total = _lookup(level.contexts, level.totals, context_key)
            types = _lookup(level.contexts, level.types, context_key)
            seen = total > 0
            safe = torch.where(seen, total, torch.ones_like(total))
            higher = (count - level.discount).clamp(min=0) / safe + level.discount * types / safe * probabilities
            probabilities = torch.where(seen & reached, higher, probabilities)
        return probabilities

    def _check_query(self, history, targets):
        for name, tensor, dims in (("history", history, 2), ("targets", targets, 1)):
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.long or tensor.dim() != dims:
                raise TypeError(f"{name} must be an int64 torch.Tensor with {dims} dimension(s), got {type_name(tensor)}")
        if history.shape != (len(targets), self.order - 1):
            raise ValueError(f"history must have shape ({len(targets)}, {self.order - 1}), got {tuple(history.shape)}")
        if len(targets) and (targets.min() < 0 or targets.max() >= self.vocab_size):
            raise ValueError(f"targets hold ids outside 0 .. {self.vocab_size - 1} (the vocabulary)")
        if history.numel() and (history.min() < -1 or history.max() >= self.vocab_size):
            raise ValueError(f"history holds ids outside -1 .. {self.vocab_size - 1} (-1: before the text)")

    def distribution(self, context):
        """p(every token | context): context a list of up to n - 1 token ids (the last just before); -> (V,)."""
        if not isinstance(context, list | tuple) or not all(is_whole_number(token) for token in context):
            raise TypeError(f"context must be a list of token ids, got {type_name(context)} {context!r:.60}")
        if any(not 0 <= token < self.vocab_size for token in context):
            raise ValueError(f"context holds ids outside 0 .. {self.vocab_size - 1} (the vocabulary)")
        context = [int(token) for token in context][-(self.order - 1):] if self.order > 1 else []
        padded = [-1] * (self.order - 1 - len(context)) + context
        history = torch.tensor([padded] * self.vocab_size, dtype=torch.long).view(self.vocab_size, self.order - 1)
        return self.probability(history, torch.arange(self.vocab_size))

    def target_probabilities(self, tokens):
        """p(tokens[t] | the tokens before it in ``tokens``) for t = 1 .. N - 1: (N - 1,)."""
        _check_tokens("tokens", tokens, self.vocab_size, 2)
        width = self.order - 1
        padded = torch.cat([torch.full((width,), -1, dtype=torch.long), tokens])  # -1: before the text
        history = torch.stack([padded[i:i + len(tokens) - 1] for i in range(1, width + 1)], dim=1) if width else (
            torch.zeros(len(tokens) - 1, 0, dtype=torch.long))
        return self.probability(history, tokens[1:])


def kneser_ney(train_tokens, vocab_size, order=3):
    """An interpolated Kneser-Ney model of ``order`` counted on ``train_tokens`` (N,) int64."""
    return KneserNey(train_tokens, vocab_size, order)


def kneser_ney_loss(train_tokens, held_out_tokens, vocab_size, order=3):
    """Mean -ln p, in nats per token, of held_out_tokens[1:] under a Kneser-Ney model counted on train_tokens."""
    model = kneser_ney(train_tokens, vocab_size, order)
    return -model.target_probabilities(held_out_tokens).log().mean().item()


# --- lesson 13's baselines: unigram, bigram and Kneser-Ney trigram, as the training log records them ----

def bigram_loss(train_tokens, targets_tokens, vocab_size, prior=BIGRAM_PRIOR):
    """Held-out loss (nats per token) of targets_tokens[1:] under the additive bigram counted on train_tokens.

    P(b | a) = (count(a, b) + prior * P_unigram(b)) / (count(a) + prior), the unigram with one pseudo-count each.
    """
    _check_counting(train_tokens, targets_tokens, vocab_size, prior, "targets_tokens")
    counts = torch.bincount(train_tokens, minlength=vocab_size).double() + 1.0  # (V,)
    unigram = counts / counts.sum()  # (V,)
    pairs = train_tokens[:-1] * vocab_size + train_tokens[1:]
    pair_counts = torch.bincount(pairs, minlength=vocab_size * vocab_size).double().view(vocab_size, vocab_size)
    row_totals = pair_counts.sum(dim=1)  # (V,): count(a), summed once
    previous, following = targets_tokens[:-1], targets_tokens[1:]
    bigram = (pair_counts[previous, following] + prior * unigram[following]) / (row_totals[previous] + prior)
    return -bigram.log().mean().item()


def bigram_prior_trials(train_tokens, vocab_size):
    """Loss of the bigram with each prior of BIGRAM_PRIORS on the training tokens' last 15%, counted on the rest.

    The baseline keeps the prior with the lowest: chosen on training text only, never on the held-out novel.
    """
    check_tokens("train_tokens", train_tokens, positive_int("vocab_size", vocab_size), minimum=14)  # 2 or more each side
    cut = int(0.85 * len(train_tokens))
    return {prior: bigram_loss(train_tokens[:cut], train_tokens[cut:], vocab_size, prior) for prior in BIGRAM_PRIORS}


def check_counting(train_tokens, held_out_tokens, vocab_size, prior=BIGRAM_PRIOR):
    """baselines' arguments: 1-D token ids of at least 2 tokens each, inside a vocabulary whose bigram table fits,
    and a positive finite prior."""
    _check_counting(train_tokens, held_out_tokens, vocab_size, prior, "held_out_tokens")


def _check_counting(train_tokens, other_tokens, vocab_size, prior, other_name):
    vocab_size = positive_int("vocab_size", vocab_size)
    check_allocation(f"the bigram counts for vocab_size={vocab_size}", 8 * vocab_size * vocab_size)
    for name, tokens in (("train_tokens", train_tokens), (other_name, other_tokens)):
        check_tokens(name, tokens, vocab_size)
    positive_number("prior", prior)


def check_tokens(name, tokens, vocab_size, minimum=2):
    """``tokens``: a 1-D tensor of at least ``minimum`` token ids, each in 0..vocab_size - 1."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must be a 1-D tensor of token ids, got {type_name(tokens)}")
    require_computable(name, tokens)
    if len(tokens) < minimum:
        raise ValueError(f"{name} holds {len(tokens)} tokens; the bigram needs at least {minimum}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size:
        raise ValueError(f"{name} holds token ids from {int(tokens.min())} to {int(tokens.max())}, outside the "
                         f"vocabulary 0..{vocab_size - 1}")


def baselines(train_tokens, held_out_tokens, vocab_size, prior=BIGRAM_PRIOR):
    """Held-out loss (nats per token, on held_out_tokens[1:]) of three models counted on the training tokens.

    Unigram: token frequencies with one pseudo-count each (so no token has probability 0).
    Bigram: P(b | a) = (count(a, b) + prior * P_unigram(b)) / (count(a) + prior).
    Trigram: interpolated Kneser-Ney (KneserNey above), the strongest of the three.
    """
    check_counting(train_tokens, held_out_tokens, vocab_size, prior)
    counts = torch.bincount(train_tokens, minlength=vocab_size).double() + 1.0  # (V,)
    unigram = counts / counts.sum()  # (V,)
    trigram = kneser_ney(train_tokens, vocab_size, order=3).target_probabilities(held_out_tokens)  # (M - 1,)
    return {
        "unigram_loss": round(-unigram[held_out_tokens[1:]].log().mean().item(), 4),
        "bigram_loss": round(bigram_loss(train_tokens, held_out_tokens, vocab_size, prior), 4),
        "kneser_ney_trigram_loss": round(-trigram.log().mean().item(), 4),
    }


def baseline_log(train_tokens, held_out_tokens, config, vocab_size):
    """The baselines on the network's held-out targets, with perplexities, and on the curve's first targets."""
    check_counting(train_tokens, held_out_tokens, vocab_size)
    sizes = ("eval_windows", "context_length")
    if not isinstance(config, dict) or not all(isinstance(config.get(name), int) and config[name] > 0 for name in sizes):
        raise TypeError(f"config must be the training settings, a dict with positive whole eval_windows and context_length, "
                        f"got {type_name(config)} {config!r:.60}")
    trials = bigram_prior_trials(train_tokens, vocab_size)
    prior = min(trials, key=trials.get)
    base = baselines(train_tokens, held_out_tokens, vocab_size, prior)
    for name in ("unigram", "bigram", "kneser_ney_trigram"):
        base[f"{name}_perplexity"] = round(math.exp(base[f"{name}_loss"]), 2)
    base["bigram_prior"] = prior
    base["bigram_prior_trials"] = {str(key): round(value, 4) for key, value in trials.items()}
    probe = held_out_tokens[:config["eval_windows"] * config["context_length"] + 1]  # the curve's targets
    base["on_the_curves_targets"] = baselines(train_tokens, probe, vocab_size, prior)
    return base


# --- lesson 22's baseline: unigram and add-k bigram on a model's held-out windows ----

def add_k_baseline(train_tokens, held_out_inputs, held_out_targets, vocab_size, ks=ADD_K_VALUES):
    """The unigram and add-k bigram losses (nats a token) on held-out (inputs, targets) (W, T), with counts from
    ``train_tokens`` (N,); k is chosen on the last tenth of the training tokens with counts from the rest."""
    vocab_size = positive_int("vocab_size", vocab_size)
    check_allocation("the bigram table", vocab_size * vocab_size * 8)
    check_tokens("train_tokens", train_tokens, vocab_size, minimum=20)
    for name, tokens in (("held_out_inputs", held_out_inputs), ("held_out_targets", held_out_targets)):
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"{name} must be a tensor of token ids (W, T), got {type_name(tokens)}")
        check_tokens(name, tokens.flatten(), vocab_size, minimum=1)
    if held_out_inputs.shape != held_out_targets.shape:
        raise ValueError(f"held_out_inputs {tuple(held_out_inputs.shape)} and held_out_targets "
                         f"{tuple(held_out_targets.shape)} must have the same shape")
    if not isinstance(ks, tuple | list) or not ks or not all(
            isinstance(k, int | float) and not isinstance(k, bool) and math.isfinite(k) and k > 0 for k in ks):
        raise ValueError(f"ks must be a non-empty list of positive numbers (the add-k values tried), got {ks!r:.60}")

    def counts(tokens):
        pairs = torch.bincount(tokens[:-1] * vocab_size + tokens[1:], minlength=vocab_size * vocab_size)
        return pairs.view(vocab_size, vocab_size).double()

    def bigram_loss(table, k, before, after):
        chosen, totals = table[before, after], table.sum(dim=1)[before]  # (n,) each: never an (n, V) copy
        return -(torch.log(chosen + k) - torch.log(totals + k * vocab_size)).mean().item()

    cut = len(train_tokens) * 9 // 10
    fit, check = counts(train_tokens[:cut]), train_tokens[cut:]
    k = min(ks, key=lambda k: bigram_loss(fit, k, check[:-1], check[1:]))
    table = counts(train_tokens)
    before, after = held_out_inputs.flatten(), held_out_targets.flatten()
    unigram = torch.bincount(train_tokens, minlength=vocab_size).double() + 1.0
    return {"unigram": round(-(torch.log(unigram[after]) - torch.log(unigram.sum())).mean().item(), 4),
            "bigram": round(bigram_loss(table, k, before, after), 4), "k": k,
            "on": "the held-out windows the models are scored on; counts from the training novels, the same tokenizer "
                  "(unigram add-1, bigram add-k with k chosen on the last tenth of the training tokens)"}
