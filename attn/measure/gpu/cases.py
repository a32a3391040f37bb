"""How the GPU suite runs one case: a first call that may be refused or run out of memory, then timing and peak memory.
"""

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
