"""Helpers for tests that read the lesson notebooks."""

import json
from pathlib import Path

import numpy

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

    The teaching cells may use ``np``, which the lesson imported in its first cell.

    Lessons build a teaching version step by step (loops, then vectors); the tests use this to
    check that those versions and the ``attn`` package agree.
    """
    namespace = {"np": numpy}
    for cell in code_cells(load(path)):
        if "teaching-version" in tags(cell):
            exec(compile("".join(cell["source"]), f"{Path(path).name}:teaching", "exec"), namespace)  # noqa: S102
    return namespace
