"""Lesson 18's side-by-side runs (attn.experiments.sparse_runs, attn.models.sparse_mixers): mixers, keys read, the
indexer's loss, record."""

import json
from pathlib import Path

import matplotlib
import pytest
import torch

from attn.common.plotting import seed_dots
from attn.experiments import sparse_runs
from attn.experiments.sparse_runs import ARMS, RESULTS_NAME, cache_numbers, compare, induction_model, keys_read, main, make_mixer
from attn.models.sparse_mixers import SINKS, TOP_K, DSAMixer, WindowSinksMixer, indexer_kl
from attn.multihead import explicit_attention

matplotlib.use("Agg")
SHIPPED = Path(__file__).resolve().parents[2] / "lessons" / "records" / RESULTS_NAME


@pytest.mark.parametrize("task", ["recall", "induction"])
@pytest.mark.parametrize("arm", ARMS)
def test_every_mixer_keeps_the_shape_and_never_reads_the_future(arm, task):
    torch.manual_seed(0)
    mixer = make_mixer(arm, task)
    x = torch.randn(2, 20, 32)
    output = mixer(x)
    assert output.shape == x.shape
    changed = x.clone()
    changed[:, 13] += 1.0  # a later token changes
    again = mixer(changed)
    assert torch.allclose(again[:, :13], output[:, :13], atol=1e-6)
    assert not torch.allclose(again[:, 13:], output[:, 13:])


def _keys_per_query(weights):
    """(T,) keys each query gives weight, the same for every batch row and head (B, H, T, T)."""
    counts = (weights > 0).sum(dim=-1)  # (B, H, T)
    assert (counts == counts[:1, :1]).all()
    return counts[0, 0]


def test_window_and_sinks_and_dsa_read_exactly_k_keys():
    torch.manual_seed(0)
    length = 20
    expected = torch.arange(1, length + 1).clamp(max=TOP_K)  # min(p + 1, k): every key while fewer exist
    x = torch.randn(2, length, 32)
    window = WindowSinksMixer(32, 4)
    _, weights = window.attention(x, x, x, is_causal=True, need_weights=True)
    assert torch.equal(_keys_per_query(weights), expected)
    assert (weights[..., TOP_K:, :SINKS] > 0).all()  # the sinks, always read
    dsa = DSAMixer(32, 4)
    _, weights, _ = dsa.read(x)
    assert torch.equal(_keys_per_query(weights), expected)
    assert keys_read("window+sinks", 25) == keys_read("dsa", 25) == TOP_K
    assert keys_read("dense", 25) == 25 and keys_read("delta", 25) == 0


def test_the_indexer_loss_is_zero_for_an_indexer_that_matches_dense_attention():
    torch.manual_seed(0)
    scores = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    dense = torch.softmax(scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -torch.inf), dim=-1)
    target = dense.mean(dim=1)  # (B, T, T): summed over heads, renormalised
    matching = target.log()  # -inf on the future keys, which the loss ignores
    assert indexer_kl(matching, dense).item() == pytest.approx(0.0, abs=1e-12)
    assert indexer_kl(matching + 5.0, dense).item() == pytest.approx(0.0, abs=1e-12)  # a constant shift is the same
    assert indexer_kl(torch.zeros(2, 6, 6, dtype=torch.float64), dense).item() > 0.01  # uniform over visible keys


