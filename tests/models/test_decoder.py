"""attn.models.decoder: generating with and without a KV cache equals one full causal pass; bad input is named."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn import KVCache
from attn.measure.timing import seconds_per_token
from attn.models.decoder import (
    Decoder,
    counting_sequences,
    generate,
    sequence_accuracy,
    stepwise_logits,
    train,
)


def small_model(seed=0, **kwargs):
    torch.manual_seed(seed)
    options = {"vocab_size": 10, "max_length": 16, "embed_dim": 16, "num_heads": 4, "num_layers": 2, **kwargs}
    return Decoder(**options).eval()


@pytest.fixture(scope="module")
def trained():
    """The model of lesson 10, trained as the lesson trains it."""
    torch.manual_seed(0)
    model = Decoder(vocab_size=10, max_length=16, embed_dim=32, num_heads=4, num_layers=2)
    losses = train(model, counting_sequences(16), steps=150, learning_rate=1e-2)
    return model, losses


def test_counting_sequences_count_in_equal_steps():
    sequences = counting_sequences(6, vocab_size=5)
    assert sequences.shape == (25, 6) and sequences.dtype == torch.int64
    assert sequences[0].tolist() == [0] * 6
    assert sequences[5 * 3 + 2].tolist() == [3, 0, 2, 4, 1, 3]  # start 3, step 2, modulo 5
    steps = (sequences[:, 1:] - sequences[:, :-1]) % 5  # (25, 5): the same step all along each row
    assert torch.equal(steps, steps[:, :1].expand(-1, 5))
    assert len({tuple(row) for row in sequences[:, :2].tolist()}) == 25, "the first two tokens fix the sequence"


@pytest.mark.parametrize(
    "arguments, error, expected",
    [
        ((0,), ValueError, "length must be positive, got 0"),
        ((6, 1.5), TypeError, "vocab_size must be a positive int, got float 1.5"),
        (("6",), TypeError, "length must be a positive int, got str"),
        ((None,), TypeError, "length must be a positive int, got None"),
    ],
)
def test_counting_sequences_refuse_bad_sizes(arguments, error, expected):
    with pytest.raises(error, match=expected):
        counting_sequences(*arguments)


def test_logits_have_one_row_per_position_and_are_causal():
    model = small_model()
    tokens = torch.randint(10, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(tokens)
        changed = tokens.clone()
        changed[:, 5:] = (changed[:, 5:] + 1) % 10  # change every token from position 5 on
        logits_changed = model(changed)
    assert logits.shape == (3, 9, 10)
    torch.testing.assert_close(logits[:, :5], logits_changed[:, :5], msg="positions 0-4 cannot see positions 5 on")
    assert (logits[:, 5:] - logits_changed[:, 5:]).abs().max() > 1e-3


def test_step_t_equals_row_t_of_the_full_causal_pass():
    model = small_model()
    tokens = torch.randint(10, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(tokens)  # (B, T, V)
        for t in range(12):
            torch.testing.assert_close(model(tokens[:, :t + 1])[:, -1], full[:, t], atol=1e-5, rtol=1e-5)


SCHEDULES = {
    "one token at a time": None,
    "prefill then single steps": [6, 1, 1, 1, 1, 1, 1],
    "uneven chunks": [3, 1, 5, 2, 1],
    "all at once": [12],
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_decoding_with_caches_equals_the_full_causal_pass(schedule, num_kv_heads):
    model = small_model(num_kv_heads=num_kv_heads)
    tokens = torch.randint(10, (3, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(stepwise_logits(model, tokens, SCHEDULES[schedule]), full, atol=1e-5, rtol=1e-5)


def test_decoding_with_caches_in_float64_agrees_to_rounding():
    model = small_model().double()
    tokens = torch.randint(10, (2, 10), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(tokens)
    assert full.dtype == torch.float64
    torch.testing.assert_close(stepwise_logits(model, tokens, [4, 1, 1, 1, 1, 1, 1]), full, atol=1e-12, rtol=1e-12)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=8), st.integers(0, 2**16))
def test_any_chunking_equals_the_full_pass(chunks, seed):
    model = small_model()
    tokens = torch.randint(10, (2, sum(chunks)), generator=torch.Generator().manual_seed(seed))
    if tokens.shape[1] > model.max_length:
        tokens, chunks = tokens[:, :model.max_length], None
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(stepwise_logits(model, tokens, chunks), full, atol=1e-5, rtol=1e-5)


def test_caches_hold_every_position_and_the_expected_bytes():
    model = small_model(num_kv_heads=2)
    caches = model.new_caches()
    assert len(caches) == 2 and all(isinstance(cache, KVCache) and len(cache) == 0 for cache in caches)
    tokens = torch.randint(10, (3, 7), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        model(tokens[:, :4], caches)
        model(tokens[:, 4:], caches)
    assert [len(cache) for cache in caches] == [7, 7]
    head_dim = 16 // 4
    assert sum(cache.nbytes for cache in caches) == 2 * 2 * 2 * head_dim * 7 * 4 * 3  # 2 x layers x H_kv x d x T x 4 x B


def test_training_learns_to_count(trained):
    model, losses = trained
    assert len(losses) == 150 and losses[-1] < 0.01 < losses[0]
    sequences = counting_sequences(16)
    for use_cache in (False, True):
        generated = generate(model, sequences[:, :2], 14, use_cache=use_cache)
        assert generated.shape == (100, 16)
        assert sequence_accuracy(generated, sequences) == 1.0
    with torch.no_grad():
        logits = model(sequences[:, :-1])[:, 1:]  # predictions once the step is known
        top_two = logits.topk(2, dim=-1).values
    assert (top_two[..., 0] - top_two[..., 1]).min() > 2.0, "confident enough that greedy choices never flip on rounding"


def test_generate_with_and_without_cache_agree_on_an_untrained_model():
    model = small_model(seed=7)
    prompt = torch.randint(10, (4, 3), generator=torch.Generator().manual_seed(7))
    with_cache, without = generate(model, prompt, 13), generate(model, prompt, 13, use_cache=False)
    assert with_cache.shape == (4, 16) and torch.equal(with_cache[:, :3], prompt)
    assert torch.equal(with_cache, without)
    assert torch.equal(generate(model, prompt, 0), prompt)
    assert torch.equal(generate(model, prompt, np.int64(2)), with_cache[:, :5])


def test_seconds_per_token_measures_both_ways():
    model = small_model(max_length=40)
    for use_cache in (False, True):
        seconds = seconds_per_token(model, 20, use_cache, warmup=1, repeats=3)
        assert isinstance(seconds, float) and seconds > 0
    assert seconds_per_token(model, 1, True, warmup=1, repeats=2) > 0, "a first token has nothing to prefill"
    with pytest.raises(ValueError, match="the positions this measurement needs = 41 is more than the model's max_length = 40"):
        seconds_per_token(model, 35, True, warmup=2, repeats=5)
    assert seconds_per_token(model, 40, False, warmup=1, repeats=1) > 0, "without a cache only the length itself must fit"


def test_sequence_accuracy():
    expected = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert sequence_accuracy(expected.clone(), expected) == 1.0
    assert sequence_accuracy(torch.tensor([[1, 2, 3], [4, 5, 7]]), expected) == 0.5
    with pytest.raises(ValueError, match=r"generated and expected must both be \(N, T\), got \(2, 2\) and \(2, 3\)"):
        sequence_accuracy(expected[:, :2], expected)
    with pytest.raises(TypeError, match="generated must be a torch.Tensor, got list"):
        sequence_accuracy([[1, 2, 3]], expected)


# Hostile input ----------------------------------------------------------------------------------

BAD_TOKENS = [
    (None, TypeError, "tokens must be a torch.Tensor, got None"),
    ([[1, 2]], TypeError, r"tokens must be a torch.Tensor, got list; convert it with torch.tensor\(tokens\)"),
    (np.array([[1, 2]]), TypeError, r"got numpy.ndarray; convert it with torch.as_tensor\(tokens\)"),
    ("1 2", TypeError, "tokens must be a torch.Tensor, got str"),
    (torch.tensor([[1.0, 2.0]]), TypeError, r"must hold integer token ids, got torch.float32; convert it with tokens.long\(\)"),
    (torch.tensor([[True, False]]), TypeError, "tokens must hold integer token ids, got torch.bool"),
    (torch.tensor([[1.0, float("nan")]]), TypeError, "tokens must hold integer token ids, got torch.float32"),
    (torch.tensor([1, 2]), ValueError, r"tokens must have shape \(B, T\) with T >= 1, got \(2,\)"),
    (torch.zeros(1, 2, 3, dtype=torch.long), ValueError, r"tokens must have shape \(B, T\) with T >= 1, got \(1, 2, 3\)"),
    (torch.zeros(2, 0, dtype=torch.long), ValueError, r"tokens must have shape \(B, T\) with T >= 1, got \(2, 0\)"),
    (torch.tensor([[1, 10]]), ValueError, "tokens must be token ids from 0 to 9, got values from 1 to 10"),
    (torch.tensor([[-1, 3]]), ValueError, "tokens must be token ids from 0 to 9, got values from -1 to 3"),
    (torch.zeros(1, 2, dtype=torch.long, device="meta"), ValueError, "tokens is on device meta but the model is on cpu"),
    (torch.zeros(1, 17, dtype=torch.long), ValueError, "cached positions \\+ new tokens = 17 is more than"),
]


@pytest.mark.parametrize("tokens, error, expected", BAD_TOKENS)
def test_bad_tokens_are_named(tokens, error, expected):
    with pytest.raises(error, match=expected):
        small_model()(tokens)


def test_small_integer_dtypes_are_accepted():
    model = small_model()
    tokens = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        torch.testing.assert_close(model(tokens.to(torch.int32)), model(tokens))


@pytest.mark.parametrize(
    "caches, error, expected",
    [
        (KVCache(), TypeError, "caches must be a list of attn.KVCache, one per block .* got attn.kvcache.KVCache"),
        ([KVCache(), None], TypeError, "caches must be a list of attn.KVCache"),
        ("caches", TypeError, "caches must be a list of attn.KVCache"),
        ([KVCache()], ValueError, "caches must hold one KVCache per block: 2, got 1"),
        ([KVCache(), KVCache(), KVCache()], ValueError, "caches must hold one KVCache per block: 2, got 3"),
    ],
)
def test_bad_caches_are_named(caches, error, expected):
    with pytest.raises(error, match=expected):
        small_model()(torch.tensor([[1, 2]]), caches)


def test_caches_of_different_lengths_and_overflow_leave_the_caches_unchanged():
    model = small_model()
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), caches)
        uneven = [caches[0], KVCache()]
        with pytest.raises(ValueError, match=r"the caches hold different numbers of positions, \[0, 3\]"):
            model(torch.tensor([[4]]), uneven)
        with pytest.raises(ValueError, match="cached positions \\+ new tokens = 17 is more than the model's max_length = 16"):
            model(torch.zeros(1, 14, dtype=torch.long), caches)
        with pytest.raises(ValueError, match="token ids from 0 to 9"):
            model(torch.tensor([[12]]), caches)
        with pytest.raises(ValueError, match="batch size 1 in the cache, 2 now"):
            model(torch.tensor([[1], [2]]), caches)
    assert [len(cache) for cache in caches] == [3, 3], "a refused call adds nothing to any cache"


@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        ({"vocab_size": 0}, ValueError, "vocab_size must be positive, got 0"),
        ({"vocab_size": "10"}, TypeError, "vocab_size must be a positive int, got str"),
        ({"max_length": None}, TypeError, "max_length must be a positive int, got None"),
        ({"max_length": 2.5}, TypeError, "max_length must be a positive int, got float"),
        ({"num_layers": 0}, ValueError, "num_layers must be positive, got 0"),
        ({"num_layers": True}, TypeError, "num_layers must be a positive int, got bool"),
        ({"num_kv_heads": 3}, ValueError, "num_kv_heads=3 must divide num_heads=4"),
        ({"embed_dim": 18}, ValueError, "embed_dim=18 must be a positive multiple of num_heads=4"),
        ({"mlp_ratio": -1}, ValueError, "mlp_ratio \\* embed_dim must be a positive whole number"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, error, expected):
    with pytest.raises(error, match=expected):
        small_model(**kwargs)


@pytest.mark.parametrize(
    "new_tokens, error, expected",
    [
        (-1, ValueError, "new_tokens must be 0 or more, got -1"),
        (2.0, TypeError, "new_tokens must be a whole number of 0 or more, got float 2.0"),
        ("3", TypeError, "new_tokens must be a whole number of 0 or more, got str"),
        (True, TypeError, "new_tokens must be a whole number of 0 or more, got bool"),
        (None, TypeError, "new_tokens must be a whole number of 0 or more, got None"),
        (15, ValueError, "prompt length \\+ new_tokens - 1 = 16 is more than the model's max_length = 15"),
    ],
)
def test_generate_refuses_bad_arguments(new_tokens, error, expected):
    model = small_model(max_length=15)
    with pytest.raises(error, match=expected):
        generate(model, torch.tensor([[1, 2]]), new_tokens)


def test_generate_and_stepwise_logits_need_a_decoder_and_tokens():
    with pytest.raises(TypeError, match="model must be an attn.models.decoder.Decoder, got torch.nn.modules.linear.Linear"):
        generate(torch.nn.Linear(2, 2), torch.tensor([[1]]), 2)
    with pytest.raises(TypeError, match="prompt must hold integer token ids, got torch.float32"):
        generate(small_model(), torch.tensor([[1.0]]), 2)
    with pytest.raises(TypeError, match="tokens must be a torch.Tensor, got list"):
        stepwise_logits(small_model(), [[1, 2]])


@pytest.mark.parametrize(
    "chunks, error, expected",
    [
        ([2, 2], ValueError, r"chunks must be positive and sum to T = 5, got \[2, 2\]"),
        ([5, 0], ValueError, r"chunks must be positive and sum to T = 5, got \[5, 0\]"),
        ([6, -1], ValueError, "chunks must be positive"),
        ([2.5, 2.5], TypeError, r"chunks must be a list of ints \(tokens fed per step\), got list \[2.5, 2.5\]"),
        (5, TypeError, "chunks must be a list of ints"),
        ([True, 4], TypeError, "chunks must be a list of ints"),
    ],
)
def test_stepwise_logits_refuses_bad_chunks(chunks, error, expected):
    with pytest.raises(error, match=expected):
        stepwise_logits(small_model(), torch.tensor([[1, 2, 3, 4, 5]]), chunks)


@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        ({"steps": 0}, ValueError, "steps must be positive, got 0"),
        ({"steps": 1.5}, TypeError, "steps must be a positive int, got float"),
        ({"learning_rate": 0.0}, ValueError, "learning_rate must be a positive finite number, got 0.0"),
        ({"learning_rate": float("nan")}, ValueError, "learning_rate must be a positive finite number, got nan"),
        ({"learning_rate": "0.01"}, TypeError, "learning_rate must be a positive number, got str"),
        ({"first_target": 0}, ValueError, "first_target must be between 1 and T - 1 = 15, got 0"),
        ({"first_target": 16}, ValueError, "first_target must be between 1 and T - 1 = 15, got 16"),
        ({"first_target": "2"}, TypeError, "first_target must be an int, got str"),
        ({"sequences": counting_sequences(16).float()}, TypeError, "sequences must hold integer token ids, got torch.float32"),
        ({"sequences": counting_sequences(18)}, ValueError, "sequence length - 1 = 17 is more than the model's max_length = 16"),
        ({"sequences": counting_sequences(1)}, ValueError, "sequences must have at least 2 tokens, got 1"),
    ],
)
def test_train_refuses_bad_arguments(kwargs, error, expected):
    model = small_model()
    before = [p.clone() for p in model.parameters()]
    arguments = {"sequences": counting_sequences(16), "steps": 1, **kwargs}
    with pytest.raises(error, match=expected):
        train(model, **arguments)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)), "no step was taken"
