"""The GPU suite (python -m attn.measure.bench --suite gpu): its dry run on the CPU, its schema, its pieces and its plots.

The dry run executes every part of the suite at tiny sizes, so that the day a GPU is at hand the
one command is known to work. The plots are drawn from a synthetic GPU-shaped result built here,
in the test: invented numbers that are never written to lessons/benchmarks/ and never shown in the book.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, replace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn import flops, multihead  # noqa: E402
from attn.common.plotting import COLUMN_WIDTH  # noqa: E402
from attn.measure import bench  # noqa: E402
from attn.measure import peaks as gpu_peaks  # noqa: E402
from attn.measure.gpu import cases, core, cuda_tests, report, suite  # noqa: E402
from attn.measure.gpu import decode as gpu_decode  # noqa: E402
from attn.measure.gpu import layer as gpu_layer  # noqa: E402
from attn.measure.gpu import plots as gpu_plots  # noqa: E402
from attn.measure.gpu import sizes as suite_sizes  # noqa: E402
from attn.triton_kernels import triton_status  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

TRITON = importlib.util.find_spec("triton") is not None


def processor_seconds():
    """CPU time (user + system) of this process's finished children and theirs; the clock where that is not known."""
    try:
        import resource  # Unix only
    except ImportError:
        return time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """Run the real command, as a learner would; return (its JSON, its printed output, its CPU seconds, its wall seconds)."""
    out = tmp_path_factory.mktemp("suite") / "dry.json"
    command = [sys.executable, "-m", "attn.measure.bench", "--suite", "gpu", "--dry-run", "--out", str(out)]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    started, cpu_before = time.perf_counter(), processor_seconds()
    completed = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    wall, cpu = time.perf_counter() - started, processor_seconds() - cpu_before
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return json.loads(out.read_text()), completed.stdout, cpu, wall


def test_the_dry_run_follows_the_schema_in_under_a_minute(dry_run):
    """Under a minute of processor time, its pytest subprocess included; on a busy shared machine the wall time is longer."""
    result, printed, cpu, wall = dry_run
    assert report.validate(result) == []
    assert cpu < 60, f"the dry run took {cpu:.0f} s of processor time ({wall:.0f} s on the clock)"
    assert result["dry_run"] is True and result["complete"] is True
    assert result["provenance"]["device_type"] == "cpu" and result["peaks"]["matched"] is None
    assert result["provenance"]["command"].startswith("python -m attn.measure.bench --suite gpu --dry-run --out ")
    assert "causal: half" in result["flop_counting"]
    assert result["sizes"] == json.loads(json.dumps(asdict(suite_sizes.DRY)))
    lines = printed.strip().splitlines()
    assert lines[-1].startswith("wrote ") and "DRY RUN" in printed
    table = lines[next(index for index, line in enumerate(lines) if line.startswith("GPU suite")):-1]
    assert max(len(line) for line in table) <= 76, table
    for impl in ("explicit", "sdpa flash", "sdpa math"):
        row = next(line for line in table if line.startswith(f"  {impl} "))
        assert len(re.findall(r" \S+ \(n/a\)", row)) == 4, row


def test_the_dry_run_runs_every_part(dry_run):
    result = dry_run[0]
    rows = {(row["impl"], row["head_dim"], row["causal"], row["length"]): row for row in result["core"]}
    for (impl, head_dim, causal, length), row in rows.items():
        if impl in ("explicit", "sdpa flash", "sdpa math"):
            assert row["status"] == "ok" and row["tflops"] > 0 and row["share_of_ceiling"] > 0, row
            assert row["flops"] == flops.attention_flops(1, 2, length, head_dim, causal)
            if length == result["sizes"]["lengths"][0]:
                assert row["relative_error"] < 1e-5, row
        elif impl in ("sdpa efficient", "sdpa cudnn"):
            assert row["status"] == "absent" and "CUDA kernel" in row["reason"]
        elif TRITON:  # lesson 12's kernel, run by Triton's interpreter
            assert row["status"] == "ok" and row["tflops"] > 0, row
            if length == result["sizes"]["lengths"][0]:
                assert row["relative_error"] < 1e-5, row
        else:
            assert row["status"] == "absent" and row["reason"] == triton_status(), row
    assert result["ceilings"]["matmul"]["tflops"] > 0 and result["ceilings"]["copy"]["tb_per_s"] > 0
    assert all(row["ratio"] > 0 and row["relative_error"] < 1e-4 for row in result["layer"])
    assert all(row["ops"]["ours"] == row["ops"]["reference"] for row in result["layer"]), "like with like"
    assert "back-to-back calls" in result["timing"]["method"] and "sdpa_kernel" not in result["timing"]["method"]
    assert all(row["cache"] == "attn.kvcache.PreallocatedKVCache" for row in result["decode"])
    assert all(row["layer_step"]["tb_per_s"] > 0 and row["attention_only"]["tb_per_s"] > 0 for row in result["decode"])
    assert [entry["within_sweep"] for entry in result["explicit_out_of_memory"]] == [False] * 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine the CUDA tests run instead of skipping")
