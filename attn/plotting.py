"""One plotting helper for every attention picture in the course."""

import matplotlib.pyplot as plt
import numpy as np

COLORMAP = "viridis"  # perceptually uniform and readable with colour-blindness


def heatmap(matrix, row_labels, col_labels, title, ax=None, annotate=None, colorbar_label="weight", vmin=None, vmax=None):
    """Draw a (rows, cols) matrix with labelled axes, a colour bar and a title.

    matrix: (R, C); row_labels: R names (queries); col_labels: C names (keys).
    annotate: write each value in its cell (default: only when the matrix is small).
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
        _, ax = plt.subplots(figsize=(0.55 * matrix.shape[1] + 2.5, 0.45 * matrix.shape[0] + 1.5))
    image = ax.imshow(matrix, cmap=COLORMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(matrix.shape[1]), labels=col_labels, rotation=45, ha="right")
    ax.set_yticks(range(matrix.shape[0]), labels=row_labels)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, label=colorbar_label)
    if annotate is None:
        annotate = matrix.size <= 64
    if annotate:
        middle = np.nanmean([image.norm.vmin, image.norm.vmax])
        for (row, col), number in np.ndenumerate(matrix):
            colour = "black" if number > middle else "white"
            ax.text(col, row, f"{number:.2f}", ha="center", va="center", color=colour, fontsize=8)
    return ax


def weight_bars(weights, labels, title, ax=None, highlight=None):
    """Bar chart of one query's weights over its keys; ``highlight`` names a bar to emphasise."""
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 1 or len(labels) != len(weights):
        raise ValueError(f"weight_bars needs one weight per label, got shape {weights.shape} and {len(labels)} labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.8 * len(weights) + 2, 3))
    colours = plt.get_cmap(COLORMAP)(np.where(np.array(labels) == highlight, 0.85, 0.3))
    ax.bar(range(len(weights)), weights, color=colours)
    ax.set_xticks(range(len(weights)), labels=labels)
    ax.set_ylim(0, max(1.0, float(weights.max()) * 1.1))
    ax.set_ylabel("weight")
    ax.set_title(title)
    for position, weight in enumerate(weights):
        ax.text(position, weight + 0.02, f"{weight:.2f}", ha="center", fontsize=9)
    return ax
