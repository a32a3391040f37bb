"""Lesson 13's exercises: a paragraph counted in tokens after ten merges, the loss of a model that narrows each
token down to a few candidates, and the weight every head gives the first token.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

import math

import numpy as np

from attn.course.exercises.answers import Array, Function, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.registry import exercise

VOCABULARY = 4096  # the Austen tokenizer's vocabulary
CANDIDATES = 50  # exercise 13.2: a model that always narrows the next token down to 50 equally likely ones


# --- 13.1: a paragraph in tokens ---------------------------------------------------------------

# Written for the course (not Austen's): the paragraph lesson 13 runs byte pair encoding on by hand.
PARAGRAPH = (
    "The ladies of the village agreed that the new rector was a very"
    " agreeable man. He was not handsome, and he was not rich, but he was"
    " attentive, and attention, in a village, is the rarest of fortunes."
    " Within a month every family had invited him to dine, and within two"
    " every family had found a reason to be offended."
)
MERGES = 10


def _tokens_after(words, merges):
    """How many tokens ``words`` (a list of str) take once ``merges`` (pairs of bytes) are applied in order."""
    from attn.data.tokenizer import merge_pair

    total = 0
    for word in words:
        pieces = [bytes([b]) for b in word.encode("utf-8")]
        for pair in merges:
            pieces = merge_pair(pieces, pair, pair[0] + pair[1])
        total += len(pieces)
    return total


def _merge_counts():
    """The first MERGES merges with their counts, as lesson 13's loop prints them."""
    from attn.data.tokenizer import bpe_merges, pretokenize

    return bpe_merges(pretokenize(PARAGRAPH), MERGES)


def _paragraph_facts():
    """(words, the first MERGES merges, the token count after them), with lesson 13's rule for ties."""
    from attn.data.tokenizer import bpe_merges, pretokenize

    words = pretokenize(PARAGRAPH)
    merges = [pair for pair, _ in bpe_merges(words, MERGES)]
    return words, merges, _tokens_after(words, merges)


@exercise(
    "13.1",
    Number("your token count", whole=True),
    solution=lambda: _paragraph_facts()[2],
    success=(
        "each occurrence of a merged pair turns two tokens into one, so the paragraph loses one token per occurrence: "
        "its bytes minus every count the loop printed."
    ),
)
def _tokens_after_merges(count, expected):
    if count.shape != ():
        return compare_without_answer(count, expected, "your token count")
    count = int(count)
    if count == expected:
        return None
    words, merges, _ = _paragraph_facts()
    size = len(PARAGRAPH.encode("utf-8"))
    for wrong, sentence in (
        (size, "that is the paragraph's bytes, before any merge; apply the ten merges, in order, to every word"),
        (len(words), "that is the number of words; each word is its bytes first, and only the merges join them"),
        (size - MERGES, "each merge is one new token in the vocabulary, but it joins every occurrence of its pair: "
                        "the count falls by the number of occurrences, not by one"),
        (_tokens_after(words, merges[:1]), "that applies only the first merge; apply all ten, in order"),
    ):
        if count == wrong:
            return sentence + "."
    return direction_only(count, expected, "your token count")


# --- 13.2: the loss of a model that narrows the choice --------------------------------------------

@exercise(
    "13.2",
    Number("your loss"),
    solution=lambda: math.log(CANDIDATES),
    success=(
        "the token that came always gets probability 1 / 50, so each prediction costs -ln(1/50) = ln 50 nats, about 3.9, "
        "and the perplexity, e to the loss, is 50 itself: perplexity counts the equally likely options."
    ),
)
def _narrowed_loss(loss, expected):
    if loss.shape != ():
        return compare_without_answer(loss, expected, "your loss")
    if compare(loss, np.asarray(expected), "your loss") is None:
        return None
    value = float(loss)
    for wrong, sentence in (
        (CANDIDATES, "50 is that model's perplexity, e to the loss; the loss is the logarithm of it"),
        (math.log(VOCABULARY), "that is the loss of a model that knows nothing, spread over all 4,096 tokens; this one "
                               "spreads its probability over 50 candidates only, and the right token is always one of them"),
        (math.log2(CANDIDATES), "that is the loss in bits (a base-2 logarithm); the course measures cross-entropy "
                                "in nats, with the natural logarithm, as torch.nn.functional.cross_entropy does"),
        (math.log10(CANDIDATES), "that is a base-10 logarithm; cross-entropy in nats uses the natural logarithm"),
        (1 / CANDIDATES, "that is the probability the right token gets; the loss is minus its logarithm"),
        (-math.log(CANDIDATES), "a loss is minus the logarithm of a probability below 1, so it is positive"),
    ):
        if math.isclose(value, wrong, rel_tol=1e-9):
            return sentence + "."
    return direction_only(loss, expected, "your loss")


