"""Lesson 17's SmolLM2 measurement past 8,192 positions (attn.experiments.smollm2_length): the shared prefix and the
chunked reading on a small random LlamaLM, the tiny command line and its refusals, the shipped record where present."""

import json

import pytest
import torch
from torch.nn import functional

from attn.experiments import smollm2_length
from attn.models.llama import LlamaLM
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / smollm2_length.RESULTS_NAME
CONTEXT = smollm2_length.TINY_MODEL["context_length"]


def small_model():
    """The tiny size's model with sharper attention, so that positions matter to what it predicts."""
    torch.manual_seed(0)
    model = LlamaLM(**smollm2_length.TINY_MODEL).eval()
    with torch.no_grad():
        for block in model.blocks:
            for projection in (block.attention.query_proj, block.attention.key_proj):
                projection.weight.normal_(0.0, 0.6)
    return model


def stretch(length=48, seed=1):
    return torch.randint(64, (length + 1,), generator=torch.Generator().manual_seed(seed))


def one_pass(model, tokens, scaling=None):
    model.set_rotary_scaling(scaling)
    with torch.no_grad():
        losses = functional.cross_entropy(model(tokens[None, :-1])[0], tokens[1:], reduction="none")
    model.set_rotary_scaling(None)
    return losses


def test_none_and_yarn_read_in_chunks_as_in_one_pass():
    model, tokens = small_model(), stretch()
    found = smollm2_length.stream_losses(model, tokens, ("none", "yarn"), 5)
    torch.testing.assert_close(found["none"], one_pass(model, tokens), rtol=0, atol=1e-5)
    yarn = smollm2_length.scheme_scaling("yarn", CONTEXT)
    torch.testing.assert_close(found["yarn"], one_pass(model, tokens, yarn), rtol=0, atol=1e-5)
    assert model.blocks[0].attention.rotary_scaling is None  # the model is left as it was


def test_dynamic_shares_the_first_positions_and_changes_the_rest():
    model, tokens = small_model(), stretch()
    found = smollm2_length.stream_losses(model, tokens, ("none", "dynamic"), 8)
    assert torch.equal(found["dynamic"][:CONTEXT], found["none"][:CONTEXT])
    assert (found["dynamic"][CONTEXT:] - found["none"][CONTEXT:]).abs().max() > 1e-3
    # decoded token by token from the start, dynamic NTK gives what the shared prefix gives, up to rounding
    model.set_rotary_scaling(smollm2_length.scheme_scaling("dynamic", CONTEXT))
    by_token = smollm2_length.read_on(model, tokens, model.new_caches(), 0, CONTEXT, 1)
    model.set_rotary_scaling(None)
    torch.testing.assert_close(by_token, found["dynamic"][:CONTEXT], rtol=0, atol=1e-5)


def test_refusals_name_what_is_wrong():
    model = small_model()
    with pytest.raises(ValueError, match="does not reach past the model's 16 trained positions"):
        smollm2_length.stream_losses(model, stretch(10), ("none",), 4)
    with pytest.raises(ValueError, match="each of schemes"):
        smollm2_length.stream_losses(model, stretch(), ("rope",), 4)
    with pytest.raises(ValueError, match="vocabulary"):
        smollm2_length.stream_losses(model, torch.full((40,), 64), ("none",), 4)
    with pytest.raises(ValueError, match="size must be one of full, tiny"):
        smollm2_length.run("out", size="huge")


def test_the_tiny_command_writes_its_record(tmp_path, capsys):
    smollm2_length.main(["--out", str(tmp_path), "--size", "tiny"])
    assert "Wrote" in capsys.readouterr().out
    record = json.loads((tmp_path / smollm2_length.RESULTS_NAME).read_text())
    settings = smollm2_length.SIZES["tiny"]
    assert list(record["results"]) == list(settings["schemes"]) and record["context_length"] == CONTEXT
    for result in record["results"].values():
        assert len(result["loss_by_stream_and_bin"]) == settings["streams"]
        assert len(result["loss_by_bin"]) == settings["stream_length"] // settings["bin"]
        assert len(result["mean_beyond_context_by_stream"]) == settings["streams"]


def test_bad_arguments_are_refused_with_a_sentence(tmp_path, capsys):
    for argv, words in ((["--out", str(tmp_path), "--size", "huge"], "invalid choice: 'huge'"),
                        (["--size", "tiny"], "the following arguments are required: --out")):
        with pytest.raises(SystemExit) as exit_info:
            smollm2_length.main(argv)
        assert exit_info.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record():
    record = json.loads(RESULTS.read_text())
    assert record["size"] == "full" and record["context_length"] == 8192 and record["stream_length"] > 8192
    for result in record["results"].values():
        assert len(result["mean_beyond_context_by_stream"]) == record["streams"]


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record_holds_what_lesson_17_says():
    """SmolLM2 read 2,048 past its length with no step; YaRN cost a little inside; dynamic NTK broke it past L."""
    from attn.common.stats import paired_interval

    results = json.loads(RESULTS.read_text())["results"]

    def interval(scheme, key):
        return paired_interval(results[scheme][key], results["none"][key])

    none = results["none"]
    assert sum(none["mean_beyond_context_by_stream"]) <= sum(none["mean_within_context_by_stream"])
    assert interval("yarn", "mean_within_context_by_stream")[1] > 0
    _, low, high = interval("yarn", "mean_beyond_context_by_stream")
    assert low < 0 < high
    assert interval("dynamic", "mean_beyond_context_by_stream")[1] > 1.0
    assert interval("dynamic", "mean_within_context_by_stream") == (0.0, 0.0, 0.0)
