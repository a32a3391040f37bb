"""Lesson 23's measurement (attn.experiments.vit_runs): the canvas, the background patches, the reading of a ViT, the
tiny command, its refusals, and the shipped record."""

import json

import pytest
import torch

from attn.experiments import vit_runs
from attn.models.vit import VisionTransformer
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / vit_runs.RESULTS_NAME
FASHION_ABSENT = "Fashion-MNIST is not fetched here; run 'python -m attn.fashion' (needs apt-get) to run this test"


def test_the_canvas_holds_the_picture_at_its_place_and_black_elsewhere():
    images = torch.rand(2, 1, 28, 28)
    placed = vit_runs._canvas(images, 14, 28)
    assert placed.shape == (2, 1, 56, 56)
    assert torch.equal(placed[..., 14:42, 28:56], images)
    placed[..., 14:42, 28:56] = 0
    assert placed.abs().sum() == 0


def test_a_patch_is_background_only_when_no_pixel_rises_above_the_threshold():
    images = torch.zeros(1, 1, 28, 28)
    images[0, 0, 8, 20] = 0.5  # grid row 1, column 2: patch 6
    images[0, 0, 27, 0] = vit_runs.BACKGROUND  # not above the threshold: patch 12 stays background
    background = vit_runs._background_patches(images)
    assert background.shape == (1, 16) and (~background[0]).nonzero().flatten().tolist() == [6]


def test_reading_a_vit_splits_its_tokens_into_class_registers_background_and_object():
    torch.manual_seed(0)
    model = VisionTransformer(28, 7, 16, 2, 2, 10, registers=3).eval()
    images = torch.zeros(4, 1, 28, 28)
    images[:, :, 7:21, 7:21] = torch.rand(4, 1, 14, 14) + 0.1  # the four middle patches hold the object
    read = vit_runs._read_vit(model, images)
    assert read["background_share"] == 0.75 and len(read["distance"]) == 2 and len(read["distance"][0]) == 2
    for layer in read["norm"] + read["received"]:
        assert set(layer) == {"class", "registers", "background", "object"} and len(layer["registers"]) == 3
    total = [layer["class"] + sum(layer["registers"]) + 12 * layer["background"] + 4 * layer["object"]
             for layer in read["received"]]
    assert total == pytest.approx([1.0, 1.0], abs=1e-3)  # every patch query's weights sum to one
    assert all(0 <= share <= 1 for share in read["largest_patch_on_background"])


@pytest.mark.parametrize(("call", "words"), [
    (lambda: vit_runs.make_model("rope", 0), "arm must be one of"),
    (lambda: vit_runs.run("/tmp", size="huge"), "size must be one of"),
    (lambda: vit_runs.run(3, size="tiny"), "folder's path"),
    (lambda: vit_runs.run("/tmp", size="tiny", progress="loud"), "progress"),
])
def test_bad_arguments_get_a_sentence(call, words):
    with pytest.raises((TypeError, ValueError), match=words):
        call()


def test_the_tiny_command_writes_its_record(tmp_path, capsys):
    try:
        vit_runs.main(["--out", str(tmp_path), "--size", "tiny"])
    except SystemExit as error:  # the parser's sentence: the data are not fetched
        if "python -m attn.fashion" in capsys.readouterr().err:
            pytest.skip(FASHION_ABSENT)
        raise AssertionError("the tiny command failed") from error
    record = json.loads((tmp_path / vit_runs.RESULTS_NAME).read_text())
    assert record["size"] == "tiny" and len(record["runs"]) == 2 * len(vit_runs.ARMS)
    assert "test accuracy learned" in capsys.readouterr().out
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit):
        vit_runs.main(["--out", str(blocker), "--size", "tiny"])


def test_the_shipped_record_covers_every_arm_and_seed_and_says_how_each_run_ended():
    record = json.loads(RESULTS.read_text())
    settings = record["settings"]
    assert record["size"] == "full" and settings["seeds"] == [0, 1, 2]
    assert sorted((run["arm"], run["seed"]) for run in record["runs"]) == sorted(
        (arm, seed) for arm in vit_runs.ARMS for seed in settings["seeds"])
    for run in record["runs"]:
        assert run["stopped"] or run["steps"] == settings["max_steps"]
        assert run["cpu_seconds"] > 0
        assert len(run["curve"]) == -(-run["steps"] // settings["eval_every"])
        assert run["valid_accuracy"] in run["curve"]
        if run["arm"] in vit_runs.VIT_ARMS:
            assert len(run["canvas_accuracy"]) == len(vit_runs.OFFSETS) ** 2
            assert len(run["distance"]) == vit_runs.NUM_LAYERS and len(run["rollout"]) == settings["rollout_count"]
    for interval in record["comparisons"].values():
        assert interval["low"] <= interval["mean"] <= interval["high"]
    stopped = sum(run["stopped"] for run in record["runs"])
    assert f"{stopped} of the {len(record['runs'])} runs were ended by the rule" in record["text"]


def test_a_baseline_run_reproduces_its_first_validation_accuracy():
    """The data split, the batches and the seeding repeat: logistic regression's first measurement, from the record."""
    record = json.loads(RESULTS.read_text())
    settings = dict(record["settings"], max_steps=record["settings"]["eval_every"], test_count=10)
    try:
        data = vit_runs._load_data(settings)
    except FileNotFoundError:
        pytest.skip(FASHION_ABSENT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command runs
    try:
        _, summary = vit_runs._train("logistic", 0, data, settings, progress=lambda line: None)
    finally:
        torch.set_num_threads(threads)
    shipped = next(run for run in record["runs"] if (run["arm"], run["seed"]) == ("logistic", 0))
    assert summary["curve"][0] == pytest.approx(shipped["curve"][0], abs=1e-3)
