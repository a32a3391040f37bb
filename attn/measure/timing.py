"""Timing on any device: medians after warm-up, the device synchronised around every run (lessons 5, 6, 10, 12).

``median_seconds`` is what the lessons time with; ``seconds_of_each_run`` keeps every run, so that
``relative_spread`` can say how far they scatter; ``machine_load`` says how busy the machine was.
``seconds_per_token`` times lesson 10's decoder one generated token at a time.
"""

import contextlib
import math
import numbers
import os
import statistics
import sys
import time

import torch

from attn.common.validate import positive_int, require_callable, seed_value, type_name, whole_count
from attn.models.decoder import Decoder, check_room


def synchronize(device):
    """Wait for the work queued on a GPU (CUDA or Apple's MPS) to finish; nothing to wait for on a CPU."""
    from attn.common.device import check_device

    device = check_device("device", device) or torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


# A row whose middle half of runs spreads over more than this fraction of its median is flagged.
SPREAD_LIMIT = 0.2


def check_timing(function, device, warmup, repeats):
    """The arguments of median_seconds: a function, a device (torch.device or its name), warmup >= 0, repeats >= 1.

    Returns (device as a torch.device, warmup, repeats).
    """
    require_callable("function", function)
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device {device!r} is not a device name; use 'cpu', 'cuda' or 'mps'") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be the torch.device the function runs on (or its name, such as 'cpu'), "
                        f"got {type_name(device)} {device!r:.60}")
    return device, whole_count("warmup", warmup), positive_int("repeats", repeats)


def seconds_of_each_run(function, device, warmup=3, repeats=10, calls=1):
    """Wall-clock seconds per call of ``function()`` in each of ``repeats`` runs, after ``warmup`` untimed calls.

    A run is ``calls`` back-to-back calls between two synchronisations of the device, divided by
    ``calls``: on a GPU, many calls per run let the launches overlap the work, so that the time is the
    kernels', not the host's wait for each one.
    """
    device, warmup, repeats = check_timing(function, device, warmup, repeats)
    calls = positive_int("calls", calls)
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            function()
        synchronize(device)
        times.append((time.perf_counter() - start) / calls)
    return times


def median_seconds(function, device, warmup=3, repeats=10):
    """Median wall-clock time of ``function()`` in seconds, synchronising the device around each run."""
    return statistics.median(seconds_of_each_run(function, device, warmup, repeats))


def relative_spread(times):
    """The interquartile range of ``times`` over their median: 0.1 means the middle half of the
    runs lies within a band 10% of the median wide; 0 for a single run."""
    if isinstance(times, (str, bytes)) or not hasattr(times, "__len__"):
        raise TypeError(f"relative_spread needs a list of times in seconds, got {type(times).__name__}")
    if not all(isinstance(t, numbers.Real) and not isinstance(t, bool) and math.isfinite(t) and t >= 0 for t in times):
        raise ValueError(f"relative_spread needs times in seconds, each a finite number of 0 or more, got {list(times)!r:.80}")
    if len(times) < 2:
        return 0.0
    lower, _, upper = statistics.quantiles(times, n=4, method="inclusive")
    middle = statistics.median(times)
    if middle == 0:  # runs too short for the clock: no spread can be measured against a median of 0
        return 0.0 if upper == lower else math.inf
    return (upper - lower) / middle


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


@torch.no_grad()
def seconds_per_token(model, length, use_cache, warmup=2, repeats=7, seed=0):
    """Median seconds for one greedy step once the sequence holds ``length`` tokens (batch of one, random tokens).

    Without a cache a step feeds all ``length`` tokens. With one, the first length - 1 tokens are
    prefilled once (not timed) and a step feeds one token; each timed step appends one more position
    to the caches, as generation does, so the model needs length - 1 + warmup + repeats positions.
    """
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be an attn.models.decoder.Decoder, got {type_name(model)}")
    length, warmup, repeats = positive_int("length", length), whole_count("warmup", warmup), positive_int("repeats", repeats)
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache must be True or False, got {type_name(use_cache)} {use_cache!r}")
    needed = length + (warmup + repeats - 1 if use_cache else 0)
    check_room(model, needed, "the positions this measurement needs")
    device = model.readout.weight.device
    generator = torch.Generator().manual_seed(seed_value(seed))
    tokens = torch.randint(model.vocab_size, (1, length), generator=generator).to(device)  # (1, length)
    model.eval()
    if not use_cache:
        return median_seconds(lambda: model(tokens), device, warmup, repeats)
    caches = model.new_caches()
    if length > 1:
        model(tokens[:, :-1], caches)  # prefill: positions 0 .. length - 2
    newest = tokens[:, -1:]  # (1, 1)
    return median_seconds(lambda: model(newest, caches), device, warmup, repeats)


def window_decode_times(lengths=(256, 1024, 4096), window=128, embed_dim=64, num_heads=4, num_layers=2,
                        warmup=2, repeats=7, device="cpu"):
    """Seconds per generated token at each length, with every layer global (a growing KVCache, lesson 10)
    and with every layer local (a RingKVCache of ``window`` positions, lesson 14), and the cache bytes.

    Both models are the course's Decoder with the same weights; a step feeds one token (batch of one)
    after the first length - 1 positions were prefilled (seconds_per_token, above). Returns rows
    {"length", "cache", "seconds", "cache_bytes"}.
    """
    from attn.common.device import check_device
    from attn.common.validate import positive_int, whole_count

    if not isinstance(lengths, list | tuple) or not lengths:
        raise TypeError(f"lengths must be a non-empty list or tuple of positive ints, got {type(lengths).__name__}")
    lengths = [positive_int("each length", length) for length in lengths]
    warmup, repeats = whole_count("warmup", warmup), positive_int("repeats", repeats)
    device = check_device("device", device)
    from attn.models.decoder import Decoder

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
