"""Benchmark the attention core (explicit vs fused) and whole layers (ours vs nn.MultiheadAttention).

    python -m attn.measure.bench --out lessons/benchmarks/bench-NAME.json
    python -m attn.measure.bench --suite gpu --out lessons/benchmarks/gpu-NAME.json
        (everything lesson 6 measures: attn/measure/gpu/suite.py)

Times are medians after warm-up, with the device synchronised around every run; each row also
records how far the runs spread (the interquartile range over the median), and the result records
how busy the machine was when the run began (the load average against the number of cores), so
that ``timing_caveats`` can say when a number should not be trusted. The JSON records where it ran
(device name, torch and CUDA versions, dtype, shapes, date) so that a plot can say where its
numbers came from.
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

from attn.common.arguments import whole_number_argument
from attn.common.destinations import file_problem, write_text
from attn.common.device import check_device, describe_device, pick_device
from attn.common.sizes import check_allocation
from attn.common.validate import positive_int, type_name
from attn.flops import attention_flops
from attn.measure.peaks import data_sheet_peaks
from attn.measure.timing import SPREAD_LIMIT, machine_load, relative_spread, seconds_of_each_run
from attn.multihead import MultiHeadAttention, explicit_attention, fused_attention

LAYER_PATHS = (
    "layer (ours): attn.MultiHeadAttention as a learner calls it, its value checks included (one reduction over the "
    "input and a wait for it, per call); layer (nn.MultiheadAttention): in inference mode, its fast path "
    "(torch._native_multi_head_attention). The GPU suite compares the two like with like (attn/measure/gpu/layer.py)"
)


def peak_bf16_tflops(device_name):
    """The dense bf16 peak for a GPU name from the course's one table (attn/measure/peaks.py), or None."""
    matched = data_sheet_peaks(device_name)
    return matched["bf16_dense_tflops"] if matched else None


# On a GPU each timed run is back-to-back calls lasting about this long (at most MAX_CALLS), so that the
# host's launch and its wait for the result, which a single call between two synchronisations would
# count, vanish against the kernels' own time.
RUN_SECONDS = 2e-3
MAX_CALLS = 200


def calls_per_run(function, device):
    """1 on a CPU (its work is done when the call returns); elsewhere, enough calls to last RUN_SECONDS."""
    if not callable(function):
        raise TypeError(f"function must be a function to time, got {type_name(function)}")
    device = check_device("device", device) or torch.device("cpu")
    if device.type == "cpu":
        return 1
    one_call = seconds_of_each_run(function, device, warmup=1, repeats=1)[0]
    return max(1, min(MAX_CALLS, math.ceil(RUN_SECONDS / max(one_call, 1e-9))))


def _measure(function, device, repeats):
    """Time per call (median and spread) and peak memory of one case, or the reason it could not run."""
    gc.collect()  # the leftovers of earlier cases go before the peak is reset
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        times = seconds_of_each_run(function, device, repeats=repeats, calls=calls_per_run(function, device))
    except torch.OutOfMemoryError:
        return {"status": "out of memory"}
    except RuntimeError as error:  # on the CPU, running out of memory is a RuntimeError from the allocator
        if not is_cpu_out_of_memory(error):
            raise
        return {"status": "out of memory"}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"status": "ok", "seconds": statistics.median(times), "spread": relative_spread(times), "runs": len(times),
            "peak_mib": peak}


def is_cpu_out_of_memory(error):
    """True for the RuntimeError PyTorch's CPU allocator raises when it cannot get the memory asked for."""
    message = str(error)
    return "can't allocate memory" in message or "not enough memory" in message or "DefaultCPUAllocator" in message


