"""Figures of a GPU suite result (attn/measure/gpu/suite.py), in the course style, for lesson 6.

Each function takes a result as read from its JSON file, draws one figure at the book's column
width and returns it: the attention core's time and peak memory against T, its throughput against
the data-sheet peak and the measured ceiling, the layer's time against nn.MultiheadAttention, and
the decoding bandwidth against the card's memory bandwidth.
"""

import matplotlib.pyplot as plt

from attn.common.plotting import COLUMN_WIDTH, GUIDE, NEUTRAL, PALETTE
from attn.measure.gpu.report import IMPLEMENTATIONS, require_suite_result

# One colour and marker per implementation; triton is grey and dashed, so no two lines look alike.
STYLES = {
    "explicit": {"color": PALETTE[4], "marker": "o", "linestyle": "-"},
    "sdpa flash": {"color": PALETTE[0], "marker": "s", "linestyle": "-"},
    "sdpa efficient": {"color": PALETTE[1], "marker": "^", "linestyle": "-"},
    "sdpa cudnn": {"color": PALETTE[2], "marker": "D", "linestyle": "-"},
    "sdpa math": {"color": PALETTE[3], "marker": "v", "linestyle": "-"},
    "triton": {"color": NEUTRAL, "marker": "P", "linestyle": "--"},
}


def run_label(result):
    """Where a run came from, for a figure's title: GPU, dtype, torch version and date."""
    info = result["provenance"]  # two lines: on one, a long GPU name would widen the figure past the column
    return f"{info['device_name']}\n{result['sizes']['dtype']}, torch {info['torch']}, {info['date_utc'][:10]}"


def core_series(result, impl, head_dim, causal):
    """The timed rows of one implementation at one (d, causal), in order of T."""
    rows = [row for row in result["core"] if row["impl"] == impl and row["head_dim"] == head_dim
            and row["causal"] == causal and row["status"] == "ok"]
    return sorted(rows, key=lambda row: row["length"])


def legend_below(figure, ncol=2):
    """One legend under the figure for the lines of all its panels, each label once, so that no line is covered."""
    handles = {}
    for axis in figure.axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    figure.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=ncol)


def length_ticks(axis, lengths):
    axis.set_xticks(lengths, labels=[f"{length // 1024}k" if length >= 1024 else str(length) for length in lengths])
    axis.minorticks_off()


def out_of_memory_entry(result, head_dim, causal):
    return next(entry for entry in result["explicit_out_of_memory"]
                if entry["head_dim"] == head_dim and entry["causal"] == causal)


def missing(result, *parts):
    """True if a part of the run failed (its section is None), so that its figure cannot be drawn.

    First checks that ``result`` is a GPU suite result at all (TypeError/ValueError otherwise).
    """
    require_suite_result(result, "the GPU suite's figures")
    return any(result.get(part) is None for part in parts)


def ceiling(result, kind, key):
    """A measured ceiling (matmul TFLOP/s, copy TB/s), or None if that part failed."""
    return ((result.get("ceilings") or {}).get(kind) or {}).get(key)


def plot_time_and_memory(result, head_dim, causal=False):
    """Two stacked log-log panels against T: median time, then peak memory; the explicit path's OOM marked.

    Returns the figure, or None when the run's core sweep failed (as do the other plot functions for their parts).
    """
    if missing(result, "core", "explicit_out_of_memory"):
        return None
    figure, (time_axis, memory_axis) = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 9), layout="constrained")
    for impl in IMPLEMENTATIONS:
        rows = core_series(result, impl, head_dim, causal)
        if rows:
            lengths = [row["length"] for row in rows]
            time_axis.loglog(lengths, [row["seconds"] * 1e3 for row in rows], label=impl, **STYLES[impl])
            memory_axis.loglog(lengths, [row["peak_mib"] / 1024 for row in rows], label=impl, **STYLES[impl])
    entry = out_of_memory_entry(result, head_dim, causal)
    if entry["within_sweep"]:
        length = entry["first_out_of_memory_length"]
        time_axis.axvline(length, color=GUIDE, linestyle=":", label=f"explicit: out of memory at $T$ = {length}")
        memory_axis.plot([length], [entry["weights_gib_at_that_length"]], "X", color=PALETTE[4], markersize=11,
                         label="explicit at its OOM length:\nthe weights alone (GiB)")
    memory = result["provenance"].get("memory_gib")
    if memory:
        memory_axis.axhline(memory, color=GUIDE, linestyle="--", label=f"the GPU's memory, {memory:.0f} GiB")
    kind = "causal" if causal else "non-causal"
    time_axis.set(ylabel="milliseconds (median)", title=f"Attention core, $d$ = {head_dim}, {kind}: time")
    memory_axis.set(xlabel=r"sequence length $T$", ylabel="peak memory (GiB)", title="Peak memory")
    for axis in (time_axis, memory_axis):
        length_ticks(axis, result["sizes"]["lengths"])
    legend_below(figure)
    figure.suptitle(run_label(result))
    return figure


