"""python -m attn.models.compressed_recall: its shipped results reproduce, it is deterministic, and it checks its
arguments before any training."""

import json
from pathlib import Path

import pytest

from attn.models.compressed_recall import (
    CACHE_MIXERS,
    CACHE_TASK,
    HYBRID_STACKS,
    RESULTS_NAME,
    STEPS,
    cache_numbers_per_token,
    main,
    make_mixer,
    run_all,
    train_and_test,
)

SHIPPED = Path(__file__).resolve().parent.parent / "lessons" / "models" / RESULTS_NAME


def test_the_shipped_file_has_every_run():
    record = json.loads(SHIPPED.read_text())
    assert record["steps"] == STEPS and len(record["seeds"]) >= 5
    assert list(record["cache"]["runs"]) == list(CACHE_MIXERS)
    assert list(record["hybrid"]["runs"]) == ["+".join(kinds) for kinds in HYBRID_STACKS]
    for run in record["cache"]["runs"].values():
        assert len(run["accuracy"]) == len(record["seeds"])
    assert record["cache"]["runs"]["mla"]["cache_numbers_per_token"] == record["cache"]["runs"]["mqa"]["cache_numbers_per_token"]


def test_one_shipped_run_reproduces():
    """Multi-query attention, seed 0, retrained in full: the accuracy the lesson prints for it."""
    record = json.loads(SHIPPED.read_text())
    accuracy, parameters = train_and_test(("mqa",), CACHE_TASK, seed=0)
    assert parameters == record["cache"]["runs"]["mqa"]["parameters"]
    assert accuracy == pytest.approx(record["cache"]["runs"]["mqa"]["accuracy"][0], abs=0.003)


def test_a_tiny_run_writes_the_same_file_twice(tmp_path):
    first = run_all(tmp_path / "a", seeds=(0,), steps=3, progress=lambda line: None)
    second = run_all(tmp_path / "b", seeds=(0,), steps=3, progress=lambda line: None)
    assert first == second
    assert (tmp_path / "a" / RESULTS_NAME).read_text() == (tmp_path / "b" / RESULTS_NAME).read_text()


def test_mla_caches_as_much_as_mqa():
    layer = make_mixer("mla")
    assert layer.cache_numbers_per_token() == cache_numbers_per_token("mla") == cache_numbers_per_token("mqa")
    with pytest.raises(ValueError, match="unknown mixer"):
        make_mixer("rnn")


@pytest.mark.parametrize(
    "arguments, words",
    [(["--seeds", "0"], "--seeds must be"), (["--steps", "many"], "--steps must be"), (["--seeds", "2.5"], "--seeds must be")],
)
def test_arguments_are_checked_before_training(capsys, tmp_path, arguments, words):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), *arguments])
    assert words in capsys.readouterr().err


def test_out_is_checked_before_training(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit):
        main(["--out", str(blocker)])
    assert "is a file" in capsys.readouterr().err
    (tmp_path / "models" / RESULTS_NAME).mkdir(parents=True)
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "models")])
    assert "is a folder" in capsys.readouterr().err
