"""Lesson 14: sliding windows, the ring-buffer cache and sinks, against loops, flex_attention and transformers."""

import json
import math
import os
import warnings
from pathlib import Path

import pytest
import torch

import attn
from attn import KVCache, MultiHeadAttention, RingKVCache
from attn.experiments import window_runs
from attn.model_attention import ModelAttention
from attn.models.decoder import Decoder, stepwise_logits
from attn.window import (
    sink_attention,
    sink_rescale,
    sliding_window_mask,
    window_keep_mask,
)
from tests.notebooks import ROOT, teaching_namespace


def window_loop(t_q, t_k, window, sink_tokens=0):
    """For each query, the keys it may see, one by one."""
    keep = torch.zeros(t_q, t_k, dtype=torch.bool)
    for i in range(t_q):
        p = t_k - t_q + i  # the query's absolute position
        for j in range(t_k):
            keep[i, j] = j <= p and (j > p - window or j < sink_tokens)
    return keep


@pytest.mark.parametrize("t_q, t_k, window, sinks", [(7, 7, 3, 0), (7, 7, 3, 2), (3, 10, 4, 1), (1, 9, 1, 0), (6, 6, 10, 0)])
def test_mask_equals_the_loop(t_q, t_k, window, sinks):
    assert torch.equal(sliding_window_mask(t_q, t_k, window, sinks), window_loop(t_q, t_k, window, sinks))


def test_mask_keeps_window_keys_itself_included():
    keep = sliding_window_mask(8, 8, 3)
    assert keep.sum(dim=1).tolist() == [1, 2, 3, 3, 3, 3, 3, 3]
    assert keep[5].nonzero().flatten().tolist() == [3, 4, 5]  # p - W < j <= p
    with_sinks = sliding_window_mask(8, 8, 3, sink_tokens=2)
    assert with_sinks[7].nonzero().flatten().tolist() == [0, 1, 5, 6, 7]
    assert with_sinks[0].nonzero().flatten().tolist() == [0], "a sink is still causal"
    assert torch.equal(sliding_window_mask(8, 8, 8), torch.ones(8, 8, dtype=torch.bool).tril())


def test_mask_is_the_convention_of_transformers():
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.masking_utils import sliding_window_causal_mask_function

    window, length = 4, 12
    query, key = torch.arange(length)[:, None], torch.arange(length)[None, :]
    theirs = sliding_window_causal_mask_function(window)(0, 0, query, key)
    assert torch.equal(sliding_window_mask(length, length, window), theirs)
    assert not torch.equal(sliding_window_mask(length, length, window + 1), theirs), "the off-by-one window differs"


