"""The Kneser-Ney baseline of lesson 13 (attn.models.ngram): every distribution sums to 1, the counts match the
lesson's loops, the lower levels are what Kneser-Ney says, and bad input gets a sentence."""

import math

import pytest
import torch

from attn.models import ngram
from tests.notebooks import ROOT


def random_text(length=400, vocab_size=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (length,), generator=generator)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("context", [[], [3], [3, 5], [5, 3, 1], [11, 11, 11]])
def test_every_distribution_sums_to_one(order, context):
    model = ngram.kneser_ney(random_text(), 16, order)  # ids 12 .. 15 are never seen
    distribution = model.distribution(context)
    assert distribution.shape == (16,) and (distribution > 0).all()
    assert distribution.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_an_unseen_context_hands_its_mass_down():
    tokens = random_text()
    trigram, bigram = ngram.kneser_ney(tokens, 16, 3), ngram.kneser_ney(tokens, 16, 2)
    assert torch.equal(trigram.distribution([14, 3]), trigram.distribution([3]))  # (14, 3) never seen
    assert not torch.equal(trigram.distribution([3]), bigram.distribution([3]))  # continuation counts, not counts


def test_the_lower_level_counts_continuations():
    # 'b' follows only 'a' (many times); 'c' follows four different tokens once each: c is the likelier continuation
    tokens = torch.tensor([0, 1] * 20 + [3, 2, 4, 2, 5, 2, 6, 2])
    unigram_level = ngram.kneser_ney(tokens, 8, 2).levels[1]
    counts = dict(zip(unigram_level.keys.tolist(), unigram_level.counts.tolist(), strict=True))
    assert counts[1] == 1 and counts[2] == 4


def test_the_target_probabilities_use_the_history_the_text_has():
    tokens = random_text(length=60)
    model = ngram.kneser_ney(tokens, 16, 3)
    probabilities = model.target_probabilities(tokens[:10])
    assert probabilities[0].item() == pytest.approx(model.distribution([tokens[0].item()])[tokens[1]].item(), abs=1e-15)
    for t in range(2, 10):
        expected = model.distribution(tokens[t - 2:t].tolist())[tokens[t]].item()
        assert probabilities[t - 1].item() == pytest.approx(expected, abs=1e-15)
    loss = ngram.kneser_ney_loss(tokens, tokens[:10], 16, 3)
    assert loss == pytest.approx(-probabilities.log().mean().item())


@pytest.fixture(scope="module")
def lesson13():
    from tests.notebooks import teaching_namespace

    return teaching_namespace(ROOT / "lessons" / "13_reading_austen.ipynb")


def skewed_text(length, vocab_size, seed):
    """Tokens drawn with probabilities falling as 1 / (id + 1): some n-grams seen once, some twice, some often."""
    generator = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, vocab_size + 1, dtype=torch.float64)
    return torch.multinomial(weights, length, replacement=True, generator=generator)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_lessons_loop_is_the_package(lesson13, seed):
    tokens = skewed_text(300, 60, seed)
    by_hand = lesson13["kneser_ney_by_hand"](tokens.tolist(), 64)
    model = ngram.kneser_ney(tokens, 64, 3)
    assert all(0 < level.discount < 1 for level in model.levels[1:])  # each level has counts of 1 and of 2
    pairs = list(zip(tokens[:-1].tolist(), tokens[1:].tolist(), strict=True))[:40] + [(0, 63), (63, 63), (5, 0)]
    for a, b in pairs:  # seen contexts, and contexts never seen
        expected = model.distribution([a, b])
        found = torch.tensor([by_hand(w, a, b) for w in range(64)], dtype=torch.float64)
        assert torch.allclose(found, expected, rtol=0, atol=1e-14)
        assert math.fsum(found.tolist()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("arguments", "error", "message"), [
    (([0, 1, 2], 4, 3), TypeError, "torch.Tensor"),
    ((torch.tensor([[0, 1, 2]]), 4, 3), ValueError, "one row"),
    ((torch.tensor([0, 1.0, 2]), 4, 3), ValueError, "int64"),
    ((torch.tensor([0, 1]), 4, 3), ValueError, "at least 3"),
    ((torch.tensor([0, 1, 9]), 4, 3), ValueError, "outside 0 .. 3"),
    ((torch.tensor([0, 1, -1]), 4, 3), ValueError, "outside"),
    ((torch.tensor([0, 1, 2]), 0, 3), ValueError, "vocab_size"),
    ((torch.tensor([0, 1, 2]), 4, 0), ValueError, "order"),
    ((torch.tensor([0, 1, 2]), 4, 9), ValueError, "too large"),
    ((torch.tensor([0, 1, 2]), 4, True), TypeError, "order"),
])
def test_bad_input_gets_a_sentence(arguments, error, message):
    with pytest.raises(error, match=message):
        ngram.kneser_ney(*arguments)


def test_bad_queries_get_a_sentence():
    model = ngram.kneser_ney(random_text(), 16, 3)
    for context, error in (("ab", TypeError), ([1.5], TypeError), ([16], ValueError), ([-1], ValueError)):
        with pytest.raises(error, match="context"):
            model.distribution(context)
    with pytest.raises(ValueError, match="shape"):
        model.probability(torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="targets"):
        model.probability(torch.zeros(3, 2, dtype=torch.long), [0, 1, 2])
    with pytest.raises(ValueError, match="targets"):
        model.probability(torch.zeros(1, 2, dtype=torch.long), torch.tensor([16]))
    with pytest.raises(ValueError, match="history"):
        model.probability(torch.full((1, 2), -2), torch.tensor([1]))


def test_the_bigram_baselines_refuse_what_they_cannot_count():
    tokens = random_text()
    assert ngram.bigram_loss(tokens, tokens, 16) > 0
    for call, error, words in (
        (lambda: ngram.bigram_loss(tokens, 3, 16), TypeError, "targets_tokens must be a 1-D tensor of token ids"),
        (lambda: ngram.bigram_loss(tokens.float(), tokens, 16), TypeError, "train_tokens must be a 1-D tensor"),
        (lambda: ngram.bigram_loss(tokens, tokens[:1], 16), ValueError, "targets_tokens holds 1 tokens"),
        (lambda: ngram.bigram_loss(tokens, tokens, 4), ValueError, r"outside the vocabulary 0..3"),
        (lambda: ngram.bigram_loss(tokens, tokens, 16, prior=math.nan), ValueError, "prior must be a positive finite"),
        (lambda: ngram.bigram_loss(tokens, tokens, 16, prior=0.0), ValueError, "prior must be a positive finite"),
        (lambda: ngram.bigram_prior_trials(3, 16), TypeError, "train_tokens must be a 1-D tensor"),
        (lambda: ngram.bigram_prior_trials(tokens[:10], 16), ValueError, "needs at least 14"),
        (lambda: ngram.baseline_log(tokens, tokens, None, 16), TypeError, "config must be the training settings"),
        (lambda: ngram.baseline_log(tokens, tokens, {"eval_windows": 0, "context_length": 4}, 16), TypeError, "config"),
    ):
        with pytest.raises(error, match=words):
            call()
