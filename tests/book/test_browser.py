"""Every page of the built book, opened in headless Chromium as a reader would, on a desktop and a phone.

The book is served from 127.0.0.1 with no other network: exactly a reader who built it or downloaded it.
Every page is opened at 1280x800 and at 390x844 (device scale factor 3) and checked for:

- nothing fetched from anywhere but the book itself, no failed request, no JavaScript or console error;
- no raw TeX left in the page's text (code excluded), and every formula typeset by MathJax without error;
- no page wider than the phone's viewport; a table wider than its column shows a scroll hint;
- at 1280 px, no printed output wider than its output block (nothing cut off at the right), no code block
  wider than its column and no name in inline code broken across two lines (`mlp_ratio` as mlp_ | ratio);
- every page of book/ is visited, as every lesson is (a page the table of contents leaves out would not be);
- every image loaded, with alt text; every sidebar link resolving;
- exercise titles read "Exercise 1.1: ...", and the reference list matches the author-year citations;
- the previous/next links at the foot of the page fit the screen (on a phone they were cut at the right);
- the axe-core accessibility engine (axe-playwright-python's copy, pinned in requirements.txt) finds nothing
  critical or serious, in the same visit: every rule at the desktop width; at the phone width every rule but the
  colour ones on one page of each template, and on every other page the rules the width can change; the colour
  rules on the few pages that between them show every colour pair of text any page shows (see AXE).

Legibility of figures. The course style (attn.common.plotting) writes no text smaller than SMALLEST_FONT_PT
(10 pt) and saves PNGs at PNG_DPI (200 dpi), so the smallest text is 10 / 72 * 200 = 27.8 pixels high in
the PNG, and on the page it is that times (rendered width / PNG width). The rule:

- at both widths, the smallest text renders at least MIN_TEXT_CSS_PX (9) CSS pixels high, i.e. the PNG
  is at most 3.09 times its rendered width; and the figure is at least 300 CSS px wide and 140 high;
- at 1280 px, the PNG has at least twice the pixels of its rendered width (sharp on 2x screens);
- the figure keeps its aspect ratio when the column shrinks it.

tests/common/test_plotting.py checks the other half: that every lesson figure is a 200-dpi PNG from the course
style and no lesson asks for text below 10 pt.

The sidebar toggles are clicked (phone: both open their panel and a link in either closes it; desktop: the
primary one hides and shows the sidebar), and lesson 4's explorer is driven through its sliders and keys, its
numbers compared with attn.course.explorer.fruit_attention; the keyboard reaches it in four presses, and keyboard
focus is visible on every control. Dark mode, the colour-mode switch, printing (emulated print media) and the
search page's snippets are checked too.
"""

import functools
import http.server
import json
import re
import shutil
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from attn.common.plotting import PHONE_TEXT_PX, PNG_DPI, SMALLEST_FONT_PT
from attn.course import fruit
from attn.course.explorer import fruit_attention
from tests.notebooks import ROOT

# The numbered lessons ("05a", the interlude, has no number of its own): the glossary names each of them.
LESSON_NUMBERS = {path.name[:2] for path in (ROOT / "lessons").glob("[0-9][0-9]_*.ipynb")}

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not found: install it (Debian/Ubuntu: apt-get install chromium) to run the browser test"
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

DESKTOP = {"viewport": {"width": 1280, "height": 800}, "device_scale_factor": 1}
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 3, "is_mobile": True, "has_touch": True}
WIDTHS = {"desktop": DESKTOP, "phone": PHONE}

MIN_TEXT_CSS_PX = PHONE_TEXT_PX  # 9: the course style's promise, attn.common.plotting
SMALLEST_TEXT_PNG_PX = SMALLEST_FONT_PT / 72 * PNG_DPI  # 27.8
MIN_FIGURE_WIDTH, MIN_FIGURE_HEIGHT = 300, 140


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a browser closing a connection early is not an error of the book


@pytest.fixture(scope="module")
def site(built_book):
    handler = functools.partial(QuietHandler, directory=str(built_book))
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", built_book
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def pages_of(built_book):
    """Every page the book built, except index.html, which only redirects (tested on its own)."""
    pages = []
    for path in built_book.rglob("*.html"):
        if {"_sources", "_static"} & set(path.parts) or path.name == "index.html":
            continue
        pages.append(path.relative_to(built_book).as_posix())
    return sorted(pages)


