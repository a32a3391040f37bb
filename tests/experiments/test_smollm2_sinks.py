"""Lesson 22's SmolLM2 measurements (attn.experiments.smollm2_sinks) on a tiny LlamaLM: the hooked reading against
the model's own weights, the replacement, the clip table, and the shipped record."""

import json

import pytest
import torch

from attn.experiments import smollm2_sinks as sinks
from attn.models.llama import LlamaLM
from tests.notebooks import ROOT

RECORD = ROOT / "lessons" / "records" / sinks.RESULTS_NAME
TINY = {"vocab_size": 50, "context_length": 64, "embed_dim": 16, "num_heads": 4, "num_kv_heads": 2, "num_layers": 3,
        "mlp_hidden_dim": 32}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return LlamaLM(**TINY).eval()


def passages(count=3, length=16):
    return torch.randint(50, (count, length), generator=torch.Generator().manual_seed(1))


def test_the_hooked_reading_matches_the_model(model):
    tokens = passages()[0]
    read = sinks._read_passage(model, tokens)
    assert read["stream"].shape == (4, 16, 16) and read["logits"].shape == (3, 4, 16, 16)
    torch.testing.assert_close(torch.softmax(read["logits"], dim=-1), read["weights"], atol=1e-5, rtol=0)
    torch.testing.assert_close(read["stream"][1:] - read["stream"][:-1], read["attended"] + read["mlp"])


def test_replacing_a_position_changes_the_loss_and_nothing_is_left_hooked(model):
    tokens = passages()[0]
    plain = sinks._passage_loss(model, tokens)
    assert sinks._passage_loss(model, tokens, replace_at=0, position=0) != plain
    assert sinks._passage_loss(model, tokens) == plain
    for how in ("swap", "keep_feature", "feature_only"):
        assert sinks._passage_loss(model, tokens, 0, 0, how, feature=3, donor=torch.zeros(16)) != plain
    with pytest.raises(ValueError, match="how"):
        sinks._passage_loss(model, tokens, 0, 0, "zero")
    assert all(not block._forward_hooks and not block._forward_pre_hooks for block in model.blocks)


def test_the_changed_position_s_own_prediction_is_left_out(model):
    tokens = passages()[0]
    logits = model(tokens[None])[0]
    losses = torch.nn.functional.cross_entropy(logits[:-1], tokens[1:], reduction="none")
    assert sinks._passage_loss(model, tokens) == pytest.approx(losses[1:].mean().item(), rel=1e-5)
    assert sinks._passage_loss(model, tokens, None, 5) == pytest.approx(
        torch.cat([losses[1:5], losses[6:]]).mean().item(), rel=1e-5)
    # a swap with the passage's own vector, and keeping the feature when it is the only change, change nothing
    own = sinks._stream_at(model, tokens, 2)[0]
    assert sinks._passage_loss(model, tokens, 1, 0, "swap", donor=own) == pytest.approx(
        sinks._passage_loss(model, tokens), rel=1e-5)


def test_the_clip_table_counts_the_heads_above_each_threshold():
    largest = torch.tensor([[5.0, 25.0], [12.0, 3.0]])
    weight = torch.tensor([[0.1, 0.9], [0.5, 0.3]])
    found = sinks._clipped(largest, weight, 10.0)
    assert found["touched"] == [[0, 1], [1, 0]] and found["touched_first_token_weight"] == pytest.approx(0.7)
    assert sinks._clipped(largest, weight, 30.0)["touched_first_token_weight"] is None


def test_the_measure_on_a_tiny_model(model):
    record = sinks._measure(model, passages(), progress=lambda line: None)
    assert len(record["residual_norm"]["ratio_by_layer"]) == 4 and len(record["short_key"]["key_ratio"]) == 3
    assert record["heads"]["weights_check"] < 1e-5
    replacement = record["replacement"]
    assert 1 <= replacement["layer"] <= 3 and replacement["after_layer"] == replacement["layer"] - 1
    assert record["massive"]["writer_layer"] == record["massive"]["writer_block"] - 1
    assert all(len(replacement[name]) == 3 for name in ("untouched", "untouched_control", *sinks.ARMS))
    with pytest.raises(ValueError, match="size"):
        sinks.run(ROOT / "never_written", "huge")


def test_the_shipped_record_follows_its_schema():
    record = json.loads(RECORD.read_text())
    layers = len(record["short_key"]["key_ratio"])
    assert len(record["residual_norm"]["ratio_by_layer"]) == layers + 1
    assert len(record["replacement"]["untouched"]) == record["settings"]["passages"]
    for name in ("first_minus_untouched", "swapped_minus_untouched", "keep_feature_minus_untouched",
                 "feature_only_minus_untouched", "control_minus_untouched"):
        found = record["replacement"][name]
        assert found["words"] == sinks._words(found["mean"], found["low"], found["high"])
    assert record["heads"]["weights_check"] < 1e-4