def test_the_dry_run_runs_the_cuda_selection_and_records_its_counts(dry_run):
    tests = dry_run[0]["cuda_tests"]
    assert tests["status"] == "ran" and tests["exit_code"] == 0
    assert tests["passed"] == tests["failed"] == tests["errors"] == 0
    assert tests["skipped"] >= 40 and tests["deselected"] > 0
    assert f"{tests['skipped']} skipped" in tests["summary"]
    assert set(tests["files"]) == {f"tests/layers/test_{name}.py" for name in ("multihead", "block", "kvcache", "triton_kernel")}


def test_validate_names_what_is_wrong(dry_run):
    result = json.loads(json.dumps(dry_run[0]))
    result["core"].pop()
    result["core"][0].update(status="refused", reason="")
    result["layer"] = result["layer"][:2]
    del result["provenance"]["driver"]
    problems = report.validate(result)
    assert "core does not hold every implementation at every (head_dim, causal, length) exactly once" in problems
    assert any("status 'refused' without a reason" in problem for problem in problems)
    assert any(problem.startswith("layer does not have four rows") for problem in problems)
    assert "provenance has no driver" in problems
    assert report.validate({"schema": report.SCHEMA}) != []


# ---------------------------------------------------------------------------------------------- the pieces


def test_out_of_memory_is_caught_and_recorded():
    device = torch.device("cpu")

    def too_big(*_):
        raise cases.OUT_OF_MEMORY("CUDA out of memory. Tried to allocate 128.00 GiB")

    output, failure = cases.attempt(too_big, device)
    assert output is None and failure["status"] == "out of memory" and "128.00 GiB" in failure["reason"]
    assert cases.measure(too_big, device, suite_sizes.DRY)["status"] == "out of memory"


def test_the_sweep_records_the_explicit_out_of_memory_length_and_skips_longer_ones(monkeypatch):
    sizes = replace(suite_sizes.DRY, lengths=(16, 32, 64), head_dims=(8,))

    def explicit_that_dies_at_32(query, key, value, causal):
        if query.shape[2] >= 32:
            raise cases.OUT_OF_MEMORY("CUDA out of memory")
        return multihead.explicit_attention(query, key, value, is_causal=causal)[0]

    dies = core.Implementation(first=explicit_that_dies_at_32, timed=explicit_that_dies_at_32)
    monkeypatch.setattr(core, "implementations", lambda device: {"explicit": dies})
    rows = core.core_sweep(torch.device("cpu"), sizes, 1.0, {"matched": None}, log=lambda line: None)
    statuses = [(row["length"], row["status"]) for row in rows if not row["causal"]]
    assert statuses == [(16, "ok"), (32, "out of memory"), (64, "skipped")]
    entry = core.explicit_out_of_memory(rows, sizes.batch, sizes.heads, "bfloat16")[0]
    assert entry["first_out_of_memory_length"] == 32 and entry["last_length_that_ran"] == 16 and entry["within_sweep"]
    assert entry["weights_gib_at_that_length"] == sizes.batch * sizes.heads * 32**2 * 2 / 2**30


def test_other_runtime_errors_are_errors_not_refusals():
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert cases.attempt(broken, torch.device("cpu"))[1] == {
        "status": "error", "reason": "RuntimeError: CUDA error: an illegal memory access was encountered"}


