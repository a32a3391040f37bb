"""The GPU suite: everything lesson 6 promises to measure, in one command.

    python -m attn.bench --suite gpu --out lessons/results/gpu-NAME.json   # on a CUDA GPU
    python -m attn.bench --suite gpu --dry-run --out /tmp/gpu-dry.json      # every part, tiny, on the CPU

One run records, in one JSON file (``SCHEMA``): where it ran (provenance), the package's CUDA tests
(run by pytest in a subprocess, counts parsed from its summary), the card's practical ceilings (a
large bf16 matrix product and a device-to-device copy), the attention core for the explicit path,
every ``scaled_dot_product_attention`` backend and lesson 12's Triton kernel (time, peak memory,
TFLOP/s with causal work counted as half, shares of the data-sheet peak and of the measured
ceiling), the explicit path's out-of-memory length, the whole layer against
``nn.MultiheadAttention``, and decoding with the KV cache (time per token, achieved bandwidth).
A case that a backend refuses, that runs out of memory or that fails is recorded with its reason;
nothing is dropped. It needs torch and numpy only (Triton where present): no Jupyter, no matplotlib.
"""

import datetime
import gc
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from attn.kvcache import KVCache
from attn.multihead import MultiHeadAttention, explicit_attention

SCHEMA = "attn.gpu_suite/1"
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "lessons" / "results"

# Published specifications, not measurements: dense (no sparsity) bf16 tensor-core TFLOP/s, which
# the data sheets print as half their "with sparsity" figure, and HBM bandwidth in TB/s.
DATA_SHEET_SOURCE = (
    "NVIDIA H100 Tensor Core GPU data sheet (H100 SXM, H100 PCIe and H100 NVL columns) and NVIDIA H200 Tensor Core "
    "GPU data sheet (H200 SXM and H200 NVL columns): BF16 Tensor Core with sparsity, halved for dense; GPU memory bandwidth"
)
DATA_SHEET_PEAKS = {  # the more specific names first: "H100 PCIe" must not match plain "H100"
    "H100 PCIe": {"bf16_dense_tflops": 756.0, "hbm_tb_per_s": 2.0},
    "H100 NVL": {"bf16_dense_tflops": 835.0, "hbm_tb_per_s": 3.9},
    "H200 NVL": {"bf16_dense_tflops": 835.0, "hbm_tb_per_s": 4.8},
    "H100": {"bf16_dense_tflops": 989.0, "hbm_tb_per_s": 3.35},  # SXM
    "H200": {"bf16_dense_tflops": 989.0, "hbm_tb_per_s": 4.8},  # SXM
}

FLOP_COUNTING = (
    "non-causal: 4 B H T^2 d (Q K^T and A V, 2 B H T^2 d each); causal: half of that, 2 B H T^2 d, because about half "
    "of the T^2 query-key pairs are masked (exactly T (T + 1) / 2 are kept) and the fused kernels skip the masked blocks"
)
DECODE_COUNTING = (
    "bytes read per step: the cached keys and values, 2 B H T d x element size, at the mean cache length of the timed "
    "steps, divided by the time per token; the course's KVCache also copies the whole cache on every append (torch.cat), "
    "which is not counted, so the memory traffic of a layer step is larger than this; a short cache can stay in the "
    "GPU's L2 cache between steps, so its figure can pass the HBM bandwidth"
)
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
CPU_BACKENDS = ("flash", "math")  # PyTorch's CPU build has these two; the other two are CUDA kernels
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
REFUSALS = ("No available kernel", "No viable backend")  # how scaled_dot_product_attention says no to a backend


@dataclass(frozen=True)
class Sizes:
    """Every size the suite uses: the GPU run's (``GPU``) or the dry run's (``DRY``)."""

    dtype: str
    batch: int
    heads: int
    head_dims: tuple
    lengths: tuple
    matmul_size: int
    copy_mib: int
    layer: dict
    decode: dict
    warmup: int
    repeats: int
    case_budget_s: float
    test_timeout_s: int


GPU = Sizes(
    dtype="bfloat16", batch=4, heads=16, head_dims=(64, 128), lengths=(512, 1024, 2048, 4096, 8192, 16384, 32768),
    matmul_size=8192, copy_mib=2048,
    layer={"batch": 4, "length": 4096, "embed_dim": 1024, "heads": 16},
    decode={"batch": 4, "embed_dim": 1024, "heads": 16, "cache_lengths": (1024, 2048, 4096, 8192, 16384, 32768), "steps": 16},
    warmup=3, repeats=10, case_budget_s=2.0, test_timeout_s=240,
)
DRY = Sizes(
    dtype="float32", batch=1, heads=2, head_dims=(16, 32), lengths=(32, 64),
    matmul_size=128, copy_mib=4,
    layer={"batch": 1, "length": 32, "embed_dim": 32, "heads": 4},
    decode={"batch": 1, "embed_dim": 32, "heads": 4, "cache_lengths": (32, 64), "steps": 4},
    warmup=1, repeats=2, case_budget_s=1.0, test_timeout_s=300,
)