# What a page reports once it has loaded and MathJax has finished. Code, and MathJax's own output, are
# left out of the raw-TeX search: code may show TeX on purpose.
MEASURE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  // course.js marks wide formulas once they are typeset and laid out: give it two frames.
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  const skip = "pre, code, script, style, textarea, mjx-container";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode: node => (node.parentElement && !node.parentElement.closest(skip)
      ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_REJECT),
  });
  const rawTex = [];
  while (walker.nextNode()) {
    const text = walker.currentNode.nodeValue;
    if (/\\\\[()\\[\\]]|\\$\\$|\\\\[A-Za-z]+/.test(text)) rawTex.push(text.trim().slice(0, 80));
  }
  // A display formula with no blank line before its $$ is read as inline maths between two stray dollars,
  // "$" + formula + "$": each dollar sits alone in the text beside the formula, where the search above
  // for "$$" cannot see it.
  for (const formula of document.querySelectorAll("span.math")) {
    const before = formula.previousSibling, after = formula.nextSibling;
    if ((before && before.nodeType === Node.TEXT_NODE && /\\$\\s*$/.test(before.nodeValue))
        || (after && after.nodeType === Node.TEXT_NODE && /^\\s*\\$/.test(after.nodeValue))) {
      rawTex.push("$" + formula.textContent.trim().slice(0, 60) + "$: a $$ formula with no blank line before it");
    }
  }
  const formulas = Array.from(document.querySelectorAll("span.math, div.math"));
  const untypeset = formulas.filter(f => !f.querySelector("mjx-container")).map(f => f.textContent.slice(0, 60));
  let mathErrors = [];
  if (window.MathJax && MathJax.startup && MathJax.startup.document) {
    mathErrors = Array.from(MathJax.startup.document.math)
      .filter(item => /<merror|mathcolor="red"/.test(MathJax.startup.toMML(item.root)))
      .map(item => item.math);
  }
  const images = Array.from(document.querySelectorAll(".bd-article img")).map(image => {
    const box = image.getBoundingClientRect();
    return {src: image.src, alt: image.alt, done: image.complete, naturalWidth: image.naturalWidth,
            naturalHeight: image.naturalHeight, width: box.width, height: box.height};
  });
  const wideTables = Array.from(document.querySelectorAll(".bd-article .pst-scrollable-table-container"))
    .filter(box => box.scrollWidth > box.clientWidth + 1)
    .map(box => {
      const hint = box.previousElementSibling;
      const shown = !!hint && hint.classList.contains("table-scroll-hint") && !hint.hidden
        && hint.getBoundingClientRect().height > 0;
      return {table: box.textContent.trim().slice(0, 40), hinted: shown, focusable: box.tabIndex === 0};
    });
  // Every displayed formula: its typeset width against its column, and whether a wide one scrolls in its
  // own box (MathJax's container) with the hint above it.
  const wideFormulas = Array.from(document.querySelectorAll(".bd-article div.math")).flatMap(box => {
    const scroller = box.querySelector(":scope > mjx-container");
    const math = scroller && scroller.firstElementChild;
    if (!math) return [];
    const column = box.parentElement.getBoundingClientRect().width;
    const width = math.getBoundingClientRect().width;
    if (width <= column + 1 && box.getBoundingClientRect().width <= column + 1) return [];
    const style = getComputedStyle(scroller);
    const hint = box.previousElementSibling;
    return [{formula: box.textContent.trim().slice(0, 60), width: Math.round(width), column: Math.round(column),
             scrolls: ["auto", "scroll"].includes(style.overflowX) && scroller.clientWidth <= column + 1,
             hinted: !!hint && hint.classList.contains("math-scroll-hint") && !hint.hidden
               && hint.getBoundingClientRect().height > 0,
             focusable: scroller.tabIndex === 0}];
  });
  const titles = Array.from(document.querySelectorAll(".exercise > .admonition-title, .solution > .admonition-title"))
    .map(title => title.textContent.trim());
  const solutionLinks = Array.from(document.querySelectorAll(".solution > .admonition-title a")).map(link => link.textContent);
  const prevNext = Array.from(document.querySelectorAll(".prev-next-area a")).map(link => {
    const box = link.getBoundingClientRect();
    return {text: link.innerText.replace(/\\s+/g, " ").trim(), left: box.left, right: box.right,
            cut: link.scrollWidth > link.clientWidth + 1};
  });
  return {
    rawTex, formulas: formulas.length, displayFormulas: document.querySelectorAll(".bd-article div.math").length,
    untypeset, mathErrors, images, wideTables, wideFormulas, titles, solutionLinks, prevNext,
    pageWidth: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth),
    viewportWidth: document.documentElement.clientWidth,
    title: document.title, heading: (document.querySelector("h1") || {innerText: ""}).innerText.trim(),
    sidebarLinks: Array.from(document.querySelectorAll("nav.bd-docs-nav a")).map(a => a.href),
  };
}"""


# Printed outputs cut at the right. Solutions are folded away; unfold them (for this measurement only, after axe
# has seen the page as a reader does) so that their outputs are measured too.
CUT_OUTPUTS = """() => {
  document.querySelectorAll(".toggle-hidden").forEach(node => node.classList.remove("toggle-hidden"));
  return Array.from(document.querySelectorAll(".bd-article .cell_output .output, .bd-article .cell_output pre"))
    .filter(output => output.getBoundingClientRect().width > 0 && output.scrollWidth > output.clientWidth + 1)
    .map(output => output.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "").slice(0, 90));
}"""


# Code at the width of the page, measured with the solutions unfolded (after CUT_OUTPUTS): every code block that
# is wider than its box (it would scroll sideways), and every name in inline code broken across two lines: a
# part of a name between spaces (a span.pre), or a whole piece of code of SHORT_CODE characters or fewer
# (`key == query`). Two fragments on different lines are more than 4 px apart vertically.
SHORT_CODE = 30  # as course.js
CODE_FIT = """([short, desktop]) => {
  const article = document.querySelector(".bd-article");
  if (!article) return {wideCode: [], brokenNames: [], wideInline: []};
  const lines = node => {
    const tops = Array.from(node.getClientRects()).filter(rect => rect.width > 0).map(rect => rect.top);
    return tops.length && Math.max(...tops) - Math.min(...tops) > 4 ? 2 : 1;
  };
  const wideCode = Array.from(article.querySelectorAll("pre"))
    .filter(pre => pre.getBoundingClientRect().width > 0 && pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => ({code: pre.textContent.trim().slice(0, 60), width: pre.scrollWidth, column: pre.clientWidth}));
  const inline = Array.from(article.querySelectorAll("code.literal")).filter(code => !code.closest("pre"));
  const brokenNames = inline
    .flatMap(code => Array.from(code.querySelectorAll("span.pre")).concat(
      desktop || code.textContent.trim().length <= short ? [code] : []))
    .filter(node => lines(node) > 1)
    .map(node => node.textContent.trim() + (node.closest("table") ? " (in a table)" : ""));
  const column = article.getBoundingClientRect();
  const wideInline = desktop ? inline.filter(code => !code.closest("table"))
    .filter(code => code.getBoundingClientRect().right > column.right + 1)
    .map(code => code.textContent.trim().slice(0, 60)) : [];
  return {wideCode, brokenNames, wideInline};
}"""


# axe-core, run in the page after MEASURE. MathJax's typeset output is left out: it is the formula library's
# markup (a reader's screen reader gets MathJax's own speech text), and it is a third of a lesson's elements.
# No preloading: axe would fetch the stylesheets again, and resolves the theme's @import against the wrong
# folder (a 404 that the page itself never makes); only css-orientation-lock needs them.
# Colour contrast is by far the slowest rule (three quarters of axe's time on a page), and it does not depend on the
# width: it runs at the desktop width only, as does the next slowest colour rule, link-in-text-block (a link told
# from its sentence by colour or underline), and only on the pages of COLOUR_PAGES. Every other page's colours are
# the same stylesheet's: test_every_colour_of_text_is_checked_for_contrast_somewhere holds that every pair of text
# colour and background (and text size, large or not) that any page shows appears on a page of COLOUR_PAGES, so a
# page that brings a colour of its own fails there, naming it. At the desktop width the code cells' inputs are left
# out (their syntax colours are the same on every page and test_code_colours_have_contrast_in_both_modes checks them
# once, in both colour modes). At the phone width every rule but the colour ones runs on the pages of PHONE_FULL_AXE,
# one of each template (the book's pages, a lesson with widgets, a lesson with wide formulas and code): the phone's
# own chrome (the header's buttons, the drawer) is the same on every page. Every other page runs, at the phone width,
# the rules whose outcome the width can change: a region that scrolls must take the keyboard's focus, touch targets
# must be large enough, and the landmarks the layout moves. One axe run per visit: each run first walks the page.
PHONE_FULL_AXE = ("book/welcome.html", "lessons/04_softmax_first_output.html", "lessons/20_attention_across_devices.html")
# The pages whose colours axe checks: between them they show every colour pair the book uses (lesson 1 and the
# troubleshooting page have the code blocks' syntax colours, lesson 15 a tinted box, the search page its own hint).
COLOUR_PAGES = (*PHONE_FULL_AXE, "lessons/01_lookup_table.html", "lessons/15_latent_and_linear.html",
                "book/troubleshooting.html", "search.html")
WIDTH_RULES = ["scrollable-region-focusable", "target-size", "region", "landmark-unique", "meta-viewport"]
AXE = """async ([desktop, full, widthRules, colour]) => {
  const rules = {"color-contrast": {enabled: colour}, "link-in-text-block": {enabled: colour},
                 "label-content-name-mismatch": {enabled: true}};
  const options = {resultTypes: ["violations"], preload: false, rules: rules};
  if (!full) options.runOnly = {type: "rule", values: widthRules};
  const results = await axe.run(
    {exclude: desktop ? [["mjx-container"], [".cell_input"]] : [["mjx-container"]]}, options);
  return results.violations.map(v => ({id: v.id, impact: v.impact, count: v.nodes.length,
                                       first: v.nodes[0].target.join(" ") + " " + v.nodes[0].html.slice(0, 80)}));
}"""


# Every pair of text colour and background a reader sees on the page (folded solutions and code cells' inputs left
# out, as axe leaves them), with "large" where WCAG's larger text allows less contrast: "rgb(..) on rgb(..)". The
# background is the nearest one that is not transparent, up the page from the text.
COLOURS = """() => {
  const skip = "mjx-container, .cell_input, script, style, noscript";
  const background = element => {
    for (let node = element; node; node = node.parentElement) {
      const colour = getComputedStyle(node).backgroundColor;
      if (!/rgba\\(.*,\\s*0\\)$|transparent/.test(colour)) return colour;
    }
    return "rgb(255, 255, 255)";
  };
  const pairs = new Set(), seen = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const element = walker.currentNode.parentElement;
    if (!element || seen.has(element) || !walker.currentNode.nodeValue.trim() || element.closest(skip)) continue;
    seen.add(element);
    const style = getComputedStyle(element);
    if (style.visibility !== "visible" || !element.getClientRects().length) continue;
    const size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight, 10) >= 700;
    const large = size >= 24 || (size >= 18.66 && bold) ? " (large)" : "";
    pairs.add(`${style.color} on ${background(element)}${large}`);
  }
  return Array.from(pairs).sort();
}"""


@functools.cache
def axe_script():
    from axe_playwright_python.base import AXE_SCRIPT

    return AXE_SCRIPT


class Visitor:
    """One tab per width that opens the book's pages one after another, and reports what a reader would see and
    what went wrong on each. axe-core is added to every page the tab opens (an init script: sent to the browser
    once, not with every page)."""

    def __init__(self, browser, settings, base, desktop):
        self.context = browser.new_context(**settings)
        self.context.add_init_script(script=axe_script())
        self.page = self.context.new_page()
        self.base, self.desktop, self.problems = base, desktop, []
        self.page.on("request", self.on_request)
        self.page.on("requestfailed", lambda request: self.problems.append(f"failed: {request.url}"))
        self.page.on("response", self.on_response)
        self.page.on("pageerror", lambda error: self.problems.append(f"JavaScript error: {error}"))
        self.page.on("console", self.on_console)

    def on_request(self, request):
        if not request.url.startswith((self.base, "data:", "blob:", "about:")):
            self.problems.append(f"fetched from outside the book: {request.url}")

    def on_response(self, response):
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def on_console(self, message):
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")

    def visit(self, relative):
        """Open one page, wait for MathJax, measure it, run axe, then unfold the solutions and measure outputs."""
        self.problems = []
        self.page.goto(self.base + relative, wait_until="load")
        report = self.page.evaluate(MEASURE)
        colour = self.desktop and relative in COLOUR_PAGES
        report["axe"] = self.page.evaluate(AXE, [self.desktop, self.desktop or relative in PHONE_FULL_AXE, WIDTH_RULES, colour])
        report["colours"] = self.page.evaluate(COLOURS) if self.desktop else []
        report["cutOutputs"] = self.page.evaluate(CUT_OUTPUTS)
        report.update(self.page.evaluate(CODE_FIT, [SHORT_CODE, self.desktop]))
        report["problems"] = self.problems
        # Leave the page as closing it would: what it still had loading is cancelled here, not reported as a
        # failed request of the next page.
        self.problems = []
        self.page.goto("about:blank")
        return report

    def close(self):
        self.context.close()


@pytest.fixture(scope="module")
def reports(site, browser):
    """{(width name, page): report} for every page at both widths: each page is opened once per width."""
    base, built_book = site
    results = {}
    for name, settings in WIDTHS.items():
        visitor = Visitor(browser, settings, base, desktop=name == "desktop")
        for relative in pages_of(built_book):
            results[name, relative] = visitor.visit(relative)
        visitor.close()
    return results


def test_the_front_page_opens_the_welcome_page(site, browser):
    base, _ = site
    page = browser.new_page()
    page.goto(base + "index.html")
    page.wait_for_url("**/book/welcome.html")
    assert "Attention, Step by Step" in page.title()
    page.close()


def test_a_display_formula_read_as_inline_counts_as_raw_tex(browser):
    # What MyST makes of "... and\n$$o = ...$$" with no blank line before the $$ (lesson 19 once had one):
    # inline maths between two stray dollars. The page's search for raw TeX must report it.
    page = browser.new_page()
    stray = '<p>and\n$<span class="math notranslate nohighlight">o = e^{a}</span>$</p>'
    page.set_content(f"<html><body>{stray}</body></html>")
    assert page.evaluate(MEASURE)["rawTex"] == ["$o = e^{a}$: a $$ formula with no blank line before it"]
    page.set_content('<html><body><p>and</p><div class="math">o = e^{a}</div></body></html>')
    assert page.evaluate(MEASURE)["rawTex"] == []
    page.close()


def test_every_page_loads_only_from_the_book_without_errors(reports):
    for (width, relative), report in reports.items():
        assert not report["problems"], f"{relative} at {width}: {report['problems']}"


def test_no_raw_tex_and_every_formula_typeset(reports):
    pages_with_math = 0
    for (width, relative), report in reports.items():
        assert not report["rawTex"], f"{relative} at {width} shows raw TeX: {report['rawTex'][:5]}"
        assert not report["untypeset"], f"{relative} at {width}: formulas not typeset: {report['untypeset'][:5]}"
        assert not report["mathErrors"], f"{relative} at {width}: MathJax could not typeset {report['mathErrors'][:5]}"
        pages_with_math += report["formulas"] > 0
    assert pages_with_math >= 10, "the lessons and the notation page are full of formulas"
    assert reports["desktop", "book/notation.html"]["formulas"] >= 30


def test_no_page_is_wider_than_a_phone(reports):
    for (width, relative), report in reports.items():
        assert report["pageWidth"] <= report["viewportWidth"], (
            f"{relative} at {width} scrolls sideways: {report['pageWidth']} px wide in a {report['viewportWidth']} px viewport"
        )


def test_wide_tables_scroll_in_their_own_box_with_a_hint(reports):
    for (width, relative), report in reports.items():
        for table in report["wideTables"]:
            assert table["hinted"] and table["focusable"], f"{relative} at {width}: a wide table without a scroll hint: {table}"


def test_every_display_formula_fits_its_column_or_scrolls_with_a_hint(reports):
    for (width, relative), report in reports.items():
        for formula in report["wideFormulas"]:
            assert formula["scrolls"] and formula["hinted"] and formula["focusable"], (
                f"{relative} at {width}: a formula wider than its column, cut with no cue: {formula}"
            )
    assert sum(report["displayFormulas"] for report in reports.values()) >= 30, "display formulas were measured"


def test_a_formula_wider_than_its_column_scrolls_with_a_hint(site, browser):
    # Every formula in the book fits a phone; on a narrower screen lesson 6's MultiHead formula does not, and
    # must then scroll in its own box, with the hint above it and keyboard focus.
    base, _ = site
    context, page = open_page(browser, PHONE, base + "lessons/06_multi_head_gpu.html")
    page.set_viewport_size({"width": 260, "height": 844})
    page.wait_for_timeout(500)  # course.js marks the formula on the frame after it is resized
    wide = page.evaluate(MEASURE)["wideFormulas"]
    assert any("MultiHead" in formula["formula"] for formula in wide), wide
    for formula in wide:
        assert formula["scrolls"] and formula["hinted"] and formula["focusable"], formula
    context.close()


def test_printed_output_fits_its_block_at_desktop_width(reports):
    for (width, relative), report in reports.items():
        if width == "desktop":
            assert not report["cutOutputs"], f"{relative}: output cut off at 1280 px: {report['cutOutputs']}"


def test_code_fits_its_column_and_no_code_name_breaks_at_desktop_width(reports):
    # At 1280 px every page's code blocks fit their column, no piece of inline code is broken across lines (any
    # length: a line of prose breaks before it instead), and none runs past the column (on a phone, course.js
    # lets a long name break after a "." or "_", and code blocks scroll in their box).
    wide, broken, wide_inline = [], [], []
    for (width, relative), report in reports.items():
        if width == "desktop":
            wide += [f"{relative}: {code}" for code in report["wideCode"]]
            broken += [f"{relative}: {name}" for name in report["brokenNames"]]
            wide_inline += [f"{relative}: {code}" for code in report["wideInline"]]
    assert not wide, "code wider than its column at 1280 px:\n" + "\n".join(wide)
    assert not broken, "inline code broken across lines at 1280 px:\n" + "\n".join(broken)
    assert not wide_inline, "inline code running past its column at 1280 px:\n" + "\n".join(wide_inline)


def test_every_page_of_the_book_folder_is_visited(site, reports):
    # Every page in book/ is opened at both widths, as the lessons are: a page in the table of contents is built
    # and visited; a file that is no page of its own is included by one (the running-times table).
    _, built_book = site
    sources = {path.read_text() for path in (ROOT / "book").glob("*.md")}
    for page in sorted((ROOT / "book").glob("*.md")):
        built = f"book/{page.stem}.html"
        included = any(f"```{{include}} {page.name}" in text for text in sources)
        assert included or {("desktop", built), ("phone", built)} <= set(reports), f"{built} is not visited"
    lessons = sorted((ROOT / "lessons").glob("*.ipynb"))
    assert all(("desktop", f"lessons/{lesson.stem}.html") in reports for lesson in lessons)


def test_every_image_loads_with_alt_text_and_sidebar_links_resolve(site, reports):
    base, _ = site
    sidebar_links = set()
    for (_, relative), report in reports.items():
        for image in report["images"]:
            if image["src"].startswith(base):
                assert image["done"] and image["naturalWidth"] > 0, f"{relative}: image did not load: {image['src']}"
            assert image["alt"].strip(), f"{relative}: an image has no alt text"
        if relative.startswith("lessons/"):
            assert report["images"], f"{relative} shows no figure"
        sidebar_links.update(link.split("#")[0] for link in report["sidebarLinks"] if link.startswith(base))
    assert any("lessons/01_lookup_table.html" in link for link in sidebar_links), "lesson 1 is not in the sidebar"
    for link in sorted(sidebar_links):
        with urllib.request.urlopen(link) as response:  # noqa: S310 - a local server started above
            assert response.status == 200, link


def test_every_figure_is_large_enough_to_read(reports):
    figures = 0
    for (width, relative), report in reports.items():
        for image in report["images"]:
            figures += 1
            name = f"{relative} at {width}: {image['src'].rsplit('/', 1)[-1][:12]}"
            scale = image["width"] / image["naturalWidth"]
            assert SMALLEST_TEXT_PNG_PX * scale >= MIN_TEXT_CSS_PX, (
                f"{name}: smallest text {SMALLEST_TEXT_PNG_PX * scale:.1f} CSS px high "
                f"(PNG {image['naturalWidth']} px wide, shown {image['width']:.0f} px)"
            )
            assert image["width"] >= MIN_FIGURE_WIDTH and image["height"] >= MIN_FIGURE_HEIGHT, (
                f"{name}: shown {image['width']:.0f}x{image['height']:.0f} CSS px"
            )
            assert image["height"] / image["width"] == pytest.approx(image["naturalHeight"] / image["naturalWidth"], rel=0.02), (
                f"{name}: stretched"
            )
            if width == "desktop":
                assert image["naturalWidth"] >= 2 * image["width"] - 1, f"{name}: soft on a 2x screen"
    assert figures >= 2 * 15


def test_exercise_titles_and_solution_links_read_cleanly(reports):
    titles = [title for (width, relative), report in reports.items() if width == "desktop" for title in report["titles"]]
    assert titles, "no exercise found"
    for title in titles:
        assert "Exercise (" not in title, title
        assert re.search(r"Exercise (\d+|P)\.\d+: \S", title), title
    links = [link for (width, _), report in reports.items() if width == "desktop" for link in report["solutionLinks"]]
    assert links and all(link == link.strip() for link in links), [link for link in links if link != link.strip()][:3]


def test_previous_and_next_links_fit_the_screen(reports):
    for (width, relative), report in reports.items():
        viewport = WIDTHS[width]["viewport"]["width"]
        for link in report["prevNext"]:
            assert not link["cut"] and link["left"] >= 0 and link["right"] <= viewport + 0.5, (
                f"{relative} at {width}: the link '{link['text']}' is cut at the edge: {link}"
            )
    assert any(report["prevNext"] for report in reports.values())


# Findings the course fixed (course.js), which must not come back even though axe rates them moderate.
FIXED_FINDINGS = {"region", "landmark-unique", "aria-required-children", "aria-deprecated-role", "aria-allowed-role"}


def test_no_critical_or_serious_accessibility_findings(reports):
    visited = {relative for _, relative in reports}
    assert set(PHONE_FULL_AXE) <= visited, f"PHONE_FULL_AXE names pages the book no longer has: {set(PHONE_FULL_AXE) - visited}"
    findings = []
    for (width, relative), report in reports.items():
        findings += [
            f"{relative} at {width}: {finding['id']} ({finding['impact']}, {finding['count']}x) {finding['first']}"
            for finding in report["axe"]
            if finding["impact"] in ("critical", "serious") or finding["id"] in FIXED_FINDINGS
        ]
    assert not findings, "\n".join(findings)


def test_a_colour_of_its_own_is_seen_and_hidden_text_is_not(browser):
    page = browser.new_page()
    page.set_content('<html><body style="background: rgb(250, 250, 250); color: rgb(20, 20, 20)"><p>plain</p>'
                     '<h1 style="font-size: 30px">large</h1><p><span style="color: rgb(200, 0, 0)">red</span></p>'
                     '<div style="display: none"><span style="color: rgb(0, 0, 200)">folded</span></div></body></html>')
    assert page.evaluate(COLOURS) == ["rgb(20, 20, 20) on rgb(250, 250, 250)",
                                      "rgb(20, 20, 20) on rgb(250, 250, 250) (large)",
                                      "rgb(200, 0, 0) on rgb(250, 250, 250)"]
    page.close()


def test_every_colour_of_text_is_checked_for_contrast_somewhere(reports):
    # axe's colour rules run on COLOUR_PAGES only (see AXE): every pair of text colour and background shown at the
    # desktop width on any page must be one that a page of COLOUR_PAGES shows too, where axe checked it.
    missing = {page for page in COLOUR_PAGES if ("desktop", page) not in reports}
    assert not missing, f"COLOUR_PAGES names pages the book no longer has: {sorted(missing)}"
    checked = {pair for page in COLOUR_PAGES for pair in reports["desktop", page]["colours"]}
    assert len(checked) >= 5, checked
    unchecked = {}
    for (_, relative), report in reports.items():
        for pair in set(report["colours"]) - checked:
            unchecked.setdefault(pair, relative)
    assert not unchecked, "colours that axe's contrast rule never saw (add the page to COLOUR_PAGES):\n" + "\n".join(
        f"{pair}, first on {page}" for pair, page in sorted(unchecked.items()))


def open_page(browser, settings, url):
    context = browser.new_context(**settings)
    page = context.new_page()
    page.goto(url, wait_until="load")
    return context, page


def test_the_reference_list_matches_the_author_year_citations(site, browser):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "book/references.html")
    entries = page.locator("div.citation-list div.citation").all_inner_texts()
    assert entries, "no reference list"
    assert not any(re.search(r"\[[A-Z][A-Za-z+]*\d\d\]", entry) for entry in entries), entries[:3]
    # The first author runs to a comma, " and ", or a full stop that does not end an initial ("Albert Q. Jiang").
    first_authors = [re.match(r"(.+?)(?:,|\s+and\s|(?<![\s.][A-Z])\.\s)", entry).group(1) for entry in entries]
    # A group author, braced in references.bib ({Qwen Team}), is filed under its whole name (book/_ext).
    groups = set(re.findall(r"author\s*=\s*\{\{([^{}]+)\}\}", (ROOT / "book" / "references.bib").read_text()))
    surnames = [author if author in groups else author.split()[-1] for author in first_authors]  # split: any space
    assert surnames == sorted(surnames, key=str.lower), surnames
    page.goto(base + "lessons/03_scaled_dot_products.html", wait_until="load")
    citation = page.locator("a", has_text=re.compile(r"Vaswani et al\., 2017")).first
    href = citation.get_attribute("href")
    page.goto(base + "lessons/" + href, wait_until="load")
    target = page.locator(f"[id='{href.split('#')[1]}']")
    assert "Vaswani" in target.inner_text() and "2017" in target.inner_text()
    context.close()


def test_references_link_to_arxiv_and_doi(site, browser):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "book/references.html")
    entries = page.locator("div.citation-list div.citation")
    for index in range(entries.count()):
        entry = entries.nth(index)
        text = entry.inner_text()
        hrefs = [link.get_attribute("href") for link in entry.locator("a").all()]
        for arxiv in re.findall(r"arXiv:(\d{4}\.\d{4,5})", text):
            assert f"https://arxiv.org/abs/{arxiv}" in hrefs, f"arXiv:{arxiv} is not a link: {text[:80]}"
        for doi in re.findall(r"doi:(10\.\S+?)\.?(?:\s|$)", text):
            assert f"https://doi.org/{doi}" in hrefs, f"doi:{doi} is not a link: {text[:80]}"
        assert any(href.startswith("https://") for href in hrefs), f"a reference with no link: {text[:80]}"
    assert entries.count() >= 15
    context.close()


def test_glossary_lesson_mentions_link_to_the_lessons(site, browser, reports):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "book/glossary.html")
    definitions = page.locator("dl.glossary dd")
    assert definitions.count() >= 50
    hrefs = set()
    for index in range(definitions.count()):
        definition = definitions.nth(index)
        text = definition.inner_text()
        if not re.search(r"\(lessons? \d", text):
            continue
        links = definition.locator("a", has_text=re.compile(r"^(lesson )?\d+$")).all()
        numbers = re.findall(r"\(lessons? (\d+)(?: and (\d+))?\)", text)
        expected = [number for pair in numbers for number in pair if number]
        assert [link.inner_text().split()[-1] for link in links] == expected, f"'(lesson N)' not linked: {text[:80]}"
        hrefs.update(link.get_attribute("href") for link in links)
    for href in sorted(hrefs):  # each lesson was opened by the reports fixture: no need to open it again
        number = re.search(r"lessons/(\d\d)_", href).group(1)
        target = href.split("#")[0].removeprefix("../")
        assert ("desktop", target) in reports, href
        report = reports["desktop", target]
        assert report["heading"] and f"{int(number)}" in report["title"], (href, report["title"])
    assert len(hrefs) == len(LESSON_NUMBERS), sorted(hrefs)  # every lesson is named somewhere
    context.close()


def test_sidebars_open_on_a_phone(site, browser):
    base, _ = site
    context, page = open_page(browser, PHONE, base + "lessons/03_scaled_dot_products.html")
    lesson_link = page.get_by_role("link", name="Lesson 1: A lookup table")
    assert not lesson_link.is_visible()
    page.locator(".primary-toggle:visible").click()
    page.wait_for_selector("#pst-primary-sidebar-modal[open]")
    assert lesson_link.is_visible()
    box = lesson_link.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    lesson_link.click()
    page.wait_for_url("**/lessons/01_lookup_table.html")

    page.locator(".secondary-toggle:visible").click()
    page.wait_for_selector("#pst-secondary-sidebar-modal[open]")
    exercises = page.locator("#pst-secondary-sidebar-modal").get_by_role("link", name="Exercises")
    assert exercises.is_visible()
    # Tapping a section closes the drawer, and the section is what the reader sees.
    exercises.click()
    page.wait_for_selector("#pst-secondary-sidebar-modal:not([open])", state="attached")
    page.wait_for_timeout(300)
    heading = page.locator("section#exercises > h2")
    box = heading.bounding_box()
    assert 0 <= box["y"] < 844 / 2, box
    assert page.evaluate("document.activeElement.id") == "exercises"

    context.close()


def test_the_sidebar_toggle_hides_and_shows_the_sidebar_on_a_desktop(site, browser):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "lessons/03_scaled_dot_products.html")
    sidebar = page.locator("#pst-primary-sidebar")
    toggle = page.locator(".primary-toggle:visible")
    assert sidebar.is_visible() and sidebar.bounding_box()["x"] >= 0
    toggle.click()
    page.wait_for_function("getComputedStyle(document.querySelector('#pst-primary-sidebar')).visibility === 'hidden'")
    toggle.click()
    page.wait_for_function("getComputedStyle(document.querySelector('#pst-primary-sidebar')).visibility === 'visible'")
    assert page.get_by_role("link", name="Lesson 1: A lookup table").is_visible()
    context.close()


# Explorer settings: (sweetness, durability, texture), scaled, temperature exponent (temperature = 10 ** exponent).
SETTINGS = [
    ((0.8, 0.2, 0.1), True, "0"),
    ((0.0, 1.0, 0.0), True, "0.3"),
    ((1.0, 0.0, 1.0), False, "-1.5"),
    ((0.35, 0.65, 0.9), False, "1.5"),
    ((0.5, 0.5, 0.5), True, "-0.7"),
    ((0.05, 0.95, 0.45), False, "-1"),
]


def read_explorer(explorer):
    """The numbers the explorer shows: weights (3,), output (3,) and the chosen item."""
    def shown(key):
        return float(explorer.locator(f"[data-fe='{key}']").inner_text())

    weights = [shown(f"weight-{name}") for name in fruit.NAMES]
    output = [shown(f"output-{name}") for name in fruit.VALUE_ATTRIBUTES]
    return np.array(weights), np.array(output), explorer.locator("[data-fe='choice']").inner_text()


def assert_explorer_matches(explorer, query, scaled, exponent):
    weights, output = fruit_attention(query, scaled, 10 ** float(exponent))
    shown_weights, shown_output, choice = read_explorer(explorer)
    setting = f"query {query}, scaled {scaled}, temperature 10**{exponent}"
    np.testing.assert_allclose(shown_weights, weights, rtol=0, atol=5e-4 + 1e-9, err_msg=setting)
    np.testing.assert_allclose(shown_output, output, rtol=0, atol=5e-4 + 1e-9, err_msg=setting)
    assert [f"{number:.3f}" for number in shown_weights] == [f"{number:.3f}" for number in weights], setting
    assert choice == fruit.NAMES[int(np.argmax(weights))], setting


@pytest.mark.parametrize("width", ["desktop", "phone"])
def test_the_explorer_runs_in_the_page_and_matches_python(site, browser, width):
    base, _ = site
    context, page = open_page(browser, WIDTHS[width], base + "lessons/04_softmax_first_output.html")
    explorer = page.locator(".fruit-explorer")
    assert explorer.count() == 1
    explorer.scroll_into_view_if_needed()
    sliders = {name: explorer.get_by_label(name, exact=True) for name in (*fruit.KEY_ATTRIBUTES, "temperature")}
    scaling = explorer.get_by_role("checkbox")
    viewport = WIDTHS[width]["viewport"]["width"]
    for slider in sliders.values():  # labelled, and large enough to drag with a finger
        box = slider.bounding_box()
        assert box["height"] >= 40 and box["width"] >= 120 and box["x"] + box["width"] <= viewport, box

    assert_explorer_matches(explorer, tuple(fruit.QUERY), True, "0")  # as the page opens
    for query, scaled, exponent in SETTINGS:
        for name, number in zip(fruit.KEY_ATTRIBUTES, query, strict=True):
            sliders[name].fill(str(number))
        sliders["temperature"].fill(exponent)
        scaling.set_checked(scaled)
        assert_explorer_matches(explorer, query, scaled, exponent)

    # The keyboard moves the sliders too: two steps right on sweetness from 0.05.
    sliders["sweetness"].focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert sliders["sweetness"].input_value() == "0.15"
    assert_explorer_matches(explorer, (0.15, 0.95, 0.45), False, "-1")
    context.close()


def test_the_explorer_computes_what_python_computes_at_any_setting(site, browser):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "lessons/04_softmax_first_output.html")
    rng = np.random.default_rng(4)
    cases = [(rng.uniform(-1, 2, 3).tolist(), bool(rng.integers(2)), float(10 ** rng.uniform(-2, 2))) for _ in range(200)]
    computed = page.evaluate(
        """cases => {
          const data = JSON.parse(document.querySelector('.fruit-explorer').getAttribute('data-explorer'));
          return cases.map(([query, scaled, temperature]) => window.fruitExplorer.attention(data, query, scaled, temperature));
        }""",
        cases,
    )
    for (query, scaled, temperature), result in zip(cases, computed, strict=True):
        weights, output = fruit_attention(query, scaled, temperature)
        np.testing.assert_allclose(result["weights"], weights, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(result["output"], output, rtol=1e-12, atol=1e-12)
        assert result["best"] == int(np.argmax(weights))
    data = json.loads(page.locator(".fruit-explorer").get_attribute("data-explorer"))
    np.testing.assert_array_equal(data["keys"], fruit.KEYS)
    np.testing.assert_array_equal(data["values"], fruit.VALUES)
    context.close()


# Contrast (WCAG 2.x) of two CSS colours "rgb(r, g, b)" as the browser computes them.
CONTRAST = """
  function luminance(colour) {
    const [r, g, b] = colour.match(/[\\d.]+/g).slice(0, 3).map(Number).map(value => {
      const c = value / 255;
      return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function contrast(a, b) {
    const [high, low] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (high + 0.05) / (low + 0.05);
  }
  function background(node) {  // the first opaque background behind a node
    for (; node && node.nodeType === 1; node = node.parentElement) {
      const colour = getComputedStyle(node).backgroundColor;
      if (!/rgba\\(.*,\\s*0\\)$|transparent/.test(colour)) return colour;
    }
    return "rgb(255, 255, 255)";
  }
"""


def in_page_with_contrast(body):
    """A function for page.evaluate whose body (ending with its closing brace) can use CONTRAST's helpers."""
    return "() => {" + CONTRAST + body


def open_in_mode(browser, settings, url, mode):
    """A new context at ``settings`` whose page has the theme in colour mode ``mode``, opened at ``url``."""
    context = browser.new_context(**settings, color_scheme=mode)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    page = context.new_page()
    page.goto(url, wait_until="load")
    return context, page


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_keyboard_focus_is_visible_on_every_control(site, browser, mode):
    # Tab through the whole of a page (the welcome page: the sidebar, the header's buttons, links in the text,
    # a table that scrolls) and check each stop's outline: drawn, at least 2 px, 3:1 against what is around it.
    base, _ = site
    context, page = open_in_mode(browser, DESKTOP, base + "book/welcome.html", mode)
    focus_style = in_page_with_contrast(
        """
          const node = document.activeElement;
          if (!node || node === document.body) return null;
          const style = getComputedStyle(node);
          const around = background(node.parentElement);
          // The theme draws the sidebar's and the contents' focus as a ring (a box-shadow with no offset and a
          // spread), not an outline: the widest such ring counts too.
          const rings = (style.boxShadow.match(/rgba?\\([^)]*\\)[^,]*/g) || []).map(shadow => {
            const lengths = (shadow.replace(/rgba?\\([^)]*\\)/, "").match(/-?[\\d.]+px/g) || []).map(parseFloat);
            const ring = lengths.length === 4 && lengths[0] === 0 && lengths[1] === 0 && !/inset/.test(shadow)
              && /^rgb\\(/.test(shadow.trim());  // opaque: bootstrap's faint half-transparent ring does not count
            return ring ? {width: lengths[3], contrast: contrast(shadow.match(/rgba?\\([^)]*\\)/)[0], around)} : null;
          }).filter(ring => ring && ring.width >= 2 && ring.contrast >= 3);
          return {name: node.outerHTML.slice(0, 90), className: node.className, style: style.outlineStyle,
                  width: parseFloat(style.outlineWidth), contrast: contrast(style.outlineColor, around),
                  ring: rings.length > 0};
        }"""
    )
    stops, failures = [], []
    for _ in range(200):
        page.keyboard.press("Tab")
        stop = page.evaluate(focus_style)
        if stop is None or (stops and stop["name"] == stops[0]["name"]):
            break  # back at the start
        stops.append(stop)
        outline = stop["style"] != "none" and stop["width"] >= 2 and stop["contrast"] >= 3
        if not (outline or stop["ring"]):
            failures.append(f"{stop['name']}: outline {stop['style']} {stop['width']}px, {stop['contrast']:.2f}:1")
    classes = " ".join(str(stop["className"]) for stop in stops)
    assert "Skip to main content" in stops[0]["name"], stops[0]
    for control in ("search-button-field", "primary-toggle", "dropdown-toggle", "theme-switch-button"):
        assert control in classes, control
    assert len(stops) >= 30, len(stops)
    assert not failures, "\n".join(failures)
    context.close()


def test_the_keyboard_reaches_the_explorer_in_four_presses(site, browser):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "lessons/04_softmax_first_output.html")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to main content"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the fruit explorer"
    page.wait_for_function("document.activeElement.getBoundingClientRect().top >= 0")  # it slides in when focused
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    sweetness = page.locator(".fruit-explorer").get_by_label("sweetness", exact=True)
    assert sweetness.evaluate("node => node === document.activeElement")
    assert sweetness.evaluate("node => node.matches(':focus-visible') && getComputedStyle(node).outlineStyle !== 'none'")
    page.keyboard.press("ArrowLeft")
    assert sweetness.input_value() == "0.75"
    # The temperature slider moves the exponent; what it announces is the temperature.
    temperature = page.locator(".fruit-explorer").get_by_label("temperature", exact=True)
    for exponent, shown in (("0", "1.00"), ("0.3", "2.00"), ("-1.5", "0.03")):
        temperature.fill(exponent)
        assert temperature.get_attribute("aria-valuetext") == shown
        assert page.locator(".fruit-explorer output[for$='-temperature']").inner_text() == shown
    context.close()


def test_the_colour_mode_switch_changes_the_look_on_the_first_click(site, browser):
    base, _ = site
    # light -> dark -> system settings -> light: from the default (light) the first click shows the dark look.
    for system in ("light", "dark"):
        context = browser.new_context(**DESKTOP, color_scheme=system)
        page = context.new_page()
        page.goto(base + "book/welcome.html", wait_until="load")
        switch = page.locator(".theme-switch-button:visible").first
        looks = [page.evaluate("document.documentElement.dataset.theme")]
        labels = [switch.get_attribute("aria-label")]
        for _ in range(3):
            switch.click()
            looks.append(page.evaluate("document.documentElement.dataset.theme"))
            labels.append(switch.get_attribute("aria-label"))
        assert looks == ["light", "dark", system, "light"], (system, looks)
        assert labels == [f"Colour mode: {mode}" for mode in ("light", "dark", "system settings", "light")], labels
        page.reload(wait_until="load")  # the choice is kept
        assert page.evaluate("document.documentElement.dataset.mode") == page.evaluate("localStorage.getItem('mode')")
        context.close()


def test_the_explorer_is_themed_in_dark_mode(site, browser):
    base, _ = site
    context, page = open_in_mode(browser, PHONE, base + "lessons/04_softmax_first_output.html", "dark")
    colours = page.evaluate(
        in_page_with_contrast(
            """
          const explorer = document.querySelector(".fruit-explorer");
          const panel = background(explorer);
          const texts = Array.from(explorer.querySelectorAll("legend, label, output, .fe-name, .fe-number, p"))
            .map(node => contrast(getComputedStyle(node).color, background(node)));
          const bars = Array.from(explorer.querySelectorAll(".fe-bar"))
            .map(bar => contrast(getComputedStyle(bar).backgroundColor, background(bar.parentElement)));
          return {panel: luminance(panel), texts, bars};
        }"""
        )
    )
    assert colours["panel"] < 0.05, "the explorer's panel is dark in dark mode"
    assert min(colours["texts"]) >= 4.5, colours["texts"]
    assert len(colours["bars"]) == 3 and min(colours["bars"]) >= 3, colours["bars"]
    context.close()


@pytest.mark.parametrize("lesson", ["01_lookup_table", "08_order", "12_inside_the_kernel"])
def test_printing_wraps_code_and_leaves_solutions_out_with_a_note(site, browser, lesson):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + f"lessons/{lesson}.html")
    page.emulate_media(media="print")
    printed = page.evaluate(
        """() => {
          const shown = node => node.getClientRects().length > 0;
          const blocks = Array.from(document.querySelectorAll(".bd-article pre")).filter(shown);
          const solutions = Array.from(document.querySelectorAll(".bd-article .solution"));
          return {
            blocks: blocks.length,
            cut: blocks.filter(pre => pre.scrollWidth > pre.clientWidth + 1 || getComputedStyle(pre).whiteSpace !== "pre-wrap")
              .map(pre => pre.textContent.slice(0, 60)),
            solutions: solutions.length,
            solutionContent: solutions.flatMap(s => Array.from(s.children).slice(1)).filter(shown).length,
            notes: solutions.map(s => getComputedStyle(s.querySelector(".admonition-title"), "::after").content),
            chrome: Array.from(document.querySelectorAll(
              ".bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .prev-next-area"))
              .filter(shown).map(node => node.className),
            pageWidth: document.documentElement.scrollWidth, width: document.documentElement.clientWidth,
          };
        }"""
    )
    assert printed["blocks"] >= 10 and not printed["cut"], printed["cut"]
    assert printed["solutions"] >= 2 and printed["solutionContent"] == 0, "solutions print as a note only"
    assert all("Not printed" in note for note in printed["notes"]), printed["notes"]
    assert not printed["chrome"], printed["chrome"]
    assert printed["pageWidth"] <= printed["width"]
    context.close()


def test_search_snippets_read_as_text(site, browser):
    base, _ = site
    context, page = open_page(browser, DESKTOP, base + "search.html?q=temperature")
    # Sphinx adds results one by one as it fetches each page's text: read them once it says it has finished.
    page.wait_for_function("document.querySelectorAll('#search-results li p.context').length >= 5"
                           " && document.body.innerText.includes('Search finished')", timeout=60_000)
    # The list can still be re-sorted for a moment after that (a fresh clone's slower first visit saw three
    # snippets): wait for the one read below, which fails here if it never comes.
    page.wait_for_function("[...document.querySelectorAll('#search-results li p.context')]"
                           ".some(p => p.innerText.includes('\u03c4 > 0'))", timeout=30_000)
    snippets = page.locator("#search-results li p.context").all_inner_texts()
    for snippet in snippets:
        assert not re.search(r"\\[()\[\]]|\\[A-Za-z]+|\$", snippet), f"TeX in a search snippet: {snippet}"
        assert not snippet.lstrip(".").startswith("Contents"), f"the print-only contents in a snippet: {snippet}"
    assert any("\u03c4 > 0" in snippet for snippet in snippets), snippets
    context.close()


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_code_colours_have_contrast_in_both_modes(site, browser, mode):
    # The syntax colours of code cells, left out of the contrast rule in every page's visit: lesson 1's cells use
    # every kind of token the lessons colour (keywords, names, strings, numbers, comments, operators, builtins).
    base, _ = site
    context, page = open_in_mode(browser, DESKTOP, base + "lessons/01_lookup_table.html", mode)
    assert page.evaluate("document.documentElement.dataset.theme") == mode
    page.evaluate(axe_script())
    findings = page.evaluate(
        """async () => (await axe.run({include: [[".cell_input"]]},
                                       {runOnly: {type: "rule", values: ["color-contrast"]}, resultTypes: ["violations"]}))
          .violations.flatMap(v => v.nodes.map(n => n.html.slice(0, 80) + " " + n.any.map(c => c.message).join(" ")))"""
    )
    kinds = set(page.evaluate("Array.from(document.querySelectorAll('.cell_input pre span[class]'), s => s.className)"))
    assert {"k", "n", "s2", "mi", "c1", "o", "nb"} <= kinds, kinds
    assert not findings, findings[:5]
    context.close()
