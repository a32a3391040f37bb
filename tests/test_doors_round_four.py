"""Issue 38's listed doors, one test each: names no file system can hold, links to nowhere and in loops, numbers
without bounds on the command lines, checkpoints that could run code, and answers too long to look at."""

import os
import pickle
import time

import pytest
import torch

from attn.common import destinations
from attn.course import execute
from attn.course.exercises.registry import verdict
from attn.experiments import compressed_recall, window_runs
from attn.models import induction, lm_training


@pytest.fixture
def places(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "deeper")
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    os.mkfifo(tmp_path / "pipe")
    return tmp_path


@pytest.mark.parametrize("problem", [destinations.folder_problem, destinations.file_problem])
def test_names_no_file_system_holds_get_a_sentence(problem, places):
    cases = {
        str(places / ("x" * 300)): "bytes long; a file or folder name may have at most 255",
        "/" + "a/" * 2100: "a whole path may have at most 4095",
        "out\ud800": "a lone surrogate",
        "out\x00x": "holds the NUL character",
        str(places / "loop-a"): "leads round in a loop",
        str(places / "loop-a" / "inside"): "leads round in a loop",
    }
    for text, message in cases.items():
        assert message in problem(text), text


def test_a_link_to_nowhere_is_named_as_a_link(places):
    assert "is a symbolic link to" in destinations.folder_problem(str(places / "dangling"))
    assert "which does not exist; create that folder first" in destinations.folder_problem(str(places / "dangling"))
    message = destinations.file_problem(str(places / "dangling"))
    assert "is a symbolic link to" in message and "whose folder" in message and "does not exist" in message


def refusal(capsys, main, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*arguments, **options):
        raise AssertionError("the long work started before the arguments were checked")

    monkeypatch.setattr(induction.files, "train_and_save", refuse)
    monkeypatch.setattr(lm_training, "train", refuse)
    monkeypatch.setattr(window_runs, "run_all", refuse, raising=False)
    monkeypatch.setattr(compressed_recall, "run_all", refuse, raising=False)


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize("name", ["dangling", "loop-a", "x" * 300])
def test_every_training_command_refuses_a_bad_out_before_training(capsys, places, name):
    out = str(places / name)
    for main, argv in (
        (induction.main, ["--out", out]),
        (lm_training.main, ["train", "--out", out]),
        (window_runs.main, ["--out", out]),
        (compressed_recall.main, ["--out", out]),
    ):
        assert "argument --out: " in refusal(capsys, main, argv)


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize("main, argv, message", [
    (lm_training.main, ["train", "--threads", "1000000"], "--threads must be a whole number from 1 to"),
    (lm_training.main, ["train", "--seed", str(2**64)], "--seed must be a whole number from 0 to 18,446,744,073,709,551,615"),
    (lm_training.main, ["train", "--steps", str(2**64)], "--steps must be a whole number from 1 to 10,000,000"),
    (compressed_recall.main, ["--seeds", "1000000000"], "--seeds must be a whole number from 1 to 1,000"),
    (window_runs.main, ["--per-distance", "1000000000"], "--per-distance must be a whole number from 1 to 100,000"),
    (window_runs.main, ["--steps", str(2**70)], "--steps must be a whole number from 1 to 10,000,000"),
])
def test_numbers_without_bounds_are_refused_while_the_arguments_are_read(capsys, tmp_path, main, argv, message):
    argv = [*argv[:1], "--out", str(tmp_path), *argv[1:]] if main is lm_training.main else ["--out", str(tmp_path), *argv]
    assert message in refusal(capsys, main, argv)


class _RunsCode:
    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_a_checkpoint_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    planted = _RunsCode()
    planted.target = str(tmp_path / "ran")
    path = tmp_path / lm_training.CHECKPOINT_NAME
    path.write_bytes(pickle.dumps({"config": planted}))
    with pytest.raises(ValueError, match="it was not loaded \\(loading it could run code\\)"):
        lm_training.load_checkpoint(path)
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_of_tensors_and_numbers_loads_and_one_lacking_entries_is_refused(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"config": {"steps": 2}, "model": {"w": torch.ones(2)}}, path)
    with pytest.raises(ValueError, match="lacks optimizer, generator, rng, step, curve, seconds"):
        lm_training.load_checkpoint(path)


def test_a_ten_million_entry_list_is_answered_at_once():
    started = time.perf_counter()
    line = verdict("12.1", [0.0] * 10**7)
    assert time.perf_counter() - started < 1.0
    assert line.startswith("Not yet: ") and "more than 100,000 numbers" in line