def run_benchmark(device=None, dtype=torch.bfloat16, batch=4, heads=16, head_dims=(64, 128), lengths=(512, 1024, 2048, 4096),
                  repeats=10, layers=True):
    """Measure every case and return the results as a dictionary (see the module docstring)."""
    device, batch, heads, head_dims, lengths, repeats = check_benchmark_arguments(
        device, dtype, batch, heads, head_dims, lengths, repeats, layers)
    load_at_start = machine_load()  # before the benchmark adds its own work
    generator = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    for head_dim in head_dims:
        for length in lengths:
            shape = (batch, heads, length, head_dim)
            q, k, v = (torch.randn(shape, generator=generator).to(device, dtype) for _ in range(3))
            flops = attention_flops(batch, heads, length, head_dim)
            cases = {
                "explicit": lambda q=q, k=k, v=v: explicit_attention(q, k, v),
                "fused": lambda q=q, k=k, v=v: fused_attention(q, k, v),
            }
            if layers:
                embed_dim = heads * head_dim
                reference = nn.MultiheadAttention(embed_dim, heads, batch_first=True).to(device, dtype).eval()
                ours = MultiHeadAttention.from_torch(reference).eval()
                x = torch.randn((batch, length, embed_dim), generator=generator).to(device, dtype)
                cases["layer (ours)"] = lambda ours=ours, x=x: ours(x, x, x)
                cases["layer (nn.MultiheadAttention)"] = lambda ref=reference, x=x: ref(x, x, x, need_weights=False)
            for name, function in cases.items():
                with torch.inference_mode():
                    result = _measure(function, device, repeats)
                row = {"case": name, "batch": batch, "heads": heads, "head_dim": head_dim, "length": length, **result}
                if result["status"] == "ok" and name in ("explicit", "fused"):
                    row["tflops"] = flops / result["seconds"] / 1e12
                rows.append(row)
    name = describe_device(device)
    return {
        "device": name,
        "device_type": device.type,
        "peak_bf16_tflops": peak_bf16_tflops(name) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": str(dtype).replace("torch.", ""),
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "cores": os.cpu_count(),
        "load_average": load_at_start,
        "date": datetime.date.today().isoformat(),
        "flops_formula": "4 * B * H * T^2 * d (attention core only)",
        "timing": "median time per call; on a GPU each run is back-to-back calls (about 2 ms) between two synchronisations",
        "layer_paths": LAYER_PATHS,
        "rows": rows,
    }


BENCH_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def check_benchmark_arguments(device, dtype, batch, heads, head_dims, lengths, repeats, layers):
    """run_benchmark's arguments, checked before anything runs; returns (device, batch, heads, head_dims, lengths, repeats).

    device: None (the best available), a torch.device or its name, present on this machine; sizes are positive
    whole numbers, and the largest case's query, key and value must fit in the device's memory.
    """
    if device is None:
        device = pick_device()
    elif isinstance(device, str | torch.device):
        known = available_devices()
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(f"{device!r} is not a device name; this machine has: {', '.join(known)}") from None
        if device.type != "cpu" and str(device) not in known:
            raise ValueError(f"device {device} is not available on this machine; it has: {', '.join(known)}")
    else:
        raise TypeError(f"device must be None, a torch.device or its name ('cpu', 'cuda'), got {type_name(device)}")
    if dtype not in BENCH_DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(map(str, BENCH_DTYPES))} (attention averages), got {dtype!r:.40}")
    batch, heads, repeats = positive_int("batch", batch), positive_int("heads", heads), positive_int("repeats", repeats)
    sizes = {}
    for name, values in (("head_dims", head_dims), ("lengths", lengths)):
        if isinstance(values, str) or not isinstance(values, list | tuple) or not values:
            raise TypeError(f"{name} must be a non-empty list of positive whole numbers, got {values!r:.60}")
        sizes[name] = tuple(positive_int(f"every entry of {name}", value) for value in values)
    if not isinstance(layers, bool):
        raise TypeError(f"layers must be True or False, got {type_name(layers)} {layers!r}")
    inputs = 4 * batch * heads * max(sizes["lengths"]) * max(sizes["head_dims"]) * dtype.itemsize  # q, k, v, x
    check_allocation(f"the benchmark's inputs at T={max(sizes['lengths'])}, d={max(sizes['head_dims'])}", inputs, device)
    return device, batch, heads, sizes["head_dims"], sizes["lengths"], repeats


LABEL_KEYS = ("device", "dtype", "torch", "date")
ROW_KEYS = ("case", "batch", "heads", "head_dim", "length", "status")


def check_result(result, name="result", keys=(), caller="this function"):
    """TypeError/ValueError unless ``result`` is a benchmark result as run_benchmark returns it (or its JSON holds):
    a dictionary with ``keys`` and rows that each name their case, sizes and status (and seconds if timed)."""
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
        raise TypeError(f"{caller} needs, as {name}, a benchmark result (the dictionary run_benchmark returns, or its "
                        f"JSON file read with json.load), with its rows, got {type_name(result)}")
    absent = [key for key in keys if key not in result]
    broken = [index for index, row in enumerate(result["rows"]) if not isinstance(row, dict)
              or any(key not in row for key in ROW_KEYS) or (row["status"] == "ok" and "seconds" not in row)]
    if absent or broken:
        what = f"has no {', '.join(absent)}" if absent else f"has rows without {', '.join(ROW_KEYS)} (row {broken[0]})"
        raise ValueError(f"{name} {what}: it is not a benchmark result from run_benchmark")


