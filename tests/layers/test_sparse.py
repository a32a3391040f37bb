"""attn.sparse (lesson 18): the top-k keep-mask against a loop (causal, end-aligned, ties, sinks), top-k attention
against dense attention, and the lightning indexer against transformers' DeepseekV32Indexer; hostile input gets a
sentence."""

import math
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional

from attn.multihead import explicit_attention
from attn.sparse import LightningIndexer, topk_attention, topk_keep_mask
from attn.window import sliding_window_mask

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: the reference is built from a config


def topk_loop(scores, top_k, sink_tokens=0):
    """For one (T_q, T_k) table, query by query: the sinks it sees, then its best keys one at a time."""
    t_q, t_k = scores.shape
    keep = torch.zeros(t_q, t_k, dtype=torch.bool)
    for i in range(t_q):
        p = t_k - t_q + i  # the query's key position
        visible = [j for j in range(p + 1) if scores[i, j] > -math.inf]
        for j in visible:
            keep[i, j] = j < sink_tokens
        others = [j for j in visible if j >= sink_tokens]
        best = sorted(others, key=lambda j: (-scores[i, j].item(), j))  # highest first, the earlier key on a tie
        for j in best[:top_k]:
            keep[i, j] = True
    return keep


@st.composite
def score_cases(draw):
    t_k = draw(st.integers(1, 7))
    t_q = draw(st.integers(1, t_k))
    levels = draw(st.integers(1, 4))  # few distinct values, so ties are common
    values = draw(st.lists(st.integers(0, levels), min_size=t_q * t_k, max_size=t_q * t_k))
    scores = torch.tensor(values, dtype=torch.float64).view(t_q, t_k)
    if draw(st.booleans()):
        scores = scores.masked_fill(scores == 0, -math.inf)  # keys ruled out by the scorer
    return scores, draw(st.integers(0, t_k + 1)), draw(st.integers(0, 3))


@settings(max_examples=120)
@given(score_cases())
def test_mask_equals_the_loop(case):
    scores, top_k, sinks = case
    assert torch.equal(topk_keep_mask(scores, top_k, sinks), topk_loop(scores, top_k, sinks))


@settings(max_examples=80)
@given(score_cases())
def test_mask_is_causal_end_aligned_and_keeps_the_right_count(case):
    scores, top_k, sinks = case
    keep = topk_keep_mask(scores, top_k, sinks)
    t_q, t_k = scores.shape
    causal = sliding_window_mask(t_q, t_k, t_k)
    visible = causal & (scores > -math.inf)
    assert not (keep & ~visible).any(), "a kept key is in the future or ruled out"
    sink_columns = torch.arange(t_k) < sinks
    assert torch.equal(keep & sink_columns, visible & sink_columns), "visible sinks are always kept"
    others = visible & ~sink_columns
    assert torch.equal((keep & ~sink_columns).sum(-1), others.sum(-1).clamp(max=top_k)), "min(top_k, visible) chosen"


def test_end_aligned_like_the_window():
    """Two new queries after five cached keys: query 0 stands at key 5 and sees keys 0..5."""
    scores = torch.arange(7.0).expand(2, 7)  # later keys score higher
    keep = topk_keep_mask(scores, 2)
    assert keep[0].nonzero().flatten().tolist() == [4, 5]
    assert keep[1].nonzero().flatten().tolist() == [5, 6]


def test_large_top_k_is_the_causal_mask():
    scores = torch.randn(3, 6, 6, generator=torch.Generator().manual_seed(0))
    for top_k in (6, 7, 2**70):
        assert torch.equal(topk_keep_mask(scores, top_k), sliding_window_mask(6, 6, 6).expand(3, 6, 6))
    assert torch.equal(topk_keep_mask(scores[:, 2:], 6), sliding_window_mask(4, 6, 6).expand(3, 4, 6))
    for sinks in (6, 2**63 - 1, 2**63, 2**70):
        assert torch.equal(topk_keep_mask(scores, 0, sinks), sliding_window_mask(6, 6, 6).expand(3, 6, 6)), sinks


