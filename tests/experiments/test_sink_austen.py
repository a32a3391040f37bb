"""Lesson 22's Austen models (attn.experiments.sink_austen): the arms' one switch, equal parameters, the watched
pass against the layers' own, the tiny command on a stand-in corpus and the shipped record."""

import json

import pytest
import torch

from attn.experiments import sink_austen
from attn.gates import DifferentialAttention, GatedAttention
from tests.notebooks import ROOT

RECORD = ROOT / "lessons" / "records" / sink_austen.RESULTS_NAME
SETTINGS = sink_austen.SIZES["tiny"]


def stand_in_data(vocab=64):
    generator = torch.Generator().manual_seed(0)
    return (torch.randint(vocab, (600,), generator=generator), torch.randint(vocab, (200,), generator=generator), vocab)


@pytest.mark.parametrize("arm", list(sink_austen.ARMS))
def test_the_watched_pass_is_the_layer_own(arm):
    model = sink_austen.build(arm, SETTINGS, 64, seed=0).eval()
    tokens = torch.randint(64, (2, 20), generator=torch.Generator().manual_seed(1))
    found = sink_austen.watch(model, tokens)
    with torch.no_grad():
        torch.testing.assert_close(model.blocks[-1](model.blocks[0](model.token_embedding(tokens), is_causal=True),
                                                    is_causal=True).abs().amax().item(),
                                   found["largest_activation"][-1], atol=1e-3, rtol=0)
    layer = model.blocks[0].attention
    x = torch.randn(2, 20, SETTINGS["embed_dim"], generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        layer.watch = True
        watched = layer(x)
        layer.watch = False
        torch.testing.assert_close(watched, layer(x))
    assert (found["sink_share"] is not None) == (arm == "sink") and (found["gate_mean"] is not None) == (arm == "gate")
    kind = DifferentialAttention if arm == "differential" else GatedAttention
    assert all(isinstance(block.attention.layer, kind) for block in model.blocks)


def test_the_arms_hold_equal_parameters_within_one_percent():
    counts = {arm: sum(p.numel() for p in sink_austen.build(arm, sink_austen.SIZES["full"], 4096, 0).parameters())
              for arm in sink_austen.ARMS}
    assert all(abs(count / counts["softmax"] - 1) < 0.01 for count in counts.values())


def test_a_beginning_of_text_token_replaces_the_first():
    windows = torch.arange(12).view(2, 6)
    assert sink_austen._with_bos(windows, 99)[:, 0].tolist() == [99, 99]
    assert torch.equal(sink_austen._with_bos(windows, 99)[:, 1:], windows[:, 1:])


def test_the_attention_refuses_what_it_does_not_run():
    layer = sink_austen.SwitchedAttention("softmax", 8, 2)
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="causal self-attention only"):
        layer(x, x, x, mask=torch.ones(4, 4, dtype=torch.bool))


def without_seconds(value):
    """``value`` (a record) with every "seconds" entry, at any depth, left out."""
    if isinstance(value, dict):
        return {key: without_seconds(item) for key, item in value.items() if key != "seconds"}
    return [without_seconds(item) for item in value] if isinstance(value, list) else value


def test_the_tiny_run_on_a_stand_in_corpus_is_deterministic():
    first = sink_austen.measure("tiny", lambda line: None, data=stand_in_data())
    second = sink_austen.measure("tiny", lambda line: None, data=stand_in_data())
    first, second = without_seconds(first), without_seconds(second)  # the timings differ from run to run
    assert first == second and set(first["intervals"]) == set(sink_austen.ARMS) - {"softmax"}
    steps = first["runs"]["softmax"]["checkpoints"][0]["step"]
    assert steps == list(range(0, SETTINGS["steps"], SETTINGS["checkpoint_every"])) + [SETTINGS["steps"]]
    with pytest.raises(ValueError, match="size"):
        sink_austen.measure("huge", data=stand_in_data())


def test_the_shipped_record_follows_its_schema():
    record = json.loads(RECORD.read_text())
    assert list(record["runs"]) == list(sink_austen.ARMS) and record["parameter_spread"] < 0.01
    layers = record["settings"]["num_layers"]
    for run in record["runs"].values():
        assert len(run["held_out_loss"]) == record["settings"]["seeds"]
        assert all(len(layers_of_seed) == layers for layers_of_seed in run["largest_logit"])
    for found in record["intervals"].values():
        for interval in found.values():
            assert interval["words"] == sink_austen.words(interval["mean"], interval["low"], interval["high"])
    assert (record["variant"] is None) == any(record["runs"]["softmax"]["sink_formed"])
    assert record["claims"] == sink_austen.claims(record["intervals"], any(record["runs"]["softmax"]["sink_formed"]))


def test_a_claim_is_held_only_when_its_interval_is_below_zero():
    assert sink_austen.verdict({"mean": -0.2, "low": -0.3, "high": -0.1}) == "held"
    assert sink_austen.verdict({"mean": 0.2, "low": 0.1, "high": 0.3}) == "not held"
    assert sink_austen.verdict({"mean": -0.2, "low": -0.5, "high": 0.1}) == "not distinguishable"
    below = {metric: {"mean": -0.2, "low": -0.3, "high": -0.1} for metric in sink_austen.CLAIMS}
    assert sink_austen.claims({"gate": below}, True)["gate"]["first_token_weight"] == "held"
    assert sink_austen.claims({"gate": below}, False)["gate"] == {
        "held_out_loss": "held", "first_token_weight": sink_austen.NOT_TESTABLE, "largest_activation": "held"}
