"""The attention core on its own: the explicit path, every scaled_dot_product_attention backend and lesson 12's
Triton kernel, at every head size, causal or not, and every length; and where the explicit path runs out of memory.
"""

import importlib.metadata
import importlib.util

import torch
from torch.nn import functional

from attn.flops import attention_flops
from attn.measure.gpu.cases import attempt, free_memory, measure, random_tensor, relative_error, seeded
from attn.multihead import explicit_attention

FLOP_COUNTING = (
    "non-causal: 4 B H T^2 d (Q K^T and A V, 2 B H T^2 d each); causal: half of that, 2 B H T^2 d, because about half "
    "of the T^2 query-key pairs are masked (exactly T (T + 1) / 2 are kept) and the fused kernels skip the masked blocks"
)


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


CPU_BACKENDS = ("flash", "math")  # PyTorch's CPU build has these two; the other two are CUDA kernels


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
