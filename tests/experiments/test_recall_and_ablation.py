"""Issue 51's two added measurements: lesson 17's recall probe and log-n on repaired angles
(attn.experiments.long_context_recall), and lesson 16's ablation with layer-matched controls (attn.experiments.smollm2_ablation).

Their pieces on small inputs; the shipped records (where present) against what the lessons read; a first stretch
measured again where the model and the corpus are present; the command lines' refusals before any work."""

import json
import math

import pytest
import torch

from attn.experiments import long_context, long_context_recall, smollm2_ablation, smollm2_reading
from tests.experiments.test_long_context import small_model, stream
from tests.notebooks import ROOT

RECORDS = ROOT / "lessons" / "records"
RECALL = RECORDS / long_context_recall.RESULTS_NAME
ABLATION = RECORDS / smollm2_ablation.RESULTS_NAME


def test_the_passage_is_planted_far_or_near_and_nowhere_else():
    streams = torch.stack([stream(63, seed) for seed in range(3)])  # (3, 64)
    control, far, near, first_target = long_context_recall._planted(streams, passage=4, near=8)
    ending = streams[:, -4:]
    assert first_target == 60  # the copy's first token; its next three are scored
    assert torch.equal(far[:, 1:5], ending) and torch.equal(near[:, 48:52], ending)
    for copies in (control, far, near):
        assert torch.equal(copies[:, -4:], ending)  # every reading ends with the passage
        assert torch.equal(copies[:, 5:48], streams[:, 5:48]) and torch.equal(copies[:, 52:], streams[:, 52:])
        assert torch.equal(copies[:, 0], streams[:, 0])
    assert not torch.equal(control[:, 1:5], ending) and not torch.equal(control[:, 48:52], ending)
    assert torch.equal(far[:, 48:52], control[:, 48:52]) and torch.equal(near[:, 1:5], control[:, 1:5])


def test_a_combined_scheme_is_its_scheme_with_log_n_hooks_and_leaves_nothing_behind():
    model, tokens = small_model(), stream(48)
    with long_context_recall._scheme(model, "yarn+log-n", 48):
        combined, _ = long_context.read_stream(model, tokens, 8)
    with long_context.applied(model, "yarn", 48):
        alone, _ = long_context.read_stream(model, tokens, 8)
    plain, _ = long_context.read_stream(model, tokens, 8)
    with long_context_recall._scheme(model, "none", 48):
        none, _ = long_context.read_stream(model, tokens, 8)
    assert torch.equal(none, plain)
    assert torch.allclose(combined[:15], alone[:15], atol=1e-6)  # log-n changes nothing up to L = 16
    assert not torch.allclose(combined[16:], alone[16:], atol=1e-4)  # and something past it
    assert all(not block.attention.query_proj._forward_hooks for block in model.blocks)


def test_recall_measures_each_scheme_on_every_stretch():
    model = small_model()
    tokens = torch.randint(50, (400,), generator=torch.Generator().manual_seed(4))
    settings = {"lengths": (40,), "streams": 3, "chunk": 8, "passage": 4, "near": 6}
    record = long_context_recall._measure(model, tokens, settings, progress=lambda line: None)
    schemes = [*long_context.SCHEMES, *long_context_recall.COMBINED]
    assert list(record["recall"]["40"]) == schemes
    for losses in record["recall"]["40"].values():
        assert {name: len(values) for name, values in losses.items()} == {"control": 3, "far": 3, "near": 3}
    # far back (35 positions), two layers of a window of 16 keys reach 30 positions: the far passage is invisible
    window = record["recall"]["40"]["window"]
    assert window["far"] == window["control"]


@pytest.mark.skipif(not RECALL.exists(), reason="the shipped record is not present")
def test_the_shipped_recall_record_pairs_with_long_context():
    record = json.loads(RECALL.read_text())
    reading = json.loads((RECORDS / long_context.RESULTS_NAME).read_text())["reading"]
    assert record["settings"]["streams"] == 12 and record["context_length"] == 256
    for length in ("512", "2048"):
        assert set(record["combined_reading"][length]) == set(long_context_recall.COMBINED)
        assert list(record["recall"][length]) == [*long_context.SCHEMES, *long_context_recall.COMBINED]
        assert len(record["combined_reading"][length]["yarn+log-n"]["mean_beyond_context_by_stream"]) == 12
        assert len(reading[length]["yarn"]["mean_beyond_context_by_stream"]) == 12  # they pair, stretch by stretch
    window = record["recall"]["2048"]["window"]  # 2,048 tokens back: beyond the window's reach through 4 layers
    assert window["far"] == window["control"]


