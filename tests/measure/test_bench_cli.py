"""python -m attn.measure.bench through main(): every bad argument gets argparse's one-line error before anything runs."""

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from attn.measure import bench, timing

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
    assert message.startswith("python -m attn.measure.bench: error: argument") or "required" in message
    return message


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize(
    "argv, words",
    [
        (["--out", "/missing/dir/x.json"], "argument --out: the folder /missing/dir does not exist"),
        (["--repeats", "0"], "argument --repeats: --repeats must be a whole number from 1 to 10,000 (each repeat times "
                             "every case again), got 0"),
        (["--repeats", "two"], "argument --repeats: --repeats must be a whole number, got 'two'"),
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


# Timing that says when not to trust it (issue 23: a busy machine printed 100x the recorded time silently).


def timed_row(seconds, spread=0.0, length=128, case="fused", runs=15):
    return {"case": case, "batch": 1, "heads": 8, "head_dim": 64, "length": length, "status": "ok",
            "seconds": seconds, "spread": spread, "runs": runs}


def result_of(rows, load=0.1, cores=2):
    return {"device": "cpu", "device_type": "cpu", "dtype": "float32", "torch": "0.0", "date": "2026-01-01",
            "load_average": load, "cores": cores, "rows": rows}


def test_relative_spread_is_the_interquartile_range_over_the_median():
    assert timing.relative_spread([1.0]) == 0.0
    assert timing.relative_spread([2.0, 2.0, 2.0, 2.0]) == 0.0
    # inclusive quartiles of 1..5 are 2 and 4; the median is 3
    assert timing.relative_spread([5.0, 1.0, 3.0, 2.0, 4.0]) == pytest.approx(2 / 3)
    # one run a hundred times too long moves the median and the quartiles little
    assert timing.relative_spread([1.0] * 9 + [100.0]) == pytest.approx(0.0)


def test_each_row_records_its_spread_and_the_run_records_the_load(monkeypatch):
    monkeypatch.setattr(bench, "machine_load", lambda: 7.5)
    result = bench.run_benchmark("cpu", torch.float32, batch=1, heads=2, head_dims=(8,), lengths=(16,), repeats=4,
                                 layers=False)
    assert result["load_average"] == 7.5 and result["cores"] == os.cpu_count()
    for row in result["rows"]:
        assert row["runs"] == 4 and row["spread"] >= 0.0
    assert any("busy: load average 7.5" in caveat for caveat in bench.timing_caveats(result))


def test_a_quiet_steady_run_has_no_caveat():
    quiet = result_of([timed_row(1e-3, 0.05), timed_row(2e-3, 0.1, case="explicit")])
    assert bench.timing_caveats(quiet, recorded=result_of([timed_row(0.9e-3)])) == []


def test_a_busy_machine_is_named():
    (caveat,) = bench.timing_caveats(result_of([timed_row(1e-3)], load=6.2, cores=2))
    assert "busy: load average 6.2 on 2 cores" in caveat


def test_a_wide_spread_is_named_with_its_rows():
    rows = [timed_row(1e-3, 3.0), timed_row(1e-3, 0.1, length=256), timed_row(1e-3, 0.25, length=512)]
    (caveat,) = bench.timing_caveats(result_of(rows))
    assert caveat.startswith("2 of 3 cases spread by more than 20%")
    assert "T=128 d=64 fused (300%)" in caveat and "T=512 d=64 fused (25%)" in caveat and "T=256" not in caveat


def test_a_time_far_above_the_recorded_one_is_named():
    recorded = result_of([timed_row(0.24e-3), timed_row(1e-3, length=256)])
    live = result_of([timed_row(32e-3), timed_row(2e-3, length=256)])  # 133x and 2x the recorded times
    (caveat,) = bench.timing_caveats(live, recorded=recorded)
    assert caveat.startswith("1 of 2 cases more than 3 times slower than the recorded run (cpu, float32")
    assert "T=128 d=64 fused (133x)" in caveat and "T=256" not in caveat


def test_a_recorded_run_of_another_kind_or_size_is_not_compared():
    live = result_of([timed_row(32e-3)])
    gpu = {**result_of([timed_row(0.24e-3)]), "device_type": "cuda"}
    assert bench.timing_caveats(live, recorded=gpu) == []
    other_heads = result_of([{**timed_row(0.24e-3), "heads": 16}])
    assert bench.timing_caveats(live, recorded=other_heads) == []


def test_rows_that_did_not_run_are_left_out_of_the_caveats():
    rows = [timed_row(1e-3), {"case": "explicit", "batch": 1, "heads": 8, "head_dim": 64, "length": 128,
                              "status": "out of memory"}]
    assert bench.timing_caveats(result_of(rows), recorded=result_of([timed_row(1e-6, case="explicit")])) == []


def test_machine_load_is_a_number_or_none_where_the_system_has_none(monkeypatch):
    load = timing.machine_load()
    assert load is None or load >= 0.0
    monkeypatch.delattr(os, "getloadavg")
    assert timing.machine_load() is None


def test_the_command_line_prints_its_caveats(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "machine_load", lambda: 99.0)
    assert bench.main([*SMALL, "--out", str(tmp_path / "busy.json")]) == 0
    assert "caveat: the machine was busy: load average 99.0" in capsys.readouterr().out


def test_silenced_stderr_hides_what_cpp_writes_and_restores_it(capfd):
    with timing.silenced_stderr():
        os.write(2, b"profiler log line\n")
    os.write(2, b"after the block\n")
    assert capfd.readouterr().err == "after the block\n"


def test_silenced_stderr_restores_standard_error_after_an_exception(capfd):
    with pytest.raises(ValueError, match="inside"), timing.silenced_stderr():
        raise ValueError("inside")
    os.write(2, b"still there\n")
    assert capfd.readouterr().err == "still there\n"


def test_the_profiler_names_the_kernel_without_writing_to_stderr(capfd):
    from torch.profiler import ProfilerActivity, profile

    query = torch.randn(1, 2, 8, 4)
    with timing.silenced_stderr(), profile(activities=[ProfilerActivity.CPU]) as run:
        torch.nn.functional.scaled_dot_product_attention(query, query, query)
    assert any("scaled_dot_product" in event.key for event in run.key_averages())
    assert capfd.readouterr().err == ""


def test_the_benchmark_plot_writes_its_maths_as_mathtext():
    import matplotlib.pyplot as plt

    recorded = json.loads((bench.Path(__file__).resolve().parents[2] / "lessons" / "benchmarks"
                           / "cpu-2core-float32.json").read_text())
    time_axis, rate_axis = bench.plot(recorded)
    try:
        assert rate_axis.get_xlabel() == r"sequence length $T$"
        assert "$" in rate_axis.get_ylabel() and "T^2" in rate_axis.get_ylabel()
        assert all("$d$ = 64" in text.get_text() for text in time_axis.get_legend().get_texts())
    finally:
        plt.close("all")


@pytest.mark.parametrize("times, words", [
    (None, "needs a list of times in seconds, got NoneType"),
    ("0.1 0.2", "needs a list of times in seconds, got str"),
    (0.1, "needs a list of times in seconds, got float"),
    ([0.1, "0.2"], "each a finite number of 0 or more"),
    ([0.1, float("nan")], "each a finite number of 0 or more"),
    ([0.1, -0.2], "each a finite number of 0 or more"),
    ([[0.1], [0.2]], "each a finite number of 0 or more"),
    ([True, False], "each a finite number of 0 or more"),
])
def test_relative_spread_names_what_is_wrong_with_its_times(times, words):
    with pytest.raises((TypeError, ValueError), match=words):
        timing.relative_spread(times)


@pytest.mark.parametrize("result, recorded, words", [
    (None, None, "as result, a benchmark result"),
    ({"rows": "none"}, None, "as result, a benchmark result"),
    ("cpu-2core-float32.json", None, "got str"),
    ({"rows": []}, "cpu-2core-float32.json", "as recorded, a benchmark result"),
    ({"rows": []}, {"device": "cpu"}, "as recorded, a benchmark result"),
])
def test_timing_caveats_names_what_is_not_a_result(result, recorded, words):
    with pytest.raises(TypeError, match=words):
        bench.timing_caveats(result, recorded=recorded)


# Destinations that cannot take the result, found before anything runs (issue 32)


@pytest.fixture
def no_hang():
    """A check that opened a named pipe would wait for a reader forever: fail after ten seconds instead."""

    def hung(*arguments):
        raise AssertionError("the destination check hung")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("nothing_runs", "no_hang")
def test_pipes_devices_and_links_to_nowhere_are_refused_as_destinations(capsys, monkeypatch, tmp_path):
    from attn.measure.gpu import suite

    monkeypatch.setattr(suite, "main", lambda *arguments: pytest.fail("the GPU suite started"))
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    assert f"argument --out: {pipe} is a named pipe, not a file" in error_of(capsys, ["--out", str(pipe)])
    assert "argument --out: /dev/full is a device or other special file, not a file" in error_of(capsys, ["--out", "/dev/full"])
    assert "/dev/full is a device" in error_of(capsys, ["--suite", "gpu", "--dry-run", "--out", "/dev/full"])
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "missing" / "x.json")
    message = error_of(capsys, ["--out", str(dangling)])
    assert f"argument --out: {dangling} is a symbolic link to {tmp_path / 'missing' / 'x.json'}, whose folder " in message
    assert f"{tmp_path / 'missing'} does not exist; create it or remove the link" in message


@pytest.mark.usefixtures("nothing_runs")
def test_lengths_nobody_can_allocate_are_refused_with_their_bytes(capsys, tmp_path):
    message = error_of(capsys, ["--device", "cpu", "--lengths", str(10**12), "--out", str(tmp_path / "x.json")])
    assert "argument" in message and "would need" in message and "of this machine's memory" in message


def test_a_result_goes_through_a_link_and_a_failed_write_leaves_the_old_file(tmp_path):
    from attn.common.destinations import write_text, write_through_temporary

    target = tmp_path / "target.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text(link, "new")
    assert target.read_text() == "new" and link.is_symlink()

    def fails(path):
        Path(path).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_through_temporary(target, fails)
    assert target.read_text() == "new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.json", "target.json"]
