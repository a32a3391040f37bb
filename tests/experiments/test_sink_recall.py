"""Lesson 22's recall with absent keys (attn.experiments.sink_recall): the data, the one switch between arms, the
measurements, the tiny command and the shipped record."""

import json
import math

import pytest
import torch

from attn.experiments import sink_recall
from attn.gates import GatedAttention
from tests.notebooks import ROOT

RECORD = ROOT / "lessons" / "records" / sink_recall.RESULTS_NAME
TINY = sink_recall.SIZES["tiny"]


def test_absent_queries_ask_for_keys_not_in_their_context_and_the_rest_are_untouched():
    data = sink_recall._recall_with_absent(40, 0.25, n_pairs=4, n_keys=12, n_values=8, seed=3)
    plain = sink_recall.make_recall_data(40, n_pairs=4, n_keys=12, n_values=8, seed=3)
    assert torch.equal(data.query[10:], plain.query[10:]) and torch.equal(data.target[10:], plain.target[10:])
    for row in range(10):
        assert int(data.query[row]) not in data.keys[row].tolist()
        assert int(data.target[row]) == 8 and int(data.position[row]) == -1
    with pytest.raises(ValueError, match="n_keys > n_pairs"):
        sink_recall._recall_with_absent(4, 0.5, n_pairs=4, n_keys=4, n_values=8, seed=0)
    for share in (-0.1, 1.5, True, "half"):
        with pytest.raises(ValueError, match="share"):
            sink_recall._recall_with_absent(4, share, n_pairs=2, n_keys=6, n_values=4, seed=0)


def test_the_arms_differ_only_in_the_one_switch():
    layers = {arm: sink_recall._SinkRecall(arm, 12, 8, 8, 2).attention for arm in sink_recall.ARMS}
    assert all(isinstance(layer, GatedAttention) and not layer.qk_norm and layer.rotary_base is None
               for layer in layers.values())
    assert [(layer.normalize, layer.gate) for layer in layers.values()] == [
        ("softmax", False), ("sink", False), ("off_by_one", False), ("softpick", False), ("softmax", True)]


def test_the_query_reads_the_pairs_through_the_layer_own_softmax():
    torch.manual_seed(0)
    model = sink_recall._SinkRecall("sink", 12, 8, 8, 2)
    with torch.no_grad():
        model.attention.sink_logits.fill_(1.5)
    data = sink_recall._recall_with_absent(5, 0.4, n_pairs=4, n_keys=12, n_values=8, seed=1)
    logits, output, weights, opened = model.inspect(data.keys, data.values, data.query)
    assert logits.shape == (5, 9) and output.shape == (5, 8) and weights.shape == (5, 2, 4) and opened is None
    layer = model.attention
    pairs = model.key_embedding(data.keys) + model.value_embedding(data.values)
    x = torch.cat([pairs, model.key_embedding(data.query)[:, None]], dim=1)
    q, k, _, _ = layer.projections(x)
    scores = (q[:, :, -1:] @ k[:, :, :-1].transpose(-2, -1))[:, :, 0] / math.sqrt(layer.head_dim)
    expected = torch.exp(scores) / (math.exp(1.5) + torch.exp(scores).sum(dim=-1, keepdim=True))
    torch.testing.assert_close(weights, expected)


def test_a_gate_opening_is_measured_only_for_the_gate():
    torch.manual_seed(0)
    model = sink_recall._SinkRecall("gate", 12, 8, 8, 2)
    data = sink_recall._recall_with_absent(6, 0.5, n_pairs=4, n_keys=12, n_values=8, seed=2)
    found = sink_recall._measure(model, data, True)
    assert 0 < found["gate"] < 1 and found["nothing"] == pytest.approx(0, abs=1e-6)


def test_interval_words_follow_the_interval():
    assert sink_recall._words(0.2, 0.1, 0.3) == "higher than softmax"
    assert sink_recall._words(-0.2, -0.3, -0.1) == "lower than softmax"
    assert sink_recall._words(0.1, -0.1, 0.3) == "not distinguishable from softmax"


