"""Benchmark the attention core (explicit vs fused) and whole layers (ours vs nn.MultiheadAttention).

    python -m attn.bench --out lessons/results/bench-NAME.json
    python -m attn.bench --suite gpu --out lessons/results/gpu-NAME.json   (everything lesson 6 measures; attn/gpu_suite.py)

Times are medians after warm-up, with the device synchronised around every run; each row also
records how far the runs spread (the interquartile range over the median), and the result records
how busy the machine was when the run began (the load average against the number of cores), so
that ``timing_caveats`` can say when a number should not be trusted. The JSON records where it ran
(device name, torch and CUDA versions, dtype, shapes, date) so that a plot can say where its
numbers came from.
"""

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from attn.destinations import file_problem
from attn.device import describe_device, pick_device
from attn.multihead import MultiHeadAttention, explicit_attention, fused_attention

# Dense bf16 tensor-core peaks in TFLOP/s, from the vendors' data sheets (without sparsity).
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}


def peak_bf16_tflops(device_name):
    """The dense bf16 peak for a GPU name, or None when the course does not know it."""
    for key, peak in PEAK_BF16_TFLOPS.items():  # "H100 PCIe" is checked before plain "H100"
        if all(part in device_name for part in key.split()):
            return peak
    return None


def attention_flops(batch, heads, length, head_dim):
    """Floating-point operations of the attention core: Q K^T and A V, 2 * 2 * B * H * T^2 * d."""
    return 4 * batch * heads * length**2 * head_dim


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


# A row whose middle half of runs spreads over more than this fraction of its median is flagged.
SPREAD_LIMIT = 0.2


def seconds_of_each_run(function, device, warmup=3, repeats=10):
    """Wall-clock seconds of ``repeats`` calls of ``function()`` after ``warmup`` untimed ones.

    The device is synchronised around each run, so that a GPU's queued work is counted.
    """
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        function()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def median_seconds(function, device, warmup=3, repeats=10):
    """Median wall-clock time of ``function()`` in seconds, synchronising the device around each run."""
    return statistics.median(seconds_of_each_run(function, device, warmup, repeats))


def relative_spread(times):
    """The interquartile range of ``times`` over their median: 0.1 means the middle half of the
    runs lies within a band 10% of the median wide; 0 for a single run."""
    if isinstance(times, (str, bytes)) or not hasattr(times, "__len__"):
        raise TypeError(f"relative_spread needs a list of times in seconds, got {type(times).__name__}")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0 for t in times):
        raise ValueError(f"relative_spread needs times in seconds, each a finite number of 0 or more, got {list(times)!r:.80}")
    if len(times) < 2:
        return 0.0
    lower, _, upper = statistics.quantiles(times, n=4, method="inclusive")
    return (upper - lower) / statistics.median(times)


@contextlib.contextmanager
def silenced_stderr():
    """Within the block, send whatever is written to the process's standard error (file descriptor 2)
    nowhere: PyTorch's profiler library writes two log lines there, with a timestamp, every time it
    starts and stops. Standard error is restored when the block ends, even by an exception."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as nowhere:
            os.dup2(nowhere.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def machine_load():
    """The load average over the last minute (tasks running or waiting for a core), or None where
    the system does not report it (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _measure(function, device, repeats):
    """Time (median and spread) and peak memory of one case, or the reason it could not run."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        times = seconds_of_each_run(function, device, repeats=repeats)
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


def window_decode_times(lengths=(256, 1024, 4096), window=128, embed_dim=64, num_heads=4, num_layers=2,
                        warmup=2, repeats=7, device="cpu"):
    """Seconds per generated token at each length, with every layer global (a growing KVCache, lesson 10)
    and with every layer local (a RingKVCache of ``window`` positions, lesson 14), and the cache bytes.

    Both models are the course's Decoder with the same weights; a step feeds one token (batch of one)
    after the first length - 1 positions were prefilled (attn.decoder.seconds_per_token). Returns rows
    {"length", "cache", "seconds", "cache_bytes"}.
    """
    from attn.decoder import Decoder, seconds_per_token  # here: attn.decoder imports this module

    rows = []
    for kind in ("global", "local"):
        torch.manual_seed(0)
        model = Decoder(16, max(lengths) + warmup + repeats, embed_dim, num_heads, num_layers,
                        window=window if kind == "local" else None).to(device).eval()
        for length in lengths:
            seconds = seconds_per_token(model, length, use_cache=True, warmup=warmup, repeats=repeats)
            caches = model.new_caches()
            with torch.no_grad():
                model(torch.zeros(1, length, dtype=torch.long, device=device), caches)
            rows.append({"length": length, "cache": "growing" if kind == "global" else f"ring (W={window})",
                         "seconds": seconds, "cache_bytes": sum(cache.nbytes for cache in caches)})
    return rows


def is_cpu_out_of_memory(error):
    """True for the RuntimeError PyTorch's CPU allocator raises when it cannot get the memory asked for."""
    message = str(error)
    return "can't allocate memory" in message or "not enough memory" in message or "DefaultCPUAllocator" in message


def run_benchmark(device=None, dtype=torch.bfloat16, batch=4, heads=16, head_dims=(64, 128), lengths=(512, 1024, 2048, 4096),
                  repeats=10, layers=True):
    """Measure every case and return the results as a dictionary (see the module docstring)."""
    device = torch.device(device) if device is not None else pick_device()
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
        "rows": rows,
    }