def test_ties_go_to_the_earlier_key():
    scores = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0]])
    assert topk_keep_mask(scores, 2)[0].nonzero().flatten().tolist() == [1, 2]
    assert topk_keep_mask(torch.zeros(1, 5), 3)[0].nonzero().flatten().tolist() == [0, 1, 2]


def test_sinks_are_kept_and_not_counted():
    scores = torch.tensor([[-5.0, -5.0, 1.0, 3.0, 2.0, 0.0]])
    keep = topk_keep_mask(scores, 2, sink_tokens=2)
    assert keep[0].nonzero().flatten().tolist() == [0, 1, 3, 4], "two sinks plus the two best of the rest"
    assert topk_keep_mask(scores, 0, sink_tokens=2)[0].nonzero().flatten().tolist() == [0, 1]
    square = topk_keep_mask(torch.zeros(4, 4), 1, sink_tokens=3)
    assert square[0].nonzero().flatten().tolist() == [0], "a sink is still causal"
    assert square[3].nonzero().flatten().tolist() == [0, 1, 2, 3]


def test_a_query_that_sees_nothing_keeps_nothing_and_reads_zeros():
    """The course's convention for a row with no allowed key: zero weights and a zero output, never NaN."""
    scores = torch.tensor([[[-math.inf, 1.0, 2.0], [-math.inf, -math.inf, 2.0], [-math.inf, -math.inf, -math.inf]]])
    keep = topk_keep_mask(scores, 2)
    assert keep[0].tolist() == [[False, False, False], [False, False, False], [False, False, False]]
    assert not topk_keep_mask(torch.randn(1, 4, 4), 0).any()
    query, key, value = (torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    output, weights = topk_attention(query, key, value, scores, 2)
    assert not output.isnan().any() and torch.equal(output, torch.zeros_like(output))
    assert torch.equal(weights, torch.zeros_like(weights))


def test_empty_tables_give_empty_masks():
    assert topk_keep_mask(torch.empty(2, 0, 3), 2).shape == (2, 0, 3)
    assert topk_keep_mask(torch.empty(0, 0), 2).shape == (0, 0)


def test_topk_attention_reads_only_the_kept_keys():
    generator = torch.Generator().manual_seed(1)
    query, key, value = (torch.randn(2, 4, 6, 5, generator=generator, dtype=torch.float64) for _ in range(3))
    scores = torch.randn(2, 6, 6, generator=generator, dtype=torch.float64)
    dense, _ = explicit_attention(query, key, value, is_causal=True)
    full, _ = topk_attention(query, key, value, scores, top_k=6)
    torch.testing.assert_close(full, dense, rtol=0, atol=1e-12)
    sparse, weights = topk_attention(query, key, value, scores, top_k=2, sink_tokens=1)
    keep = topk_keep_mask(scores, 2, 1)[:, None]
    assert torch.equal(weights > 0, keep.expand_as(weights)), "weight only on the kept keys, for every head"
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6, dtype=torch.float64), rtol=0, atol=1e-12)
    expected, _ = explicit_attention(query, key, value, keep)
    torch.testing.assert_close(sparse, expected, rtol=0, atol=0)
    assert (sparse - dense).abs().max() > 1e-3, "with k < T the choice is live"


# ------------------------------------------------------------------------------------ the lightning indexer


def reference_indexer(seed=0, index_topk=3):
    """A tiny random transformers DeepseekV32Indexer in float64 (weights drawn with std 0.5 so that differences show)."""
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32 import modeling_deepseek_v32

    torch.manual_seed(seed)
    config = DeepseekV32Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8,
        qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, index_n_heads=3, index_head_dim=8,
        index_topk=index_topk, attn_implementation="eager",
    )
    module = modeling_deepseek_v32.DeepseekV32Indexer(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=0.5)
    return module


