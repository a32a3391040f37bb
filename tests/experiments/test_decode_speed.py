"""Lesson 19's fast decoding (issue 53): LlamaLM checks at its door and runs its blocks unchecked, with the rotary
angles made once per call; lesson 10's generate reads the last position's logits only and writes into preallocated
caches. The fast path gives lesson 16's checked path's numbers, every hostile input still gets its sentence, and the
benchmark command (attn.experiments.decode_speed) refuses bad arguments before any work and writes its record."""

import json

import pytest
import torch

from attn.experiments import decode_speed
from attn.kvcache import PreallocatedKVCache
from attn.models.decoder import decoding_caches, generate
from attn.models.llama import LlamaLM
from attn.multihead import explicit_attention, fused_attention
from attn.positions import apply_rotary, rotary_angles, rotate
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / decode_speed.RESULTS_NAME
VOCAB = 97
SMALL = dict(vocab_size=VOCAB, context_length=64, embed_dim=48, num_heads=6, num_kv_heads=2, num_layers=3,
             mlp_hidden_dim=80, rotary_base=100000.0)


def small_model(dtype=torch.float32, seed=0, **changes):
    """A random LlamaLM with weights of std 0.3 (norms around 1), so that every layer's work shows in the logits."""
    torch.manual_seed(seed)
    model = LlamaLM(**(SMALL | changes)).to(dtype).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
            else:
                parameter.normal_(std=0.3)
    return model


def tokens(batch=2, length=13, seed=1):
    return torch.randint(VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def checked(model, *arguments, **options):
    """model(...) on lesson 16's path, every block checking its own input."""
    model.check_every_block = True
    try:
        with torch.no_grad():
            return model(*arguments, **options)
    finally:
        model.check_every_block = False


def fast(model, *arguments, **options):
    with torch.no_grad():
        return model(*arguments, **options)


# The fast path computes what the checked path computes ------------------------------------------------------


@pytest.mark.parametrize("scaling", [None, {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16},
                                     {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}])
def test_the_fast_path_gives_the_checked_paths_logits_exactly(scaling):
    model = small_model().set_rotary_scaling(scaling)
    ids = tokens()
    assert torch.equal(fast(model, ids), checked(model, ids))
    # prefill, then one token at a time: the fast path through preallocated caches, the checked one through torch.cat
    caches_fast, caches_checked = decoding_caches(model, 13), model.new_caches()
    assert all(isinstance(cache, PreallocatedKVCache) for cache in caches_fast)
    for start, end in [(0, 5)] + [(t, t + 1) for t in range(5, 13)]:
        assert torch.equal(fast(model, ids[:, start:end], caches_fast), checked(model, ids[:, start:end], caches_checked))
    assert [len(cache) for cache in caches_fast] == [13] * 3


def test_float64_and_a_partial_rotary_take_the_fast_path_too():
    model = small_model(torch.float64)
    for block in model.blocks:
        block.attention.rotary_fraction = 0.5
    ids = tokens()
    assert torch.equal(fast(model, ids), checked(model, ids))


def test_the_last_positions_logits_alone_equal_the_last_row():
    model = small_model()
    ids = tokens()
    full = fast(model, ids)
    for run in (fast, checked):
        last = run(model, ids, last_only=True)
        assert last.shape == (2, 1, VOCAB)
        torch.testing.assert_close(last[:, 0], full[:, -1], rtol=0, atol=1e-5)  # one row's product: 4e-7 seen


def test_generate_gives_the_same_tokens_on_both_paths_and_without_a_cache():
    model = small_model()
    prompt = tokens(length=5)
    greedy = generate(model, prompt, 20)
    model.check_every_block = True
    assert torch.equal(generate(model, prompt, 20), greedy)
    model.check_every_block = False
    assert torch.equal(generate(model, prompt, 20, use_cache=False), greedy)
    sampled = [generate(model, prompt, 12, temperature=0.9, generator=torch.Generator().manual_seed(3), use_cache=cache)
               for cache in (True, False)]
    assert torch.equal(*sampled)


def test_generate_asks_for_the_last_logits_only_and_preallocates_its_caches(monkeypatch):
    model = small_model()
    calls = []
    forward = LlamaLM.forward

    def spy(self, fed, caches=None, **options):
        calls.append((fed.shape[1], options.get("last_only"), {type(cache) for cache in caches}, caches[0].capacity))
        return forward(self, fed, caches, **options)

    monkeypatch.setattr(LlamaLM, "forward", spy)
    generate(model, tokens(length=5), 4)
    assert calls == [(5, True, {PreallocatedKVCache}, 8)] + [(1, True, {PreallocatedKVCache}, 8)] * 3


def test_lesson_10s_decoder_keeps_every_logit_and_gets_preallocated_caches():
    from attn.models.decoder import Decoder

    torch.manual_seed(0)
    decoder = Decoder(vocab_size=10, max_length=16, num_layers=2).eval()
    prompt = torch.tensor([[1, 2], [3, 4]])
    assert torch.equal(generate(decoder, prompt, 10), generate(decoder, prompt, 10, use_cache=False))
    windowed = Decoder(vocab_size=10, max_length=16, num_layers=2, window=4)
    assert [type(cache).__name__ for cache in decoding_caches(windowed, 12)] == ["RingKVCache"] * 2
    for wrong, error, words in ((("model", 4), TypeError, "must be an attn.models.decoder.Decoder"),
                                ((decoder, 0), ValueError, "length must be at least 1"),
                                ((decoder, 17), ValueError, "length must be at most 16"),
                                ((decoder, 2.5), TypeError, "length must be a whole number")):
        with pytest.raises(error, match=words):
            decoding_caches(*wrong)


def test_one_query_after_cached_keys_needs_no_mask():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 6, 1, 8, generator=generator)
    key, value = torch.randn(2, 3, 9, 8, generator=generator), torch.randn(2, 3, 9, 8, generator=generator)
    expected, _ = explicit_attention(query, key, value, is_causal=True)
    torch.testing.assert_close(fused_attention(query, key, value, is_causal=True), expected, rtol=0, atol=1e-6)


