"""Lesson 17's measurement on lesson 13's model (attn.experiments.long_context): each scheme does what its name says on a
small random model, the command line writes its record on the tiny size and refuses bad arguments with a sentence,
and the shipped record (where present) says what the lesson reads."""

import io
import json

import pytest
import torch
from torch.nn import functional

from attn.data import corpus
from attn.experiments import long_context
from attn.experiments.window_austen import set_window
from attn.models import lm, lm_training
from attn.softmax import log_n_scale
from tests.data.test_austen import short_texts
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / long_context.RESULTS_NAME
CONTEXT = 16


def small_model():
    """A random AustenLM (context 16, heads of 8 features) whose attention is sharp enough for positions to matter."""
    torch.manual_seed(0)
    model = lm.AustenLM(vocab_size=50, context_length=CONTEXT, embed_dim=16, num_heads=2, num_layers=2).eval()
    with torch.no_grad():
        for block in model.blocks:
            for projection in (block.attention.query_proj, block.attention.key_proj):
                projection.weight.normal_(0.0, 0.6)
    return model


def stream(length, seed=1):
    return torch.randint(50, (length + 1,), generator=torch.Generator().manual_seed(seed))


def one_pass(model, tokens):
    with torch.no_grad():
        return functional.cross_entropy(model(tokens[None, :-1])[0], tokens[1:], reduction="none")


def test_none_reproduces_the_plain_model_exactly():
    model, tokens = small_model(), stream(48)
    plain, plain_weights = long_context.read_stream(model, tokens, 8)
    with long_context.applied(model, "none", 48):
        losses, weights = long_context.read_stream(model, tokens, 8)
    assert torch.equal(losses, plain) and torch.equal(weights, plain_weights)


@pytest.mark.parametrize("scheme", [name for name in long_context.SCHEMES if name != "dynamic"])
def test_reading_in_chunks_equals_one_pass(scheme):
    model, tokens = small_model(), stream(48)
    with long_context.applied(model, scheme, 48):
        chunked, _ = long_context.read_stream(model, tokens, 5)
        whole = one_pass(model, tokens)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-5)


@pytest.mark.parametrize("scheme", ["pi", "ntk", "yarn", "yarn-no-temperature"])
def test_a_scheme_at_factor_one_is_the_plain_model(scheme):
    model, tokens = small_model(), stream(48)
    plain = one_pass(model, tokens)
    settings = long_context.scheme_settings(scheme, CONTEXT, CONTEXT, 8, lm.ROTARY_BASE)  # s = 1
    for block in model.blocks:
        block.attention.rotary_base = settings["rotary_base"]
        block.attention.set_rotary_scaling(settings["scaling"])
    torch.testing.assert_close(one_pass(model, tokens), plain, rtol=0, atol=1e-5)
    with long_context.applied(small_model(), scheme, 48) as scaled:  # and at s = 3 it changes what the model reads
        assert (one_pass(scaled, tokens) - plain).abs().max() > 1e-3


@pytest.mark.parametrize("scheme", ["dynamic", "log-n", "window"])
def test_schemes_that_act_only_past_the_trained_length_leave_the_first_positions_alone(scheme):
    model, tokens = small_model(), stream(48)
    plain, _ = long_context.read_stream(model, tokens, 8)
    with long_context.applied(model, scheme, 48):
        losses, _ = long_context.read_stream(model, tokens, 8)
    torch.testing.assert_close(losses[:CONTEXT], plain[:CONTEXT], rtol=0, atol=1e-5)
    assert (losses[CONTEXT:] - plain[CONTEXT:]).abs().max() > 1e-3


def test_dynamic_in_one_pass_is_ntk_at_the_whole_length_and_in_chunks_it_is_not():
    model, tokens = small_model(), stream(48)
    with long_context.applied(model, "ntk", 48):
        ntk = one_pass(model, tokens)
    with long_context.applied(model, "dynamic", 48):
        dynamic = one_pass(model, tokens)
        by_token, _ = long_context.read_stream(model, tokens, 1)
        by_eight, _ = long_context.read_stream(model, tokens, 8)
    torch.testing.assert_close(dynamic, ntk, rtol=0, atol=1e-5)
    assert (by_token - by_eight).abs().max() > 1e-4  # the base follows the length read: chunks matter
    torch.testing.assert_close(by_eight[-8:], by_token[-8:], rtol=0, atol=0.5)  # but not by much


def test_log_n_factors_are_log_n_scale_of_the_keys_each_query_sees():
    factors = long_context.log_n_factors(torch.arange(40), CONTEXT)
    assert factors.tolist() == pytest.approx([log_n_scale(p + 1, CONTEXT) for p in range(40)], rel=1e-6)


