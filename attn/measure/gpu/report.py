"""Reading a GPU suite result: its schema checked, the real runs in a folder found, and the short table printed last.
"""

import json
import os
import warnings
from pathlib import Path

from attn.measure.gpu.core import SDPA_BACKENDS

SCHEMA = "attn.measure.gpu.suite/1"


STATUSES = {"ok", "out of memory", "refused", "absent", "skipped", "error"}


IMPLEMENTATIONS = ("explicit", *(f"sdpa {name}" for name in SDPA_BACKENDS), "triton")


TOP_LEVEL = {
    "schema": str, "dry_run": bool, "complete": bool, "provenance": dict, "peaks": dict, "flop_counting": str,
    "decode_counting": str, "layer_paths": str, "timing": dict, "sizes": dict, "section_errors": dict, "section_seconds": dict,
    "cuda_tests": dict, "ceilings": dict, "core": list, "explicit_out_of_memory": list, "layer": list, "decode": list,
    "seconds": float,
}


PROVENANCE = ("device_type", "device_name", "date_utc", "command", "torch", "cuda", "cudnn", "triton", "numpy", "driver")


def require_suite_result(result, what="this function"):
    """TypeError/ValueError unless ``result`` is a GPU suite result (a dictionary with SCHEMA and its provenance)."""
    if not isinstance(result, dict):
        raise TypeError(f"{what} needs a GPU suite result (the dictionary read from its JSON file), got {type(result).__name__}")
    if result.get("schema") != SCHEMA or not isinstance(result.get("provenance"), dict):
        hint = " (this looks like a benchmark result: attn.measure.bench.plot draws those)" if "rows" in result else ""
        raise ValueError(f"{what} needs a GPU suite result, with schema {SCHEMA!r} and its provenance; "
                         f"got a dictionary with schema {result.get('schema')!r}{hint}")


def validate(result):
    """Everything wrong with a suite result's shape, as sentences (an empty list: it follows SCHEMA)."""
    if not isinstance(result, dict):
        raise TypeError(f"validate needs a GPU suite result (the dictionary read from its JSON file), "
                        f"got {type(result).__name__}")
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
    """The GPU suite results in ``folder`` that real GPU runs produced: no dry runs, no CPU runs.

    A file that cannot be read as a suite result (truncated JSON, no provenance) is skipped with a
    warning that names it, so that one bad file does not hide the good ones.
    """
    if not isinstance(folder, str | os.PathLike) or not Path(folder).is_dir():
        raise ValueError(f"folder must be a folder of JSON results, such as lessons/benchmarks, got {folder!r:.60}")
    runs = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            warnings.warn(f"skipped {path.name}: it is not readable JSON ({error})", stacklevel=2)
            continue
        if not isinstance(result, dict) or result.get("schema") != SCHEMA:
            continue  # another kind of result (a benchmark), not a suite run
        if not isinstance(result.get("provenance"), dict):
            warnings.warn(f"skipped {path.name}: a GPU suite result without its provenance (where it ran)", stacklevel=2)
            continue
        if not result.get("dry_run") and result["provenance"].get("device_type") == "cuda":
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
        share = percent(copy["tb_per_s"] / peaks["hbm_tb_per_s"] if peaks and peaks["hbm_tb_per_s"] else None)
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
    upcast = sorted({row["impl"] for row in result["core"] if row.get("compute_dtype", row["dtype"]) != row["dtype"]})
    if upcast:
        lines.append(f"  ({', '.join(upcast)}: computed in float32, its share is of the float32 peak)")
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
    lines = ["layer, ours / nn.MultiheadAttention (median times, both via sdpa):"]
    for causal in (False, True):
        ratios = [f"{row['mode']} {row['ratio']:.2f}" if row["ratio"] is not None
                  else f"{row['mode']} {row['ours']['status']}/{row['reference']['status']}"
                  for row in result["layer"] if row["causal"] == causal]
        lines.append(f"  {'causal' if causal else 'non-causal':10s}  " + " | ".join(ratios))
    fast = [f"{'causal' if row['causal'] else 'non-causal'} {row['ratio_to_fast_path']:.2f}" for row in result["layer"]
            if row.get("ratio_to_fast_path") is not None]
    if fast:
        lines.append("  forward against its inference fast path: " + " | ".join(fast))
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
    require_suite_result(result, "summary_lines")
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