def test_a_part_that_breaks_is_recorded_and_the_others_still_run(monkeypatch, tmp_path):
    def broken(*args):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(suite, "run_cuda_tests", lambda timeout: {"status": "not run", "reason": "not in this test"})
    explicit_only = {"explicit": core.implementations(torch.device("cpu"))["explicit"]}
    monkeypatch.setattr(core, "implementations", lambda device: explicit_only)
    monkeypatch.setattr(suite, "layer_comparison", broken)
    sizes = replace(suite_sizes.DRY, head_dims=(8,), lengths=(16,))
    out = tmp_path / "partial.json"
    result = suite.run_suite(torch.device("cpu"), sizes, "python -m attn.measure.bench", out, True, log=lambda line: None)
    assert result["section_errors"] == {"layer": "RuntimeError: broken on purpose"} and result["layer"] is None
    assert result["complete"] is False and len(result["decode"]) == 2 and result["core"][0]["status"] == "ok"
    assert json.loads(out.read_text())["section_errors"] == result["section_errors"]
    assert "the layer part failed: RuntimeError: broken on purpose" in report.validate(result)
    assert "layer: FAILED, RuntimeError: broken on purpose" in report.summary_lines(result)


def test_a_refused_backend_is_recorded_with_pytorchs_reason():
    query = torch.randn(1, 2, 8, 4)
    output, failure = cases.attempt(lambda: core.sdpa_call("efficient", False)(query, query, query),
                                        torch.device("cpu"))
    assert output is None and failure["status"] == "refused"
    assert "RuntimeError" in failure["reason"] and "backend" in failure["reason"]


def test_a_slow_case_is_timed_fewer_times_but_at_least_three():
    cpu = torch.device("cpu")
    assert cases.affordable_repeats(lambda _: time.sleep(0.05), cpu, lambda: None, 10, budget_s=0.2) in (3, 4)
    assert cases.affordable_repeats(lambda _: time.sleep(0.05), cpu, lambda: None, 10, budget_s=0.01) == 3
    assert cases.affordable_repeats(lambda _: None, cpu, lambda: None, 10, budget_s=1.0) == 10
    seconds, repeats, calls = cases.median_seconds(lambda _: time.sleep(0.02), cpu, 0, 10, budget_s=0.05)
    assert repeats == 3 and calls == 1 and seconds >= 0.02


def test_causal_work_is_counted_as_half():
    assert flops.attention_flops(4, 16, 4096, 64, causal=False) == 4 * 4 * 16 * 4096**2 * 64
    assert flops.attention_flops(4, 16, 4096, 64, causal=True) == 2 * 4 * 16 * 4096**2 * 64


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", ("H100", 989.0, 3.35)),
    ("NVIDIA H100 PCIe", ("H100 PCIe", 756.0, 2.0)),
    ("NVIDIA H100 NVL", ("H100 NVL", 835.0, 3.9)),
    ("NVIDIA H200", ("H200", 989.0, 4.8)),
    ("NVIDIA H200 NVL", ("H200 NVL", 835.0, 4.8)),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_data_sheet_peaks_match_the_most_specific_name(name, expected):
    peaks = gpu_peaks.data_sheet_peaks(name)
    assert (peaks["name"], peaks["bf16_dense_tflops"], peaks["hbm_tb_per_s"]) == expected if expected else peaks is None


@pytest.mark.parametrize("output, summary, counts", [
    ("....\n===== 3 failed, 40 passed, 2 skipped in 5.10s =====\n", "3 failed, 40 passed, 2 skipped in 5.10s",
     {"failed": 3, "passed": 40, "skipped": 2, "errors": 0}),
    ("E\n1 error in 0.50s\n", "1 error in 0.50s", {"errors": 1, "passed": 0}),
    ("sss\n46 skipped, 99 deselected in 2.61s\n", "46 skipped, 99 deselected in 2.61s", {"skipped": 46, "deselected": 99}),
    ("no tests ran in 0.01s\n", "no tests ran in 0.01s", {"passed": 0, "failed": 0, "skipped": 0}),
])
def test_pytest_summaries_are_parsed(output, summary, counts):
    parsed_summary, parsed = cuda_tests.parse_pytest_summary(output)
    assert parsed_summary == summary
    assert {key: parsed[key] for key in counts} == counts


