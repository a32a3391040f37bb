"""attn.block_sparse (lesson 18): NSA's three branches against fla-core's naive references (naive_nsa_compression,
naive_nsa_topk, naive_nsa_selection, naive_nsa), its window branch against lesson 14's mask, MoBA against its
definition written as loops and against flex_attention; dense attention when every block is chosen; hostile input
gets a sentence.

fla's ``naive_nsa`` pools blocks with ``mean_pooling``, a Triton kernel that needs a GPU; on the CPU the tests give it
``pooled_loop`` below, written from the kernel's rule (each block's sum divided by min(block_size, T - start)), and
check ``block_means`` against that loop. fla computes its branches in float32 whatever the input dtype, so float64
inputs agree to about 1e-6, not 1e-15; the largest differences are printed (pytest -s shows them).
"""

import math
import warnings

import pytest
import torch

from attn.block_sparse import (
    NativeSparseAttention,
    block_means,
    block_token_mask,
    moba_attention,
    moba_select_blocks,
    nsa_attention,
    nsa_compressed_attention,
    nsa_select_blocks,
    nsa_selected_attention,
)
from attn.multihead import explicit_attention
from attn.window import sliding_window_mask

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # fla warns, on import, that flash_attn is absent; only its sliding branch needs it
    from fla.ops.nsa import naive as fla_nsa

FLOAT32_AGREEMENT = 1e-5  # fla's float32 arithmetic against ours in float64


def pooled_loop(x, block_size, cu_seqlens=None):
    """fla's mean_pooling, block by block: x [B, T, H, D] -> [B, ceil(T / block_size), H, D]."""
    assert cu_seqlens is None
    length = x.shape[1]
    blocks = [x[:, start:start + block_size].sum(1) / min(block_size, length - start) for start in range(0, length, block_size)]
    return torch.stack(blocks, dim=1)


@pytest.fixture
def fla_on_cpu(monkeypatch):
    monkeypatch.setattr(fla_nsa, "mean_pooling", pooled_loop)
    return fla_nsa


def tensors(batch, heads, kv_heads, length, head_dim, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, length, head_dim, generator=generator, dtype=dtype)
    key = torch.randn(batch, kv_heads, length, head_dim, generator=generator, dtype=dtype)
    value = torch.randn(batch, kv_heads, length, head_dim, generator=generator, dtype=dtype)
    return query, key, value


def fla_layout(x):
    """(B, H, T, d) <-> [B, T, H, d]."""
    return x.transpose(1, 2)


def keep_from_indices(indices, n_blocks):
    """fla's block indices [B, T, H, S] (-1 = none) -> our block keep-mask (B, H, T, n_blocks)."""
    slots = indices.masked_fill(indices < 0, n_blocks)  # -1 goes to a spare column, dropped
    keep = torch.zeros(*indices.shape[:3], n_blocks + 1, dtype=torch.bool).scatter_(-1, slots, True)
    return fla_layout(keep[..., :n_blocks])


def indices_from_keep(block_keep, slots):
    """Our block keep-mask (B, H, T, n) -> fla's indices [B, T, H, slots], the chosen blocks first, -1 after."""
    n_blocks = block_keep.shape[-1]
    order = torch.where(block_keep, torch.arange(n_blocks), n_blocks).sort(-1).values[..., :slots]
    return fla_layout(order.masked_fill(order == n_blocks, -1))


# block means --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 7, 8, 9, 21])
def test_block_means_equal_the_loop_the_last_partial_block_its_own_mean(length):
    x = torch.randn(2, 3, length, 5, dtype=torch.float64)
    expected = fla_layout(pooled_loop(fla_layout(x), 4))
    assert torch.allclose(block_means(x, 4), expected, rtol=0, atol=1e-14)
    assert torch.allclose(block_means(x, 4)[..., -1, :], x[..., (math.ceil(length / 4) - 1) * 4:, :].mean(-2), atol=1e-14)


def test_block_means_do_not_overflow_in_float16():
    x = torch.full((1, 64, 2), 60000.0, dtype=torch.float16)
    assert torch.equal(block_means(x, 32), torch.full((1, 2, 2), 60000.0, dtype=torch.float16))


# NSA against fla ----------------------------------------------------------------------------------------------------


def test_compressed_branch_equals_fla():
    query, key, value = tensors(2, 8, 2, 21, 4)
    output, weights = nsa_compressed_attention(query, key, value, 4)
    k_cmp, v_cmp = pooled_loop(fla_layout(key), 4), pooled_loop(fla_layout(value), 4)
    expected, _ = fla_nsa.naive_nsa_compression(fla_layout(query), k_cmp, v_cmp, 4, 4 ** -0.5)
    difference = (output - fla_layout(expected)).abs().max().item()
    print(f"compressed branch against fla's naive_nsa_compression: largest difference {difference:.1e}")
    assert difference < FLOAT32_AGREEMENT
    assert torch.equal(output[:, :, :3], torch.zeros_like(output[:, :, :3]))  # before position 3 no block is whole
    assert output[:, :, 3].abs().min() > 0  # position 3 ends block 0: it sees it
    assert torch.equal(weights[:, :, 6, 1:], torch.zeros_like(weights[:, :, 6, 1:]))  # position 6 sees block 0 only


