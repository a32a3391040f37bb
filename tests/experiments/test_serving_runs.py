"""Lesson 19's measurement command: a tiny run on a small random model, its arguments, and the shipped record
(its shape, and the claims the lesson makes from it)."""

import json
import math

import pytest
import torch

from attn.common.stats import paired_interval
from attn.experiments import serving_runs
from attn.models import lm
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / serving_runs.RESULTS_NAME
TINY = {"requests": 6, "max_length": 40, "max_prompt": 24, "page_sizes": [1, 4, 16], "shared_counts": [1, 3],
        "system_prompt": 12, "chapter": 24, "own_tokens": 6, "shared_new_tokens": 5, "draft_lengths": [1, 3],
        "temperatures": [0.0, 1.0], "draft_prompts": 2, "draft_prompt_length": 10, "draft_new_tokens": 6,
        "draft_layers": [1], "batch_requests": 5, "batch_size": 2, "batch_prompt": 8, "batch_new_tokens": [2, 6],
        "repeats": 2}


def small_model():
    torch.manual_seed(0)
    return lm.AustenLM(vocab_size=50, context_length=64, embed_dim=16, num_heads=2, num_layers=2).eval()


def paragraphs(count=12):
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(50, (int(n),), generator=generator).tolist()
            for n in torch.randint(8, 30, (count,), generator=generator)]


def test_a_tiny_run_fills_every_part():
    lines = []
    record = serving_runs.measure(small_model(), paragraphs(), TINY, progress=lines.append)
    assert [row["page_size"] for row in record["memory"]] == [None, 1, 4, 16]
    contiguous, *paged = record["memory"]
    assert contiguous["reserved"] == 6 * 40 and paged[0]["reserved"] == paged[0]["used"] == contiguous["used"]
    assert all(0 <= row["waste_per_sequence"] < row["page_size"] for row in paged)
    assert [(row["prefix"], row["requests"]) for row in record["prefixes"]] == [
        ("system prompt", 1), ("system prompt", 3), ("chapter", 1), ("chapter", 3)]
    for row in record["prefixes"]:
        assert row["pages_shared"] <= row["pages_alone"]
        assert (row["pages_shared"] < row["pages_alone"]) == (row["requests"] > 1 and row["prefix_tokens"] >= 16)
    assert len(record["speculation"]) == 2 * 2 * 2  # drafts x temperatures x lengths
    for row in record["speculation"]:
        assert 0 <= row["accepted"] <= row["proposed"] and row["passes"] * row["tokens_per_pass"] == pytest.approx(12)
    batching = record["batching"]
    assert batching["static"]["passes"] >= batching["continuous"]["passes"]
    assert batching["continuous"]["decoded_tokens"] == batching["useful_tokens"] <= batching["static"]["decoded_tokens"]
    assert batching["pairs"] == 2 and all(len(batching[name]["tokens_per_second"]) == 2 for name in ("static", "continuous"))
    interval = batching["continuous_minus_static"]
    assert interval["low"] <= interval["mean"] <= interval["high"]
    assert any(line.startswith("batching: continuous") for line in lines)