def timing_caveats(result, recorded=None, spread_limit=SPREAD_LIMIT, slower_limit=3.0):
    """Sentences saying why the times of ``result`` may not be trusted; an empty list if none.

    Three reasons, one sentence each: the machine was busy when the run began (its load average was at
    least its number of cores: other work was waiting for every core); some rows' runs spread by more
    than ``spread_limit``; some rows are more than ``slower_limit`` times slower than the same case in
    ``recorded`` (a committed result from the same kind of device and dtype), as on a busy machine.
    """
    check_result(result, caller="timing_caveats")
    if recorded is not None:
        check_result(recorded, "recorded", caller="timing_caveats")
    caveats = []
    load, cores = result.get("load_average"), result.get("cores")
    if load is not None and cores and load >= cores:
        caveats.append(f"the machine was busy: load average {load:.1f} on {cores} cores when the run began, "
                       "so other programs shared the cores and every time may be too long")
    timed = [row for row in result["rows"] if row["status"] == "ok"]
    spread = [f"{_row_name(row)} ({row['spread']:.0%})" for row in timed if row.get("spread", 0.0) > spread_limit]
    if spread:
        caveats.append(f"{len(spread)} of {len(timed)} cases spread by more than {spread_limit:.0%} "
                       f"(the middle half of their runs, over the median): {', '.join(spread)}")
    same_kind = recorded is not None and all(result.get(key) == recorded.get(key) for key in ("device_type", "dtype"))
    if same_kind:
        reference = {_case_key(row): row for row in recorded["rows"] if row["status"] == "ok"}
        slower = [f"{_row_name(row)} ({row['seconds'] / reference[_case_key(row)]['seconds']:.0f}x)" for row in timed
                  if _case_key(row) in reference and row["seconds"] > slower_limit * reference[_case_key(row)]["seconds"]]
        if slower:
            caveats.append(f"{len(slower)} of {len(timed)} cases more than {slower_limit:g} times slower than the recorded "
                           f"run ({label(recorded)}): {', '.join(slower)}")
    return caveats


def _row_name(row):
    return f"T={row['length']} d={row['head_dim']} {row['case']}"


def _case_key(row):
    """What makes two rows the same measurement: the case and every size."""
    return row["case"], row["batch"], row["heads"], row["head_dim"], row["length"]


def share_of_peak(result, row):
    """The fraction of the GPU's dense bf16 peak a core row reached, or None if unknown."""
    for name, value in (("result", result), ("row", row)):
        if not isinstance(value, dict):
            raise TypeError(f"share_of_peak needs, as {name}, a benchmark result and one of its rows (dictionaries), "
                            f"got {type_name(value)}")
    peak = result.get("peak_bf16_tflops")
    if not peak or "tflops" not in row or result.get("dtype") != "bfloat16":
        return None
    return row["tflops"] / peak


DTYPES = ("bfloat16", "float16", "float32", "float64")


def available_devices():
    """The devices this machine can run on, as names for --device."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        names.append("mps")
    return names


def _device(text):
    """--device: a device that exists on this machine."""
    known = ", ".join(available_devices())
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device name; this machine has: {known}") from None
    if str(device) not in available_devices() and device.type != "cpu":
        raise argparse.ArgumentTypeError(f"{text} is not available on this machine; it has: {known}")
    return device


def _positive_int(text):
    """--batch, --heads, --head-dims, --lengths, --repeats: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


REPEATS_ARGUMENT = whole_number_argument("--repeats", 1, 10_000, "each repeat times every case again")


def _output_file(text):
    """--out: a file in a folder that exists and can be written, checked before anything runs."""
    problem = file_problem(text, example="bench.json")
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def _parser():
    parser = argparse.ArgumentParser(prog="python -m attn.measure.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=_device, default=None, help="cuda, mps or cpu (default: the best available)")
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="default: bfloat16 on a GPU, float32 on CPU")
    parser.add_argument("--batch", type=_positive_int, default=None, help="default: 4 on a GPU, 1 on CPU")
    parser.add_argument("--heads", type=_positive_int, default=16)
    parser.add_argument("--head-dims", type=_positive_int, nargs="+", default=[64, 128])
    parser.add_argument("--lengths", type=_positive_int, nargs="+", default=None)
    parser.add_argument("--repeats", type=REPEATS_ARGUMENT, default=10)
    parser.add_argument("--out", type=_output_file, required=True, help="where to write the JSON results")
    parser.add_argument("--suite", choices=["gpu"], default=None,
                        help="gpu: the whole GPU suite (attn/measure/gpu/suite.py), at its own fixed sizes")
    parser.add_argument("--dry-run", action="store_true", help="with --suite gpu: every part at tiny sizes on the CPU")
    return parser


