"""StreamingLLM's sink positions (attn.streaming): equal to their definition, a loop over queries in float64,
in the layer, through a ring cache of un-rotated keys, and with a sentence for every wrong input."""

import math

import pytest
import torch

from attn import MultiHeadAttention, RingKVCache, apply_rotary
from attn.experiments import window_austen
from attn.models import lm
from attn.streaming import cache_places, cache_shift, check_sink_positions, streaming_attention

BASE = 100.0  # a small base turns the pairs fast, so a wrong position shows


def definition(query, key, value, window, sink_tokens, base):
    """StreamingLLM written out: for each query, the cache it sees, each key rotated at its place there."""
    batch, heads, length, head_dim = query.shape
    key = key.repeat_interleave(heads // key.shape[1], dim=1)
    value = value.repeat_interleave(heads // value.shape[1], dim=1)
    output = torch.zeros_like(query)
    for p in range(length):
        kept, places = cache_places(p, window, sink_tokens)
        rotated_query = apply_rotary(query[:, :, p:p + 1], torch.tensor([places[-1]]), base)  # (B, H, 1, d)
        rotated_keys = apply_rotary(key[:, :, kept], torch.tensor(places), base)  # (B, H, K, d)
        weights = torch.softmax(rotated_query @ rotated_keys.transpose(-2, -1) / math.sqrt(head_dim), dim=-1)
        output[:, :, p:p + 1] = weights @ value[:, :, kept]
    return output


def draw(length, heads=4, kv_heads=2, head_dim=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, length, head_dim, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(2, kv_heads, length, head_dim, generator=generator, dtype=torch.float64) for _ in range(2))
    return q, k, v


def test_cache_places_are_the_sinks_then_the_window():
    assert cache_places(3, 4, 2) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert cache_places(10, 4, 2) == ([0, 1, 7, 8, 9, 10], [0, 1, 2, 3, 4, 5])
    assert cache_places(10, 4, 0) == ([7, 8, 9, 10], [0, 1, 2, 3])


@pytest.mark.parametrize(("window", "sinks"), [(3, 0), (3, 2), (5, 1), (1, 3), (40, 2)])
def test_streaming_attention_equals_its_definition_in_float64(window, sinks):
    q, k, v = draw(23)
    expected = definition(q, k, v, window, sinks, BASE)
    output, weights = streaming_attention(q, k, v, window, sinks, BASE)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 23, dtype=torch.float64), rtol=0, atol=1e-12)


def test_places_differ_from_absolute_positions_only_for_sinks_far_away():
    q, k, v = draw(23)
    layer_absolute = MultiHeadAttention(24, 4, num_kv_heads=2, rotary_base=BASE, window=4, sink_tokens=2).double()
    layer_cache = MultiHeadAttention(24, 4, num_kv_heads=2, rotary_base=BASE, window=4, sink_tokens=2,
                                     sink_positions="cache").double()
    layer_cache.load_state_dict(layer_absolute.state_dict())
    x = torch.randn(2, 23, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        absolute, cached = layer_absolute(x, x, x), layer_cache(x, x, x)
    torch.testing.assert_close(cached[:, :6], absolute[:, :6], rtol=0, atol=1e-12)  # no key left yet: the same
    assert (cached[:, 6:] - absolute[:, 6:]).abs().amax() > 1e-3  # the sinks now sit at other distances
    layer_absolute.sink_tokens = layer_cache.sink_tokens = 0  # without sinks the distances are the same
    with torch.no_grad():
        torch.testing.assert_close(layer_cache(x, x, x), layer_absolute(x, x, x), rtol=0, atol=1e-12)


def test_the_layer_equals_the_definition_and_decodes_through_a_ring_cache():
    torch.manual_seed(0)
    layer = MultiHeadAttention(24, 4, bias=False, num_kv_heads=2, rotary_base=BASE, window=5, sink_tokens=2,
                               sink_positions="cache").double()
    x = torch.randn(1, 30, 24, dtype=torch.float64)
    from attn.multihead import merge_heads, split_heads

    with torch.no_grad():
        full, weights = layer(x, x, x, need_weights=True)
        q, k, v = (split_heads(proj(x), heads) for proj, heads in (
            (layer.query_proj, 4), (layer.key_proj, 2), (layer.value_proj, 2)))
        expected = layer.out_proj(merge_heads(definition(q, k, v, 5, 2, BASE)))
        cache = RingKVCache(5, 2)
        stepped = torch.cat([layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache) for t in range(30)], dim=1)
        chunked_cache = RingKVCache(5, 2)
        chunked = torch.cat([layer(x[:, t:t + 3], x[:, t:t + 3], x[:, t:t + 3], cache=chunked_cache)
                             for t in range(0, 30, 3)], dim=1)
    torch.testing.assert_close(full, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-12)
    assert weights.shape == (1, 4, 30, 30) and cache.stored == 7


