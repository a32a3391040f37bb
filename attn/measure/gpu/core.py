"""The attention core on its own: the explicit path, every scaled_dot_product_attention backend and lesson 12's
Triton kernel, at every head size, causal or not, and every length; and where the explicit path runs out of memory.
"""

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional

from attn.flops import attention_flops
from attn.measure.gpu.cases import attempt, free_memory, measure, random_tensor, relative_error, seeded
from attn.multihead import _explicit_attention, explicit_attention  # the core alone is timed

FLOP_COUNTING = (
    "non-causal: 4 B H T^2 d (Q K^T and A V, 2 B H T^2 d each); causal: half of that, 2 B H T^2 d, because about half "
    "of the T^2 query-key pairs are masked (exactly T (T + 1) / 2 are kept) and the fused kernels skip the masked blocks"
)


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


CPU_BACKENDS = ("flash", "math")  # PyTorch's CPU build has these two; the other two are CUDA kernels


@dataclass(frozen=True)
class Implementation:
    """One way to compute the attention core, as the suite runs it.

    ``first(q, k, v, causal)`` is the first, untimed call: it checks the inputs (and compiles, for
    Triton) and gives the output whose error is recorded. ``timed(q, k, v, causal)`` is what is timed:
    no checks, no context manager. ``context()``, if given, is entered once around the first call and
    once around all the timed calls (scaled_dot_product_attention's backend choice), never inside a
    timing. ``upcasts``: the arithmetic runs in float32 whatever the input's dtype (PyTorch's math
    backend), so its rate is compared with the float32 peak, not the bf16 one.
    """

    first: Callable | None
    timed: Callable | None = None
    context: Callable | None = None
    absent: str | None = None
    upcasts: bool = False
    runs: str = ""


def absent(reason):
    return Implementation(first=None, absent=reason)


