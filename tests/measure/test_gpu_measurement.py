"""What the GPU suite times and measures, proved on the CPU: the timed region holds only the calls (no input
checks, no context-manager entry), every case starts with its own peak and no leftovers of the one before,
the decode bandwidth counts the bytes a step really moves, and each rate is set against the right peak.
"""

import gc
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attn import multihead
from attn.common import layer_checks, validate
from attn.common import sizes as allocation_checks
from attn.kvcache import KVCache, PreallocatedKVCache
from attn.measure import bench, timing
from attn.measure import peaks as gpu_peaks
from attn.measure.gpu import cases, core, layer
from attn.measure.gpu import decode as gpu_decode
from attn.measure.gpu import sizes as suite_sizes

CPU = torch.device("cpu")
CHECKS = {str(Path(module.__file__).resolve()) for module in (validate, layer_checks, allocation_checks)}  # every input check
FORBIDDEN_NAMES = {"check_flash_inputs", "_check_kernel_arguments", "flash_forward", "check_inputs", "require_finite",
                   "sdpa_kernel", "_sdpa_kernel", "__enter__", "__exit__"}


@pytest.fixture
def timed_regions(monkeypatch):
    """Every Python function called between start_timer and stop_timer, one list per timed region."""
    regions = []
    start, stop = cases.start_timer, cases.stop_timer

    def record(frame, event, argument):
        if event == "call":
            code = frame.f_code
            regions[-1].append((str(Path(code.co_filename).resolve()), code.co_name))

    def started(device):
        regions.append([])
        begun = start(device)
        sys.setprofile(record)
        return begun

    def stopped(begun, device):
        sys.setprofile(None)
        return stop(begun, device)

    monkeypatch.setattr(cases, "start_timer", started)
    monkeypatch.setattr(cases, "stop_timer", stopped)
    yield regions
    sys.setprofile(None)  # even if a timed call raised before stop_timer


def checks_and_contexts(region):
    """The calls in a timed region that are input checks or context-manager entries and exits."""
    return sorted({name for path, name in region if path in CHECKS or name in FORBIDDEN_NAMES})


def test_the_recorder_sees_a_check_and_a_context_inside_a_timing(timed_regions):
    """The instrument can fail: a timed function that checks its input and enters a context is caught."""
    tensor = torch.ones(4)

    def checked(_):
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            validate.require_finite("x", tensor)

    cases.median_seconds(checked, CPU, 0, 3)
    assert {"require_finite", "sdpa_kernel", "__enter__"} <= set(checks_and_contexts(timed_regions[-1]))


def test_the_timed_region_holds_only_the_calls(timed_regions):
    """Every implementation of the attention core: nothing but its work between the timing events."""
    sizes = replace(suite_sizes.DRY, head_dims=(16,), lengths=(32,), warmup=1, repeats=2)
    untriton = {name: found for name, found in core.implementations(CPU).items() if name != "triton"}  # its own test
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core, "implementations", lambda device: untriton)
        rows = core.core_sweep(CPU, sizes, None, {"matched": None}, log=lambda line: None)
    timed = [row for row in rows if row["status"] == "ok"]
    assert {row["impl"] for row in timed} >= {"explicit", "sdpa flash", "sdpa math"}
    assert timed_regions, "nothing was timed"
    for region in timed_regions:
        assert checks_and_contexts(region) == [], checks_and_contexts(region)
    assert all(row["calls_per_timing"] >= 1 for row in timed)
    fast = next(row for row in timed if row["impl"] == "sdpa flash")
    assert fast["calls_per_timing"] > 1, "a short call is timed many times between one pair of events"


def test_the_layer_is_timed_without_checks_or_context_entries_and_says_which_path_ran(timed_regions):
    sizes = replace(suite_sizes.DRY, warmup=1, repeats=2)
    rows = layer.layer_comparison(CPU, sizes)
    assert len(rows) == 4 and timed_regions
    with_checks = 0
    for region in timed_regions:
        found = checks_and_contexts(region)
        assert not {"__enter__", "__exit__", "sdpa_kernel"} & set(found), found
        if found:  # only "ours_with_checks", the layer as a learner calls it, which says so in its name
            assert "check_inputs" in found, found
            with_checks += 1
    assert with_checks == 4 * (1 + sizes.repeats)  # per row: one calibrating call, then the timings
    for row in rows:  # which path each side ran, observed
        assert row["ops"]["ours"] == row["ops"]["reference"], row["ops"]  # like with like
        assert any("attention" in name for name in row["ops"]["ours"])
        if row["mode"] == "forward":
            assert row["ops"]["reference_fast_path"] == ["_native_multi_head_attention.default"]
            assert row["ratio_to_fast_path"] > 0
    assert torch.backends.mha.get_fastpath_enabled(), "the fast path is switched back on afterwards"


