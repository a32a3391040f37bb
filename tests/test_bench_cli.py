"""python -m attn.bench through main(): every bad argument gets argparse's one-line error before anything runs."""

import json
import os

import pytest
import torch

from attn import bench

SMALL = ["--device", "cpu", "--dtype", "float32", "--batch", "1", "--heads", "2", "--head-dims", "8", "--lengths", "16", "32",
         "--repeats", "1"]


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if the benchmark itself starts: argument errors must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("the benchmark ran before its arguments were checked")

    monkeypatch.setattr(bench, "run_benchmark", refuse)


def error_of(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    message = err.strip().splitlines()[-1]
    assert message.startswith("python -m attn.bench: error: argument") or "required" in message
    return message


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize(
    "argv, words",
    [
        (["--out", "/missing/dir/x.json"], "argument --out: the folder /missing/dir does not exist"),
        (["--repeats", "0"], "argument --repeats: must be 1 or more, got 0"),
        (["--repeats", "two"], "argument --repeats: 'two' is not a whole number"),
        (["--batch", "0"], "argument --batch: must be 1 or more, got 0"),
        (["--batch", "-1"], "argument --batch: must be 1 or more, got -1"),
        (["--heads", "0"], "argument --heads: must be 1 or more, got 0"),
        (["--head-dims", "64", "-8"], "argument --head-dims: must be 1 or more, got -8"),
        (["--lengths", "-5"], "argument --lengths: must be 1 or more, got -5"),
        (["--lengths", "1.5"], "argument --lengths: '1.5' is not a whole number"),
        (["--dtype", "foo"], "argument --dtype: invalid choice: 'foo'"),
        (["--device", "gpu"], "argument --device: 'gpu' is not a device name; this machine has: cpu"),
    ],
)
def test_bad_arguments_get_one_line_before_anything_runs(capsys, tmp_path, argv, words):
    if "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "x.json")]
    assert words in error_of(capsys, argv)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.usefixtures("nothing_runs")
def test_out_must_be_given_and_must_be_a_file(capsys, tmp_path):
    assert "the following arguments are required: --out" in error_of(capsys, [])
    assert f"argument --out: {tmp_path} is a folder" in error_of(capsys, ["--out", str(tmp_path)])
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert f"argument --out: {a_file / 'x.json'} lies under {a_file}, which is a file, not a folder" in error_of(
        capsys, ["--out", str(a_file / "x.json")]
    )
    assert "argument --out: the file name is empty; give one, such as bench.json" in error_of(capsys, ["--out", ""])
    assert "argument --out: the file name is empty" in error_of(capsys, ["--out", "  "])


@pytest.mark.usefixtures("nothing_runs")
def test_out_in_a_place_nobody_can_write_is_refused_first(capsys):
    """/proc refuses new files even to root, so this runs as any user (the permission test above cannot run as root)."""
    assert "argument --out: /proc/bench.json cannot be written here" in error_of(capsys, ["--out", "/proc/bench.json"])


def test_running_out_of_cpu_memory_is_a_row_not_a_crash():
    """On the CPU, PyTorch reports an allocation that fails as a RuntimeError, not torch.OutOfMemoryError."""

    def allocates_too_much():
        torch.empty(2**62, dtype=torch.uint8)

    assert bench._measure(allocates_too_much, torch.device("cpu"), repeats=1) == {"status": "out of memory"}

    def fails_otherwise():
        raise RuntimeError("a real bug")

    with pytest.raises(RuntimeError, match="a real bug"):
        bench._measure(fails_otherwise, torch.device("cpu"), repeats=1)


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write to any folder")
def test_out_folder_must_be_writable(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert "cannot be written here" in error_of(capsys, ["--out", str(locked / "x.json")])


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_names_the_devices_there_are(capsys, tmp_path):
    message = error_of(capsys, ["--device", "cuda", "--out", str(tmp_path / "x.json")])
    assert "argument --device: cuda is not available on this machine; it has: cpu" in message


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_without_mps_is_refused(capsys, tmp_path):
    assert "mps is not available on this machine" in error_of(capsys, ["--device", "mps", "--out", str(tmp_path / "x.json")])


def test_a_small_run_on_cpu_writes_its_json(capsys, tmp_path):
    out = tmp_path / "small.json"
    assert bench.main([*SMALL, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["device_type"] == "cpu" and result["dtype"] == "float32"
    cases = {(row["case"], row["length"]) for row in result["rows"]}
    assert cases == {(case, length) for case in ("explicit", "fused", "layer (ours)", "layer (nn.MultiheadAttention)")
                     for length in (16, 32)}
    assert all(row["status"] == "ok" and row["batch"] == 1 and row["heads"] == 2 for row in result["rows"])
    assert f"wrote {out}" in capsys.readouterr().out
