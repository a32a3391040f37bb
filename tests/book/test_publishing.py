"""The book's publishing workflow (.github/workflows/book.yml): it cannot run here, so what can be checked is.

It parses; it runs on a push to main; its build step is `make book`, and `make book` runs the same jupyter-book
build (same flags) that the tests build and check (tests/conftest.py); it uploads the folder that build writes and
deploys it to Pages; and the README tells an instructor who forks the course how to publish their copy.
"""

import shlex
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, book_build_command

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_builds_on_every_push_to_main(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert triggers["push"]["branches"] == ["main"]
    steps = workflow["jobs"]["build"]["steps"]
    assert [step["run"] for step in steps if "run" in step] == ["make book"]
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"


def test_the_workflow_deploys_what_it_built_to_pages(workflow):
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(step.get("uses", "").startswith("actions/deploy-pages@") for step in deploy["steps"])
    assert workflow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_book_is_the_build_the_tests_check(tmp_path):
    """`make book` writes _build/html with the flags the tests' own build uses (only the output folder differs)."""
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".ready").touch()  # set up already: `make -n` only prints what it would run
    printed = subprocess.run(["make", "-n", "book"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    line = next(line for line in printed.splitlines() if "jupyter-book build" in line)
    words = shlex.split(line)
    tests_words = book_build_command("OUT")
    assert words[0].endswith("jupyter-book") and tests_words[0].endswith("jupyter-book")
    assert words[1:] == [word for word in tests_words[1:] if word not in ("--path-output", "OUT")]
    assert "_build/html/index.html" in printed  # where make book says the book is: the folder the workflow uploads


def test_the_readme_says_how_a_fork_publishes_its_copy():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Publishing the book"):]
    section = section[:section.index("\n## ", 1)]
    assert ".github/workflows/book.yml" in section and "Settings" in section and "GitHub Actions" in section