def plot_throughput(result, causal=False):
    """TFLOP/s against T, one panel per head size, with the data-sheet peak and the measured ceiling as lines."""
    if missing(result, "core"):
        return None
    head_dims = result["sizes"]["head_dims"]
    figure, axes = plt.subplots(len(head_dims), 1, figsize=(COLUMN_WIDTH, 3.6 * len(head_dims) + 1.2), layout="constrained",
                                squeeze=False)
    peaks = result["peaks"]["matched"]
    peak = peaks["bf16_dense_tflops"] if peaks and result["sizes"]["dtype"] == "bfloat16" else None
    measured = ceiling(result, "matmul", "tflops")
    for axis, head_dim in zip(axes[:, 0], head_dims, strict=True):
        for impl in IMPLEMENTATIONS:
            rows = core_series(result, impl, head_dim, causal)
            if rows:
                axis.semilogx([row["length"] for row in rows], [row["tflops"] for row in rows], label=impl, **STYLES[impl])
        if peak:
            axis.axhline(peak, color=GUIDE, linestyle="--", label=f"data-sheet dense bf16 peak, {peak:.0f}")
        if measured:
            axis.axhline(measured, color=GUIDE, linestyle=":", label=f"measured matmul ceiling, {measured:.0f}")
        axis.set(ylabel="TFLOP/s", title=f"$d$ = {head_dim}", ylim=(0, None))
        length_ticks(axis, result["sizes"]["lengths"])
    axes[-1, 0].set_xlabel(r"sequence length $T$")
    legend_below(figure)
    counted = "causal work counted as half" if causal else "non-causal"
    figure.suptitle(f"Attention core throughput ({counted})\n{run_label(result)}")
    return figure


def plot_layer_ratios(result):
    """One bar per case: the course's layer's median time over nn.MultiheadAttention's (1 = the same)."""
    if missing(result, "layer"):
        return None
    rows = [row for row in result["layer"] if row["ratio"] is not None]
    names = [f"{row['mode']}\n{'causal' if row['causal'] else 'non-causal'}" for row in rows]
    # narrower than the column: its tick labels reach past the constrained layout's edge
    figure, axis = plt.subplots(figsize=(COLUMN_WIDTH - 0.2, 4.6), layout="constrained")
    ratios = [row["ratio"] for row in rows]
    axis.barh(range(len(rows)), ratios, color=PALETTE[0])
    axis.axvline(1.0, color=GUIDE, linestyle="--", label="the same time")
    for position, ratio in enumerate(ratios):
        axis.text(ratio, position, f" {ratio:.2f}", va="center")
    axis.set_yticks(range(len(rows)), labels=names)
    axis.invert_yaxis()
    axis.set_xlim(0, max([1.0, *ratios]) * 1.25)
    shape = result["sizes"]["layer"]
    axis.set(xlabel="ours / nn.MultiheadAttention, median time\n(both through scaled_dot_product_attention)",
             title=f"Whole layer, $B$ = {shape['batch']}, $T$ = {shape['length']}, $E$ = {shape['embed_dim']}, "
                   f"$H$ = {shape['heads']}")
    legend_below(figure)
    figure.suptitle(run_label(result))
    return figure


def plot_decode_bandwidth(result):
    """Achieved bandwidth against the cache length: one decoding step of the layer, and attention alone, against HBM."""
    if missing(result, "decode"):
        return None
    figure, axis = plt.subplots(figsize=(COLUMN_WIDTH, 5.2), layout="constrained")
    rows = [row for row in result["decode"] if row.get("layer_step", {}).get("status") == "ok"]
    lengths = [row["cache_length"] for row in rows]
    axis.semilogx(lengths, [row["layer_step"]["tb_per_s"] for row in rows], "o-", color=PALETTE[0],
                  label="layer step with the KV cache")
    alone = [row for row in rows if row["attention_only"]["status"] == "ok"]
    axis.semilogx([row["cache_length"] for row in alone], [row["attention_only"]["tb_per_s"] for row in alone], "s-",
                  color=PALETTE[1], label="attention over the cache alone")
    peaks = result["peaks"]["matched"]
    if peaks:
        axis.axhline(peaks["hbm_tb_per_s"], color=GUIDE, linestyle="--", label=f"data-sheet HBM, {peaks['hbm_tb_per_s']} TB/s")
    copy = ceiling(result, "copy", "tb_per_s")
    if copy:
        axis.axhline(copy, color=GUIDE, linestyle=":", label=f"measured copy, {copy:.2f} TB/s")
    axis.set(xlabel="cached positions", ylabel="TB/s (bytes a step moves / time)", ylim=(0, None),
             title="Decoding: bandwidth of one step with the KV cache")
    length_ticks(axis, result["sizes"]["decode"]["cache_lengths"])
    legend_below(figure)
    figure.suptitle(run_label(result))
    return figure