def test_a_named_pipe_is_not_read_as_a_notebook(places):
    assert "is not an ordinary file" in execute.notebook_problem(places / "pipe")
    assert "leads round in a loop" in execute.notebook_problem(places / "loop-a")


# --- layers: silent wrong results and tracebacks from inside PyTorch -------------------------------------------

from attn import MultiHeadAttention, RingKVCache  # noqa: E402
from attn.latent import LatentAttention, LatentCache  # noqa: E402
from attn.linear import (  # noqa: E402
    delta_rule,
    gated_delta_rule,
    gated_delta_rule_chunked,
    gated_delta_rule_loop,
    linear_attention,
    linear_attention_chunked,
)
from attn.multihead import explicit_attention, fused_attention  # noqa: E402
from attn.window import sink_attention, sliding_window_mask  # noqa: E402


@pytest.mark.parametrize("window", [2**62, 2**63, 2**64, 2**70])
def test_a_window_beyond_int64_sees_every_earlier_key_instead_of_wrapping(window):
    assert torch.equal(sliding_window_mask(5, 5, window), torch.ones(5, 5, dtype=torch.bool).tril())


def test_sink_tokens_beyond_int64_keep_every_key_visible():
    assert torch.equal(sliding_window_mask(6, 6, 2, sink_tokens=2**63), torch.ones(6, 6, dtype=torch.bool).tril())
    layer = MultiHeadAttention(8, 2, window=2, sink_tokens=2**63)
    x = torch.randn(1, 6, 8)
    wide = MultiHeadAttention(8, 2)
    wide.load_state_dict(layer.state_dict())
    torch.testing.assert_close(layer(x, x, x), wide(x, x, x, is_causal=True))


