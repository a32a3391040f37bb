"""Lesson 19's continuous batching: every request's tokens equal decoding it alone, whatever the arrival order, the
batch size, the chunk size, the page size and the pool (preemption, shared prefixes and copy-on-write included)."""

import random

import pytest
import torch

from attn.compressed_cache import EvictingKVCache, QuantizedKVCache, caches_for
from attn.kvcache import KVCache
from attn.lm import AustenLM
from attn.models.decoder import generate
from attn.models.llama import LlamaLM
from attn.serving import PagedKVCache, Scheduler, generate_batch

VOCAB = 40


def tiny_models():
    """A tiny AustenLM and a tiny grouped-query LlamaLM in float64, with weights large enough to vary their tokens."""
    torch.manual_seed(0)
    models = [AustenLM(VOCAB, 32, 16, 2, 2), LlamaLM(VOCAB, 64, 16, 4, 2, 2, 32)]
    for model in models:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(0, 0.4) if parameter.dim() > 1 else parameter.uniform_(0.5, 1.5)
    return [model.double().eval() for model in models]


MODELS = tiny_models()


def alone(model, prompt, new_tokens):
    return generate(model, torch.tensor([prompt]), new_tokens)[0, len(prompt):].tolist()


def test_generate_batch_equals_decoding_each_prompt_alone():
    model = MODELS[1]
    prompts = [[1, 2, 3], [5] * 17, [7], list(range(30))]
    expected = [alone(model, prompt, 9) for prompt in prompts]
    assert len({tuple(tokens) for tokens in expected}) > 1 and len(set(expected[1])) > 1  # the tokens vary
    assert generate_batch(model, prompts, 9) == expected
    assert generate_batch(model, prompts, 9, page_size=3, num_pages=14) == expected  # a pool that forces preemption


def test_many_random_schedules_give_every_request_its_own_tokens():
    rng = random.Random(0)
    exercised = {"preemptions": 0, "prefix_hits": 0}
    for trial in range(12):
        model = MODELS[trial % 2]
        stem = [rng.randrange(VOCAB) for _ in range(12)]
        prompts = [stem[:rng.randint(1, 12)] + [rng.randrange(VOCAB) for _ in range(rng.randint(0, 6))]
                   for _ in range(rng.randint(1, 6))]
        prompts += [list(rng.choice(prompts)) for _ in range(rng.randint(0, 2))]  # the same prompt again: found whole
        new_tokens = [rng.randint(0, 7) for _ in prompts]
        page_size = rng.choice([1, 2, 3, 4, 5, 8])
        longest = max(-(-(len(p) + n) // page_size) for p, n in zip(prompts, new_tokens, strict=True))
        layer = model.blocks[0].attention
        cache = PagedKVCache(longest + rng.randint(0, 6), page_size, layer.num_kv_heads, layer.head_dim, torch.float64,
                             num_layers=2)
        scheduler = Scheduler(model, cache, max_batch_size=rng.randint(1, 4), chunk_size=rng.randint(1, 6))
        arrivals = sorted(rng.randint(0, 6) for _ in prompts)
        order = list(range(len(prompts)))
        rng.shuffle(order)
        ids, step = {}, 0
        while len(ids) < len(prompts) or scheduler.has_work:
            for index in [i for i, when in zip(order, arrivals, strict=True) if when == step]:
                ids[index] = scheduler.add(prompts[index], new_tokens[index])
            scheduler.step()
            step += 1
        for index, prompt in enumerate(prompts):
            assert scheduler.results[ids[index]] == alone(model, prompt, new_tokens[index]), (trial, index)
        assert cache.num_free_pages == cache.num_pages  # every page came back
        exercised["preemptions"] += scheduler.preemptions
        exercised["prefix_hits"] += scheduler.prefix_hits
    assert all(exercised.values()), exercised


def test_a_prompt_found_whole_copies_its_last_page_before_recomputing_its_last_position():
    model = MODELS[1]
    cache = PagedKVCache(16, 4, 2, 4, torch.float64, num_layers=2)
    scheduler = Scheduler(model, cache, chunk_size=8)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]  # two full pages
    first = scheduler.add(prompt, 6)
    scheduler.step()  # the first request reads its prompt and names its two pages
    second = scheduler.add(prompt, 6)
    scheduler.run()
    assert scheduler.prefix_hits == 7 and cache.copies == 1
    assert scheduler.results[first] == scheduler.results[second] == alone(model, prompt, 6)


def test_the_austen_model_serves_the_tokens_it_decodes_alone():
    from attn.lm import load

    model, tokenizer = load()
    prompts = [tokenizer.encode(text) for text in ("It is a truth universally acknowledged", "Emma", "She was not")]
    expected = [alone(model, prompt, 12) for prompt in prompts]
    assert generate_batch(model, prompts, 12, page_size=4, num_pages=10, max_batch_size=2, chunk_size=4) == expected


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda m: generate_batch(m, [], 3), ValueError, "prompts is empty"),
    (lambda m: generate_batch(m, [[]], 3), ValueError, "at least one token"),
    (lambda m: generate_batch(m, [[1, 2]], 3, page_size=0), ValueError, "page_size must be positive"),
    (lambda m: generate_batch(m, [list(range(20))], 8, page_size=4, num_pages=3), ValueError, "could never run"),
    (lambda m: generate_batch(m, [[1, VOCAB]], 3), ValueError, "vocabulary"),
    (lambda m: generate_batch(m, [[1.5]], 3), TypeError, "token ids"),
    (lambda m: generate_batch(m, [[1] * 60], 8), ValueError, "max_length"),
    (lambda m: generate_batch(None, [[1]], 3), TypeError, "interface"),
])
def test_hostile_requests_get_a_sentence(call, error, words):
    model = MODELS[0]
    model.max_length = 64  # for the test of prompts longer than the context
    try:
        with pytest.raises(error, match=words):
            call(model)
    finally:
        model.max_length = 1 << 16


