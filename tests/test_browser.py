"""Every page of the built book, opened in headless Chromium as a reader would.

Checks: no failed request for a local resource, no JavaScript error from the book's own files
(external CDNs are unreachable offline and ignored), every image on every page loaded with alt
text, and every sidebar link resolving.
"""

import functools
import http.server
import shutil
import threading
import urllib.request

import pytest

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


def visit(browser, url, base):
    """Open one page and collect what went wrong with the book's own resources."""
    page = browser.new_page()
    problems = []
    page.on("requestfailed", lambda request: request.url.startswith(base) and problems.append(f"failed: {request.url}"))
    page.on(
        "response",
        lambda response: response.url.startswith(base) and response.status >= 400
        and problems.append(f"HTTP {response.status}: {response.url}"),
    )
    page.on("pageerror", lambda error: base in (error.stack or "") and problems.append(f"JavaScript error: {error}"))
    page.on(
        "console",
        lambda message: message.type == "error"
        and message.location.get("url", "").startswith(base)
        and problems.append(f"console error: {message.text}"),
    )
    page.goto(url, wait_until="load")
    images = page.evaluate(
        "() => Array.from(document.images).map(i => ({src: i.src, width: i.naturalWidth, alt: i.alt, done: i.complete}))"
    )
    links = page.evaluate("() => Array.from(document.querySelectorAll('nav.bd-docs-nav a')).map(a => a.href)")
    page.close()
    return problems, images, links


def test_the_front_page_opens_the_welcome_page(site, browser):
    base, _ = site
    page = browser.new_page()
    page.goto(base + "index.html")
    page.wait_for_url("**/book/welcome.html")
    assert "Attention, Step by Step" in page.title()
    page.close()


def test_every_page_loads_cleanly_with_its_images_and_sidebar_links(site, browser):
    base, built_book = site
    pages = pages_of(built_book)
    lesson_pages = [page for page in pages if page.startswith("lessons/")]
    assert lesson_pages, "no lesson pages were built"
    sidebar_links = set()
    for relative in pages:
        problems, images, links = visit(browser, base + relative, base)
        assert not problems, f"{relative}: {problems}"
        for image in images:
            if image["src"].startswith(base):
                assert image["done"] and image["width"] > 0, f"{relative}: image did not load: {image['src']}"
        if relative in lesson_pages:
            assert images, f"{relative} shows no figure"
            assert all(image["alt"].strip() for image in images), f"{relative}: an image has no alt text"
        sidebar_links.update(link.split("#")[0] for link in links if link.startswith(base))
    assert any("lessons/01_lookup_table.html" in link for link in sidebar_links), "lesson 1 is not in the sidebar"
    for link in sorted(sidebar_links):
        with urllib.request.urlopen(link) as response:  # noqa: S310 - a local server started above
            assert response.status == 200, link
