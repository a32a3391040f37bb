"""Lesson 19's speculative decoding: greedy gives the model's own tokens whatever the draft; sampling keeps the
model's distribution exactly (a chi-square test on a small vocabulary)."""

import pytest
import torch

from attn.lm import AustenLM
from attn.models.decoder import generate
from attn.serving import FirstLayers, PromptLookupDraft, speculative_generate
from attn.serving.speculative import accept

VOCAB = 6


def tiny(seed, vocab=VOCAB, layers=2, scale=0.6):
    torch.manual_seed(seed)
    model = AustenLM(vocab, 32, 16, 2, layers)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, scale) if parameter.dim() > 1 else parameter.uniform_(0.5, 1.5)
    return model.double().eval()


@pytest.mark.parametrize("draft_tokens", [1, 4])
def test_greedy_speculative_decoding_is_the_models_own_greedy_decoding(draft_tokens):
    model = tiny(0, vocab=30, layers=3)
    prompt = [1, 2, 3, 1, 2, 3, 4]
    expected = generate(model, torch.tensor([prompt]), 12)[0, len(prompt):].tolist()
    for draft in (FirstLayers(model, 1), tiny(1, vocab=30), PromptLookupDraft(2)):
        assert speculative_generate(model, draft, prompt, 12, draft_tokens=draft_tokens) == expected


def test_a_good_draft_saves_passes():
    model = tiny(0, vocab=30)
    prompt = [1, 2, 3]
    speculative_generate(model, model, prompt, 20, draft_tokens=4)  # the model as its own draft: every guess kept
    assert speculative_generate.rounds == 4  # 20 tokens in 4 passes of 5 (4 guesses and one of its own)


def test_prompt_lookup_copies_what_followed_the_last_ngram():
    assert PromptLookupDraft(2).propose([5, 6, 7, 8, 9, 5, 6], 3) == ([7, 8, 9], None)
    assert PromptLookupDraft(2).propose([1, 2, 3], 3) == ([], None)


def chi_square(counts, expected):
    """Pearson's statistic and its degrees of freedom, cells expected fewer than 5 times pooled into one."""
    small = expected < 5
    counts = torch.cat((counts[~small], counts[small].sum()[None]))
    expected = torch.cat((expected[~small], expected[small].sum()[None]))
    keep = expected > 0
    return (((counts - expected) ** 2)[keep] / expected[keep]).sum().item(), int(keep.sum()) - 1


def chi_square_limit(freedom, z=3.09):
    """The 0.999 quantile of chi-square(freedom), Wilson and Hilferty's approximation (z: the normal's 0.999 quantile)."""
    return freedom * (1 - 2 / (9 * freedom) + z * (2 / (9 * freedom)) ** 0.5) ** 3


def test_the_rejection_rule_keeps_the_targets_joint_distribution_over_a_round():
    """Two guesses from a poor draft, the round's tokens (and the next token from the target when a guess is
    rejected): the first two tokens follow p1(x1) p2(x2 | x1) exactly. 3,000 rounds, chi-square on 16 cells."""
    generator = torch.Generator().manual_seed(0)
    vocab = 4
    p1 = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    p2 = torch.softmax(torch.randn(vocab, vocab, generator=generator, dtype=torch.float64), -1)  # (x1, x2)
    q1 = torch.tensor([0.5, 0.3, 0.1, 0.1], dtype=torch.float64)
    q2 = torch.softmax(torch.randn(vocab, vocab, generator=generator, dtype=torch.float64), -1)
    counts, rounds = torch.zeros(vocab * vocab, dtype=torch.float64), 3000
    for _ in range(rounds):
        x1 = int(torch.multinomial(q1, 1, generator=generator))
        x2 = int(torch.multinomial(q2[x1], 1, generator=generator))
        logits = torch.stack((p1.log(), p2[x1].log(), torch.zeros(vocab, dtype=torch.float64)))  # (3, V)
        tokens = accept(logits, [x1, x2], torch.stack((q1, q2[x1])), 1.0, generator)
        if len(tokens) == 1:  # the next round starts from the target's own distribution
            tokens.append(int(torch.multinomial(p2[tokens[0]], 1, generator=generator)))
        counts[tokens[0] * vocab + tokens[1]] += 1
    statistic, freedom = chi_square(counts, rounds * (p1[:, None] * p2).flatten())
    assert freedom == 15 and statistic < 37.7, statistic  # chi-square(15): P(statistic > 37.7) = 0.001


def test_speculative_sampling_with_a_model_draws_the_models_first_tokens():
    """End to end with two tiny models: 100 pairs of tokens against the model's probabilities (a looser check,
    fast enough for the suite)."""
    model, draft = tiny(2, scale=0.25), tiny(3, scale=0.25)
    prompt, temperature = [1, 4], 1.0
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([prompt]))[0, -1].double() / temperature, -1)  # (V,)
        both = torch.tensor([prompt + [token] for token in range(VOCAB)])
        second = torch.softmax(model(both)[:, -1].double() / temperature, -1)  # (V, V)
    generator = torch.Generator().manual_seed(0)
    counts, samples = torch.zeros(VOCAB * VOCAB, dtype=torch.float64), 100
    for _ in range(samples):
        a, b = speculative_generate(model, draft, prompt, 2, draft_tokens=2, temperature=temperature, generator=generator)
        counts[a * VOCAB + b] += 1
    statistic, freedom = chi_square(counts, samples * (first[:, None] * second).flatten())
    assert statistic < chi_square_limit(freedom), (statistic, freedom)


@pytest.mark.parametrize(("arguments", "error", "words"), [
    (([], 3), ValueError, "at least one token"),
    (([1, 2], 3, 0), ValueError, "draft_tokens must be positive"),
    (([1, 2], 3, 2, -1.0), ValueError, "temperature"),
    (([1, 99], 3), ValueError, "vocabulary"),
    (([1] * 40, 1 << 16), ValueError, "max_length"),
])
def test_hostile_arguments_get_a_sentence(arguments, error, words):
    model = tiny(0)
    with pytest.raises(error, match=words):
        speculative_generate(model, PromptLookupDraft(), *arguments)


def test_a_draft_of_another_vocabulary_is_refused():
    with pytest.raises(ValueError, match="share the model's tokenizer"):
        speculative_generate(tiny(0), tiny(1, vocab=7), [1, 2], 3)