def rotary_float64(config, length):
    """The reference's cos and sin (rotate_half layout, (1, T, rope)) computed in float64; its own rotary embedding
    computes them in float32, which alone would leave differences near 1e-7."""
    rope = config.qk_rope_head_dim
    inverse = config.rope_parameters["rope_theta"] ** (-torch.arange(0, rope, 2, dtype=torch.float64) / rope)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inverse  # (T, rope / 2)
    angles = torch.cat([angles, angles], dim=-1)[None]  # (1, T, rope)
    return angles.cos(), angles.sin()


class ReferenceScores(torch.overrides.TorchFunctionMode):
    """Keeps the scores the reference hands to ``topk`` (it computes them but returns only the indices); with
    ``float64`` it also skips its casts of float64 tensors to float32 (``.float()``, ``.to(torch.float32)``, the
    softmax's dtype): it scores, normalises and takes the softmax in float32 whatever its input."""

    def __init__(self, float64):
        super().__init__()
        self.float64, self.scores = float64, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.float64 and func is torch.Tensor.float and args[0].dtype == torch.float64:
            return args[0]
        if self.float64 and func is torch.Tensor.to and args[0].dtype == torch.float64 and torch.float32 in args[1:]:
            return args[0]  # RMSNorm's cast to float32
        if self.float64 and func is torch.nn.functional.softmax and args[0].dtype == torch.float64:
            kwargs = {**(kwargs or {}), "dtype": torch.float64}  # eager attention's softmax, float32 as written
        if func is torch.Tensor.topk:
            self.scores = args[0]
        return func(*args, **(kwargs or {}))


def reference_run(module, x, query_latent, as_written=False):
    """The reference's top-k indices (B, T, k) and its index scores (B, T, T), -inf above the diagonal."""
    length = x.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None].expand(x.shape[0], length, length)
    mode = ReferenceScores(float64=not as_written)
    if as_written:  # its own casts and rotary, in float32
        from transformers.models.deepseek_v32 import modeling_deepseek_v32

        rotary = modeling_deepseek_v32.DeepseekV32RotaryEmbedding(module.config)
        position_embeddings = rotary(x, torch.arange(length)[None])
    else:
        position_embeddings = rotary_float64(module.config, length)
    with mode:
        indices = module(x, query_latent, position_embeddings, causal, None)
    return indices, mode.scores, causal


def inputs(length=9, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(2, length, 32, generator=generator, dtype=torch.float64),
            torch.randn(2, length, 16, generator=generator, dtype=torch.float64))


def test_indexer_scores_equal_deepseek_v32():
    module = reference_indexer()
    x, query_latent = inputs()
    _, expected, causal = reference_run(module, x, query_latent)
    with torch.no_grad():
        scores = LightningIndexer.from_transformers(module)(x, query_latent)
    assert scores.shape == (2, 9, 9) and scores.dtype == torch.float64
    difference = (scores - expected)[causal].abs().max().item()
    assert difference < 1e-12, difference
    # as the reference is written (float32 scores and angles) the agreement is float32's
    _, as_written, _ = reference_run(module, x, query_latent, as_written=True)
    assert as_written.dtype == torch.float32
    assert (scores - as_written.double())[causal].abs().max().item() < 1e-5


def test_indexer_choice_equals_deepseek_v32_and_is_live():
    """The reference's top-k indices, as a mask, against topk_keep_mask of our scores. Two differences are by
    design: where a query sees fewer than k keys, torch.topk fills its k with future (-inf) keys, which the
    reference's attention then masks; and torch.topk breaks ties in no stated order (a query whose indexer heads
    are all ReLU-zero on several keys scores them all 0.0), where topk_keep_mask takes the earlier key. So the
    masks are compared on rows without a tie at the boundary, and every row's kept scores are compared."""
    module = reference_indexer(index_topk=3)
    x, query_latent = inputs()
    indices, _, causal = reference_run(module, x, query_latent)
    with torch.no_grad():
        scores = LightningIndexer.from_transformers(module)(x, query_latent)
    theirs = torch.zeros_like(causal).scatter(-1, indices.long(), True) & causal
    ours = topk_keep_mask(scores, 3)
    kept_scores = [sorted(scores[b, i][mask[b, i]].tolist()) for mask in (ours, theirs) for b in range(2) for i in range(9)]
    assert kept_scores[:18] == kept_scores[18:], "the same scores are kept"
    ranked = scores.masked_fill(~causal, -math.inf).sort(dim=-1, descending=True).values  # (B, T, T)
    no_tie = (ranked[..., 2] != ranked[..., 3]) | (causal.sum(-1) <= 3)  # (B, T): the 3rd and 4th best differ
    assert no_tie.sum() > 9 and torch.equal(ours[no_tie], theirs[no_tie])
    assert not torch.equal(ours, causal), "with k < T the mask is live"