@pytest.mark.parametrize("device, message", [("bogus", "is not a device PyTorch knows"), (3.5, "must be a torch.device")])
def test_a_mask_on_a_device_that_is_not_one_gets_a_sentence(device, message):
    with pytest.raises((ValueError, TypeError), match=message):
        sliding_window_mask(4, 4, 2, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_mask_on_cuda_without_cuda_gets_a_sentence():
    with pytest.raises(ValueError, match="no CUDA device is available on this machine"):
        sliding_window_mask(4, 4, 2, device="cuda")


def test_a_ring_cache_larger_than_any_memory_is_refused_when_made():
    with pytest.raises(ValueError, match="more positions than any cache could hold"):
        RingKVCache(2**70)
    with pytest.raises(ValueError, match="sink_tokens=.* more positions"):
        RingKVCache(4, sink_tokens=2**64)


def sink_inputs():
    return torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.zeros(2)


@pytest.mark.parametrize("change, error, message", [
    (lambda q, k, v, s: (q, k, v, s, torch.ones(3, 3)), ValueError, "keep_mask must be a bool tensor broadcastable"),
    (lambda q, k, v, s: (q, k, v, s, [[True]]), TypeError, "keep_mask must be a torch.Tensor"),
    (lambda q, k, v, s: (q, k, v, s, torch.ones(5, 3, dtype=torch.bool)), ValueError, "broadcastable to the scores"),
    (lambda q, k, v, s: (q, k, v, s.double(), None), TypeError, "sink_logits is torch.float64"),
    (lambda q, k, v, s: (q, k, v, torch.tensor([float("nan"), 0.0]), None), ValueError, "sink_logits contains NaN or inf"),
    (lambda q, k, v, s: (q, k, v, torch.tensor([float("inf"), 0.0]), None), ValueError, "sink_logits contains NaN or inf"),
    (lambda q, k, v, s: (q * 1e20, k * 1e20, v, s, None), ValueError, "could overflow torch.float32"),
])
def test_sink_attention_names_each_wrong_input(change, error, message):
    with pytest.raises(error, match=message):
        sink_attention(*change(*sink_inputs()))


@pytest.mark.parametrize("attend", [explicit_attention, fused_attention])
def test_scores_that_would_overflow_are_refused_not_turned_into_nan(attend):
    q = torch.randn(1, 2, 3, 4) * 1e20
    with pytest.raises(ValueError, match=r"the scores Q K\^T / sqrt\(d\) could overflow torch.float32"):
        attend(q, q, q)


def test_explicit_attention_in_float16_refuses_scores_beyond_65504_and_the_fused_kernel_takes_them():
    q = torch.full((1, 2, 3, 64), 300.0, dtype=torch.float16)
    with pytest.raises(ValueError, match="could overflow torch.float16"):
        explicit_attention(q, q, q)
    assert torch.isfinite(fused_attention(q, q, q)).all()  # the fused kernels add up float16 products in float32


@pytest.mark.parametrize("window", [2, 1000])
def test_the_windowed_layer_refuses_finite_inputs_whose_scores_overflow(window):
    layer = MultiHeadAttention(8, 2, window=window)
    x = torch.randn(1, 5, 8) * 1e20
    with pytest.raises(ValueError, match="could overflow torch.float32, the dtype the layer computes them in"):
        layer(x, x, x)


def one_key_written_64_times(scale):
    k = torch.zeros(1, 1, 64, 4)
    k[..., 0] = scale
    return k.clone(), k, torch.randn(1, 1, 64, 4), torch.ones(1, 1, 64)


def test_the_delta_rule_names_writes_that_overshoot_instead_of_returning_nan():
    with pytest.raises(ValueError, match=r"where beta \|k\|\^2 > 2 the error grows at every write"):
        delta_rule(*one_key_written_64_times(4.0))
    q, k, v, beta = one_key_written_64_times(0.5)
    reference = gated_delta_rule_loop(q, k, v, torch.ones_like(beta), beta)[0]
    torch.testing.assert_close(delta_rule(q, k, v, beta), reference)


def test_linear_attention_names_a_memory_that_overflowed():
    q = torch.full((1, 1, 8, 4), 1e19)
    with pytest.raises(ValueError, match="the sum of k v\\^T grows with every token"):
        linear_attention(q, q, q)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_delta_rules_run_in_half_precision_on_the_cpu(dtype):
    q, k, v, beta = one_key_written_64_times(0.5)
    half = [t.to(dtype) for t in (q, k, v, beta)]
    output = delta_rule(*half)
    assert output.dtype == dtype
    torch.testing.assert_close(output.float(), delta_rule(q, k, v, beta), atol=0.05, rtol=0.05)
    assert gated_delta_rule(half[0], half[1], half[2], torch.ones_like(half[3]), half[3]).dtype == dtype


@pytest.mark.parametrize("chunk_size", [0, -1, 2.5, True])
def test_the_chunked_forms_check_their_chunk_size(chunk_size):
    q, k, v, beta = one_key_written_64_times(0.5)
    with pytest.raises((ValueError, TypeError), match="chunk_size must be"):
        linear_attention_chunked(q, k, v, chunk_size)
    with pytest.raises((ValueError, TypeError), match="chunk_size must be"):
        gated_delta_rule_chunked(q, k, v, torch.ones_like(beta), beta, chunk_size)


def test_latent_attention_refuses_a_scaling_that_leaves_softmax_only_inf():
    with pytest.raises(ValueError, match="scaling=1e\\+300 multiplies every score"):
        LatentAttention(8, 2, 4, 2, 2, 2, scaling=1e300)


@pytest.mark.parametrize("absorbed", [False, True])
def test_latent_attention_names_an_overflow_instead_of_returning_nan(absorbed):
    layer = LatentAttention(8, 2, 4, 2, 2, 2)
    with pytest.raises(ValueError, match="x is finite, but the layer overflowed torch.float32"):
        layer(torch.randn(1, 3, 8) * 1e20, absorbed=absorbed)


def test_a_latent_cache_filled_by_a_layer_of_other_sizes_is_refused():
    cache = LatentCache()
    LatentAttention(8, 2, 4, 2, 2, 2)(torch.randn(1, 3, 8), cache=cache)
    with pytest.raises(ValueError, match="written by another layer; this one has latent_dim=6, rope_dim=4"):
        LatentAttention(8, 2, 6, 2, 4, 2)(torch.randn(1, 3, 8), cache=cache)


# --- models and measurements: sentences where they answered with negative bytes, NaN or a traceback ------------

from attn.data import tokenizer  # noqa: E402
from attn.experiments import austen_heads  # noqa: E402
from attn.measure.published_caches import PublishedAttention  # noqa: E402
from attn.models import ngram  # noqa: E402
from attn.models.decoder import Decoder  # noqa: E402
from attn.models.induction.scores import previous_token_scores  # noqa: E402


def test_published_attention_refuses_negative_heads_instead_of_counting_negative_bytes():
    with pytest.raises(ValueError, match="kv_heads must be a whole number of 1 or more, got -8"):
        PublishedAttention("bad", kv_heads=-8, head_dim=128, windows=(None,), source="x")
    with pytest.raises(ValueError, match="windows must be a non-empty tuple"):
        PublishedAttention("bad", kv_heads=8, head_dim=128, windows=(0, None), source="x")


def test_a_decoder_refuses_sinks_without_a_window_as_the_layer_does():
    with pytest.raises(ValueError, match="sink_tokens=2 needs a window"):
        Decoder(16, 8, sink_tokens=2)
    with pytest.raises(ValueError, match="sink_tokens=2 needs a window"):
        MultiHeadAttention(8, 2, sink_tokens=2)


@pytest.mark.parametrize("distance", [0, window_runs.LENGTH, -3])
def test_recall_batches_refuse_distances_outside_the_sequence(distance):
    with pytest.raises(ValueError, match="distances must lie from 1 to length - 1"):
        window_runs.recall_batch(2, torch.Generator().manual_seed(0), distances=torch.tensor([1, distance]))


def test_text_with_a_lone_surrogate_gets_a_sentence():
    with pytest.raises(ValueError, match="text holds a lone surrogate"):
        tokenizer.pretokenize("half \ud800 a character")


def test_a_tokenizer_file_with_no_vocabulary_is_refused(tmp_path):
    path = tmp_path / "empty.json"
    from tokenizers import Tokenizer as Backend
    from tokenizers import models

    Backend(models.BPE(vocab={}, merges=[])).save(str(path))
    with pytest.raises(ValueError, match="holds a tokenizer of 0 tokens"):
        tokenizer.Tokenizer.load(path)


def test_previous_token_scores_refuse_meta_weights():
    with pytest.raises(ValueError, match="weights is on the meta device"):
        previous_token_scores(torch.empty(1, 2, 4, 4, device="meta"))


@pytest.mark.parametrize("weights", [torch.ones(2, 1, 2, 1, 1), torch.ones(0, 1, 2, 4, 4)])
def test_head_measures_refuse_weights_too_short_to_measure(weights):
    for measure in (austen_heads.first_token_weight, austen_heads.previous_token_score):
        with pytest.raises(ValueError, match="hold no query after the first to average over"):
            measure(weights)


@pytest.mark.parametrize("train, held_out, vocab_size, error, message", [
    (torch.tensor([1, 2, 3]), torch.tensor([1]), 8, ValueError, "held_out_tokens holds 1 tokens; (a|the) bigram needs"),
    ([1, 2, 3], torch.tensor([1, 2]), 8, TypeError, "train_tokens must be a 1-D tensor of token ids"),
    (torch.tensor([1.0, 2.0]), torch.tensor([1, 2]), 8, TypeError, "train_tokens must be a 1-D tensor"),
    (torch.tensor([1, 2, 9]), torch.tensor([1, 2]), 8, ValueError, "outside the vocabulary 0..7"),
    (torch.tensor([1, 2]), torch.tensor([1, 2]), 2.5, TypeError, "vocab_size must be a positive int"),
    (torch.tensor([1, 2]), torch.tensor([1, 2]), 10**7, ValueError, "the bigram counts for vocab_size=10000000 would need"),
])
def test_baselines_refuse_what_they_cannot_count(train, held_out, vocab_size, error, message):
    with pytest.raises(error, match=message):
        ngram.baselines(train, held_out, vocab_size)


def test_encode_names_a_lone_surrogate():
    trained = tokenizer.train_tokenizer(["a small text to train on", "and another one"], 260)
    with pytest.raises(ValueError, match="text holds a lone surrogate"):
        trained.encode("half \ud800 a character")
    assert trained.decode(trained.encode("a small text")) == "a small text"


@pytest.mark.parametrize("lengths, error", [((), TypeError), ((0,), ValueError), ((2.5,), TypeError), ((-4,), ValueError)])
def test_window_decode_times_checks_its_lengths_first(lengths, error):
    from attn.measure.timing import window_decode_times

    with pytest.raises(error, match="length"):
        window_decode_times(lengths)


@pytest.mark.parametrize("name", ["dangling", "loop-a", "x" * 300])
def test_induction_runs_refuses_a_bad_out_before_training(capsys, places, name, monkeypatch):
    from attn.experiments import induction_runs

    monkeypatch.setattr(induction_runs, "run_all", lambda *arguments, **options: pytest.fail("trained first"))
    assert "argument --out: " in refusal(capsys, induction_runs.main, ["--out", str(places / name)])
