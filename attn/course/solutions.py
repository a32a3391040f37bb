"""Fold every exercise's solution in the lesson notebooks, as a learner opens them in JupyterLab.

    python -m attn.course.solutions lessons/*.ipynb

In the book a solution is a dropdown (``solution-start`` ... ``solution-end``, sphinx-exercise). In JupyterLab
the same cells would sit open under the exercise, so this command, for each solution in each notebook given:

- splits a Markdown cell where a solution starts or ends in its middle, so that the solution's cells are
  exactly the ``solution-start`` cell, the cells under it and the ``solution-end`` cell (the book reads the
  same: Markdown cells split between blocks build the same page);
- folds those cells by their notebook metadata: ``jupyter.source_hidden`` on every one, and
  ``jupyter.outputs_hidden`` on code cells too, so that "Run All" runs them without showing them;
- puts a Markdown cell above the solution that says "Solution below: try first", tagged ``remove-cell`` so
  that the book, whose dropdown already says it, leaves it out.

It is idempotent: a folded notebook is written back unchanged (the command says how many notebooks it
changed). ``--check`` changes nothing and fails if a notebook is not folded, for CI and the tests.

``later_cells_needing_solutions`` reads a notebook's code and names the cells outside solutions that use a
name only a solution defines: "Run All" must not depend on the solutions (tests/course/test_solutions_folded.py).
"""

import argparse
import ast
import json
import re
import sys
from pathlib import Path

START = "```{solution-start}"
END = re.compile(r"```\{solution-end\}[^\n]*\n```")
LABEL = re.compile(r"```\{solution-start\}\s*(\S+)")
LINE_START = "**Solution below: try first.**"
LINE = LINE_START + " Exercise {number}'s solution is folded in the cells under this line: click their dots to unfold them."
LINE_TAG = "remove-cell"