def test_only_the_indexer_loss_trains_the_indexer_and_it_trains_nothing_else():
    torch.manual_seed(0)
    mixer = DSAMixer(32, 4).train()
    x = torch.randn(2, 12, 32, requires_grad=True)
    mixer(x).square().sum().backward()
    kl = mixer.last_kl
    assert kl is not None and kl.item() > 0
    with_loss = {name: p.grad.clone() for name, p in mixer.named_parameters()}
    x_grad = x.grad.clone()
    mixer.zero_grad()
    index_scores = mixer.indexer(x.detach(), x.detach())
    q, k, v = mixer.heads(x)
    _, dense = explicit_attention(q.detach(), k.detach(), v.detach(), is_causal=True)
    indexer_kl(index_scores, dense).backward()
    for name, parameter in mixer.indexer.named_parameters():
        assert torch.allclose(with_loss[f"indexer.{name}"], parameter.grad, atol=1e-6), name
    mixer.zero_grad()
    x.grad = None
    output, _, _ = mixer.read(x)  # without the loss: the attention's gradients and x's are the same
    output.square().sum().backward()
    for name, parameter in mixer.attention.named_parameters():
        assert torch.allclose(with_loss[f"attention.{name}"], parameter.grad, atol=1e-6), name
    assert torch.allclose(x_grad, x.grad, atol=1e-6)
    assert all(parameter.grad is None or not parameter.grad.any() for parameter in mixer.indexer.parameters())


def test_the_induction_model_runs_each_arm_in_every_block():
    model = induction_model("window+sinks", seed=0)
    assert all(isinstance(block.attention.mixer, WindowSinksMixer) for block in model.blocks)
    tokens = torch.randint(64, (2, sparse_runs.INDUCTION_LENGTH))
    assert model(tokens).shape == (2, sparse_runs.INDUCTION_LENGTH, 64)


def test_a_tiny_run_of_the_command_writes_a_record(tmp_path):
    main(["--out", str(tmp_path), "--arms", "dense", "window+sinks", "--seeds", "2", "--max-steps", "2",
          "--per-distance", "2"])
    record = json.loads((tmp_path / RESULTS_NAME).read_text())
    assert record["arms"] == ["dense", "window+sinks"] and record["seeds"] == [0, 1]
    for task in ("recall", "induction"):
        runs = record["tasks"][task]["runs"]
        assert runs["dense"]["steps"] == [2, 2] and len(runs["window+sinks"]["accuracy"]) == 2
        assert set(record["tasks"][task]["versus_dense"]) == {"window+sinks"}
        assert set(record["tasks"][task]["versus_window"]) == {"dense"}


def test_update_retrains_only_the_named_arms_and_keeps_the_others_only_if_they_stopped(capsys, tmp_path):
    base = ["--out", str(tmp_path), "--seeds", "2", "--max-steps", "2", "--per-distance", "2"]
    assert "is not a record file" in error_of(capsys, [*base, "--update", "--arms", "dense"])
    main([*base, "--arms", "dense", "window+sinks"])
    path = tmp_path / RESULTS_NAME
    assert "reached the cap of 2 steps still falling: add dense" in error_of(
        capsys, [*base, "--update", "--arms", "window+sinks"])
    record = json.loads(path.read_text())
    for entry in record["tasks"].values():
        entry["runs"]["dense"]["stopped"] = [True, True]  # as if dense had stopped before its cap
        entry["runs"]["dense"]["accuracy"] = [0.25, 0.5]  # marks the kept runs
    path.write_text(json.dumps(record))
    assert "seeds [0, 1], this run [0, 1, 2]" in error_of(capsys, [*base[:2], "--seeds", "3", "--update", "--arms", "dsa"])
    main([*base, "--update", "--arms", "window+sinks"])
    updated = json.loads(path.read_text())
    assert updated["arms"] == ["dense", "window+sinks"] and updated["updates"][0]["arms"] == ["window+sinks"]
    for entry in updated["tasks"].values():
        assert entry["runs"]["dense"]["accuracy"] == [0.25, 0.5]
        assert entry["runs"]["window+sinks"]["steps"] == [2, 2]
        assert set(entry["versus_dense"]) == {"window+sinks"}
    path.write_text("{not json")
    assert "could not read" in error_of(capsys, [*base, "--update", "--arms", "dense"])