@pytest.mark.skipif(not RECALL.exists(), reason="the shipped record is not present")
def test_the_first_stretch_reads_again_as_shipped():
    from attn.data.corpus import austen
    from attn.models.lm import load
    from attn.models.lm_training import split_novels, token_tensor

    try:
        _, held_out = split_novels(austen())
    except FileNotFoundError:
        pytest.skip("the corpus is not fetched (python -m attn.corpus)")
    record = json.loads(RECALL.read_text())
    model, tokenizer = load()
    tokens = token_tensor(tokenizer, [held_out])
    settings = dict(record["settings"], lengths=[512], streams=12)
    streams = long_context.held_out_streams(tokens, 513, 12)[:1]
    control, far, _, first_target = long_context_recall._planted(
        long_context.held_out_streams(tokens, 513, 12), settings["passage"], settings["near"])
    for name, copies in (("control", control[:1]), ("far", far[:1])):
        loss = long_context_recall._copy_losses(model, copies, "ntk", settings["chunk"], first_target)
        assert loss[0] == pytest.approx(record["recall"]["512"]["ntk"][name][0], abs=2e-4)
    past = long_context_recall._past_losses(model, streams, "yarn+log-n", settings["chunk"])
    assert past[0] == pytest.approx(record["combined_reading"]["512"]["yarn+log-n"]["mean_beyond_context_by_stream"][0],
                                    abs=2e-4)


def test_a_layer_matched_draw_takes_as_many_heads_from_each_layer_and_none_of_the_top():
    top = {(17, 3), (17, 4), (17, 5), (18, 6), (20, 6)}
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        drawn = smollm2_ablation._layer_matched_draw(top, 9, generator)
        assert sorted(layer for layer, _ in drawn) == sorted(layer for layer, _ in top)
        assert not set(drawn) & top and len(set(drawn)) == len(drawn)


def test_the_uniform_draws_begin_with_pretrained_readings_draws():
    top = [(18, 6), (17, 3), (20, 6)]
    ours, theirs = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(5):
        assert smollm2_ablation._uniform_draw(set(top), 30, 9, ours) == smollm2_reading.random_heads(
            30, 9, 3, theirs, excluded=set(top))


def test_the_two_way_interval_holds_both_sources_of_variation():
    top = torch.tensor([1.0, 2.0, 3.0, 4.0])
    same = torch.zeros(5, 4)  # every draw alike: only the passages vary
    found = smollm2_ablation._two_way_interval(top, same, 2000, 0)
    assert found["mean"] == 2.5 and found["low"] < 2.5 < found["high"]
    spread = same + torch.linspace(-1, 1, 5)[:, None]  # draws that differ, by the same amount on every passage
    wider = smollm2_ablation._two_way_interval(top, spread, 2000, 0)
    assert wider["mean"] == pytest.approx(2.5) and wider["high"] - wider["low"] > found["high"] - found["low"]
    flat = smollm2_ablation._two_way_interval(torch.ones(4), torch.zeros(3, 4), 200, 0)
    assert flat["low"] == flat["mean"] == flat["high"] == 1.0


@pytest.mark.skipif(not ABLATION.exists(), reason="the shipped record is not present")
def test_the_shipped_ablation_record_says_what_lesson_16_reads():
    record = json.loads(ABLATION.read_text())
    reading = json.loads((RECORDS / smollm2_reading.RESULTS_NAME).read_text())["heads"]
    top = [tuple(pair) for pair in record["top_induction_heads"]]
    assert top == [tuple(pair) for pair in reading["top_induction_heads"]]
    assert record["second_copy_loss"] == reading["second_copy_loss"]
    uniform, matched = record["controls"]["uniform"], record["controls"]["layer-matched"]
    assert uniform["heads"][:5] == reading["random_heads"]  # the earlier five draws, and fifteen more
    for heads in matched["heads"]:
        assert sorted(layer for layer, _ in heads) == sorted(layer for layer, _ in top)
        assert not {tuple(pair) for pair in heads} & set(top)
    for control in (uniform, matched):
        assert len(control["second_copy_loss"]) == 20 and len(control["second_copy_loss"][0]) == 16
        interval = control["top_minus_control_second_copy"]
        assert interval["low"] <= interval["mean"] <= interval["high"] and interval["draws"] == 20
        mean = sum(record["top_second_copy_loss"]) / 16 - sum(map(sum, control["second_copy_loss"])) / (20 * 16)
        assert math.isclose(interval["mean"], mean, abs_tol=1e-3)


@pytest.mark.parametrize("module", [long_context_recall, smollm2_ablation])
def test_a_destination_that_is_a_file_is_refused_before_any_work(module, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    with pytest.raises(SystemExit):
        module.main(["--out", str(taken), "--size", "tiny"])
    assert "taken" in capsys.readouterr().err


@pytest.mark.parametrize("module", [long_context_recall, smollm2_ablation])
def test_an_unknown_size_gets_a_sentence(module):
    with pytest.raises(ValueError, match="size must be one of full, tiny"):
        module.run("somewhere", size="huge")
