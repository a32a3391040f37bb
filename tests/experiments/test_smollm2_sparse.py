"""Lesson 18's SmolLM2 measurements (attn.experiments.smollm2_sparse, its pieces in attn.experiments.topk_reading): the top-k
masses, the oracle's keep-mask against attn.sparse.topk_keep_mask, reading through k keys, the indexer's KL, the head
types, the refusals, the tiny command and the shipped record where present."""

import json

import pytest
import torch

from attn.experiments import smollm2_sparse as sparse
from attn.experiments import topk_reading as topk
from attn.models.llama import LlamaLM
from attn.sparse import LightningIndexer, topk_keep_mask
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / sparse.RESULTS_NAME


def causal_weights(heads=3, length=10, seed=0):
    """Random softmax weights (heads, T, T) of a causal self-attention, with no ties."""
    scores = torch.randn(heads, length, length, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)


def tiny_model():
    torch.manual_seed(0)
    model = LlamaLM(**sparse.TINY_MODEL).eval()
    with torch.no_grad():  # sharper attention, so that which keys are read matters
        for block in model.blocks:
            for projection in (block.attention.query_proj, block.attention.key_proj):
                projection.weight.normal_(0.0, 0.6)
    return model


def passage(length=20, seed=1):
    return torch.randint(sparse.TINY_MODEL["vocab_size"], (length,), generator=torch.Generator().manual_seed(seed))


def test_the_top_k_holds_everything_a_query_sees_when_k_reaches_it():
    weights = causal_weights()
    assert torch.allclose(topk.topk_mass_by_query(weights, 10), torch.ones(3, 10, dtype=torch.float64))
    masses = topk.topk_mass_by_query(weights, 4)  # queries 0 .. 3 see at most 4 keys
    assert torch.allclose(masses[:, :4], torch.ones(3, 4, dtype=torch.float64))
    assert (masses[:, 4:] < 1 - 1e-6).all()
    assert torch.allclose(topk.window_mass_by_query(weights, 14), torch.ones(3, 10, dtype=torch.float64))
    assert topk.counted_queries(10, 4).tolist() == [False] * 4 + [True] * 6


def test_the_masses_of_every_k_at_once_are_each_k_alone():
    weights = causal_weights(length=12)
    table = topk._topk_masses(weights, [1, 3, 12])
    for index, k in enumerate((1, 3, 12)):
        torch.testing.assert_close(table[..., index], topk.topk_mass_by_query(weights, k))


def test_the_oracle_mask_is_the_course_top_k_of_the_weights():
    weights = causal_weights(length=16)
    for k in (1, 3, 8, 16, 40):
        assert torch.equal(topk.oracle_keep_mask(weights, k), topk_keep_mask(weights, k))
    held = (weights * topk.oracle_keep_mask(weights, 3)).sum(dim=-1)
    torch.testing.assert_close(held, topk.topk_mass_by_query(weights, 3))


def test_reading_every_key_is_dense_and_fewer_keys_change_the_loss():
    model, tokens = tiny_model(), passage()
    dense = topk.token_losses(model, tokens)
    with torch.no_grad():
        reference = torch.nn.functional.cross_entropy(model(tokens[None])[0][:-1], tokens[1:], reduction="none")
    torch.testing.assert_close(dense, reference, rtol=0, atol=1e-5)
    torch.testing.assert_close(topk.token_losses(model, tokens, topk.reader("oracle", 20)), dense, rtol=0, atol=1e-5)
    torch.testing.assert_close(topk.token_losses(model, tokens, topk.reader("window", 24)), dense, rtol=0, atol=1e-5)
    for arm in ("oracle", "window"):
        changed = topk.token_losses(model, tokens, topk.reader(arm, 5))
        torch.testing.assert_close(changed[:4], dense[:4], rtol=0, atol=1e-5)  # the first 5 queries see at most 5 keys
        assert (changed - dense).abs().max() > 1e-4
    only_first = topk.token_losses(model, tokens, topk.reader("oracle", 5, layers=(0,)))
    assert not torch.allclose(only_first, dense, atol=1e-4)