def error_of(capsys, argv):
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_the_command_refuses_hostile_arguments_with_a_sentence(capsys, tmp_path):
    out = str(tmp_path)
    cases = {
        ("--arms", "sparse"): "--arms takes names from dense, window+sinks, dsa, nsa, mla, delta, got 'sparse'",
        ("--arms", "dense", "dense"): "--arms names an arm twice: dense dense",
        ("--seeds", "0"): "--seeds must be a whole number from 1 to 100",
        ("--seeds", "2.5"): "--seeds must be a whole number, got '2.5'",
        ("--max-steps", "30000"): "--max-steps must be at most 20000",
        ("--per-distance", "-1"): "--per-distance must be a whole number from 1",
    }
    for extra, message in cases.items():
        assert message in error_of(capsys, ["--out", out, *extra])
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert "is a file, not a folder" in error_of(capsys, ["--out", str(a_file / "models")])


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: make_mixer("sparse", "recall"), ValueError, "arm must be one of"),
    (lambda: make_mixer("dense", "copying"), ValueError, "task must be one of"),
    (lambda: keys_read("dense", 0), ValueError, "length must be"),
    (lambda: cache_numbers("mla", 2.5), TypeError, "length must be a whole number"),
    (lambda: indexer_kl(torch.zeros(2, 3, 3), torch.zeros(2, 1, 3, 4)), ValueError, "must be (B, T, T)"),
    (lambda: indexer_kl(torch.zeros(1, 2, 2), torch.full((1, 1, 2, 2), float("nan"))), ValueError, "NaN"),
    (lambda: indexer_kl(torch.full((1, 2, 2), float("nan")), torch.zeros(1, 1, 2, 2)), ValueError, "NaN or +inf"),
    (lambda: induction_model("dense", seed=-1), ValueError, "seed must be"),
    (lambda: WindowSinksMixer(32, 4, top_k=4, sinks=4), ValueError, "sinks must be"),
    (lambda: compare({"dense": {"accuracy": [1.0]}, "dsa": {"accuracy": [0.5]}}, ["dsa"], "dense"), ValueError,
     "at least 2"),
])
def test_functions_refuse_hostile_input_with_a_sentence(call, error, words):
    with pytest.raises(error, match=None) as caught:
        call()
    assert words in str(caught.value)


def test_the_plot_refuses_what_it_cannot_draw_and_draws_the_rest():
    with pytest.raises(TypeError, match="accuracies must be a dict"):
        seed_dots([], "title")
    with pytest.raises(ValueError, match="at least two accuracies"):
        seed_dots({"recall": {"dense": [0.5]}}, "title")
    with pytest.raises(ValueError, match="same arms"):
        seed_dots({"recall": {"dense": [0.5, 1]}, "induction": {"dsa": [0.5, 1]}}, "title")
    axes = seed_dots({"recall": {"dense": [1.0, 0.9], "dsa": [0.8, 0.7]}, "induction": {"dense": [0.5, 0.6], "dsa": [0, 1]}},
                     "title")
    assert len(axes) == 2 and axes[0].figure.get_size_inches()[0] <= 5.52
    matplotlib.pyplot.close("all")


def test_the_shipped_record_has_every_arm_on_both_tasks_over_five_seeds():
    record = json.loads(SHIPPED.read_text())
    assert record["seeds"] == [0, 1, 2, 3, 4] and record["top_k"] == TOP_K
    for task in ("recall", "induction"):
        entry = record["tasks"][task]
        assert set(entry["runs"]) == set(record["arms"]) == set(ARMS)
        for arm, run in entry["runs"].items():
            assert len(run["accuracy"]) == len(run["steps"]) == len(run["stopped"]) == 5
            assert all(run["stopped"]), f"{arm} on {task} reached its cap still falling"
            assert all(0 <= value <= 1 for value in run["accuracy"])
            assert run["keys_read"] == keys_read(arm, entry["length"])
            assert [run["cache_numbers_per_token"], run["cache_numbers"]] == list(cache_numbers(arm, entry["length"]))
        for versus, against in (("versus_dense", "dense"), ("versus_window", "window+sinks")):
            assert set(entry[versus]) == set(record["arms"]) - {against}
            for comparison in entry[versus].values():
                assert comparison["low"] <= comparison["mean"] <= comparison["high"]
                assert comparison["words"] in {"not distinguished", f"{against} ahead"} or comparison["words"].endswith(" ahead")