def timing_caveats(result, recorded=None, spread_limit=SPREAD_LIMIT, slower_limit=3.0):
    """Sentences saying why the times of ``result`` may not be trusted; an empty list if none.

    Three reasons, one sentence each: the machine was busy when the run began (its load average was at
    least its number of cores: other work was waiting for every core); some rows' runs spread by more
    than ``spread_limit``; some rows are more than ``slower_limit`` times slower than the same case in
    ``recorded`` (a committed result from the same kind of device and dtype), as on a busy machine.
    """
    for name, value in (("result", result), ("recorded", recorded)):
        if not (value is None and name == "recorded") and not (isinstance(value, dict) and isinstance(value.get("rows"), list)):
            raise TypeError(f"timing_caveats needs, as {name}, a benchmark result (the dictionary run_benchmark "
                            f"returns, with its rows), got {type(value).__name__}")
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


def _output_file(text):
    """--out: a file in a folder that exists and can be written, checked before anything runs."""
    problem = file_problem(text, example="bench.json")
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def _parser():
    parser = argparse.ArgumentParser(prog="python -m attn.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=_device, default=None, help="cuda, mps or cpu (default: the best available)")
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="default: bfloat16 on a GPU, float32 on CPU")
    parser.add_argument("--batch", type=_positive_int, default=None, help="default: 4 on a GPU, 1 on CPU")
    parser.add_argument("--heads", type=_positive_int, default=16)
    parser.add_argument("--head-dims", type=_positive_int, nargs="+", default=[64, 128])
    parser.add_argument("--lengths", type=_positive_int, nargs="+", default=None)
    parser.add_argument("--repeats", type=_positive_int, default=10)
    parser.add_argument("--out", type=_output_file, required=True, help="where to write the JSON results")
    parser.add_argument("--suite", choices=["gpu"], default=None,
                        help="gpu: the whole GPU suite (attn/gpu_suite.py), at its own fixed sizes")
    parser.add_argument("--dry-run", action="store_true", help="with --suite gpu: every part at tiny sizes on the CPU")
    return parser


def _run_suite(parser, args, argv):
    """--suite gpu: checked like every other argument before anything runs, then handed to attn.gpu_suite."""
    from attn import gpu_suite

    device = torch.device("cpu") if args.dry_run else (args.device or pick_device())
    problem = gpu_suite.check_arguments(device, args.out, args.dry_run, args.device)
    if problem:
        parser.error(problem)
    return gpu_suite.main(device, args.out, args.dry_run, sys.argv[1:] if argv is None else argv)


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
    result = run_benchmark(device, dtype, args.batch, args.heads, tuple(args.head_dims), tuple(args.lengths), args.repeats)
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
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
    return f"{result['device']}, {result['dtype']}, torch {result['torch']}, {result['date']}"


def plot(result, axes=None):
    """Core time and TFLOP/s against T for the explicit and fused paths, one line per head size.

    Draws into two stacked axes (made at the book's column width when ``axes`` is None).
    """
    import matplotlib.pyplot as plt

    from attn.plotting import COLUMN_WIDTH, GUIDE, PALETTE

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