def _run_suite(parser, args, argv):
    """--suite gpu: checked like every other argument before anything runs, then handed to attn.measure.gpu.suite."""
    from attn.measure.gpu import suite

    device = torch.device("cpu") if args.dry_run else (args.device or pick_device())
    problem = suite.check_arguments(device, args.out, args.dry_run, args.device)
    if problem:
        parser.error(problem)
    return suite.main(device, args.out, args.dry_run, sys.argv[1:] if argv is None else argv)


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)  # every argument is checked here, before anything runs
    if args.dry_run and args.suite is None:
        parser.error("argument --dry-run: only with --suite gpu")
    if args.suite == "gpu":
        return _run_suite(parser, args, argv)
    device = args.device if args.device is not None else pick_device()
    on_gpu = device.type != "cpu"
    if device.type == "mps" and args.dtype == "float64":
        parser.error("argument --dtype: MPS does not support float64; use float32, float16 or bfloat16")
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if on_gpu else torch.float32)
    if args.lengths is None:
        args.lengths = [512, 1024, 2048, 4096, 8192, 16384, 32768] if on_gpu else [128, 256, 512, 1024, 2048]
    if args.batch is None:
        args.batch = 4 if on_gpu else 1
    sizes = (args.batch, args.heads, tuple(args.head_dims), tuple(args.lengths), args.repeats)
    try:  # sizes that cannot fit are refused here, before the first case runs
        check_benchmark_arguments(device, dtype, *sizes, True)
    except (TypeError, ValueError) as error:
        parser.error(f"arguments --batch, --heads, --head-dims, --lengths: {error}")
    result = run_benchmark(device, dtype, *sizes)
    write_text(args.out, json.dumps(result, indent=1), follow_link=True)  # the file the learner named
    for row in result["rows"]:
        timing = f"{row['seconds'] * 1e3:9.2f} ms" if row["status"] == "ok" else row["status"]
        extra = f"  {row['tflops']:7.2f} TFLOP/s" if "tflops" in row else ""
        print(f"d={row['head_dim']:4d} T={row['length']:6d} {row['case']:32s} {timing}{extra}")
    for caveat in timing_caveats(result):
        print(f"caveat: {caveat}")
    print(f"wrote {args.out} ({result['device']}, torch {result['torch']}, {result['dtype']})")
    return 0


def label(result):
    """Where a result came from, for a plot title: device, dtype, torch version and date."""
    check_result(result, keys=LABEL_KEYS, caller="label")
    return f"{result['device']}, {result['dtype']}, torch {result['torch']}, {result['date']}"


def plot(result, axes=None):
    """Core time and TFLOP/s against T for the explicit and fused paths, one line per head size.

    Draws into two stacked axes (made at the book's column width when ``axes`` is None).
    """
    check_result(result, keys=LABEL_KEYS, caller="plot")
    import matplotlib.pyplot as plt

    from attn.common.plotting import COLUMN_WIDTH, GUIDE, PALETTE

    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 7))
    time_axis, rate_axis = axes
    colours = {"explicit": PALETTE[0], "fused": PALETTE[1]}
    head_dims = sorted({row["head_dim"] for row in result["rows"]})
    markers = dict(zip(head_dims, ["o-", "s--", "^:", "D-."], strict=False))
    for head_dim in head_dims:
        for case, colour in colours.items():
            rows = [r for r in result["rows"] if r["case"] == case and r["head_dim"] == head_dim and r["status"] == "ok"]
            lengths = [r["length"] for r in rows]
            name = f"{case}, $d$ = {head_dim}"
            marker = markers.get(head_dim, "o-")
            time_axis.loglog(lengths, [r["seconds"] * 1e3 for r in rows], marker, color=colour, label=name)
            rate_axis.semilogx(lengths, [r["tflops"] for r in rows], marker, color=colour, label=name)
    time_axis.set(xlabel=r"sequence length $T$", ylabel="milliseconds (median)", title="Attention core time")
    rate_axis.set(xlabel=r"sequence length $T$", ylabel=r"TFLOP/s $= 4BHT^2d\,/\,t$", title="Achieved throughput")
    if result.get("peak_bf16_tflops") and result.get("dtype") == "bfloat16":
        rate_axis.axhline(result["peak_bf16_tflops"], color=GUIDE, ls="--", label="dense bfloat16 peak")
    measured = sorted({row["length"] for row in result["rows"]})
    for axis in axes:
        axis.set_xticks(measured, labels=[str(length) for length in measured])
        axis.minorticks_off()
        axis.legend()
    axes[0].figure.suptitle(label(result))
    axes[0].figure.tight_layout()
    return axes


if __name__ == "__main__":
    raise SystemExit(main())