def test_the_window_scheme_is_lesson_14s_window_of_the_trained_length():
    model, tokens = small_model(), stream(48)
    with long_context.applied(model, "window", 48):
        ours = one_pass(model, tokens)
    theirs = one_pass(set_window(model, CONTEXT), tokens)
    set_window(model, None)
    assert torch.equal(ours, theirs)


def test_applied_restores_the_model_even_when_the_reading_fails():
    model, tokens = small_model(), stream(48)
    plain = one_pass(model, tokens)
    attention = model.blocks[0].attention
    hooks = (len(attention._forward_pre_hooks), len(attention.query_proj._forward_hooks))
    for scheme in long_context.SCHEMES:
        with pytest.raises(RuntimeError, match="stop"), long_context.applied(model, scheme, 48):
            raise RuntimeError("stop")
    assert (len(attention._forward_pre_hooks), len(attention.query_proj._forward_hooks)) == hooks
    assert attention.rotary_base == lm.ROTARY_BASE and attention.rotary_scaling is None and attention.window is None
    assert torch.equal(one_pass(model, tokens), plain)


def test_refusals_name_what_is_wrong():
    model = small_model()
    with pytest.raises(ValueError, match="not past the model's trained context of 16 tokens"):
        long_context.applied(model, "pi", 16).__enter__()
    with pytest.raises(ValueError, match="scheme"):
        long_context.scheme_settings("rope", 16, 32, 8, 10000.0)
    with pytest.raises(TypeError, match="model must be"):
        long_context.read_stream(object(), stream(20), 4)
    with pytest.raises(ValueError, match="vocabulary"):
        long_context.read_stream(model, torch.full((20,), 50), 4)


def test_bins_leave_the_first_query_out_only_when_asked():
    values = torch.tensor([[9.0, 1.0, 3.0, 5.0, 7.0]])
    assert long_context.bin_means(values, 2) == [[5.0, 4.0, 7.0]]
    assert long_context.bin_means(values, 2, skip_first=True) == [[1.0, 4.0, 7.0]]


def test_the_fine_tune_repeats_itself_and_leaves_the_model_alone():
    model, tokens = small_model(), torch.randint(50, (400,), generator=torch.Generator().manual_seed(3))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    first, first_losses = long_context.fine_tune(model, "yarn", tokens, 32, 3, 2, 1e-3, 0)
    second, second_losses = long_context.fine_tune(model, "yarn", tokens, 32, 3, 2, 1e-3, 0)
    assert first_losses == second_losses and len(first_losses) == 3
    assert all(torch.equal(value, model.state_dict()[name]) for name, value in before.items())
    assert not torch.equal(first.blocks[0].attention.query_proj.weight, model.blocks[0].attention.query_proj.weight)
    assert first.blocks[0].attention.rotary_scaling is None and not first.training  # the scheme is not left on
    with pytest.raises(ValueError, match="learning_rate"):
        long_context.fine_tune(model, "yarn", tokens, 32, 3, 2, 0.0, 0)


# --- the command line ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A corpus of the course's short texts, each repeated to a few thousand tokens, and the tiny model trained on it."""
    folder = tmp_path_factory.mktemp("long_context")
    texts = [(text + "\n") * 12 for text in short_texts()]
    corpus.write_corpus(dict(zip(corpus.TITLES, texts, strict=True)), folder / "corpus")
    lm_training.train(dict(lm.SIZES["tiny"]), folder / "model", folder / "corpus", stream=io.StringIO())
    return folder


def test_the_tiny_command_writes_every_scheme_and_fine_tune(tiny_folders, capsys):
    out = tiny_folders / "out"
    long_context.main(["--out", str(out), "--size", "tiny", "--model", str(tiny_folders / "model"),
                       "--corpus", str(tiny_folders / "corpus"), "--fine-tune-steps", "2"])
    assert "Wrote" in capsys.readouterr().out
    record = json.loads((out / long_context.RESULTS_NAME).read_text())
    settings = long_context.SIZES["tiny"]
    assert record["context_length"] == lm.SIZES["tiny"]["context_length"] and record["settings"]["fine_tune_steps"] == 2
    for length in settings["lengths"]:
        reading = record["reading"][str(length)]
        assert list(reading) == list(long_context.SCHEMES)
        for result in reading.values():
            assert len(result["loss_by_stream_and_bin"]) == settings["streams"]
            assert len(result["loss_by_bin"]) == length // settings["bin"]
            assert len(result["first_token_weight_by_layer_and_bin"]) == lm.SIZES["tiny"]["num_layers"]
    assert list(record["fine_tuned"]) == list(long_context.FINE_TUNED)
    assert all(len(tuned["training_loss"]) == 2 and list(tuned["reading"]) == [str(n) for n in settings["reread"]]
               for tuned in record["fine_tuned"].values())