def test_the_triton_row_times_the_unchecked_launcher(timed_regions):
    pytest.importorskip("triton")
    found = core.implementations(CPU)["triton"]
    query = torch.randn(1, 1, 16, 16)
    inputs = (query, query.clone(), query.clone(), True)
    failure, _ = core.first_call(found, inputs, None, CPU)
    assert failure is None
    result = core.timed_case(found, inputs, CPU, replace(suite_sizes.DRY, warmup=0, repeats=1))
    assert result["status"] == "ok"
    names = {name for _, name in timed_regions[-1]}
    assert "launch" in names and not {"flash_forward", "check_flash_inputs", "require_finite"} & names


def live_tensors(shape):
    """The tensors alive now whose shape is ``shape``, by dtype."""
    found = {}
    for item in gc.get_objects():
        if issubclass(type(item), torch.Tensor) and tuple(item.shape) == shape:
            found[item.dtype] = found.get(item.dtype, 0) + 1
    return found


def test_each_case_starts_with_its_peak_reset_and_no_leftovers(monkeypatch):
    """bfloat16 inputs: the float32 copies and the float32 reference of the first length must be gone."""
    sizes = replace(suite_sizes.DRY, dtype="bfloat16", head_dims=(8,), lengths=(16, 32), warmup=0, repeats=1)
    explicit_and_math = {name: found for name, found in core.implementations(CPU).items() if name in ("explicit", "sdpa math")}
    monkeypatch.setattr(core, "implementations", lambda device: explicit_and_math)
    seen, events = [], []
    monkeypatch.setattr(cases, "free_memory", lambda device: events.append("free") or gc.collect())
    monkeypatch.setattr(cases, "allocated_bytes", lambda device: events.append("baseline") or 3 * 2**20)
    monkeypatch.setattr(cases, "peak_allocated", lambda device: 5 * 2**20)

    def reset(device):
        events.append("reset")
        length = sizes.lengths[len(seen) // 2 % 2]  # (causal or not) x length x 2 implementations, in that order
        seen.append(live_tensors((sizes.batch, sizes.heads, length, 8)))

    monkeypatch.setattr(cases, "reset_peak", reset)
    rows = core.core_sweep(CPU, sizes, None, {"matched": None}, log=lambda line: None)
    assert len(seen) == 8 == len([row for row in rows if row["status"] == "ok"])
    assert all(tensors == {torch.bfloat16: 3} for tensors in seen), seen  # the case's query, key and value only
    timed_events = [event for event in events if event in ("free", "baseline", "reset")]
    assert timed_events.count("baseline") == 8
    assert all(timed_events[index - 1:index + 2] == ["free", "baseline", "reset"]
               for index, event in enumerate(timed_events) if event == "baseline")
    first = rows[0]
    assert first["baseline_mib"] == 3 and first["peak_mib"] == 5 and first["peak_above_baseline_mib"] == 2
    assert first["relative_error"] is not None and first["relative_error"] < 0.02


class _PersistentBytes(TorchDispatchMode):
    """Bytes that operations read from the weights and the cache buffers, and write into the buffers."""

    def __init__(self, weights, buffers):
        super().__init__()
        self.weights = {w.untyped_storage().data_ptr() for w in weights}
        self.buffers = {b.untyped_storage().data_ptr() for b in buffers}
        self.counted = {"weights": 0, "cache_written": 0, "cache_read": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:  # a view moves nothing
            tensors = [(index, t) for index, argument in enumerate(args)
                       for t in (argument if isinstance(argument, list | tuple) else [argument]) if isinstance(t, torch.Tensor)]
            for index, tensor in tensors:
                where = tensor.untyped_storage().data_ptr()
                if where in self.weights:
                    self.counted["weights"] += tensor.nbytes
                elif where in self.buffers:
                    written = index == 0 and func.__name__.startswith("copy_")
                    self.counted["cache_written" if written else "cache_read"] += tensor.nbytes
        return func(*args, **(kwargs or {}))


def test_the_decode_byte_count_is_what_a_step_moves():
    torch.manual_seed(0)
    attention = multihead.MultiHeadAttention(32, 4).eval()
    cache = PreallocatedKVCache(capacity=20)
    prefix = torch.randn(1, 9, 32)
    token = torch.randn(1, 1, 32)
    with torch.inference_mode():
        attention(prefix, prefix, prefix, is_causal=True, cache=cache)
        with _PersistentBytes(attention.parameters(), (cache._key_buffer, cache._value_buffer)) as counter:
            attention(token, token, token, is_causal=True, cache=cache)
    assert counter.counted == gpu_decode.step_bytes(attention, 1, 10, 4)
    assert counter.counted["cache_read"] == 2 * 4 * 10 * 8 * 4  # keys and values, H_kv 4 x T 10 x d 8, float32


def test_the_copying_cache_moves_more_than_the_count():
    """Why the suite decodes with the preallocated cache: torch.cat reads the whole old cache at every step."""
    torch.manual_seed(0)
    attention = multihead.MultiHeadAttention(32, 4).eval()
    cache = KVCache()
    prefix = torch.randn(1, 9, 32)
    with torch.inference_mode():
        attention(prefix, prefix, prefix, is_causal=True, cache=cache)
        old = (cache.keys, cache.values)  # kept alive, so that no new tensor reuses their memory and is counted
        with _PersistentBytes(attention.parameters(), old) as counter:
            attention(prefix[:, :1], prefix[:, :1], prefix[:, :1], is_causal=True, cache=cache)
    assert counter.counted["cache_read"] == 2 * 4 * 9 * 8 * 4  # the old cache, read by torch.cat
    del old
    assert counter.counted["cache_written"] == 0  # written to new memory instead, and read from there by attention


def test_the_dry_runs_decode_uses_the_preallocated_cache_and_counts_weights():
    sizes = replace(suite_sizes.DRY, warmup=0, repeats=1)
    row = gpu_decode.decode_sweep(CPU, sizes, {"matched": None})[0]
    assert row["cache"] == "attn.kvcache.PreallocatedKVCache"
    shape = sizes.decode
    weights = 4 * (shape["embed_dim"] ** 2 + shape["embed_dim"]) * 4  # four E x E projections and biases, float32
    assert row["bytes_per_step_parts"]["weights"] == weights
    assert row["bytes_per_step"] == sum(row["bytes_per_step_parts"].values())


def test_the_math_backend_upcasts_and_is_set_against_the_float32_peak():
    """PyTorch's math backend copies bfloat16 inputs to float32: seen in the operations it runs."""
    names = []

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.startswith("_to_copy") and (kwargs or {}).get("dtype") == torch.float32:
                names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    query = torch.randn(1, 2, 8, 4).bfloat16()
    with Names():
        core.sdpa_call("math", False)(query, query, query)
    assert names, "the math backend computed in bfloat16"
    found = core.implementations(CPU)
    assert core.compute_dtype(found["sdpa math"], "bfloat16") == "float32"
    assert core.compute_dtype(found["sdpa flash"], "bfloat16") == "bfloat16"
    peaks = {"matched": gpu_peaks.data_sheet_peaks("NVIDIA H100 80GB HBM3")}
    row = {"status": "ok", "flops": 67e12, "seconds": 1.0, "compute_dtype": "float32"}
    core.add_rates(row, 600.0, peaks, "bfloat16")
    assert row["share_of_peak"] == pytest.approx(1.0) and row["share_of_ceiling"] is None
    row = {"status": "ok", "flops": 989e12, "seconds": 1.0, "compute_dtype": "bfloat16"}
    core.add_rates(row, 600.0, peaks, "bfloat16")
    assert row["share_of_peak"] == pytest.approx(1.0) and row["share_of_ceiling"] == pytest.approx(989 / 600)


@pytest.mark.parametrize("name, bf16, fp32", [
    ("NVIDIA H100 NVL", 835.0, 60.0), ("NVIDIA H200 NVL", 835.0, 60.0), ("NVIDIA H100 80GB HBM3", 989.0, 67.0),
    ("NVIDIA H100 PCIe", 756.0, 51.0), ("NVIDIA A100-SXM4-80GB", 312.0, 19.5),
])
def test_the_benchmark_and_the_suite_read_one_table_of_peaks(name, bf16, fp32):
    assert bench.peak_bf16_tflops(name) == bf16 == gpu_peaks.data_sheet_peaks(name)["bf16_dense_tflops"]
    assert gpu_peaks.data_sheet_peaks(name)["fp32_tflops"] == fp32


def test_a_gpu_run_of_the_benchmark_times_many_calls_per_run(monkeypatch):
    """On a device that queues work, a run is back-to-back calls, divided by their number (faked here)."""
    queued = torch.device("meta")  # synchronize() does nothing for it, as for a device with nothing to wait for
    monkeypatch.setattr(bench, "seconds_of_each_run", lambda *arguments, **options: [5e-4])  # one call: 0.5 ms
    calls = bench.calls_per_run(lambda: None, queued)
    assert calls == math.ceil(bench.RUN_SECONDS / 5e-4)
    counted = []
    times = timing.seconds_of_each_run(lambda: counted.append(time.sleep(5e-4)), queued, warmup=0, repeats=2, calls=3)
    assert len(counted) == 6, "each run makes its calls back to back"
    assert len(times) == 2 and all(seconds >= 5e-4 for seconds in times), "a run's time is divided by its calls"
    assert bench.calls_per_run(lambda: None, CPU) == 1