def test_sparse_latent_attention_equals_deepseek_v32_attention():
    """The whole DSA layer: transformers' DeepseekV32Attention (latent attention reading its indexer's top k) against
    lesson 15's LatentAttention (its queries, latents and keys) attending through topk_attention with our indexer's
    choice. The seed is one with no tie at any query's k-th key, so the two choices must agree; with k < T the
    output differs from dense causal attention (the choice is live)."""
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32 import modeling_deepseek_v32

    from attn.latent import LatentAttention

    torch.manual_seed(0)
    config = DeepseekV32Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8,
        qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, index_n_heads=8, index_head_dim=8, index_topk=3,
        attn_implementation="eager",
    )
    module = modeling_deepseek_v32.DeepseekV32Attention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=0.3)
    x, _ = inputs()
    length = x.shape[1]
    causal = torch.full((length, length), float("-inf"), dtype=torch.float64).triu(1)[None, None].expand(2, 1, -1, -1)
    with ReferenceScores(float64=True) as mode, torch.no_grad():
        expected = module(x, rotary_float64(config, length), causal)[0]
    layer, indexer = LatentAttention.from_transformers(module), LightningIndexer.from_transformers(module.indexer)
    positions = torch.arange(length)
    with torch.no_grad():
        query_latent = layer.query_proj[1](layer.query_proj[0](x))  # (B, T, q_lora_rank): RMSNorm of the down-projection
        scores = indexer(query_latent=query_latent, x=x)
        torch.testing.assert_close(scores.tril(), mode.scores.masked_fill(causal[:, 0] < 0, 0), rtol=0, atol=1e-12)
        q_nope, q_rope = layer.queries(x, positions)
        latents, rope_keys = layer.compress(x, positions)
        keys_nope, values = layer.up_proj(latents).unflatten(-1, (4, -1)).transpose(1, 2).split([6, 5], dim=-1)
        keys = torch.cat([keys_nope, rope_keys[:, None].expand(-1, 4, -1, -1)], dim=-1)  # (B, H, T, 10)
        query = torch.cat([q_nope, q_rope], dim=-1) * layer.scaling * math.sqrt(10)  # explicit_attention divides by sqrt(d)
        ranked = scores.masked_fill(causal[:, 0] < 0, -math.inf).sort(dim=-1, descending=True).values
        assert ((ranked[..., 2] > ranked[..., 3]) | (torch.arange(length) < 3)).all(), "a tie at the k-th key: change the seed"
        padded = functional.pad(values, (0, 5))  # (B, H, T, 10): the course's attention takes d_v = d_k
        context = topk_attention(query, keys, padded, scores, top_k=3)[0][..., :5]  # (B, H, T, 5)
        ours = layer.out_proj(context.transpose(1, 2).flatten(2))
        dense = layer(x)
        torch.testing.assert_close(layer.query_latent(x), query_latent, rtol=0, atol=0)
        keep = topk_keep_mask(scores, 3)  # (B, T, T): the layer's own keep_mask argument, both of its forms
        through_layer = [layer(x, keep_mask=keep), layer(x, absorbed=True, keep_mask=keep)]
    for output in through_layer:
        assert (output - expected).abs().max().item() < 1e-12
    difference = (ours - expected).abs().max().item()
    assert difference < 1e-12, difference
    assert (dense - expected).abs().max().item() > 1e-3, "with k < T the sparse layer differs from dense attention"


