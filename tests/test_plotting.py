"""The shared plotting helpers draw what they say and refuse mismatched labels."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attn.plotting import COLORMAP, heatmap, weight_bars  # noqa: E402


def test_heatmap_labels_title_colourbar():
    ax = heatmap(np.eye(3), ["a", "b", "c"], ["x", "y", "z"], "Title")
    assert [label.get_text() for label in ax.get_xticklabels()] == ["x", "y", "z"]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.get_title() == "Title"
    assert ax.images[0].get_cmap().name == COLORMAP
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    assert len(ax.texts) == 9  # small matrices are annotated
    plt.close(ax.figure)


def test_heatmap_refuses_mismatched_labels():
    with pytest.raises(ValueError, match=r"2 row labels .* shape \(3, 3\)"):
        heatmap(np.eye(3), ["a", "b"], ["x", "y", "z"], "t")
    with pytest.raises(ValueError, match="2-D"):
        heatmap(np.ones(3), ["a"], ["x"], "t")


def test_weight_bars():
    ax = weight_bars([0.2, 0.8], ["a", "b"], "w", highlight="b")
    assert len(ax.patches) == 2
    assert ax.patches[1].get_height() == pytest.approx(0.8)
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="one weight per label"):
        weight_bars([0.2, 0.8], ["a"], "w")
