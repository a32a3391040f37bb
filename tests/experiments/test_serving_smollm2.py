"""Lesson 19's batching on SmolLM2 (attn.experiments.serving_smollm2): the command on a tiny LlamaLM standing in for
SmolLM2, its arguments, and the shipped record's claims."""

import json
import math

import pytest
import torch

import attn.pretrained
from attn.common.stats import paired_interval
from attn.experiments import serving_smollm2
from attn.models.llama import LlamaLM
from tests.notebooks import ROOT

RECORD = ROOT / "lessons" / "records" / serving_smollm2.RESULTS_NAME


class LetterTokenizer:
    """One token a character, folded into 50 ids: enough to cut paragraphs into prompts."""

    def encode(self, text):
        return [ord(character) % 50 for character in text]


def test_a_tiny_run_measures_the_model_it_loads(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = LlamaLM(50, 64, 16, 4, 2, 2, 32).eval()
    monkeypatch.setattr(attn.pretrained, "load", lambda: (model, LetterTokenizer()))
    lines = []
    record = serving_smollm2.run(tmp_path, "tiny", progress=lines.append)
    assert json.loads((tmp_path / serving_smollm2.RESULTS_NAME).read_text()) == json.loads(json.dumps(record))
    assert record["model"]["parameters"] == sum(parameter.numel() for parameter in model.parameters())
    assert record["provenance"]["command"] == "python -m attn.experiments.serving_smollm2 --out DIR --size tiny"
    batching = record["batching"]
    assert batching["pairs"] == 2 and batching["requests"] == 4 and batching["batch_size"] == 2
    assert batching["continuous"]["decoded_tokens"] == batching["useful_tokens"] <= batching["static"]["decoded_tokens"]
    assert any(line.startswith("batching: continuous") for line in lines)


def test_arguments_are_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit):
        serving_smollm2.main(["--out", str(tmp_path / "file")])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(ValueError, match="size must be one of full, tiny"):
        serving_smollm2.run(tmp_path, "huge")
    with pytest.raises(TypeError, match="progress must be a function"):
        serving_smollm2.run(tmp_path, "tiny", progress="loud")
    assert not (tmp_path / serving_smollm2.RESULTS_NAME).exists()


@pytest.fixture(scope="module")
def shipped():
    if not RECORD.exists():
        pytest.skip("the measurement has not been shipped in this tree")
    return json.loads(RECORD.read_text())


def test_the_shipped_record_holds_what_the_lesson_says(shipped):
    batching = shipped["batching"]
    assert shipped["size"] == "full" and batching["pairs"] == shipped["settings"]["repeats"] == 10
    assert shipped["provenance"]["command"] == "python -m attn.experiments.serving_smollm2 --out DIR"
    assert shipped["model"]["parameters"] > 50 * 2_500_000  # SmolLM2-135M against lesson 13's 2.6 million
    # The counts are the algorithm's: the same as on lesson 13's model.
    assert (batching["static"]["passes"], batching["continuous"]["passes"]) == (179, 132)
    assert (batching["static"]["prompt_passes"], batching["continuous"]["prompt_passes"]) == (4, 12)
    rates = {name: batching[name]["tokens_per_second"] for name in ("static", "continuous")}
    logs = paired_interval([math.log(rate) for rate in rates["continuous"]], [math.log(rate) for rate in rates["static"]])
    speed_up = batching["speed_up"]
    assert (speed_up["geometric_mean"], speed_up["low"], speed_up["high"]) == pytest.approx(
        tuple(math.exp(value) for value in logs), rel=1e-12)
    # What the words say: ahead in every pair, and by more than on lesson 13's model (its whole interval above);
    # from one request to three a decoding pass grows by about a fifth, and the fourth adds more than the second and
    # third together, a step the model's own forward pass takes too, far larger than lesson 13's model's; a padded
    # prompt pass costs what one reading four prompts does, and over twice the longest prompt read alone; the passes
    # add up to a run within 2%.
    lesson_13 = json.loads((ROOT / "lessons" / "records" / "serving_runs.json").read_text())["batching"]
    assert speed_up["spread"][0] > 1 and speed_up["low"] > lesson_13["speed_up"]["high"]
    continuous, static = batching["continuous"]["pass_ms"], batching["static"]["pass_ms"]
    one, three, four = (continuous[f"decode {rows}"]["median_ms"] for rows in (1, 3, 4))
    assert 1.1 < three / one < 1.3 and four - three > three - one
    forward, small = batching["forward_ms"], lesson_13["forward_ms"]
    assert forward["4"] - forward["3"] > forward["3"] - forward["1"] and forward["5"] - forward["4"] < forward["4"] - forward["3"]
    assert small["4"] / small["3"] - 1 < (forward["4"] / forward["3"] - 1) / 2
    assert continuous["prompt"]["median_ms"] == pytest.approx(static["prompt"]["median_ms"], rel=0.05)
    assert continuous["prompt"]["median_ms"] > 2 * batching["prompt_alone"]["median_ms"]
    for name in ("static", "continuous"):
        total = sum(kind["count"] // batching["pairs"] * kind["median_ms"] for kind in batching[name]["pass_ms"].values())
        assert total == pytest.approx(1000 * batching["useful_tokens"] / batching[name]["median"], rel=0.02)