def test_ring_order_does_not_matter():
    positions = torch.tensor([0, 9, 7, 8, 10])
    keep = window_keep_mask(torch.tensor([10]), positions, 3, sink_tokens=1)
    assert keep.tolist() == [[True, True, False, True, True]]


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: sliding_window_mask(5, 5, 0), ValueError, "window must be at least 1"),
        (lambda: sliding_window_mask(5, 5, 2.5), TypeError, "window must be None or a positive int"),
        (lambda: sliding_window_mask(5, 5, True), TypeError, "window must be None or a positive int"),
        (lambda: sliding_window_mask(5, 5, None), ValueError, "window must be a positive int here"),
        (lambda: sliding_window_mask(6, 5, 2), ValueError, "T_q=6 is more than T_k=5"),
        (lambda: sliding_window_mask(-1, 5, 2), ValueError, "T_q must be 0 or more"),
        (lambda: sliding_window_mask("5", 5, 2), TypeError, "T_q must be an int"),
        (lambda: sliding_window_mask(10**6, 10**6, 2), ValueError, "decode with an attn.RingKVCache"),
        (lambda: RingKVCache(2**50).append(torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8)), ValueError, "use a smaller window"),
        (lambda: sliding_window_mask(5, 5, 2, sink_tokens=-1), ValueError, "sink_tokens must be 0 or more"),
        (lambda: sliding_window_mask(5, 5, 2, sink_tokens=1.0), TypeError, "sink_tokens must be an int"),
        (lambda: window_keep_mask(torch.zeros(3), torch.arange(3), 2), ValueError, "1-D integer tensor"),
        (lambda: window_keep_mask([0, 1], torch.arange(3), 2), TypeError, "query_positions must be a torch.Tensor"),
        (lambda: MultiHeadAttention(8, 2, sink_tokens=2), ValueError, "sink_tokens=2 needs a window"),
        (lambda: MultiHeadAttention(8, 2, window=-3), ValueError, "window must be at least 1"),
        (lambda: MultiHeadAttention(8, 2, learned_sinks=1), TypeError, "learned_sinks must be True or False"),
        (lambda: MultiHeadAttention(8, 2, dropout=0.1, learned_sinks=True), ValueError, "cannot be combined with dropout"),
        (lambda: RingKVCache(0), ValueError, "window must be at least 1"),
        (lambda: RingKVCache(4, sink_tokens=-1), ValueError, "sink_tokens must be at least 0"),
        (lambda: RingKVCache("4"), TypeError, "window must be an int"),
        (lambda: Decoder(5, 8, layer_types=["local"] * 2), ValueError, "window is None"),
        (lambda: Decoder(5, 8, window=2, layer_types=["local", "globl"]), ValueError, "'local' or 'global'"),
        (lambda: Decoder(5, 8, window=2, layer_types="local"), TypeError, "layer_types must be a list"),
        (lambda: sink_rescale(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2), torch.zeros(2)), ValueError, "logsumexp"),
    ],
)
def test_hostile_arguments_get_a_sentence(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_ring_cache_refuses_the_wrong_layer_and_masks():
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="this layer has no window"):
        MultiHeadAttention(8, 2)(x, x, x, cache=RingKVCache(3))
    with pytest.raises(ValueError, match="ring cache keeps window=3, sink_tokens=0 but the layer attends with window=4"):
        MultiHeadAttention(8, 2, window=4)(x, x, x, cache=RingKVCache(3))
    with pytest.raises(ValueError, match="cannot be used with a ring cache"):
        MultiHeadAttention(8, 2, window=3)(x, x, x, mask=torch.ones(4, 4, dtype=torch.bool), cache=RingKVCache(3))
    with pytest.raises(ValueError, match="sink_logits must have one logit per query head"):
        sink_attention(torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), torch.zeros(3))


def _layer(window, sinks=0, learned=False, num_kv_heads=2, seed=0):
    torch.manual_seed(seed)
    layer = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads, window=window, sink_tokens=sinks,
                               learned_sinks=learned).double().eval()
    if learned:
        with torch.no_grad():
            layer.sink_logits.normal_()
    return layer


def test_a_configured_window_is_applied():
    x = torch.randn(1, 12, 16, dtype=torch.float64)
    windowed, global_layer = _layer(4), _layer(None)
    with torch.no_grad():
        assert (windowed(x, x, x) - global_layer(x, x, x, is_causal=True)).abs().max() > 1e-3
        wide = _layer(12)  # a window as long as the sequence is plain causal attention
        torch.testing.assert_close(wide(x, x, x), global_layer(x, x, x, is_causal=True), rtol=0, atol=1e-12)
        output, weights = windowed(x, x, x, need_weights=True)
    assert torch.equal(weights[0, 0] > 0, sliding_window_mask(12, 12, 4))
    torch.testing.assert_close(output, windowed(x, x, x), rtol=0, atol=1e-12)  # explicit and fused paths agree


@pytest.mark.parametrize("window", [1, 3, 8])
@pytest.mark.parametrize("sinks", [0, 2])
@pytest.mark.parametrize("learned", [False, True])
def test_ring_cache_decode_equals_the_full_pass_far_beyond_the_window(window, sinks, learned):
    length = 10 * window + sinks
    layer = _layer(window, sinks, learned)
    x = torch.randn(2, length, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(window))
    generator = torch.Generator().manual_seed(sinks)
    with torch.no_grad():
        full = layer(x, x, x)
        for chunking in ("ones", "random"):
            cache, outputs, start = RingKVCache(window, sinks), [], 0
            while start < length:
                size = 1 if chunking == "ones" else int(torch.randint(1, 2 * window + 2, (1,), generator=generator))
                piece = x[:, start:start + size]
                outputs.append(layer(piece, piece, piece, cache=cache))
                start += size
            torch.testing.assert_close(torch.cat(outputs, dim=1), full, rtol=0, atol=1e-12)
            assert len(cache) == length and cache.stored == window + sinks
            assert cache.nbytes == cache.allocated_nbytes == 2 * 2 * 2 * (window + sinks) * 4 * 8


