"""Lesson 19's teaching versions (the block-table loop, the log-sum-exp merge, the acceptance rules written out in
the lesson) equal attn.serving's: paged_attention, merge_attention and speculative decoding's accept."""

import math

import pytest
import torch

from attn.serving import PagedKVCache, merge_attention, paged_attention
from attn.serving.speculative import accept
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson19():
    return teaching_namespace(ROOT / "lessons" / "19_serving_attention.ipynb")


@pytest.mark.parametrize("page_size", [1, 3, 4, 16])
def test_the_block_table_loop_equals_the_gather(lesson19, page_size):
    generator = torch.Generator().manual_seed(page_size)
    cache = PagedKVCache(80, page_size, 2, 8, dtype=torch.float64)
    lengths = {"a": 7, "b": 1, "c": 16, "d": 9}
    for seq, length in list(lengths.items()) * 2:  # two appends each: interleaved pages
        keys, values = (torch.randn(2, length, 8, dtype=torch.float64, generator=generator) for _ in range(2))
        cache.append(seq, keys, values)
    seqs = list(lengths)
    queries = torch.randn(len(seqs), 2, 8, dtype=torch.float64, generator=generator)
    gathered, _ = paged_attention(queries[:, :, None], cache.key_pages[0], cache.value_pages[0],
                                  cache.block_table_tensor(seqs), torch.tensor([cache.lengths[s] for s in seqs]))
    for row, seq in enumerate(seqs):
        loop = lesson19["attend_through_table"](queries[row], cache, seq)
        torch.testing.assert_close(loop, gathered[row, :, 0], rtol=0, atol=1e-12)


def test_the_merge_equals_the_package_and_one_softmax(lesson19):
    generator = torch.Generator().manual_seed(2)
    query = torch.randn(8, dtype=torch.float64, generator=generator)
    keys, values = (torch.randn(12, 8, dtype=torch.float64, generator=generator) for _ in range(2))
    whole, whole_lse = lesson19["partial_attention"](query, keys, values)
    scores = keys @ query / math.sqrt(8)
    torch.testing.assert_close(whole, torch.softmax(scores, 0) @ values, rtol=0, atol=1e-12)
    for split in (1, 5, 11):
        a = lesson19["partial_attention"](query, keys[:split], values[:split])
        b = lesson19["partial_attention"](query, keys[split:], values[split:])
        merged, lse = lesson19["merge_two"](*a, *b)
        torch.testing.assert_close(merged, whole, rtol=0, atol=1e-12)
        torch.testing.assert_close(lse, whole_lse, rtol=0, atol=1e-12)
        package, _ = merge_attention(a[0].view(1, 1, 1, -1), a[1].view(1, 1, 1), b[0].view(1, 1, 1, -1),
                                     b[1].view(1, 1, 1))
        torch.testing.assert_close(package.flatten(), merged, rtol=0, atol=1e-12)


def test_greedy_acceptance_equals_accept(lesson19):
    generator = torch.Generator().manual_seed(3)
    for _ in range(200):
        k = int(torch.randint(0, 5, (), generator=generator))
        logits = torch.randn(k + 1, 4, dtype=torch.float64, generator=generator)
        guesses = torch.randint(0, 4, (k,), generator=generator).tolist()
        choices = logits.argmax(-1).tolist()
        assert lesson19["accept_greedy"](guesses, choices) == accept(logits, guesses, None, 0.0)


def test_sampled_acceptance_equals_accept_draw_for_draw(lesson19):
    """The same draws from the same generator: the loop and the package keep and replace the same tokens."""
    generator = torch.Generator().manual_seed(4)
    for trial in range(200):
        k = int(torch.randint(1, 4, (), generator=generator))
        logits = torch.randn(k + 1, 5, dtype=torch.float64, generator=generator)
        draft = torch.softmax(torch.randn(k, 5, dtype=torch.float64, generator=generator), -1)
        guesses = [int(torch.multinomial(row, 1, generator=generator)) for row in draft]
        ours = lesson19["accept_sampled"](torch.softmax(logits, -1), draft, guesses,
                                          torch.Generator().manual_seed(trial))
        theirs = accept(logits, guesses, draft, 1.0, torch.Generator().manual_seed(trial))
        assert ours == theirs
