"""Helpers for tests that read the lesson notebooks."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


def load(path):
    return json.loads(Path(path).read_text())


def code_cells(notebook):
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code" and "".join(cell["source"]).strip()]


def tags(cell):
    return cell.get("metadata", {}).get("tags", [])


def teaching_namespace(path):
    """Run the cells tagged ``teaching-version`` of a lesson and return the names they define.

    The lesson's first code cell (its imports) runs first, since the teaching cells use those names.

    Lessons build a teaching version step by step (loops, then vectors); the tests use this to
    check that those versions and the ``attn`` package agree.
    """
    namespace = {}
    for index, cell in enumerate(code_cells(load(path))):
        if index == 0 or "teaching-version" in tags(cell):
            exec(compile("".join(cell["source"]), f"{Path(path).name}:teaching", "exec"), namespace)  # noqa: S102
    return namespace