def test_the_angles_are_made_once_per_call_and_every_check_runs_once_per_call():
    """Per decoding step, the fast path's rotary and finiteness work does not grow with the number of layers; the
    checked path's does (its checks run in every layer)."""
    from torch.profiler import ProfilerActivity, profile

    def step_counts(layers, check_every_block):
        model = small_model(num_layers=layers)
        model.check_every_block = check_every_block
        caches = decoding_caches(model, 9)
        fast(model, tokens(length=8), caches)
        with profile(activities=[ProfilerActivity.CPU]) as run:
            fast(model, tokens(length=1, seed=2), caches)
        names = ("aten::cos", "aten::isfinite", "aten::aminmax")
        return [sum(event.count for event in run.key_averages() if event.key == name) for name in names]

    assert step_counts(1, False) == step_counts(4, False)
    assert step_counts(1, False)[0] == 1  # one cos table for every layer's queries and keys
    one, four = step_counts(1, True), step_counts(4, True)
    assert all(many > few for many, few in zip(four, one, strict=True))


def test_a_hook_a_mask_or_weights_take_the_checked_path():
    model = small_model()
    ids = tokens()
    seen = []
    handle = model.blocks[1].attention.register_forward_hook(lambda module, arguments, output: seen.append(output.shape))
    try:
        assert not model._runs_plain()
        assert torch.equal(fast(model, ids), checked(model, ids))
        assert seen == [(2, 13, 48)] * 2  # the hook ran on both calls
    finally:
        handle.remove()
    assert model._runs_plain()
    keep = torch.ones(13, 13, dtype=torch.bool)
    assert torch.equal(fast(model, ids, mask=keep), fast(model, ids))
    logits, weights = fast(model, ids, need_weights=True)
    assert weights.shape == (3, 2, 6, 13, 13)


# Every hostile input still gets its sentence, and a refused call leaves the caches as they were -------------------


