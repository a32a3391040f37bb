"""Lesson 22's Austen models (attn.experiments.sink_austen): the arms' one switch, equal parameters, the watched
pass against the layers' own, the tiny command on a stand-in corpus and the shipped record."""

import json

import pytest
import torch

from attn.common.stats import t_quantile_at
from attn.experiments import sink_austen, sink_austen_words
from attn.gates import DifferentialAttention, GatedAttention
from attn.models.ngram import add_k_baseline
from tests.notebooks import ROOT

RECORD = ROOT / "lessons" / "records" / sink_austen.RESULTS_NAME
SETTINGS = sink_austen.SIZES["tiny"]


def stand_in_data(vocab=64):
    generator = torch.Generator().manual_seed(0)
    return (torch.randint(vocab, (600,), generator=generator), torch.randint(vocab, (200,), generator=generator), vocab)


@pytest.mark.parametrize("arm", list(sink_austen.ARMS))
def test_the_watched_pass_is_the_layer_own(arm):
    model = sink_austen._build(arm, SETTINGS, 64, seed=0).eval()
    tokens = torch.randint(64, (2, 20), generator=torch.Generator().manual_seed(1))
    found = sink_austen._watch(model, tokens)
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
    counts = {arm: sum(p.numel() for p in sink_austen._build(arm, sink_austen.SIZES["full"], 4096, 0).parameters())
              for arm in sink_austen.ARMS}
    assert all(abs(count / counts["softmax"] - 1) < 0.01 for count in counts.values())


def test_a_beginning_of_text_token_replaces_the_first():
    windows = torch.arange(12).view(2, 6)
    assert sink_austen._with_bos(windows, 99)[:, 0].tolist() == [99, 99]
    assert torch.equal(sink_austen._with_bos(windows, 99)[:, 1:], windows[:, 1:])


def test_the_attention_refuses_what_it_does_not_run():
    layer = sink_austen._SwitchedAttention("softmax", 8, 2)
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="causal self-attention only"):
        layer(x, x, x, mask=torch.ones(4, 4, dtype=torch.bool))


def without_seconds(value):
    """``value`` (a record) with every "seconds" entry, at any depth, left out."""
    if isinstance(value, dict):
        return {key: without_seconds(item) for key, item in value.items() if key not in ("seconds", "cpu_seconds", "run_seconds")}
    return [without_seconds(item) for item in value] if isinstance(value, list) else value


def test_the_tiny_run_on_a_stand_in_corpus_is_deterministic():
    first = sink_austen._measure("tiny", lambda line: None, data=stand_in_data())
    second = sink_austen._measure("tiny", lambda line: None, data=stand_in_data())
    first, second = without_seconds(first), without_seconds(second)  # the timings differ from run to run
    assert first == second and set(first["intervals"]) == set(sink_austen.ARMS) - {"softmax"}
    steps = first["runs"]["softmax"]["checkpoints"][0]["step"]
    assert steps == list(range(0, SETTINGS["steps"], SETTINGS["checkpoint_every"])) + [SETTINGS["steps"]]
    with pytest.raises(ValueError, match="size"):
        sink_austen._measure("huge", data=stand_in_data())


def test_forked_workers_give_what_one_process_gives():
    data = stand_in_data()
    settings = sink_austen._rung(SETTINGS, {"what": "two seeds", "steps": 3})
    jobs = [(("arm", arm), arm, seed, settings) for arm in ("softmax", "gate") for seed in range(2)]
    alone = [without_seconds(result) for result in sink_austen._each_job(jobs, data, 1)]
    forked = [without_seconds(result) for result in sink_austen._each_job(jobs, data, 2)]
    assert forked == alone and alone[0] != alone[1]


def test_the_shipped_record_follows_its_schema():
    record = json.loads(RECORD.read_text())
    assert list(record["runs"]) == list(sink_austen.ARMS) and record["parameter_spread"] < 0.01
    layers = record["settings"]["num_layers"]
    for run in record["runs"].values():
        assert len(run["held_out_loss"]) == record["settings"]["seeds"]
        assert all(len(layers_of_seed) == layers for layers_of_seed in run["largest_logit"])
    for found in record["intervals"].values():
        for interval in found.values():
            assert interval["words"] == sink_austen_words.words(interval["mean"], interval["low"], interval["high"])
    ladder = record["ladder"]
    assert ladder and all(rung["settings"]["seeds"] == len(rung["runs"]["softmax"]["sink_formed"]) for rung in ladder)
    assert all(not any(rung["runs"]["softmax"]["sink_formed"]) for rung in ladder)  # the arms' settings come after
    assert any(record["runs"]["softmax"]["sink_formed"]), "the arms are trained where softmax forms a sink"
    softmax = record["runs"]["softmax"]
    formed = {arm: run["sink_formed"] for arm, run in record["runs"].items()}
    assert record["claims"] == sink_austen_words._claims(record["intervals"], any(softmax["sink_formed"]),
                                                  record["settings"]["steps"], sink_austen_words._massive(softmax),
                                                  formed, sink_austen_words._sink_shares(record["runs"]),
                                                  sink_austen_words._divided(record["arms"]))
    assert record["baseline"]["bigram"] < record["baseline"]["unigram"]
    assert record["bonferroni"]["family"] == len(record["intervals"])
    assert record["run_seconds"] > 0
    rungs = [sink_austen._rung(record["settings"], rung) for rung in sink_austen.SIZES["full"]["ladder"]]
    assert [rung["settings"] for rung in ladder] == json.loads(json.dumps(rungs)), "the ladder the command trains"


