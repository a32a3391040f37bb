"""A lesson as a learner opens it: in JupyterLab, started from the course's environment, in headless Chromium.

The fixture starts ``jupyter lab`` (this Python's, so the pinned JupyterLab and jupyterlab-myst) on 127.0.0.1 at
a free port, with no browser, a random token, and its own temporary settings, workspace, configuration and
runtime folders, serving a temporary folder that holds a copy of lesson 3 (so that nothing the test does can
touch the lesson itself; autosave is off as well). Lesson 3 has an exercise that asks for a prediction before
running (3.3), terms, links to other lessons and citations. The test opens it at 1280 px and checks:

- MyST renders: each exercise as an exercise (jupyterlab-myst's box with its number and title), no raw
  ``:::{``, no directive fence and no ``{role}`` left in any rendered cell; a ``{term}`` reads as its words, a
  link to another lesson as a link to its notebook (a Markdown link, not a ``{doc}`` role), a ``{cite}`` key as
  plain text (JupyterLab has no bibliography: the key degrades to readable text, never braces);
- every solution is folded: its cells' inputs (and code cells' outputs) are collapsed by their notebook
  metadata, the fold shows nothing of the answer, and the line "Solution below: try first" stands above it;
- a cell runs in the kernel and shows its output (the copy's first two code cells have their outputs cleared,
  so the output seen is the kernel's);
- "Run All" runs every cell without an error and leaves every solution folded, its output and words included:
  JupyterLab itself unfolds what it runs, and the course's extension (tools/jupyterlab-course, in
  requirements.txt) folds a solution back; a solution the learner unfolds runs and shows its output.

The notebook is opened with JupyterLab's windowing off (every cell in the page, found without scrolling); cells
render the same either way. Screenshots at 1280 and 390 px go to the test's temporary folder (and to
ATTN_SCREENSHOTS, if set). Skipped, as the book's browser test is, where Chromium is missing.
"""

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from attn.course.solutions import LINE_START, solution_spans, source_of
from tests.book.test_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium not found: install it (Debian/Ubuntu: apt-get install chromium) to run the JupyterLab test",
)

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "lessons" / "03_scaled_dot_products.ipynb"
RUN_CELLS = 2  # the first two code cells: the imports, then one that prints
START_SECONDS = 90