def test_nan_in_the_weights_is_named_and_the_caches_are_put_back():
    model = small_model()
    caches = decoding_caches(model, 20)
    fast(model, tokens(length=6), caches)
    before = [cache.keys.clone() for cache in caches]
    with torch.no_grad():
        model.blocks[2].mlp.up_proj.weight[3, 4] = float("nan")
    with pytest.raises(ValueError, match=r"weights hold NaN or inf \(in blocks.2.mlp.up_proj.weight\)"):
        fast(model, tokens(length=1), caches)
    assert [len(cache) for cache in caches] == [6] * 3
    assert all(torch.equal(cache.keys, kept) for cache, kept in zip(caches, before, strict=True))
    with pytest.raises(ValueError, match="weights hold NaN or inf"):
        generate(model, tokens(length=3), 2)


def test_nan_in_a_cache_is_named():
    model = small_model()
    caches = model.new_caches()
    fast(model, tokens(length=4), caches)
    caches[1].values[0, 0, 2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"caches\[1\] holds NaN or inf keys or values"):
        fast(model, tokens(length=1), caches)
    assert [len(cache) for cache in caches] == [4] * 3


def test_an_overflow_inside_gets_the_checked_paths_sentence():
    model = small_model()
    with torch.no_grad():
        model.blocks[0].mlp.down_proj.weight.mul_(1e18)  # finite weights whose output no RMSNorm can square
    for run in (fast, checked):
        with pytest.raises(ValueError, match="RMSNorm would overflow squaring it"):
            run(model, tokens())
    with torch.no_grad():
        model.blocks[0].mlp.down_proj.weight.div_(1e18)
        model.norm.weight.fill_(3e38)  # the readout's sums pass float32's largest number
    with pytest.raises(ValueError, match="the last block or the readout overflowed torch.float32"):
        fast(model, tokens())


def test_wrong_tokens_caches_and_flags_are_refused_before_any_block_runs():
    model = small_model()
    caches = model.new_caches()
    fast(model, tokens(batch=2, length=3), caches)
    for wrong, options, error, words in (
        (torch.tensor([[1, VOCAB]]), {}, ValueError, f"token ids from 0 to {VOCAB - 1}"),
        (torch.zeros(1, 3), {}, TypeError, "integer token ids"),
        (tokens(batch=1, length=1), {"caches": caches}, ValueError, "this cache does not fit: batch size 2"),
        (tokens(length=1), {"last_only": "yes"}, TypeError, "last_only must be True or False"),
        (tokens(length=1), {"caches": caches[:2]}, ValueError, "one KVCache per block"),
    ):
        with pytest.raises(error, match=words):
            fast(model, wrong, **options)
    assert [len(cache) for cache in caches] == [3] * 3


# rotary_angles and rotate: apply_rotary in two parts ------------------------------------------------------------