def test_ring_cache_memory_stops_growing_and_the_growing_cache_agrees():
    layer = _layer(3, 1)
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    ring, growing, ring_bytes = RingKVCache(3, 1), KVCache(), []
    with torch.no_grad():
        full = layer(x, x, x)
        grown = torch.cat([layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=growing) for t in range(20)], dim=1)
        for t in range(20):
            layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=ring)
            ring_bytes.append(ring.nbytes)
    torch.testing.assert_close(grown, full, rtol=0, atol=1e-12)
    per_position = 2 * 2 * 4 * 8  # keys and values, H_kv = 2, d = 4, float64
    assert ring_bytes == [per_position * min(t + 1, 4) for t in range(20)]
    assert growing.nbytes == 20 * per_position
    assert "seen=20" in repr(ring) and "stored=4" in repr(ring)
    ring.reset()
    assert len(ring) == 0 and ring.nbytes == 0 and "empty" in repr(ring)


def test_learned_sink_equals_its_log_sum_exp_form():
    generator = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(2, 4, 9, 5, dtype=torch.float64, generator=generator) for _ in range(3))
    sinks = torch.randn(4, dtype=torch.float64, generator=generator)
    keep = sliding_window_mask(9, 9, 3)
    output, weights = sink_attention(query, key, value, sinks, keep)
    scores = (query @ key.transpose(-2, -1) / 5**0.5).masked_fill(~keep, float("-inf"))
    plain = torch.softmax(scores, dim=-1) @ value
    torch.testing.assert_close(sink_rescale(plain, scores.logsumexp(dim=-1), sinks), output, rtol=0, atol=1e-12)
    assert (weights.sum(dim=-1) < 1).all(), "the sink keeps some of each row's weight"
    very_negative = torch.full((4,), -1e4, dtype=torch.float64)
    torch.testing.assert_close(sink_attention(query, key, value, very_negative, keep)[0], plain, rtol=0, atol=1e-12)