def test_the_stopping_rule_is_relative_to_the_best_loss():
    assert sink_recall._stopping_step(0.0097, 0.01, 2, 0.02) == (0.0097, 0)  # 3% below the best: a gain
    assert sink_recall._stopping_step(0.0099, 0.01, 2, 0.02) == (0.01, 3)  # 1% below: not enough
    assert sink_recall._stopping_step(1.5, 2.0, 0, 0.02) == (1.5, 0)


def test_absent_minus_present_is_paired_within_an_arm():
    run = {"absent_norm": [3.0, 4.0, 5.0], "present_norm": [1.0, 2.0, 3.0], "absent_nothing": [0.1, 0.1, 0.1],
           "present_nothing": [0.1, 0.1, 0.1], "absent_gate": [None] * 3, "present_gate": [None] * 3}
    found = sink_recall._absent_minus_present({"sink": {"0.5": run}}, ["0.5"])["sink"]["0.5"]
    assert found["norm"]["mean"] == pytest.approx(2.0) and found["norm"]["words"] == "larger for absent keys"
    assert found["nothing"]["words"] == "not distinguishable between absent and present keys" and "gate" not in found


def test_the_tiny_command_is_deterministic_and_refuses_a_bad_size(tmp_path, capsys):
    sink_recall.main(["--out", str(tmp_path / "a"), "--size", "tiny"])
    sink_recall.main(["--out", str(tmp_path / "b"), "--size", "tiny"])
    first = json.loads((tmp_path / "a" / sink_recall.RESULTS_NAME).read_text())
    second = json.loads((tmp_path / "b" / sink_recall.RESULTS_NAME).read_text())
    first.pop("seconds"), second.pop("seconds")
    assert first == second and set(first["intervals"]) == set(sink_recall.ARMS) - {"softmax"}
    with pytest.raises(SystemExit):
        sink_recall.main(["--out", str(tmp_path / "c"), "--size", "huge"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="size"):
        sink_recall._measure_all("huge")


def test_the_shipped_record_follows_its_schema_and_its_stopping_rule():
    record = json.loads(RECORD.read_text())
    settings = record["settings"]
    assert list(record["runs"]) == list(sink_recall.ARMS) and record["absent_shares"] == list(sink_recall.ABSENT_SHARES)
    for arm, by_share in record["runs"].items():
        for share, run in by_share.items():
            assert len(run["present_accuracy"]) == settings["seeds"]
            for curve, steps, ended, stopped in zip(run["curves"], run["steps"], run["ended"], run["stopped"], strict=True):
                best, flat = math.inf, 0
                for index, loss in enumerate(curve):  # the rule replayed: the run ends at its last measurement
                    best, flat = sink_recall._stopping_step(loss, best, flat, settings["min_gain"])
                    step = min((index + 1) * settings["eval_every"], settings["max_steps"])
                    why = sink_recall._ended(step, flat, curve[:index + 1], settings)
                    assert (why is None) == (index < len(curve) - 1), (arm, share, index, why)
                assert why == ended and stopped == (ended != "limit") and steps == step
            for curve, best_step in zip(run["curves"], run["best_step"], strict=True):  # the weights measured
                assert best_step == settings["eval_every"] * (curve.index(min(curve)) + 1)
            if arm in ("softmax", "gate"):
                assert all(value == 0 for value in run["absent_nothing"])
            if arm != "softmax":
                for found in record["intervals"][arm][share].values():
                    assert found["words"] == sink_recall._words(found["mean"], found["low"], found["high"])
            within = record["absent_minus_present"][arm][share]
            assert set(within) == ({"norm", "nothing", "gate"} if arm == "gate" else {"norm", "nothing"})
            for found in within.values():
                assert found["words"] == sink_recall._within_words(found["mean"], found["low"], found["high"])
