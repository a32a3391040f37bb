"""The GPU suite: everything lesson 6 promises to measure, in one command.

    python -m attn.measure.bench --suite gpu --out lessons/benchmarks/gpu-NAME.json   # on a CUDA GPU
    python -m attn.measure.bench --suite gpu --dry-run --out /tmp/gpu-dry.json      # every part, tiny, on the CPU

One run records, in one JSON file (``SCHEMA``): where it ran (provenance), the package's CUDA tests
(run by pytest in a subprocess, counts parsed from its summary), the card's practical ceilings (a
large bf16 matrix product and a device-to-device copy), the attention core for the explicit path,
every ``scaled_dot_product_attention`` backend and lesson 12's Triton kernel (time, peak memory,
TFLOP/s with causal work counted as half, shares of the data-sheet peak and of the measured
ceiling), the explicit path's out-of-memory length, the whole layer against
``nn.MultiheadAttention``, and decoding with the KV cache (time per token, achieved bandwidth).
A case that a backend refuses, that runs out of memory or that fails is recorded with its reason;
nothing is dropped. It needs torch and numpy only (Triton where present): no Jupyter, no matplotlib.

The parts live beside this file, one concern each: sizes, cases (how one case is run and timed),
provenance, ceilings, core, layer, decode, cuda_tests and report; this module runs them in turn.
"""

import json
import math
import shlex
import time
from dataclasses import asdict
from pathlib import Path

from attn.common.destinations import write_text
from attn.measure.gpu.cases import first_line, free_memory
from attn.measure.gpu.ceilings import copy_ceiling, matmul_ceiling
from attn.measure.gpu.core import FLOP_COUNTING, core_sweep, explicit_out_of_memory
from attn.measure.gpu.cuda_tests import REPO, run_cuda_tests
from attn.measure.gpu.decode import DECODE_COUNTING, decode_sweep
from attn.measure.gpu.layer import PATHS as LAYER_PATHS
from attn.measure.gpu.layer import layer_comparison
from attn.measure.gpu.provenance import peak_table, provenance
from attn.measure.gpu.report import SCHEMA, summary_lines
from attn.measure.gpu.sizes import DRY, GPU

RESULTS = REPO / "lessons" / "benchmarks"

TIMING_METHOD = (
    "each timing: {clock} around back-to-back calls (as many as last about 2 ms, at most 200; one call where a "
    "case prepares fresh state untimed before each call, as decoding's cache), divided by their number; the device "
    "idle before it; contexts (the sdpa backend, inference mode) entered once outside the timings; inputs checked "
    "once, by the first, untimed call; before each case the earlier cases' leftovers are freed, the bytes still "
    "allocated recorded (baseline_mib) and the peak statistics reset"
)


def finite(value):
    """JSON-safe numbers: NaN and infinity become None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def write(result, out):
    """Write ``result`` as JSON to ``out`` through a temporary file renamed into place (never half a file)."""
    write_text(out, json.dumps(finite(result), indent=1, allow_nan=False), follow_link=True)  # the learner's --out


def run_suite(device, sizes, command, out, dry_run, log=print):
    """Run every part in turn, rewriting ``out`` after each, so that an interrupted run keeps what it measured."""
    started = time.perf_counter()
    peaks = peak_table(device)
    result = {
        "schema": SCHEMA, "dry_run": dry_run, "complete": False,
        "provenance": provenance(device, command), "peaks": peaks, "flop_counting": FLOP_COUNTING,
        "timing": {"method": TIMING_METHOD.format(clock="one pair of CUDA events" if device.type == "cuda"
                                                  else "two time.perf_counter readings"),
                   "statistic": "median of the per-call times", "warmup": sizes.warmup, "repeats": sizes.repeats,
                   "fewer_repeats": f"at least 3 for a case whose {sizes.repeats} calls would take over "
                                    f"{sizes.case_budget_s} s; each timed row records its own repeats"},
        "sizes": asdict(sizes),
        "decode_counting": DECODE_COUNTING,
        "layer_paths": LAYER_PATHS,
    }
    log(f"GPU suite on {result['provenance']['device_name']} ({'dry run' if dry_run else 'measuring'})")

    def section(name, measure_it):
        """Run one part; if it breaks, record why (section_errors) and go on with the next part."""
        log(f"  {name} ...")
        began = time.perf_counter()
        try:
            result[name] = measure_it()
        except Exception as error:  # noqa: BLE001  one broken part must not lose the others on a borrowed GPU
            result[name] = None
            result["section_errors"][name] = first_line(error)
            log(f"  {name}: FAILED, {first_line(error)}")
        result["section_seconds"][name] = time.perf_counter() - began
        log(f"  {name}: {result['section_seconds'][name]:.1f} s")
        free_memory(device)
        write(result, out)

    result["section_errors"], result["section_seconds"] = {}, {}
    section("cuda_tests", lambda: run_cuda_tests(sizes.test_timeout_s))
    section("ceilings", lambda: {"matmul": matmul_ceiling(device, sizes), "copy": copy_ceiling(device, sizes)})
    ceiling = (result["ceilings"] or {}).get("matmul", {}).get("tflops")
    section("core", lambda: core_sweep(device, sizes, ceiling, peaks, log))
    section("explicit_out_of_memory", lambda: explicit_out_of_memory(result["core"], sizes.batch, sizes.heads, sizes.dtype))
    section("layer", lambda: layer_comparison(device, sizes))
    section("decode", lambda: decode_sweep(device, sizes, peaks))
    result.update(complete=not result["section_errors"], seconds=time.perf_counter() - started)
    write(result, out)
    return result


def check_arguments(device, out, dry_run, asked_device):
    """An argparse-style error for a suite that must not start (no CUDA, a dry run aimed at lessons/benchmarks), else None."""
    if dry_run and asked_device is not None and asked_device.type != "cpu":
        return "argument --dry-run: a dry run runs on the CPU; leave out --device"
    if not dry_run and device.type != "cuda":
        return (f"argument --suite: the GPU suite needs a CUDA GPU and this machine's best device is {device.type}; "
                "add --dry-run to run every part at tiny sizes on the CPU")
    if dry_run and Path(out).resolve().parent == RESULTS.resolve():
        return "argument --out: a dry run measures nothing; write it outside lessons/benchmarks/, which holds real runs only"
    return None


def main(device, out, dry_run, argv):
    """Run the suite, write ``out``, print the table; exit status 1 if a CUDA test failed, else 0."""
    sizes = DRY if dry_run else GPU
    command = shlex.join(["python", "-m", "attn.measure.bench", *argv])
    result = run_suite(device, sizes, command, out, dry_run)
    for line in summary_lines(result):
        print(line)
    print(f"wrote {out}")
    tests = result["cuda_tests"]
    return 1 if tests.get("failed") or tests.get("errors") else 0