def sdpa_backend(name):
    """torch.nn.attention's backend enum for a name of SDPA_BACKENDS, or None where this torch lacks it."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return None
    return getattr(SDPBackend, SDPA_BACKENDS[name], None)


def sdpa_only(backend_name):
    """A function of nothing giving the context in which scaled_dot_product_attention may use only this backend."""
    from torch.nn.attention import sdpa_kernel

    backend = sdpa_backend(backend_name)
    return lambda: sdpa_kernel(backend)


def sdpa(query, key, value, causal):
    """scaled_dot_product_attention, called bare: the backend is whatever the enclosing context allows."""
    return functional.scaled_dot_product_attention(query, key, value, is_causal=causal)


def sdpa_call(backend_name, causal):
    """A function (q, k, v) -> output that runs scaled_dot_product_attention with only one backend allowed
    (it enters the backend's context at every call: for a reference, never for a timing)."""
    only = sdpa_only(backend_name)

    def run(query, key, value):
        with only():
            return sdpa(query, key, value, causal)

    return run


def triton_implementation():
    """Lesson 12's Triton kernel: checked once by ``flash_forward``, then timed through its bare ``launch``."""
    if importlib.util.find_spec("attn.triton_kernels") is None:
        return absent("this copy of the course has no attn/triton_kernels.py (lesson 12's kernel)")
    from attn import triton_kernels  # imports no Triton: the launcher does, on its first call

    if importlib.util.find_spec("triton") is None:
        return absent(triton_kernels.triton_status())
    defaults = inspect.signature(triton_kernels.flash_forward).parameters
    blocks = (defaults["block_q"].default, defaults["block_k"].default)  # flash_forward's own default tiles

    def first(query, key, value, causal):
        return triton_kernels.flash_forward(query, key, value, causal, *blocks)

    def timed(query, key, value, causal):  # inputs from random_tensor: contiguous, as launch needs
        return triton_kernels.launch(query, key, value, causal, *blocks)

    return Implementation(first=first, timed=timed,
                          runs="attn.triton_kernels.launch, checked once by flash_forward before the timing")


def explicit(query, key, value, causal):
    """What is timed: explicit_attention's arithmetic without its checks (the layer calls the same core)."""
    return _explicit_attention(query, key, value, None, 0.0, causal)[0]


def explicit_checked(query, key, value, causal):
    """The first call: explicit_attention as a learner calls it, its inputs checked once."""
    return explicit_attention(query, key, value, is_causal=causal)[0]


def implementations(device):
    """Every attention-core implementation, name -> Implementation (with ``absent`` saying why where it cannot run)."""
    found = {"explicit": Implementation(first=explicit_checked, timed=explicit,
                                        runs="attn.multihead._explicit_attention (explicit_attention without its "
                                             "checks), the inputs checked once by explicit_attention before the timing")}
    for name in SDPA_BACKENDS:
        if sdpa_backend(name) is None:
            missing = f"torch {torch.__version__} has no {SDPA_BACKENDS[name]} backend in torch.nn.attention"
            found[f"sdpa {name}"] = absent(missing)
        elif device.type == "cpu" and name not in CPU_BACKENDS:
            found[f"sdpa {name}"] = absent(f"absent on the CPU: {SDPA_BACKENDS[name]} is a CUDA kernel")
        else:
            found[f"sdpa {name}"] = Implementation(
                first=sdpa, timed=sdpa, context=sdpa_only(name), upcasts=name == "math",
                runs=f"scaled_dot_product_attention inside sdpa_kernel({SDPA_BACKENDS[name]}), entered once outside "
                     "the timing")
    found["triton"] = triton_implementation()
    return found


def core_row(name, head_dim, length, causal, sizes):
    return {"impl": name, "head_dim": head_dim, "length": length, "causal": causal, "batch": sizes.batch, "heads": sizes.heads,
            "dtype": sizes.dtype, "flops": attention_flops(sizes.batch, sizes.heads, length, head_dim, causal)}


def compute_dtype(implementation, dtype):
    """The dtype an implementation's arithmetic runs in: float32 for PyTorch's math backend on 16-bit inputs."""
    if implementation.upcasts and dtype in ("bfloat16", "float16"):
        return "float32"
    return dtype


def first_call(implementation, inputs, reference, device):
    """The first call of an implementation at one shape: (None, its relative error or None) or (its failure, None)."""
    output, failure = attempt(lambda: implementation.first(*inputs), device, implementation.context)
    if failure:
        return failure, None
    error = relative_error(output, reference) if reference is not None else None
    return None, error


def timed_case(implementation, inputs, device, sizes):
    """The timing and peak memory of an implementation's timed calls, its context entered once outside them."""
    def call(_):
        return implementation.timed(*inputs)

    with torch.inference_mode():
        return measure(call, device, sizes, context=implementation.context)


def float32_reference(query, key, value, causal):
    """The written-out kernel in float32 on float32 copies of the inputs; the copies are gone when it returns."""
    upcast = (query.float(), key.float(), value.float())
    return sdpa_call("math", causal)(*upcast)


def core_sweep(device, sizes, ceiling_tflops, peaks, log=print):
    """Every implementation at every (d, causal, T): rows of time, memory, TFLOP/s and shares.

    At each shape, every implementation is first called once (refusal, out of memory, and at the
    shortest T its relative error against a float32 reference); the reference and every output are
    then freed, and each implementation is timed with only the inputs alive. After an implementation
    runs out of memory at some T, its longer T are recorded as skipped.
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
                inputs = (*(random_tensor(shape, device, dtype, generator) for _ in range(3)), causal)
                reference = float32_reference(*inputs) if length == sizes.lengths[0] else None
                shape_rows = {}
                for name, implementation in found.items():
                    row = core_row(name, head_dim, length, causal, sizes)
                    row.update(compute_dtype=compute_dtype(implementation, sizes.dtype), runs=implementation.runs)
                    if implementation.first is None:
                        row.update(status="absent", reason=implementation.absent)
                    elif name in died_at:
                        row.update(status="skipped", reason=f"out of memory already at T={died_at[name]}")
                    else:
                        failure, error = first_call(implementation, inputs, reference, device)
                        row.update(failure or {"status": "to time", "relative_error": error})
                    shape_rows[name] = row
                del reference
                free_memory(device)
                for name, row in shape_rows.items():
                    if row["status"] == "to time":
                        error = row.pop("relative_error")
                        del row["status"]
                        row.update(timed_case(found[name], inputs, device, sizes), relative_error=error)
                    if row["status"] == "out of memory":
                        died_at[name] = length
                    add_rates(row, ceiling_tflops, peaks, sizes.dtype)
                    rows.append(row)
                del inputs
                free_memory(device)
            log(f"    d={head_dim} {'causal' if causal else 'non-causal'}: done")
    return rows


PEAK_OF = {"bfloat16": "bf16_dense_tflops", "float32": "fp32_tflops"}  # the data-sheet peak for the arithmetic's dtype


def add_rates(row, ceiling_tflops, peaks, dtype):
    """TFLOP/s of a timed row, and its share of the data-sheet peak and of the measured ceiling.

    The peak is the one for the dtype the arithmetic runs in (``compute_dtype``): bf16 tensor cores
    for bf16 kernels, the float32 peak for PyTorch's math backend, which upcasts. The measured ceiling
    is a bf16 matrix product, so a row computed in another dtype has no share of it.
    """
    if row.get("status") != "ok":
        return
    computed = row.get("compute_dtype", dtype)
    row["tflops"] = row["flops"] / row["seconds"] / 1e12
    key = PEAK_OF.get(computed)
    peak = peaks["matched"].get(key) if peaks["matched"] and key and dtype == "bfloat16" else None
    row["peak_basis"] = f"data-sheet {computed} peak" if peak else None
    row["share_of_peak"] = row["tflops"] / peak if peak else None
    same_dtype = computed == dtype
    row["share_of_ceiling"] = row["tflops"] / ceiling_tflops if ceiling_tflops and same_dtype else None


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
