"""The course's figure style and the plotting helpers every lesson shares.

A lesson calls ``use_course_style()`` once, in its first cell. Figures are then drawn at
100 CSS pixels per inch and saved at twice that (200 dpi), so they stay sharp on high-density
screens; no text is smaller than ``SMALLEST_FONT_PT``; and figures are at most
``COLUMN_WIDTH`` inches wide, so that on a phone, where the column is ``PHONE_COLUMN_PX`` CSS
pixels and every figure is scaled down to fit it, the smallest text still renders at least
``PHONE_TEXT_PX`` CSS pixels high. Colours come from one palette (``PALETTE`` and its
two greys), each at least 3:1 against the white background.
"""

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

COLORMAP = "viridis"  # perceptually uniform and readable with colour-blindness

# Okabe and Ito's colour-blind-safe palette, without its three light colours (orange, sky blue,
# yellow: under 3:1 on white). Contrast on white: 5.2, 3.9, 3.4, 3.1 and 21.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000")  # blue, vermillion, bluish green, reddish purple, black
# Two greys complete it: one for marks that should not draw the eye, one for reference lines.
NEUTRAL = "#858585"  # 3.7:1 on white; weight_bars draws its bars in it, and the highlighted one in PALETTE[0]
GUIDE = "#666666"  # 5.7:1 on white
BAR = NEUTRAL
HIGHLIGHT = PALETTE[0]
BACKGROUND = "#FFFFFF"
MINIMUM_CONTRAST = 3.0  # marks and text against what they are drawn on

FIGURE_DPI = 100  # CSS pixels per inch of figure
PNG_DPI = 2 * FIGURE_DPI  # saved pixels per inch: twice the CSS size, for high-density screens
SMALLEST_FONT_PT = 10
PHONE_COLUMN_PX = 358  # CSS pixels: the book's column on a 390 px phone
PHONE_TEXT_PX = 9  # the smallest text a reader must read, in CSS pixels on that phone
# inches: the widest figure whose SMALLEST_FONT_PT text is still PHONE_TEXT_PX high on the phone
# (10 pt / 72 * 358 px / 5.4 in = 9.2 px). On a desktop (a 690 px column) it shows at 540 px.
COLUMN_WIDTH = 5.4

COURSE_RC = {
    "figure.dpi": FIGURE_DPI,
    "savefig.dpi": "figure",
    "figure.facecolor": BACKGROUND,
    "savefig.facecolor": BACKGROUND,
    "axes.facecolor": BACKGROUND,
    "figure.figsize": (COLUMN_WIDTH, 3.4),
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": SMALLEST_FONT_PT,
    "ytick.labelsize": SMALLEST_FONT_PT,
    "legend.fontsize": SMALLEST_FONT_PT,
    "legend.title_fontsize": 11,
    "figure.titlesize": 12,
    "axes.prop_cycle": mpl.cycler(color=PALETTE),
    "image.cmap": COLORMAP,
    "lines.linewidth": 2.0,
    "lines.markersize": 6.0,
}


def use_course_style():
    """Apply the course's figure style (fonts, colours, sizes) and, in a notebook, 2x (retina) PNG output.

    Inline figures are saved at ``PNG_DPI`` and shown at half their pixel size, so each PNG has
    twice the pixels of the space it takes on the page.
    """
    mpl.rcParams.update(COURSE_RC)
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to configure for display
        return
    if get_ipython() is not None:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")


