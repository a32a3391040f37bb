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


def test_explorer_pieces():
    from attn.explorer import explorer, fruit_attention, sweep_grid

    weights, output = fruit_attention([0.8, 0.2, 0.1])
    np.testing.assert_allclose(weights, [0.3722, 0.3473, 0.2805], atol=1e-4)
    assert output.shape == (3,)
    with pytest.raises(ValueError, match="temperature must be positive, got 0"):
        fruit_attention([0.8, 0.2, 0.1], temperature=0)
    figure = sweep_grid([0.8, 0.2, 0.1], temperatures=(0.5, 2.0))
    assert len(figure.axes) == 4
    plt.close(figure)
    widget = explorer()
    assert [child.description for child in widget.children[:5]] == [
        "sweetness", "durability", "texture", "divide by sqrt(d_k)", "temperature"
    ]
    plt.close("all")