# --- 13.3: the weight on the first token --------------------------------------------------------

def first_token_weight(weights):
    """The course's answer: weights (L, B, H, T, T) -> (L, H), the mean weight on key 0 over queries 1 .. T - 1."""
    return weights[..., 1:, 0].mean(axis=(1, 3))


def _first_token_cases():
    """Attention weights (L, B, H, T, T) that are causal rows summing to 1, seeded; two shapes."""
    cases = []
    for seed, shape in ((0, (2, 3, 2, 5)), (1, (3, 1, 4, 4))):
        layers, batch, heads, length = shape
        scores = np.random.default_rng(seed).normal(size=(layers, batch, heads, length, length))
        scores[..., 0] += 1.5  # some weight on the first token, as in a trained model
        scores = np.where(np.tril(np.ones((length, length), dtype=bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        cases.append(weights / weights.sum(axis=-1, keepdims=True))
    return cases


def _first_token_calls():
    return [(f"on weights of shape {weights.shape}", (weights,)) for weights in _first_token_cases()]


def _average_over(weights, axes):
    return weights[..., 1:, 0].mean(axis=axes)


@exercise(
    "13.3",
    Function("your first_token_weight", calls=_first_token_calls, returns=Array("the weights on the first token"),
             errors=(("'dim'", "The check passes NumPy arrays, whose mean takes axis=, not dim= (PyTorch's name)."),)),
    solution=lambda: first_token_weight,
    success=(
        "the weight on key 0, column 0 of each row, averaged over the batch and over every query but the first, "
        "which has nothing else to look at: one number per layer and head."
    ),
)
def _weight_on_first_token(answer, expected):
    for weights, output, target in zip(_first_token_cases(), answer.outputs, expected.outputs, strict=True):
        if matches(output, target):
            continue
        label = f"on weights of shape {weights.shape}"
        layers, _, heads = weights.shape[:3]
        if output.shape != target.shape:
            if output.shape == target.T.shape and matches(output, target.T):
                return f"{label}, the numbers are right but transposed: one row per layer, (L, H) = {target.shape}."
            return (f"{label}, your function returned shape {output.shape}; expected one number per layer and head, "
                    f"(L, H) = {(layers, heads)}: average over the batch (axis 1) and the queries (axis 3).")
        for mistake, sentence in (
            (weights[..., 0].mean(axis=(1, 3)), "query 0 is included: it can only look at itself, so its weight on "
                                                "key 0 is always 1; average over queries 1 .. T - 1"),
            (weights[..., 0, :].mean(axis=(1, 3)), "that averages row 0, the first query's weights over the keys; "
                                                   "the weight on the first token is column 0 of every row"),
            (weights[..., 1:, -1].mean(axis=(1, 3)), "that is the last key's column; the first token is key 0"),
            (weights[..., 1:, 0].sum(axis=(1, 3)), "that is a sum; divide by the number of weights (or use .mean)"),
            (weights[..., 1:, 0].mean(axis=(1, 2)), "that averages over the batch and the heads; after weights[..., 1:, 0] "
                                                    "the axes are (L, B, H, queries): average over the batch (axis 1) "
                                                    "and the queries (axis 3), not the heads"),
            (weights[..., 0, 1:].mean(axis=(1, 3)), "the last two axes are swapped: weights[..., 0, 1:] is row 0, the first "
                                                    "query; the first key is column 0 of every row, weights[..., 1:, 0]"),
            (target.T, f"the numbers are right but transposed: one row per layer, (L, H) = {target.shape}"),
        ):
            if matches(output, mistake):
                return f"{label}: {sentence}."
        problem = compare(output, target, f"what your function returned {label}")
        if problem is not None:
            return problem
    return None