def _flex(query, key, value, window, sinks=0):
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

    def keep(batch, head, q_index, k_index):
        return (k_index <= q_index) & ((k_index > q_index - window) | (k_index < sinks))

    length = query.shape[2]
    block_mask = create_block_mask(keep, None, None, length, length, device="cpu")
    with warnings.catch_warnings():  # eager flex_attention warns that it is not compiled: on purpose here
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile", category=UserWarning)
        output, aux = flex_attention(query, key, value, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    return output, aux.lse


@pytest.mark.parametrize("window, sinks", [(4, 0), (5, 2), (1, 0)])
def test_flex_attention_agrees(window, sinks):
    layer = _layer(window, sinks, learned=True, num_kv_heads=4)
    x = torch.randn(2, 30, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    from attn.multihead import split_heads

    with torch.no_grad():  # flex_attention has no backward on the CPU
        query, key, value = (split_heads(projection(x), 4) for projection in (layer.query_proj, layer.key_proj, layer.value_proj))
        sink_logits = layer.sink_logits.clone()
    plain, logsumexp = _flex(query, key, value, window, sinks)
    ours, _ = attn.multihead.explicit_attention(query, key, value, sliding_window_mask(30, 30, window, sinks))
    torch.testing.assert_close(plain, ours, rtol=0, atol=1e-12)
    with_sinks = sink_rescale(plain, logsumexp, sink_logits)
    torch.testing.assert_close(with_sinks, sink_attention(query, key, value, sink_logits,
                                                          sliding_window_mask(30, 30, window, sinks))[0], rtol=0, atol=1e-12)


# transformers: each reference layer built from a tiny random configuration, nothing downloaded ---------------


@pytest.fixture(scope="module")
def references():
    os.environ["HF_HUB_OFFLINE"] = "1"
    from attn.measure.window_references import reference_layers

    return reference_layers(length=24, window=5, seed=0)


def test_transformers_layers_agree(references):
    assert [case.name for case in references] == ["Mistral"] + ["Gemma 3"] * 6 + ["gpt-oss"] * 2
    assert [case.window for case in references] == [5, 5, 5, 5, 5, 5, None, 5, None]
    for case in references:
        # float64 throughout, but transformers computes rotary angles in float32 (all three) and Mistral's
        # and Gemma's eager softmax in float32: differences of about 1e-6. gpt-oss without rotary: rounding only.
        assert case.largest_difference(rotary=True) < 1e-5, case
        assert case.largest_difference(rotary=False) < (1e-12 if case.name == "gpt-oss" else 1e-5), case


def test_the_off_by_one_window_is_caught(references):
    for case in references:
        if case.window is not None:
            assert case.largest_difference(rotary=False, window_change=1) > 1e-2, case
            assert case.largest_difference(rotary=False, window_change=-1) > 1e-2, case


def test_windowed_decoder_steps_equal_the_full_pass():
    torch.manual_seed(0)
    model = Decoder(11, 64, embed_dim=16, num_heads=2, num_layers=3, window=4, sink_tokens=1,
                    layer_types=["local", "global", "local"]).double().eval()
    caches = model.new_caches()
    assert [type(cache) for cache in caches] == [RingKVCache, KVCache, RingKVCache]
    tokens = torch.randint(11, (2, 60), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(stepwise_logits(model, tokens), full, rtol=0, atol=1e-10)
    torch.testing.assert_close(stepwise_logits(model, tokens, [7, 1, 20, 32]), full, rtol=0, atol=1e-10)


# The lesson's loop, and the capability runs the lesson reads -------------------------------------


def test_the_lesson_s_loop_equals_the_package():
    loop = teaching_namespace(ROOT / "lessons" / "14_windows_and_sinks.ipynb")["window_mask_loop"]
    for t_q, t_k, window, sinks in [(8, 8, 3, 2), (5, 13, 4, 1), (1, 6, 1, 0), (9, 9, 12, 3), (4, 4, 2, 0)]:
        assert (loop(t_q, t_k, window, sinks) == sliding_window_mask(t_q, t_k, window, sinks).numpy()).all()


def shipped_runs():
    return json.loads((ROOT / "lessons" / "records" / window_runs.RUNS_NAME).read_text())


def test_the_shipped_runs_hold_what_the_lesson_says():
    record = shipped_runs()
    window, distances = record["task"]["window"], record["distances"]
    assert record["seeds"] == [0, 1, 2] and set(record["stacks"]) == set(window_runs.STACKS)
    for run in record["runs"]:
        layers = record["stacks"][run["stack"]]
        reach = len(layers) * (window - 1) if "global" not in layers else max(distances)
        inside = [a for d, a in zip(distances, run["accuracy"], strict=True) if d <= reach]
        beyond = [a for d, a in zip(distances, run["accuracy"], strict=True) if d > reach]
        assert min(inside) >= 0.95, run["stack"]
        assert not beyond or max(beyond) <= 0.3, run["stack"]  # chance is 1/8


@pytest.mark.parametrize("stack, seed", [("1 local", 0), ("local + global", 2)])
def test_the_runs_reproduce_their_first_steps(stack, seed):
    shipped = next(run for run in shipped_runs()["runs"] if (run["stack"], run["seed"]) == (stack, seed))
    again = window_runs.run(stack, seed, steps=window_runs.FIRST_LOSSES, per_distance=1)
    assert again["first_losses"] == pytest.approx(shipped["first_losses"], abs=1e-4)


def test_the_runs_command_writes_its_record_and_refuses_bad_arguments(tmp_path, capsys):
    window_runs.main(["--out", str(tmp_path), "--stacks", "1 local", "--seeds", "3", "--steps", "2",
                      "--per-distance", "1"])
    record = json.loads((tmp_path / window_runs.RUNS_NAME).read_text())
    assert [(run["stack"], run["seed"]) for run in record["runs"]] == [("1 local", 3)]
    assert len(record["runs"][0]["accuracy"]) == len(record["distances"]) == window_runs.LENGTH - 1
    assert "1 local, seed 3" in capsys.readouterr().out
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for arguments, words in (
        (["--out", str(blocker)], "is a file"),
        (["--out", str(tmp_path), "--stacks", "4 local"], "unknown stack '4 local'"),
        (["--out", str(tmp_path), "--steps", "0"], "--steps must be a whole number from 1"),
        (["--out", str(tmp_path), "--seeds", "-1"], "a seed is a whole number"),
        (["--out", str(tmp_path), "--per-distance", "x"], "--per-distance must be a whole number, got"),
    ):
        with pytest.raises(SystemExit):
            window_runs.main(arguments)
        assert words in capsys.readouterr().err, arguments
    assert Path(tmp_path / window_runs.RUNS_NAME).exists()


def test_from_transformers_refuses_what_is_not_an_attention_layer():
    with pytest.raises(TypeError, match="must be a transformers attention layer"):
        ModelAttention.from_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="must be a transformers attention layer"):
        ModelAttention.from_transformers("MistralAttention")


def test_published_caches_follow_their_sources():
    from attn.measure.published_caches import PUBLISHED, cache_table

    mistral, gemma, gpt_oss = PUBLISHED
    assert [model.layers for model in PUBLISHED] == [32, 62, 36]
    assert sum(window is None for window in gemma.windows) == 10 and gemma.windows[:6] == (1024,) * 5 + (None,)
    assert gpt_oss.windows[:4] == (128, None, 128, None)
    # Mistral 7B's paper: the rolling buffer makes the cache 8x smaller at 32k tokens.
    assert mistral.cache_bytes(32768, windowed=False) == 8 * mistral.cache_bytes(32768)
    assert mistral.cache_bytes(4096) == 32 * 4096 * 2 * 8 * 128 * 2 == mistral.cache_bytes(10**6)
    assert len(cache_table((1, 2))) == 6
    for bad in (-1, 2.5, True, "4096"):
        with pytest.raises(ValueError, match="length must be a whole number"):
            mistral.cache_bytes(bad)


def test_the_window_benchmark_times_both_caches():
    from attn.measure.timing import window_decode_times

    rows = window_decode_times(lengths=(8, 32), window=4, embed_dim=8, num_heads=2, num_layers=1, warmup=0, repeats=1)
    assert [(row["length"], row["cache"]) for row in rows] == [(8, "growing"), (32, "growing"), (8, "ring (W=4)"),
                                                              (32, "ring (W=4)")]
    per_position = 2 * 2 * 4 * 4  # keys and values, H_kv = 2, d = 4, float32
    assert [row["cache_bytes"] for row in rows] == [8 * per_position, 32 * per_position, 4 * per_position, 4 * per_position]
    assert all(row["seconds"] > 0 for row in rows)


def test_model_attention_refuses_bad_arguments_and_inputs_before_any_work():
    layer = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="attention must be an attn.MultiHeadAttention"):
        ModelAttention(torch.nn.Linear(8, 8))
    with pytest.raises(ValueError, match="rotary_base must be a finite number > 1"):
        ModelAttention(layer, rotary_base=math.nan)
    for eps, error in ((-1.0, ValueError), ("0.5", TypeError), (math.inf, ValueError)):
        with pytest.raises(error, match="qk_norm_eps must be a positive"):
            ModelAttention(layer, qk_norm_eps=eps)
    model = ModelAttention(layer, rotary_base=10000.0, qk_norm_eps=1e-6)
    for x, error, words in (
        (torch.randn(3), ValueError, r"x must have shape \(B, T, 8\)"),
        (torch.randn(2, 4, 6), ValueError, r"x must have shape \(B, T, 8\)"),
        (torch.ones(2, 4, 8, dtype=torch.int64), TypeError, "x must hold floating-point numbers"),
        (torch.randn(2, 4, 8, dtype=torch.float64), TypeError, "float64"),
        (torch.full((2, 4, 8), math.nan), ValueError, "x"),
    ):
        with pytest.raises(error, match=words):
            model(x)
    assert model(torch.randn(2, 4, 8)).shape == (2, 4, 8)