def test_a_claim_is_held_not_held_or_not_distinguishable_and_says_when():
    verdict = sink_austen_words._verdict
    assert verdict({"mean": -0.2, "low": -0.3, "high": -0.1}, 300) == "held: lower after 300 steps"
    assert verdict({"mean": 0.2, "low": 0.1, "high": 0.3}, 300) == "not held: higher after 300 steps"
    assert verdict({"mean": -0.2, "low": -0.5, "high": 0.1}, 300) == "not distinguishable after 300 steps"
    below = {metric: {"mean": -1, "low": -2, "high": -0.5} for metric in sink_austen_words.CLAIMS}
    found = sink_austen_words._claims({"gate": below}, False, 300, False)["gate"]
    assert found["first_token_weight"] == sink_austen_words.NOT_TESTABLE
    assert found["largest_activation"] == sink_austen_words.NOT_TESTABLE_MASSIVE
    assert found["held_out_loss"] == "held: lower after 300 steps"


def test_no_sink_is_not_held_where_a_seed_formed_one_and_held_only_if_also_lower():
    lower = {metric: {"mean": -1, "low": -2, "high": -0.5} for metric in sink_austen_words.CLAIMS}
    unclear = {metric: {"mean": -1, "low": -2, "high": 0.5} for metric in sink_austen_words.CLAIMS}
    claims = sink_austen_words._claims
    one_formed = claims({"gate": lower}, True, 600, False, {"gate": [False, True, False]})["gate"]
    assert one_formed["first_token_weight"] == "not held: a sink in 1 of 3 seeds after 600 steps"
    none_lower = claims({"gate": lower}, True, 600, False, {"gate": [False] * 3})["gate"]["first_token_weight"]
    assert none_lower.startswith("held: no seed formed a sink")
    none_unclear = claims({"gate": unclear}, True, 600, False, {"gate": [False] * 3})["gate"]["first_token_weight"]
    assert none_unclear.startswith("not distinguishable: no seed formed a sink")
    assert claims({"gate": lower}, True, 600, True, {"gate": [False]})["gate"]["largest_activation"].startswith("held")
    moved = claims({"sink": lower}, True, 600, False, {"sink": [False] * 3}, {"sink": 0.45})["sink"]
    assert moved["first_token_weight"].startswith("not held: the learned sink logit takes 0.450")
    small = claims({"sink": lower}, True, 600, False, {"sink": [False] * 3}, {"sink": 0.1})["sink"]
    assert small["first_token_weight"].startswith("held")
    assert sink_austen_words._divided(sink_austen.ARMS) == {"differential"}
    divided = claims({"differential": unclear}, True, 600, False, {"differential": [True, False, False]}, None,
                     {"differential"})
    assert divided["differential"]["first_token_weight"].startswith("not distinguishable: a sink in 1 of 3 seeds only")


def test_the_t_quantile_and_the_bonferroni_intervals():
    assert t_quantile_at(0.975, 2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile_at(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    runs = {"softmax": {"held_out_loss": [5.0, 5.1, 5.2]}, "gate": {"held_out_loss": [4.9, 5.05, 5.1]},
            "sink": {"held_out_loss": [5.0, 5.1, 5.3]}}
    found = sink_austen_words._bonferroni(runs)
    assert found["family"] == 2 and found["level"] == 0.975
    wider = found["held_out_loss"]["gate"]
    from attn.common.stats import paired_interval
    mean, low, high = paired_interval([4.9, 5.05, 5.1], [5.0, 5.1, 5.2])
    assert wider["mean"] == pytest.approx(mean, abs=1e-4) and wider["low"] < low and wider["high"] > high


def test_the_count_baseline_and_diffllama_schedule():
    tokens = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1, 0, 1] * 20)
    inputs, targets = torch.tensor([[0, 1, 0]]), torch.tensor([[1, 0, 1]])
    found = add_k_baseline(tokens, inputs, targets, 3)
    assert found["bigram"] < 0.05 < found["unigram"]  # a perfect alternation: the bigram all but knows
    schedule = sink_austen_words._lambda_init
    assert schedule(0) == pytest.approx(0.2) and schedule(1) == pytest.approx(0.3555, abs=1e-4)
    model = sink_austen._build("differential", SETTINGS, 64, seed=0)
    assert [block.attention.layer.lambda_init for block in model.blocks] == [sink_austen_words._lambda_init(0),
                                                                             sink_austen_words._lambda_init(1)]
    assert sink_austen_words._even_rows(4)["even_sink_share"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4, abs=1e-4)


def test_the_differential_first_token_weight_is_normalised_by_its_row_sum():
    model = sink_austen._build("differential", SETTINGS, 64, seed=0).eval()
    tokens = torch.randint(64, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        layer = model.blocks[0].attention
        layer.watch = True
        layer(model.token_embedding(tokens))
        layer.watch = False
    rows = layer.seen["weights"].sum(dim=-1)
    torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)