@pytest.mark.parametrize("block_count", [3, 4, 6, 9])
def test_block_choice_equals_fla(block_count):
    query, key, _ = tensors(2, 8, 2, 23, 4, seed=block_count)
    _, weights = nsa_compressed_attention(query, key, key, 4)
    chosen = nsa_select_blocks(weights, 2, 4, block_count)
    indices = fla_nsa.naive_nsa_topk(fla_layout(query), pooled_loop(fla_layout(key), 4), block_count, 4, 4 ** -0.5)
    assert torch.equal(chosen, keep_from_indices(indices, 6))
    assert chosen.sum(-1).max().item() == min(block_count, 6)


def test_selected_branch_equals_fla():
    query, key, value = tensors(1, 8, 2, 19, 4, seed=3)
    _, weights = nsa_compressed_attention(query, key, value, 4)
    chosen = nsa_select_blocks(weights, 2, 4, 3)
    output, _ = nsa_selected_attention(query, key, value, chosen, 4)
    expected = fla_nsa.naive_nsa_selection(fla_layout(query), fla_layout(key), fla_layout(value),
                                           indices_from_keep(chosen, 3), 4)
    difference = (output - fla_layout(expected)).abs().max().item()
    print(f"selected branch against fla's naive_nsa_selection: largest difference {difference:.1e}")
    assert difference < FLOAT32_AGREEMENT


