"""How the GPU suite runs one case: a first call that may be refused or run out of memory, then timing and peak memory.
"""

import contextlib
import gc
import math
import statistics
import time
import warnings

import torch

OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


REFUSALS = ("No available kernel", "No viable backend")  # how scaled_dot_product_attention says no to a backend


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# A timed batch of calls lasts at least this long (at most MAX_CALLS calls), so that what the host does
# between two launches, and the resolution of the timer, vanish against the kernels' own time.
BATCH_SECONDS = 2e-3
MAX_CALLS = 200


def start_timer(device):
    """Start timing: a CUDA event recorded on the stream, or the CPU's clock. Nothing else runs here."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return start
    return time.perf_counter()


def stop_timer(started, device):
    """Seconds since ``start_timer``: a second event, waited for, on CUDA; the clock elsewhere."""
    if device.type == "cuda":
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return started.elapsed_time(end) / 1e3
    return time.perf_counter() - started


def time_calls(function, prepared, device, calls):
    """Seconds of ``calls`` back-to-back calls of ``function(prepared)`` between one pair of timing events.

    The device is idle when the first event is recorded; between the two events run only the calls.
    """
    synchronize(device)
    started = start_timer(device)
    for _ in range(calls):
        function(prepared)
    return stop_timer(started, device)


def one_call_seconds(function, device, setup):
    """Seconds of one more (warm) call of ``function(setup())``, setup untimed."""
    return time_calls(function, setup(), device, 1)


def repeats_within(one_timing, repeats, budget_s):
    """How many timings of ``one_timing`` seconds fit in ``budget_s``: at least 3, at most ``repeats``."""
    if budget_s is None:
        return repeats
    return max(min(3, repeats), min(repeats, int(budget_s / max(one_timing, 1e-9))))


def affordable_repeats(function, device, setup, repeats, budget_s):
    """How many timed calls fit in ``budget_s`` (at least 3, at most ``repeats``), from one more timed warm-up call."""
    return repeats_within(one_call_seconds(function, device, setup), repeats, budget_s)


def calls_per_timing(one_call):
    """How many calls one timing holds: enough to last BATCH_SECONDS, at most MAX_CALLS, at least 1."""
    return max(1, min(MAX_CALLS, math.ceil(BATCH_SECONDS / max(one_call, 1e-9))))


def median_seconds(function, device, warmup, repeats, setup=None, budget_s=None, context=None):
    """(median seconds per call of ``function(prepared)``, timings taken, calls per timing), after ``warmup`` untimed calls.

    ``context()``, if given, is entered once around everything (a backend choice, inference mode), never
    inside a timing. Without ``setup``, each timing holds many back-to-back calls between one pair of
    CUDA events (elsewhere, perf_counter readings) and is divided by their number. ``setup()``, if
    given, runs untimed before every call and its result is passed to ``function``; then each timing
    holds one call. ``budget_s``: fewer timings (at least 3) for a case so slow that ``repeats`` would
    take longer than this.
    """
    prepare = setup or (lambda: None)
    with context() if context is not None else contextlib.nullcontext():
        for _ in range(warmup):
            function(prepare())
        one_call = one_call_seconds(function, device, prepare)
        calls = 1 if setup is not None else calls_per_timing(one_call)
        repeats = repeats_within(one_call * calls, repeats, budget_s)
        times = [time_calls(function, prepare(), device, calls) / calls for _ in range(repeats)]
    return statistics.median(times), repeats, calls


def free_memory(device):
    """Free the leftovers of earlier cases. On CUDA, where the peaks are counted, a full collection and the
    allocator's cache; elsewhere PyTorch counts no bytes, and only the young generations are collected (a full
    collection of a large process takes a good part of a second, and would be paid before every case)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    else:
        gc.collect(1)


def first_line(error):
    """An exception as one line, type and message, for the JSON."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def attempt(function, device, context=None):
    """Call ``function()`` once (inside ``context()`` if given); return (output, None), or (None, {"status", "reason"}).

    A backend that refuses the inputs raises a RuntimeError after warning why; the warnings and the
    error together are the recorded reason. Out of memory is caught and recorded.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with context() if context is not None else contextlib.nullcontext():
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


def allocated_bytes(device):
    """Bytes of tensors allocated on a CUDA device now; None elsewhere (PyTorch counts only GPU memory)."""
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else None


def reset_peak(device):
    """Start a new peak: from here on, the peak is the most bytes allocated at once."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_allocated(device):
    """The most bytes allocated at once since ``reset_peak``; None off CUDA."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def mebibytes(count):
    return None if count is None else count / 2**20


def measure(function, device, sizes, setup=None, context=None):
    """{"status": "ok", "seconds" (per call), "repeats", "calls_per_timing", "peak_mib", "baseline_mib",
    "peak_above_baseline_mib"} for ``function``, or its failure (out of memory, error).

    Before the case: the leftovers of earlier cases are freed, the bytes still allocated (the case's
    inputs and whatever the caller holds) are recorded as the baseline, and the peak is reset, so that
    the peak is this case's own.
    """
    free_memory(device)
    baseline = allocated_bytes(device)
    reset_peak(device)
    failure = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # attempt() already recorded what the first call said
        try:
            seconds, repeats, calls = median_seconds(function, device, sizes.warmup, sizes.repeats, setup,
                                                     sizes.case_budget_s, context)
        except OUT_OF_MEMORY as error:
            failure = {"status": "out of memory", "reason": first_line(error)}
        except Exception as error:  # noqa: BLE001  recorded, and the suite goes on
            failure = {"status": "error", "reason": first_line(error)}
    if failure:
        free_memory(device)
        return failure
    peak = peak_allocated(device)
    above = None if peak is None else peak - baseline
    return {"status": "ok", "seconds": seconds, "repeats": repeats, "calls_per_timing": calls,
            "peak_mib": mebibytes(peak), "baseline_mib": mebibytes(baseline), "peak_above_baseline_mib": mebibytes(above)}


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
