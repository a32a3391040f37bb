"""The course style and the shared plotting helpers: readable, high-contrast, colour-blind-safe figures.

Contrast is the WCAG 2 ratio; every mark and every piece of text needs at least 3:1 against what it is
drawn on. The lessons' committed figures are checked here too: every one comes from the course style
(a 2x PNG at 200 dpi, narrow enough that its 10 pt text is still 9 CSS px on a phone), no lesson asks
for smaller text or for a colour outside the palette, and figure text writes its maths in mathtext.
"""

import base64
import html
import inspect
import json
import re
import struct

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402

from attn.common.plotting import (  # noqa: E402
    BACKGROUND,
    COLORMAP,
    COLUMN_WIDTH,
    GUIDE,
    HIGHLIGHT,
    MINIMUM_CONTRAST,
    NEUTRAL,
    PALETTE,
    PHONE_COLUMN_PX,
    PHONE_TEXT_PX,
    PNG_DPI,
    SMALLEST_FONT_PT,
    contrast_ratio,
    heatmap,
    labels_fit_across,
    mark_cells,
    relative_luminance,
    text_colour_on,
    use_course_style,
    weight_bars,
)
from attn.course import fruit  # noqa: E402
from tests.notebooks import LESSONS, code_cells, load  # noqa: E402


@pytest.fixture(autouse=True)
def course_style():
    """Each test draws in the course style, and leaves matplotlib as it found it."""
    with matplotlib.rc_context():
        use_course_style()
        yield
        plt.close("all")


def test_contrast_ratio_matches_wcag():
    assert contrast_ratio("black", "white") == pytest.approx(21.0)
    assert contrast_ratio("white", "white") == pytest.approx(1.0)
    assert contrast_ratio("#767676") == pytest.approx(4.54, abs=0.01)  # the usual 4.5:1 grey on white
    assert contrast_ratio("#FDE725") == pytest.approx(1.26, abs=0.01)  # viridis's yellow: the chair line
    assert relative_luminance("#000000") == 0.0 and relative_luminance("#FFFFFF") == pytest.approx(1.0)


@pytest.mark.parametrize("colour", [*PALETTE, NEUTRAL, GUIDE])
def test_every_palette_colour_stands_out_from_the_background(colour):
    assert contrast_ratio(colour, BACKGROUND) >= MINIMUM_CONTRAST


def test_the_palette_is_okabe_ito_without_its_light_colours():
    okabe_ito = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
    assert set(PALETTE) <= okabe_ito and len(set(PALETTE)) == len(PALETTE) == 5
    # The emphasised bar differs from the others in lightness too, not only in hue.
    assert abs(relative_luminance(HIGHLIGHT) - relative_luminance(NEUTRAL)) > 0.05


@pytest.mark.parametrize("colormap", [COLORMAP, "cividis"])
def test_text_on_any_heatmap_cell_has_contrast(colormap):
    for position in np.linspace(0, 1, 256):
        cell = matplotlib.colormaps[colormap](position)
        assert contrast_ratio(text_colour_on(cell), cell) >= 4.5
        # mark_cells draws black around white: one of the two always shows.
        assert max(contrast_ratio("black", cell), contrast_ratio("white", cell)) >= MINIMUM_CONTRAST


def test_the_course_style_sets_readable_sizes_and_sharp_output():
    assert plt.rcParams["figure.dpi"] == PNG_DPI / 2
    assert matplotlib.colors.same_color(plt.rcParams["figure.facecolor"], BACKGROUND)
    assert plt.rcParams["figure.figsize"][0] <= COLUMN_WIDTH
    for key in ("font.size", "axes.titlesize", "axes.labelsize", "xtick.labelsize", "ytick.labelsize", "legend.fontsize"):
        assert FontProperties(size=plt.rcParams[key]).get_size_in_points() >= SMALLEST_FONT_PT, key
    colours = [entry["color"] for entry in plt.rcParams["axes.prop_cycle"]]
    assert colours == list(PALETTE)


def text_sizes(figure):
    return [text.get_fontsize() for text in figure.findobj(matplotlib.text.Text) if text.get_text().strip()]


