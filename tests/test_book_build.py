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