def test_a_model_reads_with_cache_places():
    torch.manual_seed(0)
    model = lm.AustenLM(vocab_size=50, context_length=16, embed_dim=16, num_heads=2, num_layers=2).eval()
    tokens = torch.randint(50, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        absolute = window_austen.set_window(model, 6, 2)(tokens)
        places = window_austen.set_window(model, 6, 2, "cache")(tokens)
        caches = [RingKVCache(6, 2) for _ in model.blocks]
        stepped = torch.cat([model(tokens[:, t:t + 1], caches) for t in range(40)], dim=1)
    torch.testing.assert_close(stepped, places, rtol=0, atol=1e-4)
    torch.testing.assert_close(places[:, :8], absolute[:, :8], rtol=0, atol=1e-5)
    assert (places[:, 8:] - absolute[:, 8:]).abs().amax() > 1e-4
    assert window_austen.set_window(model, None).blocks[0].attention.sink_positions == "absolute"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: check_sink_positions("relative", 4), "must be 'absolute' or 'cache'"),
    (lambda: check_sink_positions(1, 4), "must be 'absolute' or 'cache', got int"),
    (lambda: check_sink_positions("cache", None), "needs a window"),
    (lambda: MultiHeadAttention(8, 2, sink_positions="cache"), "needs a window"),
    (lambda: MultiHeadAttention(8, 2, window=2, sink_positions="cache", dropout=0.1), "without learned sinks or dropout"),
    (lambda: cache_places(-1, 4), "query_position must be an int >= 0"),
    (lambda: cache_places(3, 0), "window must be at least 1"),
    (lambda: cache_places(3, None), "window must be a positive int"),
    (lambda: streaming_attention(*draw(5), None), "window must be a positive int"),
    (lambda: streaming_attention(*draw(5), 2, -1), "sink_tokens must be 0 or more"),
    (lambda: streaming_attention(*draw(5), 2, 1, BASE, key_positions=torch.arange(4)), "holds 4 positions for 5"),
    (lambda: streaming_attention(*draw(5), 2, 1, BASE, key_positions=torch.ones(5)), "1-D integer tensor"),
    (lambda: streaming_attention(*draw(5), 2, 1, BASE, key_positions=torch.arange(5) - 1), "must be 0 or more"),
    (lambda: streaming_attention(*draw(5), 2, 0, BASE, query_positions=torch.tensor([9] * 5)), "a query sees no key"),
    (lambda: streaming_attention(*draw(5), 2, 1, BASE, query_positions=[0]), "query_positions must be a torch.Tensor"),
    (lambda: streaming_attention(draw(5)[0], draw(4)[1], draw(5)[2], 2), "key"),
    (lambda: window_austen.set_window(lm.AustenLM(10, 4, 8, 2, 1), 2, 0, "places"), "must be 'absolute' or 'cache'"),
    (lambda: window_austen.conditions(sink_positions=None), "sink_positions must be a non-empty list or tuple"),
    (lambda: window_austen.conditions(sink_positions=("places",)), "each of sink_positions must be one of"),
    (lambda: cache_shift(torch.arange(5), True, 0), "window must be None or a positive int"),
    (lambda: cache_shift(torch.arange(5), 2, "2"), "sink_tokens must be an int >= 0"),
    (lambda: cache_shift(torch.arange(5), None, 0), "window must be a positive int"),
    (lambda: cache_shift(torch.ones(5), 2, 0), "1-D integer tensor"),
    (lambda: streaming_attention(*draw(5), 2, 1, keep_mask=torch.ones(3, dtype=torch.bool)), "does not broadcast"),
    (lambda: streaming_attention(*draw(5), 2, 1, keep_mask=torch.ones(5, 5, dtype=torch.long)), "keep_mask"),
])
def test_wrong_inputs_get_a_sentence(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_a_window_past_every_position_shifts_nothing():
    assert torch.equal(cache_shift(torch.arange(5), 2**70, 0), torch.zeros(5, dtype=torch.long))
    assert cache_shift(torch.tensor([9]), 4, 2).tolist() == [9 - 4 + 1 - 2]


def test_dropout_in_training_is_refused():
    layer = MultiHeadAttention(8, 2, window=2, dropout=0.1, rotary_base=BASE)
    layer.sink_positions = "cache"
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="call model.eval"):
        layer(x, x, x)
    layer.eval()
    assert layer(x, x, x).shape == (1, 4, 8)
