"""Benchmark the attention core (explicit vs fused) and whole layers (ours vs nn.MultiheadAttention).

    python -m attn.bench --out lessons/results/bench-NAME.json
    python -m attn.bench --suite gpu --out lessons/results/gpu-NAME.json   (everything lesson 6 measures; attn/gpu_suite.py)

Times are medians after warm-up, with the device synchronised around every run. The JSON
records where it ran (device name, torch and CUDA versions, dtype, shapes, date) so that a
plot can say where its numbers came from.
"""

import argparse
import datetime
import json
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


def median_seconds(function, device, warmup=3, repeats=10):
    """Median wall-clock time of ``function()`` in seconds, synchronising the device around each run."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        function()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure(function, device, repeats):
    """Time and peak memory of one case, or the reason it could not run."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        seconds = median_seconds(function, device, repeats=repeats)
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
    return {"status": "ok", "seconds": seconds, "peak_mib": peak}


def is_cpu_out_of_memory(error):
    """True for the RuntimeError PyTorch's CPU allocator raises when it cannot get the memory asked for."""
    message = str(error)
    return "can't allocate memory" in message or "not enough memory" in message or "DefaultCPUAllocator" in message


def run_benchmark(device=None, dtype=torch.bfloat16, batch=4, heads=16, head_dims=(64, 128), lengths=(512, 1024, 2048, 4096),
                  repeats=10, layers=True):
    """Measure every case and return the results as a dictionary (see the module docstring)."""
    device = torch.device(device) if device is not None else pick_device()
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
        "date": datetime.date.today().isoformat(),
        "flops_formula": "4 * B * H * T^2 * d (attention core only)",
        "rows": rows,
    }


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
    print(f"wrote {args.out} ({result['device']}, torch {result['torch']}, {result['dtype']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


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
            name = f"{case}, d={head_dim}"
            marker = markers.get(head_dim, "o-")
            time_axis.loglog(lengths, [r["seconds"] * 1e3 for r in rows], marker, color=colour, label=name)
            rate_axis.semilogx(lengths, [r["tflops"] for r in rows], marker, color=colour, label=name)
    time_axis.set(xlabel="sequence length T", ylabel="milliseconds (median)", title="Attention core time")
    rate_axis.set(xlabel="sequence length T", ylabel="TFLOP/s = 4 B H T^2 d / t", title="Achieved throughput")
    if result.get("peak_bf16_tflops") and result.get("dtype") == "bfloat16":
        rate_axis.axhline(result["peak_bf16_tflops"], color=GUIDE, ls="--", label="dense bf16 peak")
    measured = sorted({row["length"] for row in result["rows"]})
    for axis in axes:
        axis.set_xticks(measured, labels=[str(length) for length in measured])
        axis.minorticks_off()
        axis.legend()
    axes[0].figure.suptitle(label(result))
    axes[0].figure.tight_layout()
    return axes
