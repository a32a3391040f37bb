"""Lesson 4's explorer: how the query, scaling and temperature change the fruit weights.

``draw_fruit_attention`` draws one setting; ``explorer()`` wraps it in sliders
(JupyterLab) and ``sweep_grid()`` draws a fixed grid of settings (the book).
"""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np

from attn import fruit
from attn.plotting import weight_bars
from attn.softmax import softmax


def fruit_attention(query, scaled=True, temperature=1.0):
    """Weights (3,) and output (d_v=3,) of the fruit table for one query (d_k=3,)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    scores = fruit.KEYS @ np.asarray(query, dtype=float)  # (3,)
    if scaled:
        scores = scores / np.sqrt(fruit.KEYS.shape[1])
    weights = softmax(scores / temperature)  # (3,)
    return weights, weights @ fruit.VALUES  # (3,), (3,)


def draw_fruit_attention(query, scaled=True, temperature=1.0, ax=None):
    """Bar chart of the weights, with the output vector written in the title."""
    weights, output = fruit_attention(query, scaled, temperature)
    label = f"{'scaled' if scaled else 'unscaled'}, temperature {temperature:g}"
    summary = ", ".join(f"{name} {number:.2f}" for name, number in zip(fruit.VALUE_ATTRIBUTES, output, strict=True))
    return weight_bars(weights, list(fruit.NAMES), f"{label}\n{summary}", ax=ax, highlight=fruit.NAMES[int(np.argmax(weights))])


def sweep_grid(query, temperatures=(0.1, 1.0, 10.0)):
    """A (2 x len(temperatures)) grid: unscaled on top, scaled below. Returns the figure."""
    fig, axes = plt.subplots(2, len(temperatures), figsize=(3.2 * len(temperatures), 6), sharey=True)
    for column, temperature in enumerate(temperatures):
        for row, scaled in enumerate((False, True)):
            draw_fruit_attention(query, scaled, temperature, ax=axes[row, column])
    fig.tight_layout()
    return fig


class Explorer(widgets.VBox):
    """The explorer's widgets, with a short text form for places that cannot show widgets."""

    def __repr__(self):
        return "Fruit attention explorer: sliders for sweetness, durability, texture, scaling and temperature"


def explorer():
    """Sliders for the query's attributes, scaling on or off and the temperature (needs a live kernel to respond).

    The chart lives inside the widget (an Output area that is redrawn on every change),
    so a notebook run without a browser records only the widget itself.
    """
    slider = dict(min=0.0, max=1.0, step=0.05)
    controls = [
        widgets.FloatSlider(value=fruit.QUERY[0], description="sweetness", **slider),
        widgets.FloatSlider(value=fruit.QUERY[1], description="durability", **slider),
        widgets.FloatSlider(value=fruit.QUERY[2], description="texture", **slider),
        widgets.Checkbox(value=True, description="divide by sqrt(d_k)"),
        widgets.FloatLogSlider(value=1.0, base=10, min=-1.5, max=1.5, step=0.1, description="temperature"),
    ]
    chart = widgets.Output()

    def redraw(change=None):
        sweetness, durability, texture, scaled, temperature = (control.value for control in controls)
        figure, ax = plt.subplots(figsize=(4.4, 3))
        draw_fruit_attention([sweetness, durability, texture], scaled, temperature, ax=ax)
        figure.tight_layout()
        plt.close(figure)
        chart.outputs = ()
        chart.append_display_data(figure)

    for control in controls:
        control.observe(redraw, names="value")
    redraw()
    return Explorer(children=[*controls, chart])