def test_the_cuda_selection_is_every_file_with_cuda_cases():
    names = [path.name for path in cuda_tests.cuda_test_files(ROOT / "tests")]  # in every room of tests/
    assert set(names) == {"test_multihead.py", "test_block.py", "test_kvcache.py", "test_triton_kernel.py"}
    assert "test_gpu_suite.py" not in names and "test_softmax.py" not in names


def test_recorded_runs_are_real_gpu_runs_only(tmp_path, dry_run):
    (tmp_path / "dry.json").write_text(json.dumps(dry_run[0]))
    (tmp_path / "cpu-bench.json").write_text((ROOT / "lessons" / "benchmarks" / "cpu-2core-float32.json").read_text())
    assert report.recorded_runs(tmp_path) == []
    gpu_shaped = synthetic_gpu_result()
    (tmp_path / "gpu.json").write_text(json.dumps(gpu_shaped))
    assert report.recorded_runs(tmp_path) == [json.loads(json.dumps(gpu_shaped))]


# ---------------------------------------------------------------------------------------------- the command line


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the suite ran before its arguments were checked")

    monkeypatch.setattr(suite, "run_suite", refuse)


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("argv, words", [
    (["--suite", "gpu"], "argument --suite: the GPU suite needs a CUDA GPU and this machine's best device is cpu; add --dry-run"),
    (["--dry-run"], "argument --dry-run: only with --suite gpu"),
    (["--suite", "cpu"], "argument --suite: invalid choice: 'cpu'"),
])
def test_bad_suite_arguments_get_one_line_before_anything_runs(capsys, tmp_path, argv, words):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*argv, "--out", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "x.json").exists()