def test_a_wrong_copy_is_caught():
    module = reference_indexer()
    x, query_latent = inputs()
    _, expected, causal = reference_run(module, x, query_latent)
    layer = LightningIndexer.from_transformers(module)
    with torch.no_grad():
        layer.key_proj.weight.copy_(module.wk.weight)  # the rotary rows left in rotate_half's order
        assert (layer(x, query_latent) - expected)[causal].abs().max() > 1e-3


def test_indexer_is_a_weighted_sum_of_relu_heads():
    """The equation written out, head by head, loops over the query and key positions."""
    torch.manual_seed(0)
    layer = LightningIndexer(8, 6, num_heads=2, head_dim=4, rope_dim=0).double()
    x, query_latent = torch.randn(1, 5, 8, dtype=torch.float64), torch.randn(1, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        scores = layer(x, query_latent)
        q = layer.query_proj(query_latent).view(1, 5, 2, 4)
        k = layer.key_norm(layer.key_proj(x))
        w = layer.head_weights(x) / math.sqrt(2)
    for t in range(5):
        for s in range(5):
            expected = sum(w[0, t, j] * torch.relu(q[0, t, j] @ k[0, s] / 2) for j in range(2))
            assert abs(scores[0, t, s].item() - expected.item()) < 1e-12


# ------------------------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("scores, top_k, sinks, words", [
    ([[1.0]], 1, 0, "torch.Tensor"),
    (torch.ones(3), 1, 0, "at least 2 axes"),
    (torch.ones(4, 3), 1, 0, "T_q=4"),
    (torch.ones(2, 2, dtype=torch.int64), 1, 0, "floating-point"),
    (torch.tensor([[math.nan, 1.0]]), 1, 0, r"NaN or \+inf"),
    (torch.tensor([[math.inf, 1.0]]), 1, 0, r"NaN or \+inf"),
    (torch.ones(2, 2).to_sparse(), 1, 0, "to_dense"),
    (torch.empty(2, 2, device="meta"), 1, 0, "meta"),
    (torch.ones(2, 2), -1, 0, "top_k must be 0 or more"),
    (torch.ones(2, 2), 1.5, 0, "top_k must be a whole number"),
    (torch.ones(2, 2), True, 0, "top_k must be a whole number"),
    (torch.ones(2, 2), 1, -2, "sink_tokens must be 0 or more"),
    (torch.ones(2, 2), 1, "1", "sink_tokens must be a whole number"),
])
def test_hostile_mask_arguments_get_a_sentence(scores, top_k, sinks, words):
    with pytest.raises((TypeError, ValueError), match=words):
        topk_keep_mask(scores, top_k, sinks)


def test_hostile_indexer_input_gets_a_sentence():
    layer = LightningIndexer(8, 6, num_heads=2, head_dim=4, rope_dim=2)
    x, query_latent = torch.randn(1, 5, 8), torch.randn(1, 5, 6)
    with pytest.raises(ValueError, match="must share"):
        layer(x, query_latent[:, :4])
    with pytest.raises(ValueError, match=r"query_latent must have shape \(B, T, 6\)"):
        layer(x, torch.randn(1, 5, 7))
    with pytest.raises(TypeError, match="float64"):
        layer(x.double(), query_latent.double())
    with pytest.raises(ValueError, match="NaN or inf"):
        layer(x.masked_fill(x > 1, math.nan), query_latent)
    with pytest.raises(ValueError, match="overflowed"):
        layer(x * 1e4, query_latent * 1e36)
    for arguments, words in [((8, 6, 2, 4, 3), "even"), ((8, 6, 2, 4, 6), "at most head_dim"), ((8, 0, 2, 4, 2), "positive"),
                             ((8, 6, 2, 4, 2, 0.5), "rotary_base")]:
        with pytest.raises((TypeError, ValueError), match=words):
            LightningIndexer(*arguments)
    with pytest.raises(TypeError, match="DeepseekV32Indexer"):
        LightningIndexer.from_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="index_scores must have shape \\(B, T_q, T_k\\)"):
        topk_attention(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(3, 3), 2)
    with pytest.raises(ValueError, match="keep_mask"):
        topk_attention(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 3, 3), 2)