def test_heatmap_labels_title_colourbar():
    ax = heatmap(np.eye(3), ["a", "b", "c"], ["x", "y", "z"], "Title")
    assert [label.get_text() for label in ax.get_xticklabels()] == ["x", "y", "z"]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.get_title() == "Title"
    assert ax.images[0].get_cmap().name == COLORMAP
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    assert len(ax.texts) == 9  # small matrices are annotated
    assert ax.figure.get_size_inches()[0] <= COLUMN_WIDTH
    assert min(text_sizes(ax.figure)) >= SMALLEST_FONT_PT


def test_heatmap_numbers_contrast_with_their_cells():
    matrix = np.linspace(0, 1, 16).reshape(4, 4)
    ax = heatmap(matrix, list("abcd"), list("wxyz"), "t", vmin=0, vmax=1)
    image = ax.images[0]
    for text in ax.texts:
        col, row = (round(coordinate) for coordinate in text.get_position())
        cell = image.cmap(image.norm(matrix[row, col]))
        assert contrast_ratio(text.get_color(), cell) >= 4.5, (text.get_text(), text.get_color())


def test_heatmap_can_leave_the_colour_bar_to_the_caller():
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        heatmap(np.eye(2), ["a", "b"], ["x", "y"], "t", ax=ax, colorbar=False)
    assert len(fig.axes) == 2


def test_heatmap_keeps_column_labels_level_where_they_fit():
    ax = heatmap(np.eye(3), list("abc"), ["apple", "banana", "chair"], "t")
    assert [label.get_rotation() for label in ax.get_xticklabels()] == [0, 0, 0]
    ax.figure.canvas.draw()
    extents = [label.get_window_extent() for label in ax.get_xticklabels()]
    assert all(left.x1 < right.x0 for left, right in zip(extents, extents[1:], strict=False)), "level labels must not touch"
    tokens = ["Bill", "is", "going", "to", "the", "theatre", "to", "watch", "a", "new", "movie"]
    ax = heatmap(np.eye(len(tokens)), tokens, tokens, "t")
    assert {label.get_rotation() for label in ax.get_xticklabels()} == {45}
    assert labels_fit_across(ax, [])


def test_heatmap_refuses_mismatched_labels():
    with pytest.raises(ValueError, match=r"2 row labels .* shape \(3, 3\)"):
        heatmap(np.eye(3), ["a", "b"], ["x", "y", "z"], "t")
    with pytest.raises(ValueError, match="2-D"):
        heatmap(np.ones(3), ["a"], ["x"], "t")


def test_wide_heatmaps_stay_within_the_column():
    ax = heatmap(np.zeros((11, 11)), [str(i) for i in range(11)], [str(i) for i in range(11)], "t")
    assert ax.figure.get_size_inches()[0] <= COLUMN_WIDTH
    assert not ax.texts  # 121 cells: too many numbers to write


def test_mark_cells_outlines_in_black_and_white():
    ax = heatmap(np.eye(3), list("abc"), list("xyz"), "t")
    mark_cells(ax, [0, 2], [1, 0])
    edges = [matplotlib.colors.to_hex(patch.get_edgecolor()) for patch in ax.patches]
    assert edges == ["#000000", "#ffffff"] * 2
    assert [patch.get_xy() for patch in ax.patches[::2]] == [(0.5, -0.5), (-0.5, 1.5)]
    with pytest.raises(ValueError):
        mark_cells(ax, [0, 1], [0])


def test_weight_bars():
    ax = weight_bars([0.2, 0.8], ["a", "b"], "w", highlight="b")
    assert len(ax.patches) == 2
    assert ax.patches[1].get_height() == pytest.approx(0.8)
    assert [matplotlib.colors.to_hex(bar.get_facecolor()).upper() for bar in ax.patches] == [NEUTRAL, HIGHLIGHT]
    assert min(text_sizes(ax.figure)) >= SMALLEST_FONT_PT
    with pytest.raises(ValueError, match="one weight per label"):
        weight_bars([0.2, 0.8], ["a"], "w")