def test_the_timing_warms_up_each_then_alternates_which_goes_first(monkeypatch):
    served = []

    def fake_serve(model, requests, batch_size, static):
        served.append("static" if static else "continuous")
        if len(requests) == 1:  # the longest prompt alone, asking for one token: one pass
            return [(1, 3, 0.012)], 0.012
        steps = [(2, 3, 0.010), (2, 1, 0.004), (1, 1, 0.003)] if static else [(2, 3, 0.012), (1, 1, 0.003)]
        return steps, (2.0 if static else 1.0) + 0.1 * len(served)

    monkeypatch.setattr(serving_runs, "_serve", fake_serve)
    monkeypatch.setattr(serving_runs, "_forward_ms", lambda model, most_rows, repeats: {
        str(rows): 1.0 + rows for rows in range(1, most_rows + 1)})
    requests = [([1, 2], 3), ([3], 1), ([4, 5, 6], 2)]
    threads = torch.get_num_threads()
    record = serving_runs.batching(None, requests, {"batch_size": 2, "repeats": 3}, progress=lambda line: None)
    assert torch.get_num_threads() == threads  # timed on one thread, the caller's threads given back
    assert served == ["static", "continuous"] + ["static", "continuous", "continuous", "static", "static", "continuous"] + [
        "continuous"] * 3  # then the longest prompt alone, once a pair
    assert record["prompt_alone"] == {"tokens": 3, "median_ms": pytest.approx(12.0)}
    # decoded: the static groups [3, 1] and [2] decode 2 x 3 and 1 x 2 tokens; the continuous batch what was asked
    assert record["static"]["decoded_tokens"] == 8 and record["continuous"]["decoded_tokens"] == 6
    # the rates are paired in the order of the pairs, whichever went first: static 2.3, 2.6, 2.7 s; continuous 1.4 ...
    assert record["static"]["tokens_per_second"] == pytest.approx([6 / 2.3, 6 / 2.6, 6 / 2.7])
    assert record["continuous"]["tokens_per_second"] == pytest.approx([6 / 1.4, 6 / 1.5, 6 / 1.8])
    assert record["continuous_minus_static"]["low"] > 0 and record["speed_up"]["spread"][0] > 1
    assert record["speed_up"]["low"] <= record["speed_up"]["geometric_mean"] <= record["speed_up"]["high"]
    # passes by kind, over the three timed serves of each arm (the warm-up's are not counted)
    assert (record["static"]["passes"], record["static"]["prompt_passes"]) == (3, 1)
    assert record["static"]["pass_ms"] == {"decode 1": {"median_ms": pytest.approx(3.0), "count": 3},
                                           "decode 2": {"median_ms": pytest.approx(4.0), "count": 3},
                                           "prompt": {"median_ms": pytest.approx(10.0), "count": 3}}
    assert record["continuous"]["pass_ms"]["prompt"] == {"median_ms": pytest.approx(12.0), "count": 3}
    assert set(record["machine"]) == {"processor", "cores", "system", "load", "load_after"}
    assert record["forward_ms"] == {"1": 2.0, "2": 3.0, "3": 4.0}  # 1 to batch_size + 1 rows


def test_the_bare_forward_is_timed_for_each_number_of_rows():
    times = serving_runs._forward_ms(small_model(), 3, 2)
    assert list(times) == ["1", "2", "3"] and all(value > 0 for value in times.values())


def test_pages_and_sharing_by_hand():
    rows = serving_runs.memory([5, 16, 17], [1, 16], 32, 10)
    assert [row["reserved"] for row in rows] == [96, 38, 64] and rows[2]["waste_per_sequence"] == 26 / 3
    assert rows[0]["reserved_bytes"] == 960
    prefix = list(range(32))  # two full pages of 16
    assert serving_runs.shared_pages(prefix, [[40], [41], [42]], 4, 16, prefix_caching=False) == 9
    assert serving_runs.shared_pages(prefix, [[40], [41], [42]], 4, 16, prefix_caching=True) == 2 + 3


def test_arguments_are_checked_before_work(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit):
        serving_runs.main(["--out", str(tmp_path / "file")])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serving_runs.main([])
    with pytest.raises(TypeError, match="paragraphs must be a list of lists"):
        serving_runs.measure(small_model(), "some text", TINY, progress=print)
    with pytest.raises(ValueError, match="at least 7 paragraphs"):
        serving_runs.measure(small_model(), paragraphs(3), TINY, progress=print)
    with pytest.raises(TypeError, match="progress must be a function"):
        serving_runs.measure(small_model(), paragraphs(), TINY, progress=None)
    with pytest.raises(TypeError, match="model must be a language model"):
        serving_runs.measure(torch.nn.Linear(2, 2), paragraphs(), TINY)
    with pytest.raises(ValueError, match="repeats must be at least 2"):
        serving_runs.measure(small_model(), paragraphs(), {**TINY, "repeats": 1})
    with pytest.raises(ValueError, match="temperatures"):
        serving_runs.measure(small_model(), paragraphs(), {**TINY, "temperatures": [-1.0]})


@pytest.fixture(scope="module")
def shipped():
    if not RESULTS.exists():
        pytest.skip("the measurement has not been shipped in this tree")
    return json.loads(RESULTS.read_text())


def test_the_shipped_record_has_every_part(shipped):
    settings = shipped["settings"]
    assert shipped["provenance"]["command"] == "python -m attn.experiments.serving_runs --out DIR"
    assert [row["page_size"] for row in shipped["memory"]] == [None, *settings["page_sizes"]]
    assert len(shipped["prefixes"]) == 2 * len(settings["shared_counts"])
    assert len(shipped["speculation"]) == (len(settings["draft_layers"]) + 1) * len(settings["temperatures"]) * len(
        settings["draft_lengths"])
    assert shipped["bytes_per_position"] == 2 * 4 * 6 * 32 * 4  # lesson 13's model: 4 layers of 6 heads of 32