def test_latent_attention_keep_mask_is_checked_and_an_empty_row_reads_nothing():
    from attn.latent import LatentAttention

    torch.manual_seed(0)
    layer = LatentAttention(16, 2, 4, 4, 2, 4).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    for wrong, words in ((torch.ones(5, 5), "bool"), (torch.ones(5, 4, dtype=torch.bool), "shape"),
                         ([[True]], "tensor")):
        with pytest.raises((TypeError, ValueError), match=words):
            layer(x, keep_mask=wrong)
    keep = torch.ones(5, 5, dtype=torch.bool)
    keep[3] = False  # query 3 keeps nothing
    output = layer(x, keep_mask=keep)
    assert torch.isfinite(output).all()
    torch.testing.assert_close(output[:, 3], layer.out_proj.bias if layer.out_proj.bias is not None
                               else torch.zeros(2, 16, dtype=torch.float64))
    torch.testing.assert_close(layer(x, keep_mask=torch.ones(5, 5, dtype=torch.bool)), layer(x))  # causal stays
    with pytest.raises(ValueError, match="no query latent"):
        layer.query_latent(x)


def test_topk_attention_with_indexer_scores_equals_fla_naive_dsa():
    """DSA against flash-linear-attention's naive_dsa (GQA: 4 query heads on 2 key/value heads): fla scores with the
    same indexer queries, keys and weights (ReLU, 1 / sqrt(d_I)), keeps the top k by torch.topk and attends, in float32.
    torch.topk breaks ties in no stated order and fla ranks float32 scores, so the seed is one where every query's k-th
    and (k+1)-th visible scores differ by more than float32 could blur (checked): then the choices must agree."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla warns, on import, that flash_attn is absent; naive_dsa does not need it
        from fla.ops.dsa.naive import naive_dsa

    torch.manual_seed(3)  # eight indexer heads and this seed: no score is ReLU's exact 0, no near-tie at the k-th key
    indexer = LightningIndexer(32, 16, num_heads=8, head_dim=8, rope_dim=4).double()
    x, query_latent = inputs(length=12, seed=3)
    generator = torch.Generator().manual_seed(4)
    query = torch.randn(2, 4, 12, 6, generator=generator, dtype=torch.float64)
    key, value = (torch.randn(2, 2, 12, 6, generator=generator, dtype=torch.float64) for _ in range(2))
    with torch.no_grad():
        scores = indexer(x, query_latent)  # (B, T, T)
        index_queries = indexer._rotate(indexer.query_proj(query_latent).view(2, 12, 8, 8).transpose(1, 2))  # (B, H_I, T, d_I)
        index_keys = indexer._rotate(indexer.key_norm(indexer.key_proj(x)))  # (B, T, d_I)
        head_weights = indexer.head_weights(x) / math.sqrt(8)  # (B, T, H_I): 1 / sqrt(H_I)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    ranked = scores.masked_fill(~causal, -math.inf).sort(dim=-1, descending=True).values  # (B, T, T)
    margins = (ranked[..., 3] - ranked[..., 4])[:, 4:]  # queries that see more than k = 4 keys
    assert margins.min() > 1e-4, "a near-tie at the k-th key: change the seed"
    ours, _ = topk_attention(query, key, value, scores, top_k=4)
    theirs, indices = naive_dsa(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                index_queries.transpose(1, 2), index_keys, head_weights, topk=4, return_indices=True)
    chosen = torch.zeros(2, 12, 13, dtype=torch.bool).scatter_(-1, indices.masked_fill(indices < 0, 12), True)[..., :12]
    assert torch.equal(chosen, topk_keep_mask(scores, 4)) and not torch.equal(chosen, causal.expand(2, -1, -1))
    difference = (ours - theirs.transpose(1, 2)).abs().max().item()
    print(f"topk_attention with the lightning indexer's scores against fla's naive_dsa: largest difference {difference:.1e}")
    assert theirs.dtype == torch.float64 and difference < 1e-5