def test_explorer_pieces():
    from attn.course.explorer import explorer, fruit_attention, sweep_grid

    weights, output = fruit_attention([0.8, 0.2, 0.1])
    np.testing.assert_allclose(weights, [0.3722, 0.3473, 0.2805], atol=1e-4)
    assert output.shape == (3,)
    with pytest.raises(ValueError, match="temperature must be a positive finite number, got 0"):
        fruit_attention([0.8, 0.2, 0.1], temperature=0)
    figure = sweep_grid([0.8, 0.2, 0.1], temperatures=(0.5, 2.0))
    assert len(figure.axes) == 4
    assert figure.get_size_inches()[0] <= COLUMN_WIDTH
    assert min(text_sizes(figure)) >= SMALLEST_FONT_PT
    widget = explorer()
    assert [child.description for child in widget.children[:5]] == [
        "sweetness", "durability", "texture", "divide by sqrt(d_k)", "temperature"
    ]


def test_sweep_grid_titles_fit_side_by_side_and_typeset_the_temperature():
    from attn.course.explorer import sweep_grid

    figure = sweep_grid([0.8, 0.2, 0.1])
    renderer = figure.canvas.get_renderer()
    axes = np.array(figure.axes).reshape(3, 2)
    for left, right in axes:
        left_title, right_title = (ax.title.get_window_extent(renderer) for ax in (left, right))
        assert left_title.x1 < right_title.x0, (left.get_title(), right.get_title())
        for ax in (left, right):
            assert r"$\tau = " in ax.get_title() and ax.get_title().count("\n") == 1
    assert figure.get_size_inches()[0] <= COLUMN_WIDTH
    assert min(text_sizes(figure)) >= SMALLEST_FONT_PT


# ASCII standing in for maths in figure text: a subscript (d_k), a root, a spaced dot, a power.
ASCII_MATHS = re.compile(r"\b[A-Za-z]_[A-Za-z0-9]+\b|sqrt|\s\.\s|\^|\*\*")
FIGURE_TEXT = re.compile(
    r"\b(label|title|xlabel|ylabel|set_title|set_xlabel|set_ylabel|suptitle|text|colorbar_label)"
    r"\s*[=(]\s*[fr]{0,2}([\"'])(.*?)\2"
)


def ascii_maths_in_figure_text(source):
    """Figure labels in ``source`` that write maths in ASCII outside $...$ (f-string fields ignored)."""
    found = []
    for match in FIGURE_TEXT.finditer(source):
        text = re.sub(r"\$[^$]*\$", "", re.sub(r"\{[^}]*\}", "", match.group(3)))
        if ASCII_MATHS.search(text):
            found.append(match.group(3))
    return found


def test_the_ascii_maths_rule_catches_what_it_should():
    assert ascii_maths_in_figure_text('ax.set(xlabel="d_k", title="q . k / sqrt(d_k)")') == ["d_k", "q . k / sqrt(d_k)"]
    assert ascii_maths_in_figure_text('ax.set_title("grows like T^2")') == ["grows like T^2"]
    typeset = 'ax.set(xlabel=r"$d_k$", label=r"$q \\cdot k / \\sqrt{d_k}$", title=f"head {d_k}, layer {n}")'
    assert ascii_maths_in_figure_text(typeset) == []


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_figure_text_typesets_its_maths(path):
    sources = ["".join(cell["source"]) for cell in code_cells(load(path))]
    found = [text for source in sources for text in ascii_maths_in_figure_text(source)]
    assert not found, f"write these with matplotlib's mathtext ($d_k$, $\\sqrt{{d_k}}$): {found}"


def test_the_explorer_figures_typeset_their_maths():
    import attn.course.explorer

    assert not ascii_maths_in_figure_text(inspect.getsource(attn.course.explorer))


def test_the_page_explorer_carries_the_fruit_table_and_no_script():
    from attn.course.explorer import QUERY_SLIDER, TEMPERATURE_EXPONENT, explorer_data, page_explorer

    markup = page_explorer()._repr_html_()
    assert markup == page_explorer()._repr_html_(), "the same HTML every run (strict nbval compares it)"
    assert "<script" not in markup, "the book serves the explorer's script; the cell carries only data"
    match = re.fullmatch(r'<div class="fruit-explorer" data-explorer="([^"]*)">.*</div>', markup, flags=re.S)
    data = json.loads(html.unescape(match.group(1)))
    assert data == explorer_data()
    np.testing.assert_array_equal(data["keys"], fruit.KEYS)
    np.testing.assert_array_equal(data["values"], fruit.VALUES)
    np.testing.assert_array_equal(data["query"], fruit.QUERY)
    assert data["names"] == list(fruit.NAMES)
    assert data["querySlider"] == QUERY_SLIDER and data["temperatureExponent"] == TEMPERATURE_EXPONENT
    assert data["colours"] == {"bar": NEUTRAL, "highlight": HIGHLIGHT}
    assert "explorer" in repr(page_explorer())