# JupyterLab's own settings for the test: no news or update check (nothing fetched from outside), no autosave,
# and every cell in the page.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
RAW_MYST = re.compile(r":::\{|```\{|\{(?:term|doc|cite|ref|numref|eq|download|abbr|sub|sup)\}`?|\{(?:exercise|solution)")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lesson_copy(folder):
    """Lesson 3 copied into ``folder``, the first RUN_CELLS code cells without their outputs; its cells."""
    notebook = json.loads(LESSON.read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    for cell in code[:RUN_CELLS]:
        cell["outputs"], cell["execution_count"] = [], None
    (folder / LESSON.name).write_text(json.dumps(notebook, indent=1))
    return notebook


def write_settings(folder):
    for name, values in SETTINGS.items():
        path = folder / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def api(base, token, path, method="GET"):
    request = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - our own server on 127.0.0.1
        body = response.read()
    return json.loads(body) if body else None


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """(base URL, token, the served copy of the lesson as a notebook dict): a JupyterLab server, stopped after."""
    folder = tmp_path_factory.mktemp("jupyterlab")
    served = folder / "lessons"
    served.mkdir()
    notebook = lesson_copy(served)
    write_settings(folder / "settings")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, **{name: str(folder / name.lower()) for name in
                              ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR")})
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={served}",
        f"--LabApp.user_settings_dir={folder / 'settings'}", f"--LabApp.workspaces_dir={folder / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the test reads folded cells' run counts
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # a container's root user; JupyterLab refuses root otherwise
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                api(base, token, "/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(folder / 'server.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield base, token, notebook, folder
    finally:
        try:
            for kernel in api(base, token, "/api/kernels"):
                api(base, token, f"/api/kernels/{kernel['id']}", method="DELETE")
        except (urllib.error.URLError, ConnectionError, TypeError):
            pass
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def lab_page(jupyterlab):
    """The lesson open in JupyterLab at 1280 x 800 in headless Chromium, every cell rendered."""
    from playwright.sync_api import sync_playwright

    base, token, notebook, folder = jupyterlab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{base}/lab/tree/{LESSON.name}?token={token}")
        cells = page.locator(".jp-Notebook .jp-Cell")
        page.wait_for_selector(".jp-Notebook .jp-MarkdownCell .myst aside.myst-exercise", timeout=60_000)
        page.wait_for_function(f"document.querySelectorAll('.jp-Notebook .jp-Cell').length === {len(notebook['cells'])}")
        yield page, cells, notebook, folder, browser
        context.close()
        browser.close()


def screenshot(page, folder, name):
    page.screenshot(path=str(folder / f"{name}.png"))
    if os.environ.get("ATTN_SCREENSHOTS"):
        target = Path(os.environ["ATTN_SCREENSHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / f"{name}.png", target / f"{name}.png")


def rendered_text(cell):
    """What a Markdown cell shows once rendered (jupyterlab-myst's output, not the hidden editor)."""
    return cell.locator(".myst").first.inner_text()


def test_myst_renders_exercises_terms_links_and_citations(lab_page):
    page, cells, notebook, folder, _ = lab_page
    markdown = [index for index, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "markdown"]
    exercises = re.findall(r":::\{exercise\} (\S+): ([^\n]+)", "\n".join(source_of(notebook["cells"][i]) for i in markdown))
    assert len(exercises) == 3, exercises
    boxes = page.locator(".jp-Notebook aside.myst-exercise")
    assert boxes.count() == len(exercises)
    for box, (number, title) in zip(boxes.all(), exercises, strict=True):
        header = box.locator(".myst-exercise-header").inner_text()
        assert number in header and title.replace("`", "") in header, header
    folded = {index for first, last in solution_spans(notebook["cells"]) for index in range(first, last + 1)}
    raw = []
    for index in markdown:
        if index in folded:
            continue  # folded: checked by the next test
        text = rendered_text(cells.nth(index))
        raw += [f"cell {index}: {match.group(0)} in {text[max(0, match.start() - 40):match.end() + 40]!r}"
                for match in RAW_MYST.finditer(text)]
    assert not raw, "\n".join(raw)
    # A term, a link to another lesson and a citation, each read as words.
    opening, scaled = rendered_text(cells.nth(0)), rendered_text(cells.nth(2))
    assert "scaled dot product" in scaled, scaled[:300]
    assert "vaswani2017" in scaled and "{cite}" not in scaled, scaled[:300]
    assert re.search(r"matching.vectors|Matching vectors", opening, re.IGNORECASE), opening[:300]
    links = cells.nth(0).locator("a").evaluate_all("anchors => anchors.map(a => [a.textContent, a.getAttribute('href')])")
    assert any("Matching vectors" in text and href and "02_matching_vectors" in href for text, href in links), links
    screenshot(page, folder, "jupyterlab-1280-top")
    boxes.first.scroll_into_view_if_needed()
    screenshot(page, folder, "jupyterlab-1280-exercise")


def assert_folded(cell, index):
    """A cell folded as JupyterLab folds it: its input a placeholder, nothing of its output shown."""
    assert cell.locator(".jp-InputPlaceholder").is_visible(), f"cell {index} is not folded"
    assert not cell.locator(".jp-InputArea").is_visible(), f"cell {index} shows its input"
    assert not cell.locator(".jp-Cell-outputWrapper").is_visible(), f"cell {index} shows its output"


def test_every_solution_is_folded_behind_the_line(lab_page):
    page, cells, notebook, folder, _ = lab_page
    spans = solution_spans(notebook["cells"])
    assert len(spans) == 3, spans
    visible = page.locator(".jp-Notebook").inner_text()
    folded = {index for first, last in spans for index in range(first, last + 1)}
    shown_anyway = {line.strip() for index, cell in enumerate(notebook["cells"]) if index not in folded
                    for line in source_of(cell).splitlines()}
    for first, last in spans:
        line = cells.nth(first - 1)
        assert rendered_text(line).startswith(LINE_START.strip("*")), rendered_text(line)
        for index in range(first, last + 1):
            cell, source = cells.nth(index), source_of(notebook["cells"][index])
            assert_folded(cell, index)
            answer = [text.strip() for text in source.splitlines()[1:] if len(text.strip()) > 12]
            shown = [text for text in answer if text not in shown_anyway and text in visible]
            assert not shown, f"cell {index} gives its answer away: {shown}"
    line = cells.nth(spans[-1][0] - 1)
    line.scroll_into_view_if_needed()  # the prediction exercise, 3.3: the answer must not be in sight
    screenshot(page, folder, "jupyterlab-1280-folded")


def menu(page, menu_name, item):
    """Choose ``item`` (a regular expression for its label) from JupyterLab's menu ``menu_name``."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu_name}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()


# The run count of every code cell, from JupyterLab's notebook model (a folded cell shows no prompt in the page).
RUN_COUNTS = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  return Array.from({length: cells.length}, (_, i) => cells.get(i)).filter(cell => cell.type === "code")
    .map(cell => cell.executionCount);
}"""


RUN_ERRORS = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  return Array.from({length: cells.length}, (_, i) => cells.get(i)).filter(cell => cell.type === "code")
    .flatMap(cell => cell.outputs.toJSON()).filter(output => output.output_type === "error")
    .map(output => `${output.ename}: ${output.evalue}`);
}"""


def prompt_of(cell):
    return cell.locator(".jp-InputArea-prompt").text_content().strip()


def test_a_cell_runs_in_the_kernel_and_shows_its_output(lab_page):
    page, cells, notebook, folder, _ = lab_page
    code = [index for index, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"][:RUN_CELLS]
    outputs = json.loads(LESSON.read_text())["cells"][code[-1]]["outputs"]
    expected = "".join("".join(output.get("text", "")) for output in outputs)
    assert expected.strip(), "the cell chosen prints something"
    assert not cells.nth(code[-1]).locator(".jp-OutputArea-output").count(), "the copy's output was cleared"
    cells.nth(code[-1]).locator(".jp-InputArea-editor").click()
    menu(page, "Run", "Run All Above Selected Cell")  # the lesson's imports...
    menu(page, "Run", "Run Selected Cells?")  # ...then a cell that prints
    output = cells.nth(code[-1]).locator(".jp-OutputArea-output")
    output.first.wait_for(timeout=60_000)
    assert output.first.inner_text().split() == expected.split()
    assert re.fullmatch(r"\[\d+\]:", prompt_of(cells.nth(code[-1])))
    output.first.scroll_into_view_if_needed()
    screenshot(page, folder, "jupyterlab-1280-ran")


def test_run_all_runs_every_cell_and_keeps_the_solutions_code_folded(lab_page):
    # "Run All", as a learner would: every cell runs without an error (nothing after a solution needs it), the
    # solutions run too (a folded cell has no prompt in the page: JupyterLab's model says it ran), and their code
    # stays folded.
    page, cells, notebook, folder, _ = lab_page
    spans = solution_spans(notebook["cells"])
    code = [index for index, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"]
    menu(page, "Edit", "Clear Outputs of All Cells")  # every run count is cleared until its cell runs again
    page.wait_for_function(f"({RUN_COUNTS})().every(count => count === null)")
    menu(page, "Run", "Run All Cells")
    page.wait_for_function(f"({RUN_COUNTS})().every(count => count !== null)", timeout=120_000)
    errors = page.evaluate(RUN_ERRORS)
    assert not errors, errors
    for first, last in spans:
        for index in range(first, last + 1):
            if notebook["cells"][index]["cell_type"] == "code":
                assert cells.nth(index).locator(".jp-InputPlaceholder").is_visible(), f"cell {index} unfolded"
                assert page.evaluate(RUN_COUNTS)[code.index(index)] is not None, f"solution cell {index} did not run"
    cells.nth(spans[-1][0] - 1).scroll_into_view_if_needed()
    screenshot(page, folder, "jupyterlab-1280-after-run-all")


def test_run_all_keeps_the_solutions_outputs_and_words_folded(lab_page):
    # JupyterLab unfolds what it runs (a Markdown cell's input, a code cell's output) whatever the metadata says;
    # the course's extension (tools/jupyterlab-course) folds a solution back after Run All.
    page, cells, notebook, _, _ = lab_page  # after the Run All of the test above
    for first, last in solution_spans(notebook["cells"]):
        for index in range(first, last + 1):
            assert_folded(cells.nth(index), index)


def test_a_solution_unfolded_by_the_learner_runs_and_shows_its_output(lab_page):
    # Clicking a folded cell's dots unfolds it; run then, the solution shows its output (the extension only keeps
    # folded what is folded).
    page, cells, notebook, folder, _ = lab_page
    first, last = solution_spans(notebook["cells"])[0]
    index = next(i for i in range(first, last + 1) if notebook["cells"][i]["cell_type"] == "code")
    cell = cells.nth(index)
    cell.locator(".jp-InputPlaceholder").click()
    cell.locator(".jp-InputArea-editor").wait_for()
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    output = cell.locator(".jp-OutputArea-output")
    output.first.wait_for()
    assert "Correct: " in output.first.inner_text(), output.first.inner_text()
    cell.scroll_into_view_if_needed()
    screenshot(page, folder, "jupyterlab-1280-unfolded")


def test_the_lesson_at_a_phone_width(lab_page):
    # A screenshot to look at, and the one promise JupyterLab keeps on a phone: the page does not scroll sideways.
    page, _, _, folder, _ = lab_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("document.querySelector('#main').getBoundingClientRect().width <= 390")
    screenshot(page, folder, "jupyterlab-390")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1280, "height": 800})
