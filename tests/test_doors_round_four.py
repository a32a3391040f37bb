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
from attn.models import compressed_recall, induction, lm_training, window_runs


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
    with pytest.raises(SystemExit, match="it was not loaded \\(loading it could run code\\)"):
        lm_training.load_checkpoint(path)
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_of_tensors_and_numbers_loads_and_one_lacking_entries_is_refused(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"config": {"steps": 2}, "model": {"w": torch.ones(2)}}, path)
    with pytest.raises(SystemExit, match="lacks optimizer, generator, rng, step, curve, seconds"):
        lm_training.load_checkpoint(path)


def test_a_ten_million_entry_list_is_answered_at_once():
    started = time.perf_counter()
    line = verdict("12.1", [0.0] * 10**7)
    assert time.perf_counter() - started < 1.0
    assert line.startswith("Not yet: ") and "more than 100,000 numbers" in line


def test_a_named_pipe_is_not_read_as_a_notebook(places):
    assert "is not an ordinary file" in execute.notebook_problem(places / "pipe")
    assert "leads round in a loop" in execute.notebook_problem(places / "loop-a")