def lesson_pngs(lessons=LESSONS):
    """(lesson, cell index, PNG bytes, output metadata) for every figure committed in the lessons."""
    for path in lessons:
        for index, cell in enumerate(code_cells(load(path))):
            for output in cell["outputs"]:
                if "image/png" in output.get("data", {}):
                    yield path.stem, index, base64.b64decode(output["data"]["image/png"]), output.get("metadata", {})


def png_size_and_dpi(png):
    width, height = struct.unpack(">II", png[16:24])
    chunk = png.find(b"pHYs")
    assert chunk > 0, "PNG without a resolution"
    x_per_metre, y_per_metre, unit = struct.unpack(">IIB", png[chunk + 4 : chunk + 13])
    assert unit == 1 and x_per_metre == y_per_metre
    return width, height, x_per_metre * 0.0254


def test_the_lessons_have_figures():
    assert len(list(lesson_pngs())) >= 15


# The widest PNG whose smallest text still renders PHONE_TEXT_PX high when the phone's column
# (PHONE_COLUMN_PX) shrinks it: the browser test's rule, checked here without a browser. A figure
# COLUMN_WIDTH wide gains up to 0.2 in of margins from the tight bounding box and still fits.
PHONE_WIDEST_PNG_PX = PHONE_COLUMN_PX * (SMALLEST_FONT_PT / 72 * PNG_DPI) / PHONE_TEXT_PX  # 1105 px, 5.5 in


def test_the_phone_rule_leaves_room_for_a_full_width_figure():
    assert (COLUMN_WIDTH + 0.1) * PNG_DPI <= PHONE_WIDEST_PNG_PX < (COLUMN_WIDTH + 0.2) * PNG_DPI


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_every_lesson_figure_comes_from_the_course_style(path):
    figures = list(lesson_pngs([path]))
    for lesson, index, png, metadata in figures:
        width, height, dpi = png_size_and_dpi(png)
        where = f"{lesson}, code cell {index}"
        assert dpi == pytest.approx(PNG_DPI, abs=1), f"{where}: {dpi:.0f} dpi"
        assert metadata.get("image/png") == {"width": width // 2, "height": height // 2}, f"{where}: not a 2x (retina) PNG"
        assert width <= PHONE_WIDEST_PNG_PX, (
            f"{where}: {width / PNG_DPI:.2f} inches wide with its margins; above {PHONE_WIDEST_PNG_PX / PNG_DPI:.2f}, "
            f"its {SMALLEST_FONT_PT} pt text is under {PHONE_TEXT_PX} CSS px on a phone (make the figure narrower)"
        )


FONT_SIZE = re.compile(r"fontsize\s*=\s*([\d.]+|\"[a-z-]+\"|'[a-z-]+')")
COLOUR_LITERAL = re.compile(r"colou?r\s*=\s*[\"']([^\"']+)[\"']|[\"'](#[0-9A-Fa-f]{6})[\"']")


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_lessons_ask_for_no_small_text_and_no_colour_outside_the_palette(path):
    allowed = {matplotlib.colors.to_hex(colour) for colour in (*PALETTE, NEUTRAL, GUIDE, "black", "white")}
    cells = code_cells(load(path))
    assert "use_course_style()" in "".join(cells[0]["source"]), "the first cell applies the course style"
    for cell in cells:
        source = "".join(cell["source"])
        for size in FONT_SIZE.findall(source):
            assert size.strip("\"'") not in {"xx-small", "x-small", "small", "smaller"}, source[:80]
            if size[0].isdigit():
                assert float(size) >= SMALLEST_FONT_PT, f"fontsize={size} in {source[:80]}"
        for named, hex_code in COLOUR_LITERAL.findall(source):
            colour = named or hex_code
            assert matplotlib.colors.to_hex(colour) in allowed, f"colour {colour} outside the palette in {source[:80]}"