def test_the_oracle_reads_better_than_the_window_on_a_model_with_sharp_heads():
    model = tiny_model()
    tokens = [passage(seed=seed) for seed in range(4)]
    oracle = torch.stack([topk.token_losses(model, t, topk.reader("oracle", 5)) for t in tokens])
    window = torch.stack([topk.token_losses(model, t, topk.reader("window", 5)) for t in tokens])
    dense = torch.stack([topk.token_losses(model, t) for t in tokens])
    assert (oracle - dense).abs().mean() < (window - dense).abs().mean()


def test_the_kl_is_zero_for_a_perfect_indexer_and_positive_otherwise():
    weights = causal_weights(heads=3, length=8)[None]  # (1, H, T, T)
    target = topk.head_summed_target(weights)  # (1, T, T)
    torch.testing.assert_close(target.sum(dim=-1), torch.ones(1, 8, dtype=torch.float64))
    torch.testing.assert_close(target, weights.mean(dim=1))
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    perfect = target.log().masked_fill(~causal, 5.0)  # future keys' scores must not count
    assert abs(topk.indexer_kl(perfect, target).item()) < 1e-12
    assert abs(topk.indexer_kl(perfect + 3.0, target).item()) < 1e-12  # a shift changes no softmax
    assert topk.indexer_kl(torch.zeros_like(target), target).item() > 0.01


def test_training_brings_the_indexer_closer_to_the_layer_it_reads():
    """The machinery: the KL falls on the passages it trains on (random tokens hold nothing that carries over to
    other passages, so the validation passages here are the training ones)."""
    model = tiny_model()
    passages = torch.stack([passage(seed=seed) for seed in range(4)])
    data = topk._layer_inputs_and_targets(model, passages, (1,))[1]  # inputs (4, T, E), targets (4, T, T)
    settings = dict(sparse.SIZES["tiny"], max_steps=20, patience=10)
    torch.manual_seed(0)
    indexer = topk._make_indexer(model, settings, 1)
    assert isinstance(indexer, LightningIndexer)
    steps, curve, flat = topk._train_indexer(indexer, data, data, settings, torch.Generator().manual_seed(0))
    assert steps == 20 and len(curve) == 5 and curve[-1] < curve[0] - 0.01 and not flat


def test_head_types_follow_lesson_16s_thresholds_in_order():
    reading = sparse._stand_in_reading(2, 3)
    reading["sink"]["first_token_weight"][1][0] = 0.6  # also an induction head: induction comes first
    assert sparse.head_types(reading) == [["previous-token", "other", "sink"], ["induction", "other", "other"]]
    with pytest.raises(ValueError, match="no heads.induction_score table"):
        sparse.head_types({"sink": reading["sink"]})
    with pytest.raises(TypeError, match="lesson 16's record"):
        sparse.head_types([1, 2])


def test_hostile_arguments_are_refused_with_a_sentence():
    weights = causal_weights()
    with pytest.raises(TypeError, match="weights"):
        topk.topk_mass_by_query([[1.0]], 2)
    with pytest.raises(ValueError, match="finite and >= 0"):
        topk.topk_mass_by_query(-weights, 2)
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        topk.oracle_keep_mask(weights[..., :4], 2)
    with pytest.raises(ValueError, match="top_k"):
        topk.topk_mass_by_query(weights, 0)
    with pytest.raises(TypeError, match="top_k"):
        topk.oracle_keep_mask(weights, True)
    with pytest.raises(ValueError, match="more than sink_tokens"):
        topk.window_mass_by_query(weights, 4)
    with pytest.raises(ValueError, match="rise and not repeat"):
        topk._check_top_ks([8, 4])
    with pytest.raises(ValueError, match="arm must be one of"):
        topk.reader("random", 8)
    with pytest.raises(ValueError, match="needs an indexer"):
        topk.reader("indexer", 8, layers=(0,))
    with pytest.raises(ValueError, match="vocabulary"):
        topk.token_losses(tiny_model(), torch.full((6,), 64))
    with pytest.raises(ValueError, match="share one shape"):
        topk.indexer_kl(torch.zeros(1, 4, 4), torch.zeros(1, 4, 5))
    with pytest.raises(ValueError, match="size must be one of full, tiny"):
        sparse.run("out", size="huge")


