"""Every lesson meets the course's notebook standards (see COURSE.md)."""

import re

import pytest

from tests.notebooks import LESSONS, code_cells, load, tags

# How a notebook's title starts -> its objectives' heading and the chapter part of its exercise ids:
# lessons have "5.1", the PyTorch primer (an interlude between lessons 5 and 6) "P.1".
CHAPTERS = {"# Lesson ": ("In this lesson you will", r"\d+"), "# Interlude: ": ("In this interlude you will", "P")}
MACHINE_PATH = re.compile(r"(/root/|/home/\w+|/Users/\w+|/tmp/(?!ipykernel)|/work/|[A-Z]:\\\\)")


def output_text(output):
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    return "".join(output.get("data", {}).get("text/plain", ""))


def lesson_ids():
    return [path.stem for path in LESSONS]


@pytest.fixture(params=LESSONS, ids=lesson_ids())
def notebook(request):
    return load(request.param)


def test_there_are_lessons():
    assert len(LESSONS) >= 1


def test_python3_kernel(notebook):
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"


def test_executed_top_to_bottom_in_one_fresh_kernel(notebook):
    counts = [cell["execution_count"] for cell in code_cells(notebook)]
    assert counts == list(range(1, len(counts) + 1))


def test_errors_only_where_expected(notebook):
    for cell in code_cells(notebook):
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                assert "raises-exception" in tags(cell), f"unexpected {output['ename']} in {''.join(cell['source'])[:60]}"


def test_nothing_on_stderr(notebook):
    for cell in code_cells(notebook):
        for output in cell["outputs"]:
            assert output.get("name") != "stderr", f"stderr output: {output_text(output)[:200]}"


def test_no_machine_paths(notebook):
    for cell in code_cells(notebook):
        for output in cell["outputs"]:
            assert not MACHINE_PATH.search(output_text(output)), output_text(output)[:200]


def test_every_figure_has_alt_text(notebook):
    figures = 0
    for cell in code_cells(notebook):
        if any("image/png" in output.get("data", {}) for output in cell["outputs"]):
            figures += 1
            alt = cell["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
            assert len(alt.split()) >= 8, f"figure without a real alt text: {''.join(cell['source'])[:80]}"
    assert figures >= 1, "every lesson has at least one figure"


def test_no_control_characters_in_prose(notebook):
    # A tab or other control character in a markdown cell is nearly always a LaTeX command whose backslash
    # a Python string ate ("\\times" written as "\times" becomes a tab and "imes"), which breaks the rendered maths.
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            bad = sorted({repr(char) for char in text if ord(char) < 32 and char != "\n"})
            assert not bad, f"control characters {', '.join(bad)} in the markdown cell {cell.get('id')}: {text[:60]!r}"


def test_lesson_structure(notebook):
    markdown = "\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    code = "\n".join("".join(cell["source"]) for cell in code_cells(notebook))
    title = next((title for title in CHAPTERS if markdown.lstrip().startswith(title)), None)
    assert title, "a lesson opens with its title: '# Lesson N: ...' ('# Interlude: ...' for the PyTorch primer)"
    objectives, chapter = CHAPTERS[title]
    assert objectives in markdown, "objectives at the top"
    assert "## Summary" in markdown
    exercise = rf":::\{{exercise\}} ({chapter})\.(\d+): .*\n:label: (\S+)\n:nonumber:"
    exercises = re.findall(exercise, markdown)
    assert 2 <= len(exercises) <= 4, f"2-4 exercises titled 'L.N: ...', found {len(exercises)}"
    for lesson, number, label in exercises:
        assert label == f"ex-{lesson}-{number}", f"exercise {lesson}.{number} has label {label}"
        assert f'check("{lesson}.{number}"' in code, f"exercise {lesson}.{number} has no self-check with its id"
        assert f"{{solution-start}} {label}\n:class: dropdown" in markdown, f"exercise {label} has a hidden solution"
    assert markdown.count("{solution-start}") == markdown.count("{solution-end}")


def test_ignored_outputs_are_machine_dependent(notebook):
    """nbval-ignore-output is only for timings, devices and versions, never for convenience."""
    machine_words = ("time", "device", "version", "cuda", "bench", "perf_counter", "gpu")
    for cell in code_cells(notebook):
        if "nbval-ignore-output" in tags(cell):
            source = "".join(cell["source"]).lower()
            assert any(word in source for word in machine_words), f"ignored output without a reason: {source[:80]}"


# Code lines must fit the book's column (about 80 characters), or they are cut on screen and lost on paper.
# lessons/ruff.toml holds ruff to the same width; this test says which lines, lesson by lesson.
COLUMN = 80


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_code_fits_the_column(path):
    cells = code_cells(load(path))
    too_wide = [line for cell in cells for line in "".join(cell["source"]).splitlines() if len(line) > COLUMN]
    assert not too_wide, too_wide


def test_cell_ids_are_unique_across_the_course():
    """Jupyter Book 2 (MyST) addresses cells by id across the whole project: two lessons must not share one."""
    seen = {}
    for path in LESSONS:
        for cell in load(path)["cells"]:
            assert cell["id"] not in seen, f"{path.name} and {seen.get(cell['id'])} both have a cell with id {cell['id']!r}"
            seen[cell["id"]] = path.name


DOC_ROLE = re.compile(r"\{doc\}`")
BOOK_PAGES = sorted((LESSONS[0].parent.parent / "book").glob("*.md"))


@pytest.mark.parametrize("path", LESSONS + BOOK_PAGES, ids=lambda path: path.name)
def test_cross_references_are_links_that_read_anywhere(path):
    """A Markdown link to a page ([lesson 5](05_attention_matrix.ipynb)) is a link in the book (1.x and 2), in
    JupyterLab and on GitHub; a {doc} role is one only in the book."""
    text = path.read_text()
    assert not DOC_ROLE.search(text), f"{path.name} uses a {{doc}} role: write a Markdown link to the page instead"
