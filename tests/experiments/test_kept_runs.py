"""attn.experiments.kept_runs: runs over forked workers equal runs in one process, and a run kept on disk is read
back only when its settings match (an interrupted command goes on where it stopped)."""

import json

import pytest
import torch

from attn.experiments.kept_runs import each_kept

NAMES = ["a-seed0", "a-seed1", "b-seed0"]
SETTINGS = [{"arm": "a", "seed": 0}, {"arm": "a", "seed": 1}, {"arm": "b", "seed": 0}]


def train(index):
    generator = torch.Generator().manual_seed(index)
    return {"index": index, "number": torch.randn(3, generator=generator).tolist()}


def test_forked_workers_give_what_one_process_gives():
    alone = each_kept(train, NAMES, SETTINGS, workers=1, progress=lambda line: None)
    assert each_kept(train, NAMES, SETTINGS, workers=2, progress=lambda line: None) == alone
    assert [result["index"] for result in alone] == [0, 1, 2]


def test_kept_runs_are_read_back_and_others_trained_again(tmp_path):
    first = each_kept(train, NAMES, SETTINGS, parts=tmp_path, progress=lambda line: None)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(f"{name}.json" for name in NAMES)
    (tmp_path / "a-seed1.json").write_text("{not json")  # cut short
    kept = json.loads((tmp_path / "b-seed0.json").read_text())
    kept["result"]["number"] = [0.0]
    (tmp_path / "b-seed0.json").write_text(json.dumps(kept))  # as if trained before, with these settings
    changed = [*SETTINGS[:2], {"arm": "b", "seed": 0, "steps": 5}]  # b's settings changed since
    calls, said = [], []

    def counted(index):
        calls.append(index)
        return train(index)

    again = each_kept(counted, NAMES, changed, parts=tmp_path, progress=said.append)
    assert calls == [1, 2] and again == first  # a-seed0 read back; the broken and the outdated ones trained again
    assert any("a-seed1.json is not a run this command kept" in line for line in said)
    assert each_kept(counted, NAMES, changed, parts=tmp_path, progress=said.append) == first and calls == [1, 2]
    assert not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize(("arguments", "message"), [
    ((train, ["a"], [{}, {}]), "one entry a run each"),
    ((train, ["a", "a"], [{}, {}]), "names must differ"),
    ((train, ["../a"], [{}]), "file-safe name"),
    ((train, "ab", [{}]), "must be a list"),
    ((train, ["a"], [3]), "must be a dict"),
    ((None, ["a"], [{}]), "train"),
])
def test_hostile_arguments_get_a_sentence(arguments, message):
    with pytest.raises((TypeError, ValueError), match=message):
        each_kept(*arguments)
    with pytest.raises(ValueError, match="workers"):
        each_kept(train, ["a"], [{}], workers=0)