@pytest.mark.usefixtures("nothing_runs")
def test_a_dry_run_may_not_write_into_lessons_results(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--suite", "gpu", "--dry-run", "--out", str(ROOT / "lessons" / "benchmarks" / "dry.json")])
    assert "a dry run measures nothing; write it outside lessons/benchmarks/" in capsys.readouterr().err
    assert not (ROOT / "lessons" / "benchmarks" / "dry.json").exists()


# ---------------------------------------------------------------------------------------------- the plots


def synthetic_gpu_result():
    """A result shaped like an H100 run, with invented round numbers: for these tests only, never committed."""
    sizes = suite_sizes.GPU
    peaks = {"matched": gpu_peaks.data_sheet_peaks("NVIDIA H100 80GB HBM3"), "source": gpu_peaks.DATA_SHEET_SOURCE,
             "table": gpu_peaks.DATA_SHEET_PEAKS}
    rates = {"explicit": 100.0, "sdpa flash": 400.0, "sdpa efficient": 300.0, "sdpa cudnn": 500.0, "sdpa math": 80.0,
             "triton": 250.0}  # TFLOP/s, invented
    rows = []
    for head_dim in sizes.head_dims:
        for causal in (False, True):
            for length in sizes.lengths:
                for impl, rate in rates.items():
                    row = core.core_row(impl, head_dim, length, causal, sizes)
                    quadratic = impl in ("explicit", "sdpa math")
                    if quadratic and length >= 16384:
                        status = "out of memory" if length == 16384 else "skipped"
                        row.update(status=status, reason="invented for the test")
                    elif impl == "sdpa cudnn" and head_dim == 128 and causal:
                        row.update(status="refused", reason="invented for the test")
                    else:
                        per_head = 3 * length * head_dim * 2 + (3 * length**2 * 2 if quadratic else 0)  # bytes
                        memory = sizes.batch * sizes.heads * per_head / 2**20
                        row.update(status="ok", seconds=row["flops"] / (rate * 1e12), peak_mib=memory, repeats=10,
                                   relative_error=0.004)
                    core.add_rates(row, 600.0, peaks, "bfloat16")
                    rows.append(row)
    layer = [{"mode": mode, "causal": causal, **sizes.layer, "dtype": "bfloat16", "relative_error": 0.004,
              "ours": {"status": "ok", "seconds": 1.1e-3}, "reference": {"status": "ok", "seconds": 1e-3}, "ratio": 1.1}
             for causal in (False, True) for mode in ("forward", "forward+backward")]
    decode = [{"cache_length": length,
               "layer_step": {"status": "ok", "tb_per_s": 1.0 + length / 32768, "seconds_per_token": 1e-4, "share_of_hbm": 0.3},
               "attention_only": {"status": "ok", "tb_per_s": 2.0 + length / 32768}} for length in sizes.decode["cache_lengths"]]
    return {
        "schema": report.SCHEMA, "dry_run": False, "complete": True, "seconds": 300.0,
        "provenance": {"device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2,
                       "date_utc": "2026-01-01T00:00:00+00:00", "command": "invented for the test", "torch": "0.0",
                       "cuda": "0.0", "cudnn": 0, "triton": "0.0", "numpy": "0.0", "driver": "0.0"},
        "peaks": peaks, "flop_counting": core.FLOP_COUNTING, "decode_counting": gpu_decode.DECODE_COUNTING,
        "layer_paths": gpu_layer.PATHS,
        "timing": {}, "sizes": asdict(sizes), "section_errors": {}, "section_seconds": {},
        "cuda_tests": {"status": "ran", "passed": 60, "failed": 0, "skipped": 0, "errors": 0, "summary": "60 passed in 9.00s",
                       "failures": []},
        "ceilings": {"matmul": {"status": "ok", "tflops": 600.0, "size": [8192] * 3, "dtype": "bfloat16"},
                     "copy": {"status": "ok", "tb_per_s": 2.5}},
        "core": rows, "explicit_out_of_memory": core.explicit_out_of_memory(rows, sizes.batch, sizes.heads, "bfloat16"),
        "layer": layer, "decode": decode,
    }


@pytest.fixture
def gpu_result():
    result = synthetic_gpu_result()
    assert report.validate(result) == [], "the synthetic result must have a real run's shape"
    yield result
    plt.close("all")


def legend_texts(figure):
    legends = [axis.get_legend() for axis in figure.axes] + list(figure.legends)
    return [text.get_text() for legend in legends if legend for text in legend.get_texts()]


def horizontal_lines(axis):
    return {round(line.get_ydata()[0], 3) for line in axis.get_lines() if len(set(line.get_ydata())) == 1
            and len(line.get_xdata()) == 2}


def test_time_and_memory_plot_marks_the_explicit_out_of_memory_length(gpu_result):
    figure = gpu_plots.plot_time_and_memory(gpu_result, 64)
    time_axis, memory_axis = figure.axes
    assert time_axis.get_xscale() == time_axis.get_yscale() == memory_axis.get_yscale() == "log"
    labels = legend_texts(figure)
    assert "explicit: out of memory at $T$ = 16384" in labels and "the GPU's memory, 79 GiB" in labels
    explicit = next(line for line in time_axis.get_lines() if line.get_label() == "explicit")
    assert list(explicit.get_xdata()) == [512, 1024, 2048, 4096, 8192]
    marker = next(line for line in memory_axis.get_lines() if line.get_marker() == "X")
    assert marker.get_xdata()[0] == 16384 and marker.get_ydata()[0] == 4 * 16 * 16384**2 * 2 / 2**30
    assert figure.get_figwidth() <= COLUMN_WIDTH


def test_throughput_plot_draws_the_peak_and_the_measured_ceiling(gpu_result):
    figure = gpu_plots.plot_throughput(gpu_result, causal=True)
    assert len(figure.axes) == 2
    for axis in figure.axes:
        assert {989.0, 600.0} <= horizontal_lines(axis)
    flash = next(line for line in figure.axes[0].get_lines() if line.get_label() == "sdpa flash")
    assert list(flash.get_ydata()) == pytest.approx([400.0] * 7)
    cudnn_d128 = [line for line in figure.axes[1].get_lines() if line.get_label() == "sdpa cudnn"]
    assert cudnn_d128 == [], "a refused backend draws no line"


def test_layer_ratio_plot_has_one_bar_per_case(gpu_result):
    figure = gpu_plots.plot_layer_ratios(gpu_result)
    bars = figure.axes[0].patches
    assert [bar.get_width() for bar in bars] == pytest.approx([1.1] * 4)
    assert 1.0 in {line.get_xdata()[0] for line in figure.axes[0].get_lines()}


def test_decode_plot_draws_the_bandwidth_against_hbm(gpu_result):
    figure = gpu_plots.plot_decode_bandwidth(gpu_result)
    axis = figure.axes[0]
    assert {3.35, 2.5} <= horizontal_lines(axis)
    step = next(line for line in axis.get_lines() if line.get_label() == "layer step with the KV cache")
    assert list(step.get_xdata()) == list(suite_sizes.GPU.decode["cache_lengths"])


def test_the_printed_table_reads_a_gpu_shaped_result(gpu_result):
    lines = report.summary_lines(gpu_result)
    assert lines[:2] == ["GPU suite: NVIDIA H100 80GB HBM3, 2026-01-01", "  torch 0.0, CUDA 0.0, cuDNN 0, Triton 0.0"]
    assert "CUDA tests: 60 passed, 0 failed, 0 errors, 0 skipped" in lines
    assert "matmul 8192^3 bfloat16: 600 TFLOP/s (61% of the data-sheet peak)" in lines
    assert "  sdpa cudnn         500 (51%)    500 (51%)    500 (51%)      refused" in lines
    assert "  explicit           100 (10%)    100 (10%)    100 (10%)    100 (10%)" in lines
    assert "explicit, d=64: OOM at T=16384; T=8192 ran, peak 24.2 GiB" in lines
    assert "  causal      forward 1.10 | forward+backward 1.10" in lines
    assert "  cache  32768:     100 us, 2 TB/s (30%), alone 3 TB/s" in lines
    assert max(len(line) for line in lines) <= 76, "the table fits the book's column without wrapping"


# ---------------------------------------------------------------------------------------------- tools/gpu_run.sh


def run_script(*arguments):
    environment = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(ROOT / "tools" / "gpu_run.sh"), *arguments], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("arguments, words", [
    ((), "usage: tools/gpu_run.sh NAME [COPY_TO]"),
    (("two words",), "usage: tools/gpu_run.sh NAME [COPY_TO]"),
    (("h100", "/no/such/folder"), "tools/gpu_run.sh: the folder /no/such/folder does not exist"),
])
def test_the_gpu_script_checks_its_arguments_first(arguments, words):
    completed = run_script(*arguments)
    assert completed.returncode == 2 and words in completed.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_gpu_script_without_a_gpu_points_to_the_dry_run():
    results = ROOT / "lessons" / "benchmarks"
    before = {path: path.stat().st_mtime_ns for path in results.iterdir()}
    completed = run_script("no-gpu-here")
    assert completed.returncode == 2
    assert "sees no CUDA GPU here; to try the suite on the CPU, run" in completed.stderr
    assert "--suite gpu --dry-run" in completed.stderr
    assert {path: path.stat().st_mtime_ns for path in results.iterdir()} == before  # nothing written or touched


