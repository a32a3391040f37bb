"""Lesson 18's teaching versions equal the package: the one-query top-k loop and its weights, the vectorised mask
(attn.sparse.topk_keep_mask), and the lightning indexer's score as a loop (attn.sparse.LightningIndexer)."""

import math

import pytest
import torch

from attn.sparse import LightningIndexer, topk_keep_mask
from tests.notebooks import ROOT, teaching_namespace

LESSON = ROOT / "lessons" / "18_attention_that_chooses.ipynb"


@pytest.fixture(scope="module")
def lesson18():
    return teaching_namespace(LESSON)


@pytest.mark.parametrize("seed", range(6))
def test_the_one_query_loop_equals_the_mask_and_its_weights_the_masked_softmax(lesson18, seed):
    generator = torch.Generator().manual_seed(seed)
    length = 3 + seed
    scores = torch.randn(length, length, generator=generator, dtype=torch.float64)
    scores[0, : length // 2] = 0.5  # ties, which go to the earlier key
    for top_k in range(length + 1):
        for sinks in (0, 1, 2):
            mask = topk_keep_mask(scores, top_k, sinks)
            for position in range(length):
                kept = lesson18["keep_for_query"](scores[position].tolist(), position, top_k, sinks)
                assert kept == torch.nonzero(mask[position]).flatten().tolist()
            if top_k == 0 and sinks == 0:
                continue  # the first query keeps nothing: the loop has no maximum to subtract
            for position in range(length):
                looped = lesson18["topk_weights_for_query"](scores[position].tolist(), position, top_k, sinks)
                row = scores[position].masked_fill(~mask[position], -math.inf).softmax(-1)
                torch.testing.assert_close(torch.tensor(looped, dtype=torch.float64), row, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("t_q", "t_k"), [(1, 1), (4, 4), (3, 9), (9, 9)])
def test_the_vectorised_mask_equals_the_package(lesson18, t_q, t_k):
    generator = torch.Generator().manual_seed(t_q * 10 + t_k)
    scores = torch.randn(2, t_q, t_k, generator=generator).round(decimals=1)  # ties happen
    for top_k in (0, 1, 2, 5, t_k, t_k + 3):
        for sinks in (0, 1, 3):
            assert torch.equal(lesson18["topk_mask"](scores, top_k, sinks), topk_keep_mask(scores, top_k, sinks))


@pytest.mark.parametrize(("heads", "head_dim", "rope_dim"), [(1, 4, 2), (3, 8, 4), (4, 6, 6)])
def test_the_index_score_loop_equals_the_indexer(lesson18, heads, head_dim, rope_dim):
    torch.manual_seed(heads)
    indexer = LightningIndexer(12, 5, heads, head_dim, rope_dim).double()
    x, latent = torch.randn(6, 12, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    with torch.no_grad():
        looped = lesson18["index_scores_loop"](indexer, x, latent)
        torch.testing.assert_close(looped, indexer(x[None], latent[None])[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("length", "block_size"), [(1, 1), (7, 3), (12, 4), (13, 5)])
def test_the_block_loops_equal_the_package(lesson18, length, block_size):
    """block_means_loop, moba_blocks_for_query and nsa_blocks_for_query against attn.block_sparse, every query."""
    from attn.block_sparse import block_means, moba_select_blocks, nsa_compressed_attention, nsa_select_blocks

    generator = torch.Generator().manual_seed(length + block_size)
    query = torch.randn(1, 1, length, 6, generator=generator, dtype=torch.float64)
    key = torch.randn(1, 1, length, 6, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(lesson18["block_means_loop"](key[0, 0], block_size), block_means(key, block_size)[0, 0],
                               rtol=0, atol=1e-12)
    _, weights = nsa_compressed_attention(query, key, key, block_size)
    for count in (1, 2, 3, 5):
        moba = moba_select_blocks(query, key, block_size, count)[0, 0]
        nsa = nsa_select_blocks(weights, 1, block_size, count)[0, 0]
        for t in range(length):
            assert lesson18["moba_blocks_for_query"](query[0, 0, t], key[0, 0], t, block_size, count) == \
                torch.nonzero(moba[t]).flatten().tolist()
            assert lesson18["nsa_blocks_for_query"](weights[0, 0, t], t, block_size, count) == \
                torch.nonzero(nsa[t]).flatten().tolist()
