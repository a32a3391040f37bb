"""The book builds with warnings as errors (the ``built_book`` fixture in conftest.py), and every figure keeps its alt text."""

import re

from tests.notebooks import LESSONS


def test_opens_on_the_welcome_page(built_book):
    index = (built_book / "index.html").read_text()
    assert "book/welcome.html" in index
    welcome = (built_book / "book" / "welcome.html").read_text()
    assert "Attention, Step by Step" in welcome


def test_every_lesson_is_a_page_in_the_sidebar(built_book):
    welcome = (built_book / "book" / "welcome.html").read_text()
    for lesson in LESSONS:
        assert (built_book / "lessons" / f"{lesson.stem}.html").exists()
        assert f"lessons/{lesson.stem}.html" in welcome


def test_every_image_has_alt_text(built_book):
    for lesson in LESSONS:
        page = (built_book / "lessons" / f"{lesson.stem}.html").read_text()
        images = re.findall(r"<img [^>]*>", page)
        assert images, f"{lesson.stem} shows no figure"
        for image in images:
            alt = re.search(r'alt="([^"]*)"', image)
            assert alt and len(alt.group(1).split()) >= 8, f"{lesson.stem}: image without alt text: {image[:120]}"


def test_solutions_are_hidden_behind_a_toggle(built_book):
    for lesson in LESSONS:
        page = (built_book / "lessons" / f"{lesson.stem}.html").read_text()
        assert 'class="solution dropdown' in page or "solution dropdown" in page


def test_every_page_of_the_table_of_contents_is_built(built_book):
    for page in ("notation", "glossary", "references", "instructors", "troubleshooting"):
        assert (built_book / "book" / f"{page}.html").exists()


def test_lessons_link_terms_to_the_glossary(built_book):
    for lesson in LESSONS:
        page = (built_book / "lessons" / f"{lesson.stem}.html").read_text()
        assert "glossary.html#term-" in page, f"{lesson.stem} links no glossary term"


def built_pages(built_book):
    return [path for path in built_book.rglob("*.html") if not {"_sources", "_static"} & set(path.parts)]


def test_every_script_and_stylesheet_is_served_by_the_book(built_book):
    """Nothing is fetched from a CDN at reading time: the book must read the same offline."""
    for path in built_pages(built_book):
        page = path.read_text()
        external = re.findall(r'<(?:script|link)\b[^>]*(?:src|href)="((?:https?:)?//[^"]+)"', page)
        assert not external, f"{path.name} loads {external}"
        assert "THEBE" not in page and "thebe" not in page, f"{path.name} still includes thebe"


def test_mathjax_is_served_from_the_book_with_the_course_macros(built_book):
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert list((built_book / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    notation = (built_book / "book" / "notation.html").read_text()
    assert '<script defer="defer" src="../_static/mathjax/tex-chtml.js' in notation
    assert '"macros": {"R": "\\\\mathbb{R}"}' in notation


def test_no_widget_state_and_the_page_explorer_in_lesson_4(built_book):
    page = (built_book / "lessons" / "04_softmax_first_output.html").read_text()
    assert "widget-state" not in page and "widget-view" not in page and "jupyter-widgets" not in page
    assert page.count('class="fruit-explorer"') == 1
    assert "page_explorer()" not in page, "the explorer cell shows its output only"
    assert ">explorer</span><span class=\"p\">()" not in page, "the ipywidgets cell is for JupyterLab, not the book"
    assert (built_book / "_static" / "fruit-explorer.js").is_file()
    assert '<script src="../_static/fruit-explorer.js' in page
    assert '<link rel="stylesheet" type="text/css" href="../_static/course.css' in page


def test_printing_keeps_solutions_folded(built_book):
    """sphinx-togglebutton would open every solution before printing; course.css prints a note in its place."""
    for lesson in LESSONS:
        page = (built_book / "lessons" / f"{lesson.stem}.html").read_text()
        assert "toggleOpenOnPrint = 'false'" in page, lesson.stem
    css = (built_book / "_static" / "course.css").read_text()
    assert "@media print" in css and "Not printed" in css
