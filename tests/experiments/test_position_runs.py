"""Lesson 17's NoPE, rotary and partial rotary runs (attn.experiments.position_runs): each arm's layers, the task read at
longer lengths, a short run repeated, the command line on tiny settings and its refusals, the shipped record."""

import json

import pytest
import torch

from attn.experiments import position_runs, window_induction
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / position_runs.RESULTS_NAME


def test_each_arm_sets_its_positions_in_every_layer():
    for arm, options in position_runs.ARMS.items():
        model = position_runs.new_model(arm, 0)
        for block in model.blocks:
            assert block.attention.rotary_base == options["rotary_base"]
            assert block.attention.rotary_fraction == options.get("rotary_fraction", 1.0)
    first, again = position_runs.new_model("partial", 3), position_runs.new_model("partial", 3)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values(), strict=True))


def test_without_positions_a_one_layer_model_reads_the_earlier_tokens_as_a_set():
    model = position_runs.new_model("nope", 0).eval()
    model.blocks = model.blocks[:1]  # one layer: the last query attends over keys that carry no position
    tokens = torch.randint(64, (1, 12), generator=torch.Generator().manual_seed(0))
    shuffled = torch.cat((tokens[:, :-1][:, torch.randperm(11)], tokens[:, -1:]), dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(shuffled)[0, -1], model(tokens)[0, -1], rtol=0, atol=1e-5)
        rotary = position_runs.new_model("rotary", 0).eval()
        rotary.blocks = rotary.blocks[:1]
        assert (rotary(shuffled)[0, -1] - rotary(tokens)[0, -1]).abs().max() > 1e-4


def test_the_task_at_a_longer_length_puts_the_repeat_at_the_end():
    tokens, copyable = window_induction.repeat_batch(torch.tensor([30]), torch.Generator().manual_seed(0), 80)
    assert tokens.shape == (1, 80) and torch.equal(tokens[0, 50:80], tokens[0, 20:50])
    assert copyable[0].nonzero().flatten().tolist() == list(range(50, 79))
    with pytest.raises(ValueError, match="distances must lie from 2 to 40"):
        window_induction.repeat_batch(torch.tensor([41]), torch.Generator(), 80)


def test_a_short_run_repeats_itself_and_scores_every_distance_at_every_length():
    first = position_runs.run("partial", 1, max_steps=3, per_distance=2)
    second = position_runs.run("partial", 1, max_steps=3, per_distance=2)
    assert first["curve"] == second["curve"] and first["accuracy"] == second["accuracy"]
    assert first["steps"] == 3 and first["stopped"] is False  # max_steps came first, and the record says so
    assert {length: len(values) for length, values in first["accuracy"].items()} == {"40": 19, "80": 39, "160": 79}


def test_refusals_name_what_is_wrong():
    with pytest.raises(ValueError, match="arm"):
        position_runs.new_model("alibi", 0)
    with pytest.raises(TypeError, match="model must be an AustenLM from attn.experiments.position_runs.new_model"):
        position_runs.accuracy_by_distance(object(), 80)
    with pytest.raises(ValueError, match="length"):
        position_runs.accuracy_by_distance(position_runs.new_model("nope", 0), 2)


def test_the_command_writes_its_record_on_tiny_settings(tmp_path):
    position_runs.main(["--out", str(tmp_path), "--arms", "nope", "rotary", "--seeds", "0", "--max-steps", "2",
                        "--per-distance", "2"])
    record = json.loads((tmp_path / position_runs.RESULTS_NAME).read_text())
    assert [(run["arm"], run["seed"]) for run in record["runs"]] == [("nope", 0), ("rotary", 0)]
    assert record["stopping"]["max_steps"] == 2 and record["trained_distances"] == [2, 20]


def refusal(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        position_runs.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_bad_arguments_are_refused_with_a_sentence(tmp_path, capsys, monkeypatch):
    def refuse(*arguments, **options):
        raise AssertionError("the training started before the arguments were checked")

    monkeypatch.setattr(position_runs, "run_all", refuse)
    out = ["--out", str(tmp_path)]
    assert "unknown arm 'alibi'" in refusal(capsys, [*out, "--arms", "alibi"])
    assert "--max-steps must be a whole number from 1" in refusal(capsys, [*out, "--max-steps", "0"])
    assert "--per-distance must be a whole number from 1" in refusal(capsys, [*out, "--per-distance", "0"])
    assert "--seeds must be a whole number from 0" in refusal(capsys, [*out, "--seeds", "-1"])


@pytest.mark.skipif(not RESULTS.exists(), reason="the runs have not been shipped in this tree")
def test_the_shipped_record_covers_every_arm_and_seed_and_says_how_each_run_ended():
    record = json.loads(RESULTS.read_text())
    assert {(run["arm"], run["seed"]) for run in record["runs"]} == {
        (arm, seed) for arm in record["arms"] for seed in record["seeds"]}
    for run in record["runs"]:
        assert run["stopped"] or run["steps"] == record["stopping"]["max_steps"]
        assert {length: len(values) for length, values in run["accuracy"].items()} == {
            length: len(distances) for length, distances in record["distances"].items()}


@pytest.mark.skipif(not RESULTS.exists(), reason="the runs have not been shipped in this tree")
def test_the_shipped_record_holds_what_lesson_17_says():
    """Lesson 17's three outcomes, each as the paired interval over seeds that backs it."""
    from attn.common.stats import paired_interval

    record = json.loads(RESULTS.read_text())
    longest = record["trained_distances"][1]

    def shares(arm, length, beyond):
        """Each seed's mean share right at ``length``, over the distances up to the trained longest, or past it."""
        by_seed = []
        for run in sorted((run for run in record["runs"] if run["arm"] == arm), key=lambda run: run["seed"]):
            pairs = zip(record["distances"][length], run["accuracy"][length], strict=True)
            values = [share for distance, share in pairs if (distance > longest) == beyond]
            by_seed.append(sum(values) / len(values))
        return by_seed

    def low(first, second, length, beyond):
        return paired_interval(shares(first, length, beyond), shares(second, length, beyond))[1]

    assert max(shares("nope", "40", False)) < 0.3  # NoPE did not learn the task
    assert min(shares("rotary", "40", False)) > 0.9 and min(shares("partial", "40", False)) > 0.9
    assert low("rotary", "nope", "40", False) > 0.5
    assert max(shares("rotary", "160", False)) < 0.3  # full rotary lost it at 160, at trained distances too
    for length, beyond in (("80", True), ("160", False), ("160", True)):  # partial kept it
        assert low("partial", "rotary", length, beyond) > 0.5, (length, beyond)
    assert min(shares("partial", "160", False)) > 0.9 and min(shares("partial", "160", True)) > 0.7