# ---------------------------------------------------------------------------------------------- provenance


def data_sheet_peaks(device_name):
    """The data-sheet peaks of a GPU name, {"name", "bf16_dense_tflops", "hbm_tb_per_s"}, or None if unknown."""
    for name, peaks in DATA_SHEET_PEAKS.items():
        if all(part in device_name for part in name.split()):
            return {"name": name, **peaks}
    return None


def package_version(name):
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_driver():
    """The NVIDIA driver version as nvidia-smi reports it, or None where there is no nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        completed = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else None


def triton_kernel_status():
    """Lesson 12's sentence on how its Triton kernel runs here (compiled, interpreted, or not at all)."""
    if importlib.util.find_spec("attn.triton_kernels") is None:
        return "this copy of the course has no attn/triton_kernels.py (lesson 12's kernel)"
    from attn.triton_kernels import triton_status

    return triton_status()


def provenance(device, command):
    """Where and with what the suite ran: device, versions, date and the exact command."""
    info = {
        "device_type": device.type,
        "device_name": "cpu",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": package_version("triton"),
        "numpy": package_version("numpy"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "driver": None,
        "triton_kernel": triton_kernel_status(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            device_name=properties.name,
            driver=nvidia_driver(),
            memory_gib=round(properties.total_memory / 2**30, 1),
            multiprocessors=properties.multi_processor_count,
            compute_capability=f"{properties.major}.{properties.minor}",
        )
    return info


def peak_table(device):
    """The data-sheet peaks that apply to this device (None on a CPU or an unknown GPU), the table and its source."""
    matched = data_sheet_peaks(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    return {"matched": matched, "source": DATA_SHEET_SOURCE, "table": DATA_SHEET_PEAKS}


# ---------------------------------------------------------------------------------------------- timing


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def affordable_repeats(function, device, setup, repeats, budget_s):
    """How many timed calls fit in ``budget_s`` (at least 3, at most ``repeats``), from one more timed warm-up call."""
    prepared = setup()
    synchronize(device)
    start = time.perf_counter()
    function(prepared)
    synchronize(device)
    one_call = time.perf_counter() - start
    return max(min(3, repeats), min(repeats, int(budget_s / max(one_call, 1e-9))))


def median_seconds(function, device, warmup, repeats, setup=None, budget_s=None):
    """(median time of ``function(prepared)`` in seconds, how many calls were timed), after ``warmup`` untimed calls.

    CUDA: timed with CUDA events; elsewhere with perf_counter. ``setup()``, if given, runs untimed
    before every call and its result is passed to ``function``. ``budget_s``: fewer repeats (at
    least 3) for a case so slow that ``repeats`` calls would take longer than this.
    """
    setup = setup or (lambda: None)
    for _ in range(warmup):
        function(setup())
    if budget_s is not None:
        repeats = affordable_repeats(function, device, setup, repeats, budget_s)
    synchronize(device)
    times = []
    for _ in range(repeats):
        prepared = setup()
        synchronize(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            function(prepared)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            start = time.perf_counter()
            function(prepared)
            times.append(time.perf_counter() - start)
    return statistics.median(times), repeats


def free_memory(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def first_line(error):
    """An exception as one line, type and message, for the JSON."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def attempt(function, device):
    """Call ``function()`` once; return (output, None), or (None, {"status", "reason"}) if it could not run.

    A backend that refuses the inputs raises a RuntimeError after warning why; the warnings and the
    error together are the recorded reason. Out of memory is caught and recorded.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            output = function()
            synchronize(device)
            return output, None
        except OUT_OF_MEMORY as error:
            failure = {"status": "out of memory", "reason": first_line(error)}
        except RuntimeError as error:
            said = [str(warning.message).strip() for warning in caught]
            refused = any(words in str(error) for words in REFUSALS)
            failure = {"status": "refused" if refused else "error",
                       "reason": " | ".join([*dict.fromkeys(said), first_line(error)])}
        except Exception as error:  # noqa: BLE001  one broken case must not end a run on a borrowed GPU
            failure = {"status": "error", "reason": first_line(error)}
    free_memory(device)
    return None, failure


def measure(function, device, sizes, setup=None):
    """{"status": "ok", "seconds", "peak_mib"} for ``function``, or its failure (out of memory, error)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    failure = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # attempt() already recorded what the first call said
        try:
            seconds, repeats = median_seconds(function, device, sizes.warmup, sizes.repeats, setup, sizes.case_budget_s)
        except OUT_OF_MEMORY as error:
            failure = {"status": "out of memory", "reason": first_line(error)}
        except Exception as error:  # noqa: BLE001  recorded, and the suite goes on
            failure = {"status": "error", "reason": first_line(error)}
    if failure:
        free_memory(device)
        return failure
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"status": "ok", "seconds": seconds, "peak_mib": peak, "repeats": repeats}


def relative_error(output, reference):
    """||output - reference|| / ||reference||, computed in float32; None if it is not finite."""
    difference = (output.float() - reference.float()).norm() / reference.float().norm()
    value = difference.item()
    return value if math.isfinite(value) else None


def random_tensor(shape, device, dtype, generator):
    """Seeded standard-normal values (never zeros, which can time faster than real data)."""
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)


def seeded(device, seed=0):
    return torch.Generator(device=device).manual_seed(seed)


# ---------------------------------------------------------------------------------------------- ceilings


def matmul_ceiling(device, sizes):
    """TFLOP/s of an n x n x n matrix product in the suite's dtype: the card's practical compute ceiling."""
    dtype, n = getattr(torch, sizes.dtype), sizes.matmul_size
    generator = seeded(device)
    a, b = (random_tensor((n, n), device, dtype, generator) for _ in range(2))
    with torch.inference_mode():
        result = measure(lambda _: a @ b, device, sizes)
    result.update(size=[n, n, n], dtype=sizes.dtype, flops=2 * n**3)
    if result["status"] == "ok":
        result["tflops"] = 2 * n**3 / result["seconds"] / 1e12
    return result


def copy_ceiling(device, sizes):
    """TB/s of a large device-to-device copy, counting bytes read plus bytes written: the memory ceiling."""
    count = sizes.copy_mib * 2**20 // 4
    source = random_tensor((count,), device, torch.float32, seeded(device))
    target = torch.empty_like(source)
    result = measure(lambda _: target.copy_(source), device, sizes)
    moved = 2 * source.nbytes
    result.update(bytes_moved=moved)
    if result["status"] == "ok":
        result["tb_per_s"] = moved / result["seconds"] / 1e12
    return result


# ---------------------------------------------------------------------------------------------- attention core


def attention_flops(batch, heads, length, head_dim, causal):
    """Floating-point operations of the attention core; causal work counted as half (see FLOP_COUNTING)."""
    full = 4 * batch * heads * length**2 * head_dim
    return full // 2 if causal else full


def sdpa_backend(name):
    """torch.nn.attention's backend enum for a name of SDPA_BACKENDS, or None where this torch lacks it."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return None
    return getattr(SDPBackend, SDPA_BACKENDS[name], None)


def sdpa_call(backend_name, causal):
    """A function (q, k, v) -> output that runs scaled_dot_product_attention with only one backend allowed."""
    from torch.nn.attention import sdpa_kernel

    backend = sdpa_backend(backend_name)

    def run(query, key, value):
        with sdpa_kernel(backend):
            return functional.scaled_dot_product_attention(query, key, value, is_causal=causal)

    return run


def triton_call(device):
    """Lesson 12's Triton kernel as (q, k, v, causal) -> output, or the sentence saying why it cannot run here."""
    if importlib.util.find_spec("attn.triton_kernels") is None:
        return None, "this copy of the course has no attn/triton_kernels.py (lesson 12's kernel)"
    from attn import triton_kernels  # imports no Triton: the launcher does, on its first call

    if importlib.util.find_spec("triton") is None:
        return None, triton_kernels.triton_status()
    return triton_kernels.flash_forward, None


def implementations(device):
    """Every attention-core implementation: name -> (function(q, k, v, causal) or None, why it is absent)."""
    found = {"explicit": (lambda q, k, v, causal: explicit_attention(q, k, v, is_causal=causal)[0], None)}
    for name in SDPA_BACKENDS:
        if sdpa_backend(name) is None:
            missing = f"torch {torch.__version__} has no {SDPA_BACKENDS[name]} backend in torch.nn.attention"
            found[f"sdpa {name}"] = (None, missing)
        elif device.type == "cpu" and name not in CPU_BACKENDS:
            found[f"sdpa {name}"] = (None, f"absent on the CPU: {SDPA_BACKENDS[name]} is a CUDA kernel")
        else:
            calls = {causal: sdpa_call(name, causal) for causal in (False, True)}
            found[f"sdpa {name}"] = (lambda q, k, v, causal, calls=calls: calls[causal](q, k, v), None)
    function, reason = triton_call(device)
    found["triton"] = (None if function is None else lambda q, k, v, causal: function(q, k, v, is_causal=causal), reason)
    return found


def core_row(name, head_dim, length, causal, sizes):
    return {"impl": name, "head_dim": head_dim, "length": length, "causal": causal, "batch": sizes.batch, "heads": sizes.heads,
            "dtype": sizes.dtype, "flops": attention_flops(sizes.batch, sizes.heads, length, head_dim, causal)}


def run_core_case(function, inputs, reference, device, sizes):
    """One implementation at one shape: its first call (refusal, OOM, correctness), then its timing."""
    output, failure = attempt(lambda: function(*inputs), device)
    if failure:
        return failure
    error = relative_error(output, reference) if reference is not None else None
    del output
    with torch.inference_mode():
        result = measure(lambda _: function(*inputs), device, sizes)
    result["relative_error"] = error
    return result


def core_sweep(device, sizes, ceiling_tflops, peaks, log=print):
    """Every implementation at every (d, causal, T): rows of time, memory, TFLOP/s and shares.

    After an implementation runs out of memory at some T, its longer T are recorded as skipped.
    The relative error against a float32 reference is checked at the shortest T.
    """
    dtype = getattr(torch, sizes.dtype)
    found = implementations(device)
    rows = []
    for head_dim in sizes.head_dims:
        for causal in (False, True):
            died_at = {}
            for length in sizes.lengths:
                shape = (sizes.batch, sizes.heads, length, head_dim)
                generator = seeded(device, seed=length + head_dim)
                query, key, value = (random_tensor(shape, device, dtype, generator) for _ in range(3))
                reference = None
                if length == sizes.lengths[0]:
                    upcast = (query.float(), key.float(), value.float())
                    reference = sdpa_call("math", causal)(*upcast)  # float32, written-out kernel
                for name, (function, absent) in found.items():
                    row = core_row(name, head_dim, length, causal, sizes)
                    if function is None:
                        row.update(status="absent", reason=absent)
                    elif name in died_at:
                        row.update(status="skipped", reason=f"out of memory already at T={died_at[name]}")
                    else:
                        row.update(run_core_case(function, (query, key, value, causal), reference, device, sizes))
                    if row["status"] == "out of memory":
                        died_at[name] = length
                    add_rates(row, ceiling_tflops, peaks, sizes.dtype)
                    rows.append(row)
                del query, key, value, reference
                free_memory(device)
            log(f"    d={head_dim} {'causal' if causal else 'non-causal'}: done")
    return rows


def add_rates(row, ceiling_tflops, peaks, dtype):
    """TFLOP/s of a timed row, and its share of the data-sheet bf16 peak and of the measured ceiling."""
    if row.get("status") != "ok":
        return
    row["tflops"] = row["flops"] / row["seconds"] / 1e12
    peak = peaks["matched"]["bf16_dense_tflops"] if peaks["matched"] and dtype == "bfloat16" else None
    row["share_of_peak"] = row["tflops"] / peak if peak else None
    row["share_of_ceiling"] = row["tflops"] / ceiling_tflops if ceiling_tflops else None


def explicit_out_of_memory(rows, batch, heads, dtype):
    """Per (d, causal): the explicit path's first T that ran out of memory and the last that ran, with its peak memory."""
    element = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    found = []
    for head_dim, causal in sorted({(row["head_dim"], row["causal"]) for row in rows}):
        series = sorted((row for row in rows if row["impl"] == "explicit" and row["head_dim"] == head_dim
                         and row["causal"] == causal), key=lambda row: row["length"])
        ran = [row for row in series if row["status"] == "ok"]
        failed = [row for row in series if row["status"] == "out of memory"]
        first = failed[0]["length"] if failed else None
        found.append({
            "head_dim": head_dim, "causal": causal,
            "first_out_of_memory_length": first,
            "weights_gib_at_that_length": batch * heads * first**2 * element / 2**30 if first else None,
            "last_length_that_ran": ran[-1]["length"] if ran else None,
            "peak_mib_of_last": ran[-1]["peak_mib"] if ran else None,
            "within_sweep": first is not None,
        })
    return found


# ---------------------------------------------------------------------------------------------- layer and decoding


def layer_pair(device, dtype, embed_dim, heads):
    """nn.MultiheadAttention and the course's layer with the same weights, on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(embed_dim, heads, batch_first=True).to(device, dtype)
    return MultiHeadAttention.from_torch(reference), reference


def layer_calls(ours, reference, x, causal):
    """(ours(x), theirs(x)) as functions of nothing, causal or not, each returning the (B, T, E) output."""
    length = x.shape[1]
    if not causal:
        return (lambda: ours(x, x, x)), (lambda: reference(x, x, x, need_weights=False)[0])
    blocked = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(diagonal=1)  # theirs: True = blocked
    return ((lambda: ours(x, x, x, is_causal=True)),
            (lambda: reference(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)[0]))


def time_layer_mode(call, mode, upstream, device, sizes):
    """Median time of one layer call: forward only (eval, inference mode) or forward and backward (train)."""
    if mode == "forward":
        with torch.inference_mode():
            return measure(lambda _: call(), device, sizes)
    return measure(lambda _: call().backward(upstream), device, sizes)


def layer_comparison(device, sizes):
    """The course's layer against nn.MultiheadAttention: ratios of median times, forward and forward+backward."""
    shape = sizes.layer
    dtype = getattr(torch, sizes.dtype)
    ours, reference = layer_pair(device, dtype, shape["embed_dim"], shape["heads"])
    generator = seeded(device)
    x = random_tensor((shape["batch"], shape["length"], shape["embed_dim"]), device, dtype, generator)
    upstream = random_tensor(x.shape, device, dtype, generator)
    rows = []
    for causal in (False, True):
        for mode in ("forward", "forward+backward"):
            for module in (ours, reference):
                module.train(mode != "forward")
            inputs = x if mode == "forward" else x.detach().requires_grad_()
            ours_call, reference_call = layer_calls(ours, reference, inputs, causal)
            row = {"mode": mode, "causal": causal, **shape, "dtype": sizes.dtype}
            with torch.inference_mode():
                checked, failure = attempt(lambda ours_call=ours_call, reference_call=reference_call:
                                           relative_error(ours_call(), reference_call()), device)
            row["relative_error"] = checked
            ours_time = time_layer_mode(ours_call, mode, upstream, device, sizes)
            reference_time = time_layer_mode(reference_call, mode, upstream, device, sizes)
            row.update(ours=ours_time, reference=reference_time, check_failure=failure)
            both = ours_time["status"] == reference_time["status"] == "ok"
            row["ratio"] = ours_time["seconds"] / reference_time["seconds"] if both else None
            rows.append(row)
    return rows


def decode_case(layer, cache_length, shape, device, dtype, sizes, peaks):
    """Time per generated token with the course's KVCache at one cache length, and the attention read alone."""
    batch, heads, steps = shape["batch"], shape["heads"], shape["steps"]
    head_dim = shape["embed_dim"] // heads
    generator = seeded(device, seed=cache_length)
    keys, values = (random_tensor((batch, heads, cache_length, head_dim), device, dtype, generator) for _ in range(2))
    tokens = random_tensor((batch, steps, shape["embed_dim"]), device, dtype, generator)

    def filled_cache():
        cache = KVCache()
        cache.append(keys, values)
        return cache

    def generate(cache):
        for step in range(steps):
            token = tokens[:, step:step + 1]
            layer(token, token, token, is_causal=True, cache=cache)

    element = keys.element_size()
    mean_length = cache_length + (steps + 1) / 2  # the cache grows by one position per step
    row = {"cache_length": cache_length, "steps": steps, "batch": batch, "heads": heads, "head_dim": head_dim,
           "bytes_read_per_step": 2 * batch * heads * mean_length * head_dim * element}
    with torch.inference_mode():
        step = measure(generate, device, sizes, setup=filled_cache)
        query = tokens[:, :1].reshape(batch, 1, heads, head_dim).transpose(1, 2)  # (B, H, 1, d)
        alone = measure(lambda _: functional.scaled_dot_product_attention(query, keys, values), device, sizes)
    hbm = peaks["matched"]["hbm_tb_per_s"] if peaks["matched"] else None
    if step["status"] == "ok":
        step["seconds_per_token"] = step["seconds"] / steps
        step["tb_per_s"] = row["bytes_read_per_step"] / step["seconds_per_token"] / 1e12
        step["share_of_hbm"] = step["tb_per_s"] / hbm if hbm else None
    if alone["status"] == "ok":
        alone["tb_per_s"] = 2 * keys.nbytes / alone["seconds"] / 1e12
        alone["share_of_hbm"] = alone["tb_per_s"] / hbm if hbm else None
    row.update(layer_step=step, attention_only=alone)
    return row


def decode_sweep(device, sizes, peaks):
    """Decoding with the KV cache at every cache length of ``sizes.decode``."""
    shape = sizes.decode
    dtype = getattr(torch, sizes.dtype)
    layer, _ = layer_pair(device, dtype, shape["embed_dim"], shape["heads"])
    layer.eval()
    rows = []
    for cache_length in shape["cache_lengths"]:
        try:
            rows.append(decode_case(layer, cache_length, shape, device, dtype, sizes, peaks))
        except OUT_OF_MEMORY as error:
            rows.append({"cache_length": cache_length, "status": "out of memory", "reason": first_line(error)})
        free_memory(device)
    return rows


# ---------------------------------------------------------------------------------------------- the CUDA tests


def cuda_test_files(tests_folder):
    """The test files that hold CUDA cases: those using tests/devices.py's parametrisation or the cuda marker."""
    uses_cuda = ("from tests.devices import", "pytest.mark.cuda")
    return sorted(path for path in Path(tests_folder).glob("test_*.py") if any(word in path.read_text() for word in uses_cuda))


SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)")


def parse_pytest_summary(output):
    """pytest's last summary line ('3 passed, 2 skipped in 1.2s') and its counts."""
    lines = [line.strip(" =") for line in output.strip().splitlines() if re.search(r"\bin [\d.]+s\b", line)]
    summary = lines[-1] if lines else ""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "deselected": 0}
    for number, word in SUMMARY.findall(summary):
        word = "errors" if word.startswith("error") else word
        counts[word] = counts.get(word, 0) + int(number)
    return summary, counts


def run_cuda_tests(timeout_s, root=REPO):
    """Run the CUDA cases (``pytest -m cuda``) in a subprocess and record its counts, summary and failures."""
    tests = root / "tests"
    files = cuda_test_files(tests) if tests.is_dir() else []
    if not files:
        return {"status": "not run", "reason": f"no test files with CUDA cases under {tests.name}/"}
    if importlib.util.find_spec("pytest") is None:
        return {"status": "not run", "reason": "pytest is not installed here"}
    relative = [str(path.relative_to(root)) for path in files]
    # addopts from pyproject.toml is dropped: it needs nbval and xdist, which a GPU machine may lack.
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "-rfE", "-m", "cuda", *relative]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timed out", "reason": f"pytest ran past {timeout_s} s", "command": " ".join(command[1:])}
    summary, counts = parse_pytest_summary(completed.stdout)
    failures = [line for line in completed.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {
        "status": "ran", "exit_code": completed.returncode, "summary": summary, **counts,
        "failures": failures[:30], "files": relative, "command": " ".join(["python", *command[1:]]),
        "seconds": time.perf_counter() - started,
        "output_tail": None if completed.returncode in (0, 5) and summary else (completed.stdout + completed.stderr)[-3000:],
    }


# ---------------------------------------------------------------------------------------------- the whole run


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
    with open(out, "w") as handle:
        json.dump(finite(result), handle, indent=1, allow_nan=False)


def run_suite(device, sizes, command, out, dry_run, log=print):
    """Run every part in turn, rewriting ``out`` after each, so that an interrupted run keeps what it measured."""
    started = time.perf_counter()
    peaks = peak_table(device)
    result = {
        "schema": SCHEMA, "dry_run": dry_run, "complete": False,
        "provenance": provenance(device, command), "peaks": peaks, "flop_counting": FLOP_COUNTING,
        "timing": {"method": "CUDA events" if device.type == "cuda" else "time.perf_counter", "statistic": "median",
                   "warmup": sizes.warmup, "repeats": sizes.repeats,
                   "fewer_repeats": f"at least 3 for a case whose {sizes.repeats} calls would take over "
                                    f"{sizes.case_budget_s} s; each timed row records its own repeats"},
        "sizes": asdict(sizes),
        "decode_counting": DECODE_COUNTING,
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


# ---------------------------------------------------------------------------------------------- reading a result


STATUSES = {"ok", "out of memory", "refused", "absent", "skipped", "error"}
IMPLEMENTATIONS = ("explicit", *(f"sdpa {name}" for name in SDPA_BACKENDS), "triton")
TOP_LEVEL = {
    "schema": str, "dry_run": bool, "complete": bool, "provenance": dict, "peaks": dict, "flop_counting": str,
    "decode_counting": str, "timing": dict, "sizes": dict, "section_errors": dict, "section_seconds": dict,
    "cuda_tests": dict, "ceilings": dict, "core": list, "explicit_out_of_memory": list, "layer": list, "decode": list,
    "seconds": float,
}
PROVENANCE = ("device_type", "device_name", "date_utc", "command", "torch", "cuda", "cudnn", "triton", "numpy", "driver")


def validate(result):
    """Everything wrong with a suite result's shape, as sentences (an empty list: it follows SCHEMA)."""
    problems = [f"{key} is missing or not {kind.__name__}" for key, kind in TOP_LEVEL.items()
                if not isinstance(result.get(key), kind)]
    problems += [f"the {name} part failed: {reason}" for name, reason in (result.get("section_errors") or {}).items()]
    if problems:
        return problems
    if result["schema"] != SCHEMA:
        problems.append(f"schema is {result['schema']!r}, not {SCHEMA!r}")
    problems += [f"provenance has no {key}" for key in PROVENANCE if key not in result["provenance"]]
    problems += [f"peaks has no {key}" for key in ("matched", "source", "table") if key not in result["peaks"]]
    if "status" not in result["cuda_tests"]:
        problems.append("cuda_tests has no status")
    elif result["cuda_tests"]["status"] == "ran":
        problems += [f"cuda_tests has no {key}" for key in ("passed", "failed", "skipped", "errors", "summary", "failures")
                     if key not in result["cuda_tests"]]
    problems += [f"ceilings has no {key}" for key in ("matmul", "copy") if result["ceilings"].get(key, {}).get("status") is None]
    problems += core_problems(result["core"], result["sizes"])
    expected_pairs = {(d, causal) for d in result["sizes"]["head_dims"] for causal in (False, True)}
    if {(row["head_dim"], row["causal"]) for row in result["explicit_out_of_memory"]} != expected_pairs:
        problems.append("explicit_out_of_memory does not have one entry per (head_dim, causal)")
    if len(result["layer"]) != 4 or any("ratio" not in row for row in result["layer"]):
        problems.append("layer does not have four rows (forward, forward+backward; causal or not), each with a ratio")
    if [row["cache_length"] for row in result["decode"]] != list(result["sizes"]["decode"]["cache_lengths"]):
        problems.append("decode does not have one row per cache length")
    return problems


def core_problems(rows, sizes):
    """What is wrong with the attention-core rows: every implementation at every (d, causal, T), exactly once."""
    problems = []
    expected = {(impl, d, causal, length) for impl in IMPLEMENTATIONS for d in sizes["head_dims"]
                for causal in (False, True) for length in sizes["lengths"]}
    seen = [(row.get("impl"), row.get("head_dim"), row.get("causal"), row.get("length")) for row in rows]
    if sorted(seen, key=str) != sorted(expected, key=str):
        problems.append("core does not hold every implementation at every (head_dim, causal, length) exactly once")
    for row in rows:
        where = f"core row {row.get('impl')} d={row.get('head_dim')} T={row.get('length')} causal={row.get('causal')}"
        if row.get("status") not in STATUSES:
            problems.append(f"{where}: status {row.get('status')!r} is not one of {sorted(STATUSES)}")
        elif row["status"] == "ok":
            missing = [key for key in ("seconds", "repeats", "tflops", "share_of_peak", "share_of_ceiling", "peak_mib", "flops")
                       if key not in row]
            if missing or not row["seconds"] > 0:
                problems.append(f"{where}: a timed row needs seconds > 0 and {', '.join(missing) or 'its rates'}")
        elif not row.get("reason"):
            problems.append(f"{where}: status {row['status']!r} without a reason")
    return problems


def recorded_runs(folder):
    """The GPU suite results in ``folder`` that real GPU runs produced: no dry runs, no CPU runs."""
    runs = []
    for path in sorted(Path(folder).glob("*.json")):
        result = json.loads(path.read_text())
        if result.get("schema") == SCHEMA and not result.get("dry_run") and result["provenance"]["device_type"] == "cuda":
            runs.append(result)
    return runs


def percent(share):
    return f"{share:.0%}" if share is not None else "n/a"


SHORT_STATUS = {"out of memory": "OOM"}


def core_cell(rows):
    """One cell of the summary table: the best TFLOP/s an implementation reached over T, or why it has none."""
    timed = [row for row in rows if row["status"] == "ok"]
    if not timed:
        status = rows[0]["status"] if rows else "-"
        return SHORT_STATUS.get(status, status)
    best = max(timed, key=lambda row: row["tflops"])
    rate = f"{best['tflops']:.3g}" if best["tflops"] >= 0.01 else f"{best['tflops']:.0e}"  # at most 5 characters
    return f"{rate} ({percent(best['share_of_peak'])})"


def tests_lines(result):
    tests = result["cuda_tests"]
    if tests["status"] != "ran":
        return [f"CUDA tests: {tests['status']} ({tests.get('reason')})"]
    return [f"CUDA tests: {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
            f"{tests['skipped']} skipped", f"  pytest: {tests['summary']}", *tests["failures"]]


def ceiling_lines(result):
    peaks, lines = result["peaks"]["matched"], []
    matmul, copy = result["ceilings"]["matmul"], result["ceilings"]["copy"]
    if matmul["status"] == "ok":
        peak = peaks["bf16_dense_tflops"] if peaks and matmul["dtype"] == "bfloat16" else None
        lines.append(f"matmul {matmul['size'][0]}^3 {matmul['dtype']}: {matmul['tflops']:.3g} TFLOP/s "
                     f"({percent(matmul['tflops'] / peak if peak else None)} of the data-sheet peak)")
    else:
        lines.append(f"matmul: {matmul['status']} ({matmul.get('reason')})")
    if copy["status"] == "ok":
        share = percent(copy["tb_per_s"] / peaks["hbm_tb_per_s"] if peaks else None)
        lines.append(f"copy: {copy['tb_per_s']:.3g} TB/s read + written ({share} of the data-sheet HBM)")
    else:
        lines.append(f"copy: {copy['status']} ({copy.get('reason')})")
    return lines


def core_lines(result):
    columns = [(d, causal) for d in result["sizes"]["head_dims"] for causal in (False, True)]
    lines = ["attention core: best TFLOP/s over T (share of the data-sheet peak)",
             " " * 17 + "".join(f"{f'd={d}' + (' causal' if causal else ''):>13s}" for d, causal in columns)]
    for impl in IMPLEMENTATIONS:
        cells = [core_cell([row for row in result["core"] if row["impl"] == impl and row["head_dim"] == d
                            and row["causal"] == causal]) for d, causal in columns]
        lines.append(f"  {impl:15s}" + "".join(f"{cell:>13s}" for cell in cells))
    return lines


def out_of_memory_lines(result):
    lines = []
    for entry in result["explicit_out_of_memory"]:
        where = f"explicit, d={entry['head_dim']}{' causal' if entry['causal'] else ''}:"
        if entry["within_sweep"]:
            peak = (entry["peak_mib_of_last"] or 0) / 1024
            lines.append(f"{where} OOM at T={entry['first_out_of_memory_length']}; "
                         f"T={entry['last_length_that_ran']} ran, peak {peak:.1f} GiB")
        else:
            lines.append(f"{where} no OOM up to T={result['sizes']['lengths'][-1]}")
    return lines


def layer_lines(result):
    lines = ["layer, ours / nn.MultiheadAttention (median times):"]
    for causal in (False, True):
        ratios = [f"{row['mode']} {row['ratio']:.2f}" if row["ratio"] is not None
                  else f"{row['mode']} {row['ours']['status']}/{row['reference']['status']}"
                  for row in result["layer"] if row["causal"] == causal]
        lines.append(f"  {'causal' if causal else 'non-causal':10s}  " + " | ".join(ratios))
    return lines


def decode_lines(result):
    lines = ["decode with the KV cache: per token, TB/s (share of HBM), attention alone"]
    for row in result["decode"]:
        step = row.get("layer_step", {})
        if step.get("status") == "ok":
            alone = row["attention_only"].get("tb_per_s")
            lines.append(f"  cache {row['cache_length']:>6d}: {step['seconds_per_token'] * 1e6:7.0f} us, "
                         f"{step['tb_per_s']:.3g} TB/s ({percent(step['share_of_hbm'])}), "
                         f"alone {f'{alone:.3g} TB/s' if alone else row['attention_only']['status']}")
        else:
            lines.append(f"  cache {row['cache_length']:>6d}: {step.get('status', row.get('status'))}")
    return lines


SUMMARY_PARTS = {"cuda_tests": tests_lines, "ceilings": ceiling_lines, "core": core_lines,
                 "explicit_out_of_memory": out_of_memory_lines, "layer": layer_lines, "decode": decode_lines}


def summary_lines(result):
    """The short table the suite prints last, in lines of about 75 characters; a part that failed is named instead."""
    info = result["provenance"]
    lines = [f"GPU suite{' (DRY RUN, tiny sizes: not a measurement)' if result['dry_run'] else ''}: "
             f"{info['device_name']}, {info['date_utc'][:10]}",
             f"  torch {info['torch']}, CUDA {info['cuda']}, cuDNN {info['cudnn']}, Triton {info['triton']}"]
    for name, part in SUMMARY_PARTS.items():
        if result.get(name) is None:
            lines.append(f"{name}: FAILED, {result.get('section_errors', {}).get(name, 'not run')}")
        else:
            lines += part(result)
    return lines


# ---------------------------------------------------------------------------------------------- the command


def check_arguments(device, out, dry_run, asked_device):
    """An argparse-style error for a suite that must not start (no CUDA, a dry run aimed at lessons/results), else None."""
    if dry_run and asked_device is not None and asked_device.type != "cpu":
        return "argument --dry-run: a dry run runs on the CPU; leave out --device"
    if not dry_run and device.type != "cuda":
        return (f"argument --suite: the GPU suite needs a CUDA GPU and this machine's best device is {device.type}; "
                "add --dry-run to run every part at tiny sizes on the CPU")
    if dry_run and Path(out).resolve().parent == RESULTS.resolve():
        return "argument --out: a dry run measures nothing; write it outside lessons/results/, which holds real runs only"
    return None


def main(device, out, dry_run, argv):
    """Run the suite, write ``out``, print the table; exit status 1 if a CUDA test failed, else 0."""
    sizes = DRY if dry_run else GPU
    command = shlex.join(["python", "-m", "attn.bench", *argv])
    result = run_suite(device, sizes, command, out, dry_run)
    for line in summary_lines(result):
        print(line)
    print(f"wrote {out}")
    tests = result["cuda_tests"]
    return 1 if tests.get("failed") or tests.get("errors") else 0