def source_of(cell):
    """A cell's source as one string (notebooks store it as a list of lines or as one string)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def as_lines(text):
    """Text as notebook source lines, each but the last ending with its newline (nbformat's own layout)."""
    return text.splitlines(keepends=True)


def markdown_cell(cell_id, text, metadata=None):
    return {"cell_type": "markdown", "id": cell_id, "metadata": metadata or {}, "source": as_lines(text)}


def _split_at(cell, position, new_id):
    """Two Markdown cells from ``cell``: its text before ``position`` (keeping its id) and after (``new_id``)."""
    text = source_of(cell)
    first = dict(cell, source=as_lines(text[:position].rstrip("\n")))
    second = markdown_cell(new_id, text[position:].lstrip("\n"))
    return [first, second]


def _unique_id(wanted, taken):
    cell_id, number = wanted[:60], 2
    while cell_id in taken:
        cell_id, number = f"{wanted[:56]}-{number}", number + 1
    taken.add(cell_id)
    return cell_id


def split_solution_edges(cells):
    """The cells with every solution's first and last Markdown cell holding nothing but the solution.

    A cell with text before ``solution-start`` is split before it; a cell with text after ``solution-end``
    is split after it (the text before ``solution-end`` is the solution's own closing words).
    """
    taken = {cell.get("id") for cell in cells}
    result, label = [], "solution"
    pending = list(cells)
    while pending:
        cell = pending.pop(0)
        text = source_of(cell)
        if cell.get("cell_type") == "markdown":
            start = text.find(START)
            if start > 0 and text[:start].strip():
                found = LABEL.search(text, start)
                label = found.group(1) if found else label
                pending[:0] = _split_at(cell, start, _unique_id(f"{cell.get('id', 'cell')}-solution", taken))
                continue
            if start >= 0:
                found = LABEL.search(text, start)
                label = found.group(1) if found else label
            end = END.search(text)
            if end and text[end.end() :].strip():
                pending[:0] = _split_at(cell, end.end(), _unique_id(f"{label}-after", taken))
                continue
        result.append(cell)
    return result


def solution_spans(cells):
    """[(first, last)] indices of each solution's cells: its ``solution-start`` cell to its ``solution-end`` cell."""
    spans, first = [], None
    for index, cell in enumerate(cells):
        text = source_of(cell) if cell.get("cell_type") == "markdown" else ""
        if START in text:
            first = index
        if first is not None and END.search(text):
            spans.append((first, index))
            first = None
    return spans


def label_of(cell):
    """The exercise label a ``solution-start`` cell names (``ex-1-1``)."""
    found = LABEL.search(source_of(cell))
    return found.group(1) if found else "solution"


def number_of(label):
    """The exercise number a label names: ``ex-3-1`` -> ``3.1``, ``ex-P-2`` -> ``P.2``."""
    return label.removeprefix("ex-").replace("-", ".")


def is_line_cell(cell):
    return cell.get("cell_type") == "markdown" and source_of(cell).startswith(LINE_START)


def folded_first_line(cell, label):
    """What a folded cell's first line must be: JupyterLab shows it on the fold, so it must not give the answer
    away. A code cell opens with a comment naming the exercise; a Markdown cell with an empty line (the fold
    then shows only its dots; an empty first line changes nothing in the book or in JupyterLab's rendering)."""
    return f"# Solution to exercise {number_of(label)}" if cell.get("cell_type") == "code" else ""


def open_with(cell, first_line):
    """Put ``first_line`` at the top of ``cell``'s source unless it is there already."""
    text = source_of(cell)
    if text.split("\n", 1)[0] != first_line:
        cell["source"] = as_lines(first_line + "\n" + text)


def fold(notebook):
    """Fold every solution of ``notebook`` (a dict as json.load reads it) in place; return whether it changed."""
    before = json.dumps(notebook, sort_keys=True)
    cells = split_solution_edges(notebook["cells"])
    taken = {cell.get("id") for cell in cells}
    result, previous_end = [], -1
    for first, last in solution_spans(cells):
        result += cells[previous_end + 1 : first]
        label = label_of(cells[first])
        if result and is_line_cell(result[-1]):
            line = result.pop()
            line["source"] = as_lines(LINE.format(number=number_of(label)))
        else:
            line = markdown_cell(_unique_id(f"{label}-try-first", taken), LINE.format(number=number_of(label)))
        line.setdefault("metadata", {})
        tags = line["metadata"].setdefault("tags", [])
        if LINE_TAG not in tags:
            tags.append(LINE_TAG)
        line["metadata"].pop("jupyter", None)
        result.append(line)
        for cell in cells[first : last + 1]:
            folded = cell.setdefault("metadata", {}).setdefault("jupyter", {})
            folded["source_hidden"] = True
            if cell.get("cell_type") == "code":
                folded["outputs_hidden"] = True
            open_with(cell, folded_first_line(cell, label))
            result.append(cell)
        previous_end = last
    result += cells[previous_end + 1 :]
    notebook["cells"] = result
    return json.dumps(notebook, sort_keys=True) != before


def unfolded(notebook):
    """Sentences naming each solution of ``notebook`` that is not folded behind the line; [] when all are."""
    cells, problems = notebook["cells"], []
    spans = solution_spans(cells)
    for first, last in spans:
        label = label_of(cells[first])
        line = cells[first - 1] if first else {}
        if not is_line_cell(line) or LINE_TAG not in line.get("metadata", {}).get("tags", []):
            problems.append(f"{label}: no 'Solution below: try first' line (tagged {LINE_TAG}) above it")
        for index in range(first, last + 1):
            cell = cells[index]
            hidden = cell.get("metadata", {}).get("jupyter", {})
            if not hidden.get("source_hidden") or (cell["cell_type"] == "code" and not hidden.get("outputs_hidden")):
                problems.append(f"{label}: cell {index} ({cell.get('id')}) is not folded")
            if source_of(cell).split("\n", 1)[0] != folded_first_line(cell, label):
                problems.append(f"{label}: cell {index} ({cell.get('id')}) shows more than its name on the fold")
        if not source_of(cells[first]).lstrip().startswith(START):
            problems.append(f"{label}: its first cell holds more than the solution")
        if END.search(source_of(cells[last])).end() < len(source_of(cells[last]).rstrip()):
            problems.append(f"{label}: its last cell holds more than the solution")
    return problems


def _names(tree):
    """(names a piece of code binds, names it reads) for one parsed cell."""
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


def _parse(code):
    """A cell's code parsed, IPython magics and shell lines left out."""
    lines = [line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def later_cells_needing_solutions(notebook):
    """[(cell index, cell id, names)] for each code cell outside the solutions that reads a name whose last
    definition above it is in a solution (defined only there, or redefined there over an exercise's ``...``):
    the cells whose results "Run All" would change, or break, if the solutions did not run."""
    cells = notebook["cells"]
    inside = {index for first, last in solution_spans(cells) for index in range(first, last + 1)}
    last_defined_in_solution, needing = {}, []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        bound, read = _names(_parse(source_of(cell)))
        if index not in inside:
            missing = sorted(name for name in read - bound if last_defined_in_solution.get(name))
            if missing:
                needing.append((index, cell.get("id"), missing))
        last_defined_in_solution.update(dict.fromkeys(bound, index in inside))
    return needing


def write_notebook(notebook, path):
    """Write as nbformat does (one-space indent, sorted keys, non-ASCII kept, a final newline)."""
    Path(path).write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Fold every exercise's solution in lesson notebooks.")
    parser.add_argument("notebooks", nargs="+", help="notebooks to fold, e.g. lessons/*.ipynb")
    parser.add_argument("--check", action="store_true", help="change nothing; fail if a notebook is not folded")
    args = parser.parse_args(argv)
    paths = [Path(name) for name in args.notebooks]
    for path in paths:
        if path.suffix != ".ipynb" or not path.is_file():
            parser.error(f"{path} is not a notebook file (.ipynb); give lesson notebooks, e.g. lessons/*.ipynb")
    changed, problems = 0, []
    for path in paths:
        try:
            notebook = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            parser.error(f"{path} is not a readable notebook: {error}")
        if args.check:
            problems += [f"{path}: {problem}" for problem in unfolded(notebook)]
            continue
        if fold(notebook):
            write_notebook(notebook, path)
            changed += 1
    if args.check:
        print("\n".join(problems) or f"All solutions folded in {len(paths)} notebook(s).")
        return 1 if problems else 0
    print(f"Folded the solutions: {changed} of {len(paths)} notebook(s) changed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