def alone_with(model, prompt, new_tokens, make):
    """Greedy decoding of one prompt with one cache of ``make()``'s kind per layer: the prompt at once, then a token
    at a time."""
    caches, tokens = caches_for(model, make), list(prompt)
    with torch.no_grad():
        logits = model(torch.tensor([tokens]), caches)[0, -1]
        for _ in range(new_tokens):
            tokens.append(int(logits.double().argmax()))
            logits = model(torch.tensor([tokens[-1:]]), caches)[0, -1]
    return tokens[len(prompt):]


@pytest.mark.parametrize("make", [KVCache, lambda: QuantizedKVCache(4, 4, 4), lambda: EvictingKVCache(6, "h2o", 1, 2),
                                  lambda: EvictingKVCache(5, "knorm", 0, 0), lambda: EvictingKVCache(7, "snapkv", 1, 2)],
                         ids=["kvcache", "quantized", "h2o", "knorm", "snapkv"])
def test_the_scheduler_takes_lesson_10_s_and_lesson_21_s_caches(make):
    """Given a function that makes a cache, each request gets its own per layer: its tokens are those of decoding it
    alone with the same kind of cache, whichever requests share its steps; lesson 10's full cache gives lesson 10's
    decoding's tokens."""
    model = MODELS[1]
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5] * 12, list(range(14))]
    expected = [alone_with(model, prompt, 6, make) for prompt in prompts]
    scheduler = Scheduler(model, make, max_batch_size=2, chunk_size=16)
    ids = [scheduler.add(prompt, 6) for prompt in prompts[:2]]
    scheduler.step()
    ids.append(scheduler.add(prompts[2], 6))  # arrives late, waits for room
    results = scheduler.run()
    assert [results[i] for i in ids] == expected and scheduler.preemptions == 0 and max(scheduler.batch_sizes) == 2
    assert all(request.caches is None for request in scheduler.requests.values())  # retired with their requests
    # widths: the longest chunk of each step: both prompts at once (12), decoding (1), the late prompt beside a decode
    assert scheduler.widths[:2] == [12, 1] and 14 in scheduler.widths and len(scheduler.widths) == scheduler.steps
    if make is KVCache:  # lesson 10's decoding, which generate_batch's paged tokens equal (the first test)
        assert expected == [alone(model, prompt, 6) for prompt in prompts]
    else:  # the compressed cache changes the tokens of at least one prompt: the test can tell the kinds apart
        assert expected != FULL_TOKENS


FULL_TOKENS = [alone_with(MODELS[1], prompt, 6, KVCache) for prompt in ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5] * 12,
                                                                          list(range(14)))]


def test_the_scheduler_refuses_a_cache_it_cannot_use():
    model, shared = MODELS[1], KVCache()
    for cache, words in ((KVCache(), "pass the function that makes one"), (3, "a function that returns a new cache"),
                         (lambda: 3, "must return a new cache"), (lambda: shared, "must return a new cache")):
        with pytest.raises(TypeError, match=words):
            Scheduler(model, cache)


def test_a_step_makes_its_rotary_angles_once_for_all_its_layers(monkeypatch):
    """The angles depend on the positions only: made once a step, not once a layer (nor twice, for queries and keys)."""
    import attn.serving.runner as runner

    made = []

    def counted(*args, **kwargs):
        made.append(args[0].shape)
        return rotary_angles(*args, **kwargs)

    rotary_angles = runner.rotary_angles
    monkeypatch.setattr(runner, "rotary_angles", counted)
    model = LlamaLM(VOCAB, 64, 16, 4, 2, 3, 32).double().eval()  # three layers
    scheduler = Scheduler(model, PagedKVCache(8, 4, 2, 4, torch.float64, num_layers=3), max_batch_size=2, chunk_size=4)
    for prompt in ([1, 2, 3, 4, 5, 6], [7, 8]):
        scheduler.add(prompt, 3)
    scheduler.run()
    assert len(made) == scheduler.steps and all(shape[1] == 1 for shape in made)  # (S, 1, C): one set for every head


def test_weights_with_nan_are_refused_at_the_door_and_an_overflow_is_named():
    model = LlamaLM(VOCAB, 64, 16, 4, 2, 2, 32).eval()
    with torch.no_grad():
        model.blocks[1].mlp.down_proj.weight[0, 0] = float("nan")  # past attention: no rotation would see it
    cache = PagedKVCache(8, 4, 2, 4, torch.float32, num_layers=2)
    with pytest.raises(ValueError, match=r"weight blocks\.1\.mlp\.down_proj\.weight holds NaN or inf"):
        Scheduler(model, cache)
    with pytest.raises(ValueError, match="holds NaN or inf"):
        generate_batch(model, [[1, 2, 3]], 2)
    assert cache.num_free_pages == 8  # refused before anything was reserved
    with torch.no_grad():
        model.blocks[1].mlp.down_proj.weight[0, 0] = 0.0
        model.norm.weight.fill_(1e20)
        model.readout.weight.fill_(1e20)  # finite, but their product overflows float32 in the logits
    with pytest.raises(ValueError, match="the logits of this step hold NaN or inf although the model's weights are finite"):
        generate_batch(model, [[1, 2, 3]], 2)