def test_the_tiny_command_writes_its_record(tmp_path, capsys):
    sparse.main(["--out", str(tmp_path), "--size", "tiny"])
    assert "Wrote" in capsys.readouterr().out
    record = json.loads((tmp_path / sparse.RESULTS_NAME).read_text())
    settings = sparse.SIZES["tiny"]
    assert record["top_ks"] == list(settings["top_ks"]) and record["provenance"]["threads"] == 1
    assert len(record["mass"]["topk_by_layer_and_head"]) == sparse.TINY_MODEL["num_layers"]
    for arm in ("oracle", "window"):
        assert len(record["loss"][arm][str(settings["top_ks"][0])]["all"]) == settings["passages"]
    assert set(record["indexer"]["training"]) == {str(layer) for layer in settings["indexer_layers"]}


def test_bad_arguments_are_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for argv, words in ((["--out", str(tmp_path), "--size", "huge"], "invalid choice: 'huge'"),
                        (["--size", "tiny"], "the following arguments are required: --out"),
                        (["--out", str(blocker)], "--out")):
        with pytest.raises(SystemExit) as exit_info:
            sparse.main(argv)
        assert exit_info.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record():
    record = json.loads(RESULTS.read_text())
    settings = sparse.SIZES["full"]
    assert record["size"] == "full" and record["top_ks"] == list(settings["top_ks"])
    assert record["num_layers"] == 30 and record["num_heads"] == 9 and record["passages"] == settings["passages"]
    assert sum(record["head_types"]["counts"].values()) == 270
    table = torch.tensor(record["mass"]["topk_by_layer_and_head"])  # (L, H, K): more keys hold more weight
    assert table.shape == (30, 9, len(settings["top_ks"])) and (table.diff(dim=-1) >= 0).all() and (table <= 1).all()
    for arm in ("oracle", "window"):
        for k in settings["top_ks"]:
            assert len(record["loss"][arm][str(k)]["all"]) == record["passages"]
    for layer in settings["indexer_layers"]:
        assert record["indexer"]["training"][str(layer)]["stopped_flat"]
    assert RESULTS.stat().st_size < 300_000


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_record_holds_what_its_numbers_say():
    """Per k, the oracle's top-k holds more weight than the window and sinks and loses less (paired over passages), and
    both close on dense as k grows; the distilled indexer lands between the oracle and the window."""
    record = json.loads(RESULTS.read_text())
    mass = record["mass"]
    assert all(a > b for a, b in zip(mass["topk_by_type"]["all"], mass["window_by_type"]["all"], strict=True))
    loss = record["loss"]
    for k in map(str, record["top_ks"]):
        assert loss["window"][k]["minus_oracle"]["low"] > 0 and loss["oracle"][k]["minus_dense"]["low"] > 0
    excess = [loss["oracle"][str(k)]["minus_dense"]["mean"] for k in record["top_ks"]]
    assert excess == sorted(excess, reverse=True)
    for k in map(str, record["indexer"]["top_ks"]):
        indexed = record["indexer"]["loss"]["indexer"][k]
        assert indexed["minus_oracle"]["low"] > 0 and indexed["minus_window"]["high"] < 0
    for layer, parts in record["indexer"]["mass"].items():
        assert all(w < i <= s + 1e-4 <= p + 2e-4 for w, i, s, p in zip(parts["window"], parts["indexer"],
                                                                         parts["shared_oracle"], parts["per_head_oracle"],
                                                                         strict=True)), layer