def refusal(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        long_context.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_bad_arguments_are_refused_with_a_sentence_before_any_work(tmp_path, capsys, monkeypatch):
    def refuse(*arguments, **options):
        raise AssertionError("the long work started before the arguments were checked")

    monkeypatch.setattr(long_context, "run", refuse)
    out = ["--out", str(tmp_path / "out")]
    assert "invalid choice: 'huge'" in refusal(capsys, [*out, "--size", "huge"])
    assert "--fine-tune-steps must be a whole number from 1" in refusal(capsys, [*out, "--fine-tune-steps", "0"])
    assert "lacks austen_lm.pt, austen_tokenizer.json" in refusal(capsys, [*out, "--model", str(tmp_path)])
    (tmp_path / "file").write_text("x")
    assert "error: argument --out" in refusal(capsys, ["--out", str(tmp_path / "file")])


def test_a_missing_corpus_is_named_with_its_command(tiny_folders, tmp_path, capsys):
    line = refusal(capsys, ["--out", str(tmp_path / "out"), "--size", "tiny", "--model", str(tiny_folders / "model"),
                            "--corpus", str(tmp_path / "nowhere")])
    assert "python -m attn.corpus" in line


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record_covers_every_length_scheme_and_fine_tune():
    record = json.loads(RESULTS.read_text())
    assert record["size"] == "full" and record["context_length"] == 256
    for length in record["settings"]["lengths"]:
        for result in record["reading"][str(length)].values():
            assert len(result["mean_beyond_context_by_stream"]) == record["settings"]["streams"]
    assert list(record["fine_tuned"]) == list(long_context.FINE_TUNED)


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record_holds_what_lesson_17_says():
    """Each claim of lesson 17's prose about this record, as the paired interval over the stretches that backs it."""
    from attn.common.stats import paired_interval

    record = json.loads(RESULTS.read_text())
    reading, tuned = record["reading"], record["fine_tuned"]

    def past(where, length, scheme):
        return where[str(length)][scheme]["mean_beyond_context_by_stream"]

    def interval(first, second):
        _, low, high = paired_interval(first, second)
        return low, high

    for length in (512, 1024, 2048):  # the window is ahead of every scheme but YaRN at 512, where neither is
        for scheme in record["schemes"]:
            if scheme != "window" and not (length == 512 and scheme.startswith("yarn")):
                assert interval(past(reading, length, scheme), past(reading, length, "window"))[0] > 0, (length, scheme)
        low, high = interval(past(reading, length, "yarn"), past(reading, length, "yarn-no-temperature"))
        assert low < 0 < high, f"YaRN's temperature made a difference at {length}"
    for scheme in ("yarn", "yarn-no-temperature"):
        low, high = interval(past(reading, 512, scheme), past(reading, 512, "window"))
        assert low < 0 < high
    for scheme in ("ntk", "dynamic", "yarn"):  # each repairs part of it at 2,048; dynamic less than static NTK
        assert interval(past(reading, 2048, scheme), past(reading, 2048, "none"))[1] < 0
    assert interval(past(reading, 2048, "dynamic"), past(reading, 2048, "ntk"))[0] > 0
    assert interval(past(reading, 512, "pi"), past(reading, 512, "none"))[1] < 0  # PI helps at 512 ...
    assert interval(past(reading, 2048, "pi"), past(reading, 2048, "none"))[0] > 0  # ... and hurts at 2,048
    assert interval(past(reading, 2048, "log-n"), past(reading, 2048, "none"))[0] > 0
    def tuned_past(scheme):  # the copy fine-tuned under this scheme, read at 2,048
        return tuned[scheme]["reading"]["2048"]["mean_beyond_context_by_stream"]

    for scheme in ("yarn", "yarn-no-temperature"):
        assert interval(tuned_past(scheme), tuned_past("none"))[1] < 0, scheme
    for scheme in ("pi", "ntk", "dynamic", "log-n"):
        assert interval(tuned_past(scheme), tuned_past("none"))[0] > 0, scheme
    low, high = interval(tuned_past("yarn-no-temperature"), past(reading, 2048, "window"))
    assert low < 0 < high, "the best fine-tuned copy and the untouched window are distinguished"
    assert sum(tuned_past("none")) < sum(past(reading, 2048, "none"))
