"""Lesson 14's induction at a distance (attn.experiments.window_induction): the task, the record, the command."""

import json
from pathlib import Path

import pytest
import torch

from attn.experiments import window_induction

ROOT = Path(__file__).resolve().parents[2]
LENGTH = window_induction.LENGTH


def test_the_second_copy_repeats_the_first_and_only_it_is_scored():
    distances = torch.tensor([2, 5, window_induction.MAX_DISTANCE])
    tokens, copyable = window_induction.repeat_batch(distances, torch.Generator().manual_seed(0))
    assert tokens.shape == copyable.shape == (3, LENGTH)
    for row, distance in enumerate(distances.tolist()):
        second = range(LENGTH - distance, LENGTH)
        assert [tokens[row, p].item() for p in second] == [tokens[row, p - distance].item() for p in second]
        assert copyable[row].nonzero().flatten().tolist() == list(range(LENGTH - distance, LENGTH - 1))
        for p in range(LENGTH - distance, LENGTH - 1):  # the token after p is d - 1 positions back from p
            assert tokens[row, p + 1] == tokens[row, p + 1 - distance]


def test_a_model_that_copies_exactly_scores_one_and_loses_nothing():
    class Copier(torch.nn.Module):
        def forward(self, tokens):  # a perfect induction head, with the distance known from the test's batch
            logits = torch.full((*tokens.shape, window_induction.VOCAB_SIZE), -1e4)
            answer = tokens.roll(-1, dims=1)
            return logits.scatter(2, answer[..., None], 1e4)

    tokens, copyable = window_induction.repeat_batch(torch.tensor([3, 9]), torch.Generator().manual_seed(1))
    loss, right = window_induction.copy_loss(Copier(), tokens, copyable)
    assert loss.item() == 0 and right.all() and len(right) == 2 + 8


@pytest.mark.parametrize("distances, words", [
    (torch.tensor([1]), "must lie from 2 to 20"),
    (torch.tensor([21]), "must lie from 2 to 20"),
    (torch.tensor([2.0]), "1-D integer tensor"),
    ([3], "must be a torch.Tensor"),
])
def test_repeat_batch_refuses_distances_that_do_not_fit(distances, words):
    with pytest.raises((TypeError, ValueError), match=words):
        window_induction.repeat_batch(distances, torch.Generator())


def shipped():
    return json.loads((ROOT / "lessons" / "records" / window_induction.RESULTS_NAME).read_text())


def test_the_shipped_record_covers_every_stack_and_seed_and_says_how_each_run_ended():
    record = shipped()
    assert record["seeds"] == [0, 1, 2] and list(record["stacks"]) == list(window_induction.INDUCTION_STACKS)
    assert record["distances"] == list(range(window_induction.MIN_DISTANCE, window_induction.MAX_DISTANCE + 1))
    assert len(record["runs"]) == 3 * len(window_induction.INDUCTION_STACKS)
    for run in record["runs"]:
        assert len(run["accuracy"]) == len(record["distances"])
        assert len(run["curve"]) == -(-run["steps"] // window_induction.EVAL_EVERY)
        assert run["stopped"] or run["steps"] == record["stopping"]["max_steps"]


def test_a_run_reproduces_its_first_validation_loss():
    run = next(run for run in shipped()["runs"] if (run["stack"], run["seed"]) == ("2 local", 1))
    again = window_induction.run("2 local", 1, max_steps=window_induction.EVAL_EVERY, per_distance=1)
    assert again["curve"][0] == pytest.approx(run["curve"][0], abs=2e-4)


def test_the_command_writes_its_record_and_refuses_bad_arguments(tmp_path, capsys):
    window_induction.main(["--out", str(tmp_path), "--stacks", "2 global", "--seeds", "4", "--max-steps", "3",
                           "--per-distance", "1"])
    record = json.loads((tmp_path / window_induction.RESULTS_NAME).read_text())
    assert [(run["stack"], run["seed"], run["steps"]) for run in record["runs"]] == [("2 global", 4, 3)]
    assert "2 global, seed 4: 3 steps" in capsys.readouterr().out
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for arguments, words in (
        (["--out", str(blocker)], "is a file"),
        (["--out", str(tmp_path), "--stacks", "4 local"], "unknown stack '4 local'"),
        (["--out", str(tmp_path), "--max-steps", "0"], "--max-steps must be a whole number from 1"),
        (["--out", str(tmp_path), "--seeds", "-1"], "--seeds must be a whole number from 0"),
        (["--out", str(tmp_path), "--per-distance", "x"], "--per-distance must be a whole number, got"),
    ):
        with pytest.raises(SystemExit):
            window_induction.main(arguments)
        assert words in capsys.readouterr().err, arguments


def test_the_shipped_runs_hold_what_lesson_14_says():
    """Two local layers copy within 2 (W - 1) and not beyond; three copy everywhere, less well than a global layer."""
    record = shipped()
    reach = 2 * (record["task"]["window"] - 1)
    distances = record["distances"]
    by_stack = {}
    for run in record["runs"]:
        assert run["stopped"], (run["stack"], run["seed"])  # every run ended by the rule, none at the cap
        by_stack.setdefault(run["stack"], []).append(run["accuracy"])
    for accuracy in by_stack["2 local"]:
        assert max(a for d, a in zip(distances, accuracy, strict=True) if d > reach) < 0.15
        assert max(a for d, a in zip(distances, accuracy, strict=True) if d <= reach) > 0.9
    for stack in ("local + global", "2 global"):
        assert min(min(accuracy) for accuracy in by_stack[stack]) > 0.9, stack
    three, mixed = (sum(map(sum, by_stack[name])) for name in ("3 local", "local + global"))
    assert 0.5 * mixed < three < mixed