def relative_luminance(colour):
    """WCAG 2 relative luminance of a matplotlib colour, from 0 (black) to 1 (white)."""
    channels = np.asarray(mpl.colors.to_rgb(colour), dtype=float)  # (3,) sRGB in [0, 1]
    linear = np.where(channels <= 0.04045, channels / 12.92, ((channels + 0.055) / 1.055) ** 2.4)
    return float(linear @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(first, second=BACKGROUND):
    """WCAG 2 contrast ratio between two colours, from 1 (none) to 21 (black on white)."""
    lighter, darker = sorted((relative_luminance(first), relative_luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def text_colour_on(background):
    """Black or white, whichever contrasts more with ``background`` (always at least 4.5:1)."""
    return "black" if contrast_ratio("black", background) >= contrast_ratio("white", background) else "white"


def labels_fit_across(ax, labels):
    """Whether ``labels``, one per column of ``ax``, fit side by side unrotated at the tick label size.

    Measured against the axes' width before layout (tight or constrained layout mostly widens
    it), so each label may take at most 90% of its column, a margin for what layout takes back.
    """
    if len(labels) == 0:
        return True
    font = FontProperties(size=mpl.rcParams["xtick.labelsize"])
    measure = TextToPath().get_text_width_height_descent
    widest = max(measure(str(label), font, ismath=False)[0] for label in labels)  # points
    column = ax.get_position().width * ax.figure.get_size_inches()[0] * 72 / len(labels)  # points
    return widest <= 0.9 * column


def heatmap(
    matrix, row_labels, col_labels, title, ax=None, annotate=None, colorbar_label="weight", vmin=None, vmax=None, colorbar=True
):
    """Draw a (rows, cols) matrix with labelled axes, a colour bar and a title.

    matrix: (R, C); row_labels: R names (queries); col_labels: C names (keys).
    annotate: write each value in its cell (default: only when the matrix is small).
    colorbar: False leaves the colour bar to the caller (one bar shared by several panels).
    Returns the matplotlib Axes.
    """
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {matrix.shape}")
    if len(row_labels) != matrix.shape[0] or len(col_labels) != matrix.shape[1]:
        raise ValueError(
            f"labels do not fit the matrix: {len(row_labels)} row labels and {len(col_labels)} column labels "
            f"for a matrix of shape {matrix.shape}"
        )
    if ax is None:
        width = min(COLUMN_WIDTH, 0.5 * matrix.shape[1] + 2.8)
        _, ax = plt.subplots(figsize=(width, 0.42 * matrix.shape[0] + 1.8))
    image = ax.imshow(matrix, cmap=COLORMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_yticks(range(matrix.shape[0]), labels=row_labels)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label=colorbar_label)
    if labels_fit_across(ax, col_labels):  # level labels read more easily, where there is room
        ax.set_xticks(range(matrix.shape[1]), labels=col_labels)
    else:
        ax.set_xticks(range(matrix.shape[1]), labels=col_labels, rotation=45, ha="right", rotation_mode="anchor")
    if annotate is None:
        annotate = matrix.size <= 64
    if annotate:
        for (row, col), number in np.ndenumerate(matrix):
            cell_colour = image.cmap(image.norm(number))
            ax.text(col, row, f"{number:.2f}", ha="center", va="center", color=text_colour_on(cell_colour),
                    fontsize=SMALLEST_FONT_PT)
    return ax


def mark_cells(ax, rows, cols):
    """Outline cells of a heatmap, black around white, so that the mark shows on every colour of the map."""
    for row, col in zip(rows, cols, strict=True):
        for colour, width in (("black", 3.5), ("white", 1.5)):
            ax.add_patch(plt.Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor=colour, lw=width))


def weight_bars(weights, labels, title, ax=None, highlight=None):
    """Bar chart of one query's weights over its keys; ``highlight`` names a bar to emphasise."""
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 1 or len(weights) == 0 or len(labels) != len(weights):
        raise ValueError(f"weight_bars needs one weight per label, and at least one, "
                         f"got shape {weights.shape} and {len(labels)} labels")
    if not np.isfinite(weights).all():
        raise ValueError("weight_bars needs finite weights, got NaN or inf")
    if ax is None:
        _, ax = plt.subplots(figsize=(min(COLUMN_WIDTH, 0.9 * len(weights) + 2.4), 3.4))
    colours = [HIGHLIGHT if label == highlight else BAR for label in labels]
    ax.bar(range(len(weights)), weights, color=colours)
    ax.set_xticks(range(len(weights)), labels=labels)
    ax.set_ylim(0, max(1.0, float(weights.max()) * 1.15))
    ax.set_ylabel("weight")
    ax.set_title(title)
    for position, weight in enumerate(weights):
        ax.text(position, weight + 0.02, f"{weight:.2f}", ha="center", va="bottom", fontsize=SMALLEST_FONT_PT,
                fontweight="bold" if labels[position] == highlight else "normal")
    return ax


def seed_dots(accuracies, title, axes=None, xlabel="held-out accuracy"):
    """One panel per task, one row per arm: each seed's accuracy as a blue dot, the mean as a black bar mark and
    the 95% interval of the mean (Student's t over the seeds, attn.common.stats) as a grey line through it.

    accuracies: {task: {arm: [accuracy per seed]}}, every task with the same arms in the same order, every
    list of at least two finite numbers from 0 to 1 (lesson 18 passes the runs of attn.experiments.sparse_runs).
    axes: one matplotlib Axes per task, or None for a new figure of COLUMN_WIDTH. Returns the axes.
    """
    from attn.common.stats import paired_interval  # the one-sample interval is the paired one against zeros

    tasks, arms = _seed_dots_shape(accuracies)
    if axes is None:
        _, axes = plt.subplots(1, len(tasks), figsize=(COLUMN_WIDTH, 0.42 * len(arms) + 1.6), sharey=True,
                               squeeze=False, layout="constrained")
        axes = list(axes[0])
    if len(axes) != len(tasks):
        raise ValueError(f"axes must hold one Axes per task, {len(tasks)}, got {len(axes)}")
    for ax, task in zip(axes, tasks, strict=True):
        for row, arm in enumerate(arms):
            values = [float(value) for value in accuracies[task][arm]]
            mean, low, high = paired_interval(values, [0.0] * len(values))
            ax.hlines(row, max(low, 0.0), min(high, 1.0), color=GUIDE, linewidth=2, zorder=1)
            ax.scatter(values, [row] * len(values), color=PALETTE[0], s=28, alpha=0.7, zorder=2)
            ax.scatter([mean], [row], marker="|", s=260, linewidths=2.5, color=PALETTE[4], zorder=3)
        ax.set(xlim=(-0.03, 1.03), title=task, xlabel=xlabel)
        ax.set_xticks([0, 0.5, 1], labels=["0", "0.5", "1"])
        ax.grid(axis="x", color=NEUTRAL, alpha=0.3)
    axes[0].set_yticks(range(len(arms)), labels=arms)
    axes[0].invert_yaxis()
    axes[0].figure.suptitle(title)
    return axes


def _seed_dots_shape(accuracies):
    """The tasks and arms of ``seed_dots``' argument, checked."""
    if not isinstance(accuracies, dict) or not accuracies or not all(
            isinstance(runs, dict) and runs for runs in accuracies.values()):
        raise TypeError("accuracies must be a dict {task: {arm: [accuracy per seed]}} with at least one task and arm")
    tasks = list(accuracies)
    arms = list(accuracies[tasks[0]])
    if any(list(accuracies[task]) != arms for task in tasks):
        raise ValueError(f"every task must have the same arms in the same order, {arms}")
    for task in tasks:
        for arm, values in accuracies[task].items():
            if not isinstance(values, list | tuple) or len(values) < 2 or not all(
                    isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1 for value in values):
                raise ValueError(f"accuracies[{task!r}][{arm!r}] must be a list of at least two accuracies from 0 to 1")
    return tasks, arms
