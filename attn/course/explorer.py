"""Lesson 4's explorer: how the query, scaling and temperature change the fruit weights.

``fruit_attention`` computes one setting and ``draw_fruit_attention`` draws it. Three ways to explore:

- ``explorer()``: ipywidgets sliders, redrawn by the kernel (JupyterLab);
- ``page_explorer()``: the same controls running in the book's web page, computed by
  ``book/_static/fruit-explorer.js`` from the fruit table this module hands it as JSON
  (no kernel, nothing fetched); the book's browser test checks its numbers against
  ``fruit_attention``;
- ``sweep_grid()``: a fixed grid of settings, for print.
"""

import html
import json

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np

from attn.common.plotting import BAR, COLUMN_WIDTH, HIGHLIGHT, weight_bars
from attn.common.validate import positive_number
from attn.course import fruit
from attn.softmax import as_float_array, softmax

# The controls' ranges, shared by the widget and the page explorer.
QUERY_SLIDER = {"min": 0.0, "max": 1.0, "step": 0.05}
TEMPERATURE_EXPONENT = {"min": -1.5, "max": 1.5, "step": 0.1}  # temperature = 10 ** exponent


def fruit_attention(query, scaled=True, temperature=1.0):
    """Weights (3,) and output (d_v=3,) of the fruit table for one query (d_k=3,)."""
    query, temperature = check_fruit_arguments(query, scaled, temperature)
    scores = fruit.KEYS @ query  # (3,)
    if scaled:
        scores = scores / np.sqrt(fruit.KEYS.shape[1])
    weights = softmax(scores / temperature)  # (3,)
    return weights, weights @ fruit.VALUES  # (3,), (3,)


def check_fruit_arguments(query, scaled, temperature):
    """query as a float array (d_k,) and temperature as a float, if they make sense; one sentence if not."""
    query = as_float_array(query, "query")
    if query.shape != (fruit.KEYS.shape[1],) or not np.isfinite(query).all():
        raise ValueError(f"query must be {fruit.KEYS.shape[1]} finite numbers, one per key feature "
                         f"({', '.join(fruit.KEY_ATTRIBUTES)}), got shape {query.shape}")
    if not isinstance(scaled, bool | np.bool_):
        raise TypeError(f"scaled must be True or False, got {type(scaled).__name__} {scaled!r:.40}")
    temperature = positive_number("temperature", temperature)
    largest = np.abs(fruit.KEYS @ query).max()
    if largest / np.finfo(float).max > temperature:  # largest / temperature would overflow
        raise ValueError(f"temperature={temperature!r} is so small that the scores divided by it overflow; "
                         "use a temperature of 0.01 or more")
    return query, temperature


def setting_label(scaled, temperature):
    """A setting in the lesson's notation, for a figure: 'scaled, $\\tau = 0.1$'."""
    return f"{'scaled' if scaled else 'unscaled'}, $\\tau = {temperature:g}$"


def draw_fruit_attention(query, scaled=True, temperature=1.0, ax=None, title=None):
    """Bar chart of the weights, with the setting and the output vector in the title.

    title: a shorter title in place of the setting and the named output (``sweep_grid``'s panels).
    """
    weights, output = fruit_attention(query, scaled, temperature)
    if title is None:
        summary = ", ".join(f"{name} {number:.2f}" for name, number in zip(fruit.VALUE_ATTRIBUTES, output, strict=True))
        title = f"{setting_label(scaled, temperature)}\n{summary}"
    return weight_bars(weights, list(fruit.NAMES), title, ax=ax, highlight=fruit.NAMES[int(np.argmax(weights))])


def sweep_grid(query, temperatures=(0.1, 1.0, 10.0)):
    """One row per temperature, unscaled on the left and scaled on the right. Returns the figure.

    Each panel's title is short enough for half the column on a phone: the setting, then the
    output as numbers, in the order the figure's title names (price, liking, use).
    """
    check_fruit_arguments(query, True, 1.0)
    if isinstance(temperatures, str) or not isinstance(temperatures, list | tuple | np.ndarray) or len(temperatures) == 0:
        raise ValueError(f"temperatures must be a non-empty list of positive numbers, got {temperatures!r:.60}")
    temperatures = [check_fruit_arguments(query, True, temperature)[1] for temperature in temperatures]
    fig, axes = plt.subplots(
        len(temperatures), 2, figsize=(COLUMN_WIDTH, 0.5 + 2.7 * len(temperatures)), sharey=True, squeeze=False
    )
    for row, temperature in enumerate(temperatures):
        for column, scaled in enumerate((False, True)):
            _, output = fruit_attention(query, scaled, temperature)
            numbers = ", ".join(f"{number:.2f}" for number in output)
            title = f"{setting_label(scaled, temperature)}\noutput ({numbers})"
            draw_fruit_attention(query, scaled, temperature, ax=axes[row, column], title=title)
        axes[row, 1].set_ylabel("")  # the rows share their weight axis
    fig.suptitle(f"Fruit weights; output = ({', '.join(fruit.VALUE_ATTRIBUTES)})")
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
    controls = [
        widgets.FloatSlider(value=fruit.QUERY[0], description="sweetness", **QUERY_SLIDER),
        widgets.FloatSlider(value=fruit.QUERY[1], description="durability", **QUERY_SLIDER),
        widgets.FloatSlider(value=fruit.QUERY[2], description="texture", **QUERY_SLIDER),
        widgets.Checkbox(value=True, description="divide by sqrt(d_k)"),
        widgets.FloatLogSlider(value=1.0, base=10, description="temperature", **TEMPERATURE_EXPONENT),
    ]
    chart = widgets.Output()

    def redraw(change=None):
        sweetness, durability, texture, scaled, temperature = (control.value for control in controls)
        figure, ax = plt.subplots(figsize=(4.4, 3.2))
        draw_fruit_attention([sweetness, durability, texture], scaled, temperature, ax=ax)
        figure.tight_layout()
        plt.close(figure)
        chart.outputs = ()
        chart.append_display_data(figure)

    for control in controls:
        control.observe(redraw, names="value")
    redraw()
    return Explorer(children=[*controls, chart])


def explorer_data():
    """What the page explorer needs, as plain JSON-ready values: the fruit table, the controls' ranges, the colours."""
    return {
        "names": list(fruit.NAMES),
        "keyAttributes": list(fruit.KEY_ATTRIBUTES),
        "valueAttributes": list(fruit.VALUE_ATTRIBUTES),
        "keys": fruit.KEYS.tolist(),
        "values": fruit.VALUES.tolist(),
        "query": fruit.QUERY.tolist(),
        "querySlider": QUERY_SLIDER,
        "temperatureExponent": TEMPERATURE_EXPONENT,
        "colours": {"bar": BAR, "highlight": HIGHLIGHT},
    }


class PageExplorer:
    """The explorer for the book's web page: an HTML element that the book's script turns into live controls."""

    def _repr_html_(self):
        data = html.escape(json.dumps(explorer_data(), separators=(",", ":")), quote=True)
        return (
            f'<div class="fruit-explorer" data-explorer="{data}">'
            '<p class="fruit-explorer-fallback">The fruit attention explorer runs here in the book&#8217;s web page, '
            "with JavaScript. In JupyterLab, use <code>explorer()</code>; on paper, the grid below.</p></div>"
        )

    def __repr__(self):
        return "Fruit attention explorer for the book's web page: sliders for the query, scaling and temperature"


def page_explorer():
    """The fruit explorer as an HTML element that runs in the book's page, computed in the browser."""
    return PageExplorer()