def test_a_run_with_a_failed_part_still_draws_the_others(gpu_result):
    gpu_result.update(layer=None, ceilings=None, section_errors={"layer": "RuntimeError: x", "ceilings": "RuntimeError: y"})
    assert gpu_plots.plot_layer_ratios(gpu_result) is None
    figure = gpu_plots.plot_throughput(gpu_result)
    assert horizontal_lines(figure.axes[0]) == {989.0}, "no measured ceiling without the ceilings part"
    assert gpu_plots.plot_decode_bandwidth(gpu_result) is not None
    assert "layer: FAILED, RuntimeError: x" in report.summary_lines(gpu_result)


def test_the_figures_write_their_maths_as_mathtext(gpu_result):
    time_and_memory = gpu_plots.plot_time_and_memory(gpu_result, 64)
    assert time_and_memory.axes[1].get_xlabel() == r"sequence length $T$"
    assert "$d$ = 64" in time_and_memory.axes[0].get_title()
    assert any("$T$ = " in text for text in legend_texts(time_and_memory))
    throughput = gpu_plots.plot_throughput(gpu_result)
    assert [axis.get_title() for axis in throughput.axes] == [f"$d$ = {d}" for d in gpu_result["sizes"]["head_dims"]]
    title = gpu_plots.plot_layer_ratios(gpu_result).axes[0].get_title()
    assert all(f"${name}$ = " in title for name in "BTEH")
    for figure in (time_and_memory, throughput):
        texts = [text.get_text() for axis in figure.axes for text in (axis.xaxis.label, axis.title)]
        assert not any("length T" in text or text.startswith("d = ") for text in texts)
