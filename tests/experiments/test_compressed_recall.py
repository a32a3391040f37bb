"""python -m attn.experiments.compressed_recall: its shipped results reproduce, it is deterministic, and it checks its
arguments before any training."""

import json
from pathlib import Path

import pytest

from attn.experiments.compressed_recall import (
    CACHE_MIXERS,
    CACHE_TASK,
    HYBRID_STACKS,
    HYBRID_TASK,
    MAX_STEPS,
    MIN_GAIN,
    PATIENCE,
    RESULTS_NAME,
    GatedDeltaMixer,
    cache_numbers_per_token,
    main,
    make_mixer,
    run_all,
    train_and_test,
)

SHIPPED = Path(__file__).resolve().parents[2] / "lessons" / "records" / RESULTS_NAME


def test_the_shipped_file_has_every_run():
    record = json.loads(SHIPPED.read_text())
    assert record["max_steps"] == MAX_STEPS and len(record["seeds"]) >= 5
    assert list(record["cache"]["runs"]) == list(CACHE_MIXERS)
    assert list(record["hybrid"]["runs"]) == ["+".join(kinds) for kinds in HYBRID_STACKS]
    for run in [*record["cache"]["runs"].values(), *record["hybrid"]["runs"].values()]:
        assert len(run["accuracy"]) == len(run["steps"]) in (len(record["seeds"]), len(record["hybrid"]["seeds"]))
        for curve, steps, stopped in zip(run["curves"], run["steps"], run["stopped"], strict=True):
            best, flat = float("inf"), 0  # the stopping rule, replayed on the recorded curve
            for loss in curve:
                best, flat = (loss, 0) if loss < best - MIN_GAIN else (best, flat + 1)
            assert stopped == (steps < MAX_STEPS) == (flat >= PATIENCE)
    assert record["cache"]["runs"]["mla"]["cache_numbers_per_token"] == record["cache"]["runs"]["mqa"]["cache_numbers_per_token"]


def test_one_shipped_run_reproduces_its_first_validation_loss():
    """Multi-query attention, seed 0, retrained to its first evaluation (a seventh of the run): the shipped curve's first
    point, so data, initialisation, training steps and the validation loss are the ones that made the record (the whole
    run, 1,750 steps, cost 20 s of the suite). The stopping rule is held by
    test_a_run_stops_when_its_validation_loss_stops_falling; the accuracy is computed by the same lines here."""
    record = json.loads(SHIPPED.read_text())
    run = record["cache"]["runs"]["mqa"]
    result = train_and_test(("mqa",), CACHE_TASK, seed=0, max_steps=record["eval_every"])
    assert result["parameters"] == run["parameters"] and result["steps"] == record["eval_every"]
    assert result["curve"] == [pytest.approx(run["curves"][0][0], abs=0.005)]
    assert 0 <= result["accuracy"] <= 1


def test_a_tiny_run_writes_the_same_file_twice(tmp_path):
    first = run_all(tmp_path / "a", seeds=(0,), max_steps=3, progress=lambda line: None)
    second = run_all(tmp_path / "b", seeds=(0,), max_steps=3, progress=lambda line: None)
    assert first == second
    assert (tmp_path / "a" / RESULTS_NAME).read_text() == (tmp_path / "b" / RESULTS_NAME).read_text()


def test_mla_caches_as_much_as_mqa():
    layer = make_mixer("mla")
    assert layer.cache_numbers_per_token() == cache_numbers_per_token("mla") == cache_numbers_per_token("mqa")
    with pytest.raises(ValueError, match="unknown mixer"):
        make_mixer("rnn")


@pytest.mark.parametrize(
    "arguments, words",
    [(["--seeds", "0"], "--seeds must be"), (["--max-steps", "many"], "--max-steps must be"),
     (["--seeds", "2.5"], "--seeds must be")],
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


def test_the_query_reads_without_writing():
    """A delta layer's last token leaves the memory as it was: its output is the earlier memory read by its query."""
    import torch

    torch.manual_seed(0)
    reading, writing = GatedDeltaMixer(32, 4), GatedDeltaMixer(32, 4, query_writes=True)
    writing.load_state_dict(reading.state_dict())
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        read_only, written = reading(x), writing(x)
    assert torch.allclose(read_only[:, :-1], written[:, :-1], atol=1e-6)  # the other tokens are the same in both
    assert not torch.allclose(read_only[:, -1], written[:, -1])
    # the read-only query's output: the memory after token 5, read with the last token's query
    with torch.no_grad():
        heads = reading.qkv(x).unflatten(-1, (3, 4, -1)).permute(2, 0, 3, 1, 4)
        q = torch.nn.functional.normalize(heads[0], dim=-1) / 8 ** 0.5
        k, v = torch.nn.functional.normalize(heads[1], dim=-1), heads[2]
        beta, alpha = torch.sigmoid(reading.rates(x)).transpose(1, 2).split(4, dim=1)
        from attn.linear import gated_delta_rule_chunked

        _, state = gated_delta_rule_chunked(q[..., :-1, :], k[..., :-1, :], v[..., :-1, :], alpha[..., :-1],
                                            beta[..., :-1], 32)  # (B, H, d_k, d_v): the memory after token 5
        expected = reading.out_proj((q[..., -1, :, None] * state).sum(-2).flatten(1))
    assert torch.allclose(read_only[:, -1], expected, atol=1e-5)


def test_a_run_stops_when_its_validation_loss_stops_falling():
    result = train_and_test(("full",), HYBRID_TASK, seed=0, max_steps=500)
    assert result["steps"] == 500 and len(result["curve"]) == 2 and not result["stopped"]
