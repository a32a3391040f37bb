"""The book builds with warnings as errors, offline, and every figure keeps its alt text."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.notebooks import LESSONS, ROOT


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    output = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run(
        [str(jupyter_book), "build", "--warningiserror", "--nitpick", "--keep-going", "--path-output", str(output), "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return output / "_build" / "html"


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