def test_the_shipped_record_holds_what_the_lesson_says(shipped):
    contiguous, *paged = shipped["memory"]
    # The contiguous cache wastes more than any page size; waste grows with the page and stays below (P - 1) / 2.
    assert all(row["reserved"] < contiguous["reserved"] for row in paged)
    assert [row["waste_per_sequence"] for row in paged] == sorted(row["waste_per_sequence"] for row in paged)
    assert all(row["waste_per_sequence"] <= row["expected_waste"] for row in paged)
    # Sharing a chapter's 192 tokens saves more than sharing a 48-token system prompt, and more with more requests.
    saved = {(row["prefix"], row["requests"]): row["pages_alone"] - row["pages_shared"] for row in shipped["prefixes"]}
    assert saved[("chapter", 32)] > saved[("system prompt", 32)] > saved[("system prompt", 2)] > 0
    # Drafts from the first layers beat prompt lookup on prose; longer drafts lower the acceptance rate.
    rows = {(row["draft"], row["temperature"], row["draft_length"]): row for row in shipped["speculation"]}
    for temperature in shipped["settings"]["temperatures"]:
        assert rows[("first 2 layers", temperature, 4)]["tokens_per_pass"] > rows[("prompt lookup", temperature, 4)][
            "tokens_per_pass"]
        for draft in ("first 1 layer", "first 2 layers"):
            assert rows[(draft, temperature, 1)]["acceptance"] > rows[(draft, temperature, 8)]["acceptance"]
    assert all(1 <= row["tokens_per_pass"] < 2.5 for row in rows.values())
    # Continuous batching needs fewer passes than static batches for the same requests, and decodes fewer tokens.
    batching = shipped["batching"]
    assert batching["continuous"]["passes"] < batching["static"]["passes"]
    assert batching["continuous"]["decoded_tokens"] == batching["useful_tokens"] < batching["static"]["decoded_tokens"]
    # The timing: one pair per repeat, and the interval is the one paired_interval gives for the stored rates.
    assert batching["pairs"] == shipped["settings"]["repeats"] >= 10
    rates = {name: batching[name]["tokens_per_second"] for name in ("static", "continuous")}
    assert all(len(values) == batching["pairs"] for values in rates.values())
    interval = batching["continuous_minus_static"]
    assert (interval["mean"], interval["low"], interval["high"]) == pytest.approx(
        paired_interval(rates["continuous"], rates["static"]), rel=1e-12)
    logs = paired_interval([math.log(rate) for rate in rates["continuous"]], [math.log(rate) for rate in rates["static"]])
    speed_up = batching["speed_up"]
    assert (speed_up["geometric_mean"], speed_up["low"], speed_up["high"]) == pytest.approx(
        tuple(math.exp(value) for value in logs), rel=1e-12)
    # A request admitted mid-run reads its prompt in a pass of its own width: more such passes for continuous batching.
    assert batching["static"]["prompt_passes"] == -(-batching["requests"] // batching["batch_size"])  # one a batch
    assert batching["continuous"]["prompt_passes"] > batching["static"]["prompt_passes"]
    for name in ("static", "continuous"):
        kinds = batching[name]["pass_ms"]
        assert sum(kind["count"] for kind in kinds.values()) == batching["pairs"] * batching[name]["passes"]
        assert kinds["prompt"]["count"] == batching["pairs"] * batching[name]["prompt_passes"]
    # What the words say of the timing: continuous ahead in every pair; the passes' medians add up to a run's time
    # within 2%; each request more adds under a millisecond to a decoding pass, most of which does not grow with them;
    # a prompt pass padded beside decoding requests costs what one reading four prompts does, and more than twice the
    # longest prompt read alone.
    assert batching["speed_up"]["spread"][0] > 1
    for name in ("static", "continuous"):
        kinds = batching[name]["pass_ms"]
        total = sum(kind["count"] // batching["pairs"] * kind["median_ms"] for kind in kinds.values())
        assert total == pytest.approx(1000 * batching["useful_tokens"] / batching[name]["median"], rel=0.02)
    continuous, static = batching["continuous"]["pass_ms"], batching["static"]["pass_ms"]
    extra = (continuous["decode 4"]["median_ms"] - continuous["decode 1"]["median_ms"]) / 3  # each request more
    assert 0 < extra < 1 and continuous["decode 1"]["median_ms"] - extra > continuous["decode 4"]["median_ms"] / 2
    assert continuous["prompt"]["median_ms"] == pytest.approx(static["prompt"]["median_ms"], rel=0.05)
    assert continuous["prompt"]["median_ms"] > 2 * batching["prompt_alone"]["median_ms"]
