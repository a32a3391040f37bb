"""Lesson 21's record (compressed_caches.json): its derived fields from its measured ones, so that they can be
written again without measuring, and the paired comparison of its two retrieval arms.

- ``derive(record)``: the record with ``text``, the units' words and each quantized entry's ``bytes_share_of_float16``
  written from the measured fields (``derive`` of the shipped record is the record; the command writes through it).
- ``float16_share``: a quantized cache's bytes over a 16-bit full cache's, KIVI's residual counted in 16 bits.
- ``question_gain``: retrieval with the question inside the cut prompt minus after the cut, paired over passages.
"""
import math

from attn.common.stats import paired_interval
from attn.common.validate import positive_int, type_name, whole_count

LONGEST = 1 << 20  # positions: far more than any record's sequences

RETRIEVAL_UNITS = ("log-probability (nats) of the answer's tokens, summed: a space, then the number's 4 digits, one "
                   f"token each; chance for the 4 digits is {-4 * math.log(10):.2f}, and the space, which the question "
                   "makes likely, is not in that; the question read after the prompt was cut down")
FLOAT16_UNITS = ("a quantized cache's bytes over a float16 full cache's, with KIVI's full-precision residual kept in "
                 "16 bits as a 16-bit server keeps it: 2 * bytes_share minus the residual's share (bytes_share counts it "
                 "in float32)")


def _fields(name, value, keys):
    """``value`` if it is a dict holding every one of ``keys``; else a TypeError or ValueError naming what is wrong."""
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict (an entry of compressed_caches.json), got {type_name(value)}")
    missing = [key for key in keys if key not in value]
    if missing:
        raise ValueError(f"{name} has no {', '.join(map(repr, missing))}: is it an entry of compressed_caches.json?")
    return value


def _share(name, value):
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a share of the bytes, a finite number of 0 or more, got {value!r:.60}")
    return value


def residual_share(residual, length, scored):
    """The share of the positions a KIVI cache with ``residual`` (0: none) holds in full precision, mean over the loss
    task's decode steps: after each step it has seen t = length - scored + 1 .. length - 1 positions and keeps the
    last t % residual of them uncoded. residual >= 0, 2 <= scored < length <= 2**20."""
    residual, length, scored = whole_count("residual", residual), positive_int("length", length), positive_int("scored", scored)
    if length > LONGEST or not 2 <= scored < length:
        raise ValueError(f"need 2 <= scored < length <= {LONGEST}, got scored {scored} and length {length}")
    seen = range(length - scored + 1, length)
    return sum(t % residual / t for t in seen) / len(seen) if residual else 0.0


def float16_share(entry, settings):
    """A quantized (or evict-then-quantize) record entry's bytes over a float16 full cache's, its residual counted in
    16 bits: 2 * bytes_share - residual_share (bytes_share counts the residual in float32, 4 bytes a number); None for
    an evicting cache (in float16 it halves with the full cache: its share does not change)."""
    _fields("entry", entry, ("family", "settings", "bytes_share"))
    _fields("settings", settings, ("length", "scored"))
    if entry["family"] == "evict":
        return None
    residual = _fields("entry's settings", entry["settings"], ()).get("residual", 0)
    residual_part = residual_share(residual, settings["length"], settings["scored"])
    return round(2 * _share("bytes_share", entry["bytes_share"]) - residual_part, 4)


def record_text(record):
    """The record's ``text`` from its measured fields: the passages, the size chosen and the cost it measured."""
    _fields("record", record, ("size", "settings", "seconds", "cpu_seconds", "methods"))
    settings = _fields("the record's settings", record["settings"], ("passages", "workers"))
    count, seconds, cpu = settings["passages"], record["seconds"], record["cpu_seconds"]
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (count, seconds, cpu)):
        raise TypeError("the record's passages, seconds and cpu_seconds must be whole numbers")
    if not isinstance(record["methods"], list):
        raise TypeError(f"the record's methods must be a list, got {type_name(record['methods'])}")
    if record["size"] == "tiny":
        return "random token ids (the tiny size checks the machinery only)"
    from attn.data.corpus import TITLES
    from attn.models.lm import HELD_OUT

    stretches = f"{3 * count} evenly spread stretches of {TITLES[HELD_OUT]}"
    workers = settings["workers"]
    busy = (f"; the wall time exceeds the CPU time of all {workers} workers together: they shared a busy machine's "
            "cores" if seconds > cpu else "")
    return (f"{stretches}, {count} for each task (the two retrieval arms read the same {count}); {count} passages were "
            f"chosen for about 30 CPU-minutes (about 6 CPU-seconds a passage for each of the {len(record['methods'])} "
            f"compressed caches and the full one, on a quiet machine); measured: {cpu:,} CPU-seconds "
            f"({cpu / 60:.1f} CPU-minutes) and {seconds:,} s of wall time over {workers} workers of one thread{busy}")


def derive(record):
    """``record`` with its derived fields written from its measured ones: ``text`` (record_text), the units' words for
    ``retrieval`` and ``bytes_share_of_float16``, and every quantized entry's ``bytes_share_of_float16``
    (float16_share). The measured numbers are left as they are; returns a new dict."""
    text = record_text(record)  # checks the record's fields
    _fields("the record's units", record.get("units"), ())
    derived = {**record, "text": text, "units": {**record["units"], "retrieval": RETRIEVAL_UNITS,
                                                                  "bytes_share_of_float16": FLOAT16_UNITS}}
    derived["methods"] = []
    for entry in record["methods"]:
        share = float16_share(entry, record["settings"])
        derived["methods"].append(entry if share is None else {**entry, "bytes_share_of_float16": share})
    return derived


def question_gain(entry):
    """What reading the question before the cut changes for one record entry (a method, or the record's ``full``):
    retrieval_aware - retrieval over the passages, paired: a dict of mean, low and high (95%)."""
    _fields("entry", entry, ("retrieval_aware", "retrieval"))
    mean, low, high = paired_interval(entry["retrieval_aware"], entry["retrieval"])
    return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}