@pytest.mark.parametrize(("scaling", "fraction"), [(None, 1.0), (None, 0.5),
                                                  ({"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 32}, 1.0)])
def test_angles_made_once_turn_as_apply_rotary_turns(scaling, fraction):
    x = torch.randn(2, 3, 7, 16, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(5, 12)
    angles = rotary_angles(positions, 16, 500.0, scaling, fraction)
    assert angles.cos.shape == (7, int(8 * fraction), 2)
    assert torch.equal(rotate(x, angles), apply_rotary(x, positions, 500.0, scaling, fraction))
    wide = rotary_angles(positions, 16, 500.0, dtype=torch.float64)
    assert torch.equal(rotate(x.double(), wide), apply_rotary(x.double(), positions, 500.0))


def test_rotary_angles_and_rotate_refuse_with_a_sentence():
    angles = rotary_angles(torch.arange(4), 8)
    for call, error, words in (
        (lambda: rotary_angles(torch.arange(4), 7), ValueError, "dim must be even"),
        (lambda: rotary_angles(torch.tensor(3), 8), TypeError, r"positions must be a tensor \(T,\)"),
        (lambda: rotary_angles(torch.tensor([0.0, float("nan")]), 8), ValueError, "positions contains NaN"),
        (lambda: rotary_angles(torch.arange(4), 8, base=-1.0), ValueError, "base must be a finite number > 0"),
        (lambda: rotary_angles(torch.arange(4), 8, dtype=torch.float16), TypeError, "dtype must be torch.float32"),
        (lambda: rotary_angles(torch.arange(4), 8, base=1e-300), ValueError, "rotation angles overflow"),
        (lambda: rotate(torch.zeros(2, 5, 8), angles), ValueError, "angles for 4 positions and 4 pairs"),
        (lambda: rotate(torch.zeros(2, 4, 6), angles), ValueError, "cannot turn x of shape"),
        (lambda: rotate(torch.zeros(2, 4, 8, dtype=torch.long), angles), TypeError, "floating-point tensor"),
        (lambda: rotate(torch.zeros(2, 4, 8), (1, 2, 3)), TypeError, "the RotaryAngles that rotary_angles returns"),
    ):
        with pytest.raises(error, match=words):
            call()


# The benchmark command ----------------------------------------------------------------------------------------


def test_the_twin_computes_the_courses_logits():
    model = small_model(num_kv_heads=3)
    twin = decode_speed.transformers_twin(model)
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(twin(ids).logits, fast(model, ids), rtol=0, atol=1e-4)
    assert torch.equal(twin.generate(ids, max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(ids)),
                       generate(model, ids, 8))
    with pytest.raises(TypeError, match="must be an attn.models.llama.LlamaLM"):
        decode_speed.transformers_twin(twin)
    with pytest.raises(ValueError, match="plain Llama layers only"):
        decode_speed.transformers_twin(model.set_rotary_scaling({"rope_type": "linear", "factor": 2.0}))


def test_the_tiny_command_writes_its_record(tmp_path, capsys):
    decode_speed.main(["--out", str(tmp_path), "--size", "tiny"])
    assert "Wrote" in capsys.readouterr().out
    record = json.loads((tmp_path / decode_speed.RESULTS_NAME).read_text())
    settings = decode_speed.SIZES["tiny"]
    assert record["same_tokens"] and len(record["continuation"]) == settings["new_tokens"]
    assert set(record["threads"]) == {str(count) for count in settings["threads"]}
    one = record["threads"]["1"]
    for name in decode_speed.CONTESTANTS:
        assert set(one[name]) == {"tokens_per_second", "step_ms", "prefill_ms", "bound_share"}
        assert one[name]["tokens_per_second"]["min"] <= one[name]["tokens_per_second"]["median"]
    assert set(one["forward_ms"]) == {"course", "transformers", "course_over_transformers"}
    profile = record["profile_of_one_step"]
    assert profile["course"]["calls"]["aten::cos"] == 1
    assert profile["course_checked"]["calls"]["aten::cos"] == 2 * decode_speed.TINY_MODEL["num_layers"]
    assert record["machine"]["cores"] >= 1 and record["provenance"]["command"].endswith("--size tiny")


def test_the_out_folder_and_size_are_checked_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(decode_speed, "_model_and_tokens", lambda *arguments: pytest.fail("the command went on to work"))
    taken = tmp_path / "a file"
    taken.write_text("")
    for argv, words in ((["--out", str(taken), "--size", "tiny"], "is a file; give a folder"),
                        (["--out", str(tmp_path), "--size", "huge"], "invalid choice: 'huge'"),
                        (["--size", "tiny"], "the following arguments are required: --out")):
        with pytest.raises(SystemExit) as exit_info:
            decode_speed.main(argv)
        assert exit_info.value.code == 2 and words in capsys.readouterr().err
    for arguments, error, words in (((str(tmp_path), "huge"), ValueError, "size must be one of full, tiny"),
                                    ((3, "tiny"), TypeError, "out must be a folder's path"),
                                    ((str(tmp_path), "tiny", "print"), TypeError, "progress")):
        with pytest.raises(error, match=words):
            decode_speed.run(*arguments)


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record():
    record = json.loads(RESULTS.read_text())
    assert record["size"] == "full" and record["same_tokens"] and record["model"].startswith("SmolLM2-135M")
    assert (record["prompt_tokens"], record["new_tokens"], record["forward_tokens"]) == (256, 64, 512)
    assert set(record["threads"]) == {"1", "2"} and record["machine"]["processor"]
    course, lesson16 = (record["profile_of_one_step"][name]["calls"] for name in ("course", "course_checked"))
    assert course["aten::cos"] == 1 and lesson16["aten::cos"] == 60 and course["aten::isfinite"] < 10