@pytest.mark.parametrize(("heads", "kv_heads", "block_count"), [(16, 1, 3), (32, 2, 4)])
def test_nsa_without_a_window_equals_fla(fla_on_cpu, heads, kv_heads, block_count):
    query, key, value = tensors(2, heads, kv_heads, 22, 4, seed=heads)
    gates = torch.rand(2, heads, 22, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    output = nsa_attention(query, key, value, gates, 4, block_count)
    expected = fla_on_cpu.naive_nsa(fla_layout(query), fla_layout(key), fla_layout(value), fla_layout(gates[..., 0]),
                                    fla_layout(gates[..., 1]), block_counts=block_count, block_size=4, window_size=0)
    difference = (output - fla_layout(expected)).abs().max().item()
    print(f"nsa_attention (no window, H={heads}, H_kv={kv_heads}) against fla's naive_nsa: largest difference {difference:.1e}")
    assert difference < FLOAT32_AGREEMENT


def test_window_branch_is_lesson_14s_window():
    query, key, value = tensors(1, 4, 2, 13, 4, seed=5)
    gates = torch.rand(1, 4, 13, 3, dtype=torch.float64)
    two = nsa_attention(query, key, value, gates[..., :2], 4, 2)
    three = nsa_attention(query, key, value, gates, 4, 2, window=5)
    band, _ = explicit_attention(query, key, value, sliding_window_mask(13, 13, 5))
    assert torch.allclose(three - two, gates[..., 2:] * band, atol=1e-12)


# NSA's rules ---------------------------------------------------------------------------------------------------------


def dense_causal(query, key, value):
    return explicit_attention(query, key, value, is_causal=True)[0]


def test_every_block_chosen_is_dense_causal_attention():
    query, key, value = tensors(2, 4, 2, 17, 4, seed=7)
    gates = torch.zeros(2, 4, 17, 2, dtype=torch.float64)
    gates[..., 1] = 1  # the selected branch alone
    assert torch.allclose(nsa_attention(query, key, value, gates, 4, 5), dense_causal(query, key, value), atol=1e-12)
    assert torch.allclose(moba_attention(query, key, value, 4, 5)[0], dense_causal(query, key, value), atol=1e-12)


def test_a_live_choice_differs_from_dense():
    query, key, value = tensors(1, 4, 2, 32, 4, seed=8)
    gates = torch.zeros(1, 4, 32, 2, dtype=torch.float64)
    gates[..., 1] = 1
    dense = dense_causal(query, key, value)
    assert (nsa_attention(query, key, value, gates, 4, 3) - dense).abs().max() > 0.05
    assert (moba_attention(query, key, value, 4, 2)[0] - dense).abs().max() > 0.05


def test_forced_blocks_with_fewer_than_three_the_nearest_first():
    query, key, _ = tensors(1, 2, 1, 20, 4, seed=9)
    _, weights = nsa_compressed_attention(query, key, key, 4)
    one, two = nsa_select_blocks(weights, 1, 4, 1), nsa_select_blocks(weights, 1, 4, 2)
    own = torch.arange(20) // 4
    assert torch.equal(one[0, 0].nonzero()[:, 1], own)  # the query's own block
    for t in range(4, 20):
        assert two[0, 0, t].nonzero().flatten().tolist() == [own[t] - 1, own[t]]  # own and previous


def test_token_mask_is_the_blocks_causally():
    chosen = torch.zeros(1, 1, 6, 3, dtype=torch.bool)
    chosen[0, 0, 5, 0] = chosen[0, 0, 5, 2] = True
    tokens = block_token_mask(chosen, 2)
    assert tokens[0, 0, 5].tolist() == [True, True, False, False, True, True]
    chosen[0, 0, 2, 1] = True
    assert block_token_mask(chosen, 2)[0, 0, 2].tolist() == [False, False, True, False, False, False]


# the layer ------------------------------------------------------------------------------------------------------------


def test_layer_is_nsa_attention_with_its_projections_and_sigmoid_gates():
    torch.manual_seed(0)
    layer = NativeSparseAttention(32, 4, 2, block_size=4, block_count=2, window=6).double()
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    q = layer.query_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    k = layer.key_proj(x).view(2, 19, 2, 8).transpose(1, 2)
    v = layer.value_proj(x).view(2, 19, 2, 8).transpose(1, 2)
    gates = torch.sigmoid(layer.gate_proj(x)).view(2, 19, 4, 3).transpose(1, 2)
    heads = nsa_attention(q, k, v, gates, 4, 2, 6)
    expected = layer.out_proj(heads.transpose(1, 2).reshape(2, 19, 32))
    assert torch.allclose(layer(x), expected, atol=1e-12)


def test_layer_trains_and_is_causal():
    torch.manual_seed(1)
    layer = NativeSparseAttention(16, 4, 1, block_size=4, block_count=2, window=4, rotary_base=10000.0)
    x = torch.randn(2, 24, 16)
    output = layer(x)
    output.square().mean().backward()
    assert all(parameter.grad is not None and parameter.grad.abs().sum() > 0 for parameter in layer.parameters())
    changed = x.clone()
    changed[:, 15:] = torch.randn(2, 9, 16)
    assert torch.allclose(layer(changed)[:, :15], output[:, :15], atol=1e-6)  # later positions change nothing before


def test_layer_without_a_window_has_two_gates():
    layer = NativeSparseAttention(8, 2, 2, block_size=2, block_count=2, window=None)
    assert layer.gate_proj.out_features == 4
    assert layer(torch.randn(1, 5, 8)).shape == (1, 5, 8)


# MoBA ---------------------------------------------------------------------------------------------------------------


def moba_loop_mask(query, key, block_size, top_blocks):
    """MoBA's keep-mask (B, H, T, T), query by query: its own block, then the best past blocks by q . mean(k)."""
    batch, heads, length, _ = query.shape
    groups = heads // key.shape[1]
    keep = torch.zeros(batch, heads, length, length, dtype=torch.bool)
    for b in range(batch):
        for h in range(heads):
            for t in range(length):
                own = t // block_size
                past = [(query[b, h, t] @ key[b, h // groups, c * block_size:(c + 1) * block_size].mean(0)).item()
                        for c in range(own)]
                best = sorted(range(own), key=lambda c: (-past[c], c))[:top_blocks - 1]
                for c in [own, *best]:
                    keep[b, h, t, c * block_size:min((c + 1) * block_size, t + 1)] = True
    return keep


@pytest.mark.parametrize("top_blocks", [1, 2, 3])
def test_moba_equals_its_definition(top_blocks):
    query, key, value = tensors(2, 4, 2, 15, 4, seed=top_blocks)
    keep = moba_loop_mask(query, key, 3, top_blocks)
    chosen = moba_select_blocks(query, key, 3, top_blocks)
    assert torch.equal(block_token_mask(chosen, 3), keep)
    output, weights = moba_attention(query, key, value, 3, top_blocks)
    expected, _ = explicit_attention(query, key, value, keep)
    assert torch.allclose(output, expected, atol=1e-12)
    assert torch.equal(weights > 0, keep)


def flex_tiles(chosen, block_size, length, heads):
    """flex_attention's BlockMask for a MoBA choice (B, H, T, n_blocks), tiles of 128 x 128."""
    from torch.nn.attention.flex_attention import create_block_mask

    def moba_mask(b, h, q_idx, kv_idx):
        return chosen[b, h, q_idx, kv_idx // block_size] & (kv_idx <= q_idx)

    return create_block_mask(moba_mask, 1, heads, length, length, device="cpu", BLOCK_SIZE=128, _compile=False)


def test_moba_equals_flex_attention_and_flex_skips_the_tiles_no_query_chose():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    length, block_size, generator = 1024, 128, torch.Generator().manual_seed(11)
    query, key, value = tensors(1, 2, 1, length, 16, seed=11, dtype=torch.float32)
    chosen = moba_select_blocks(query, key, block_size, 2)  # (1, 2, T, 8): random queries choose apart
    tiles = flex_tiles(chosen, block_size, length, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention warns that eager mode runs unfused
        output = flex_attention(query, key, value, block_mask=tiles, enable_gqa=True)
    expected, _ = moba_attention(query, key, value, block_size, 2)
    difference = (output - expected).abs().max().item()
    # queries that agree within a tile of 128 (one direction per tile, a little noise) choose the same blocks
    directions = torch.randn(1, 2, length // 128, 16, generator=generator).repeat_interleave(128, dim=2)
    agreeing = directions + 0.01 * torch.randn(1, 2, length, 16, generator=generator)
    shared = flex_tiles(moba_select_blocks(agreeing, key, block_size, 2), block_size, length, 2)
    causal = create_block_mask(lambda b, h, q, k: k <= q, 1, 2, length, length, device="cpu", _compile=False)
    print(f"MoBA against flex_attention (T={length}, blocks of {block_size}, 2 chosen): largest difference "
          f"{difference:.1e}; flex skips {tiles.sparsity():.1f}% of its 128 x 128 tiles for random queries, "
          f"{shared.sparsity():.1f}% for queries that agree within a tile, {causal.sparsity():.1f}% for causal alone")
    assert difference < 1e-5
    assert tiles.sparsity() >= causal.sparsity()
    assert shared.sparsity() == pytest.approx(100 * (1 - 15 / 64))  # tile 0 reads 1 tile, the 7 others 2 each


# hostile input --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "words"), [
    (lambda q, k, v: block_means(q, 0), "block_size must be positive"),
    (lambda q, k, v: block_means(q, 2.0), "block_size must be a positive int"),
    (lambda q, k, v: block_means(q.long(), 2), "floating-point"),
    (lambda q, k, v: block_means(torch.tensor([1.0, math.nan]).view(1, 2, 1), 2), "NaN"),
    (lambda q, k, v: nsa_attention(q, k, v, torch.rand(1, 4, 8, 2), 2, 2, 3), "gates must have shape"),
    (lambda q, k, v: nsa_attention(q, k, v, torch.rand(1, 4, 8, 2), 2, 0), "block_count must be positive"),
    (lambda q, k, v: nsa_attention(q, k[:, :, :5], v[:, :, :5], torch.rand(1, 4, 8, 2), 2, 1), "share T"),
    (lambda q, k, v: nsa_attention(q, k, v, torch.rand(1, 4, 8, 2).double(), 2, 1), "gates is torch.float64"),
    (lambda q, k, v: nsa_attention(q, k, v, torch.full((1, 4, 8, 2), math.inf), 2, 1), "gates contains NaN or inf"),
    (lambda q, k, v: nsa_selected_attention(q, k, v, torch.ones(1, 2, 8, 3, dtype=torch.bool), 2, ), "block_keep"),
    (lambda q, k, v: nsa_select_blocks(torch.rand(1, 4, 8, 4), 3, 2, 2), "multiple of num_kv_heads"),
    (lambda q, k, v: moba_attention(q, k, v, 2, 0), "top_blocks must be positive"),
    (lambda q, k, v: moba_attention(q.masked_fill(q > 1, math.nan), k, v, 2, 1), "query contains NaN"),
    (lambda q, k, v: NativeSparseAttention(8, 3, 1, 2, 2, 2), "multiple of num_heads"),
    (lambda q, k, v: NativeSparseAttention(8, 2, 1, 2, 2, 0), "window must be at least 1"),
    (lambda q, k, v: NativeSparseAttention(8, 2, 1, 2, 2, 2)(torch.randn(1, 0, 8)), "T >= 1"),
])
def test_hostile_input_gets_a_sentence(call, words):
    query, key, value = tensors(1, 4, 2, 8, 4, dtype=torch.float32)
    with pytest.raises((TypeError, ValueError), match=words):
        call(query, key, value)


def test_a_block_longer_than_the_sequence_is_one_block_that_never_ends():
    query, key, value = tensors(1, 2, 1, 6, 4, seed=12)
    gates = torch.rand(1, 2, 6, 2, dtype=torch.float64)
    for block_size in (7, 2**63):
        compressed, _ = nsa_compressed_attention(query, key, value, block_size)
        assert torch.equal(compressed, torch.zeros_like(compressed))  # the one block never ends inside the sequence
        assert torch.allclose(nsa_attention(query, key, value, gates, block_size, 1),
                              gates[..., 1:] * dense_causal(query, key, value), atol=1e-12)
        assert torch.equal(block_means(key, block_size), key.mean(-2, keepdim=True))
