"""Every lesson's solutions are folded for JupyterLab, and nothing after a solution needs it (attn/course/solutions.py).

A learner opens the notebooks in JupyterLab (``make lab``): each solution's cells are folded by their metadata
(``jupyter.source_hidden``, and ``outputs_hidden`` on code cells) under a "Solution below: try first" line that
the book leaves out (``remove-cell``), and a fold shows nothing of the answer (JupyterLab shows a folded cell's
first line). tests/course/test_jupyterlab.py checks the same in a real JupyterLab for one lesson.
"""

import copy
import json

import pytest

from attn.course import solutions
from tests.notebooks import LESSONS, load


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_every_solution_is_folded_behind_the_line(path):
    notebook = load(path)
    assert solutions.solution_spans(notebook["cells"]), "every lesson has exercises with solutions"
    assert solutions.unfolded(notebook) == []
    assert not solutions.fold(copy.deepcopy(notebook)), "python -m attn.course.solutions would change it: run it"


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_no_cell_outside_the_solutions_needs_one(path):
    assert solutions.later_cells_needing_solutions(load(path)) == []


def markdown(text, cell_id):
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": solutions.as_lines(text)}


def code(text, cell_id):
    return {"cell_type": "code", "id": cell_id, "metadata": {}, "source": solutions.as_lines(text),
            "execution_count": None, "outputs": []}


def unfolded_lesson():
    """A lesson as written for the book: the solution's closing words and the next exercise share a cell."""
    return {"cells": [
        code("x = 1", "a"),
        markdown(":::{exercise} 9.1: Try\n:label: ex-9-1\n:::", "b"),
        code("answer = ...\ncheck('9.1', answer)", "c"),
        markdown("```{solution-start} ex-9-1\n:class: dropdown\n```", "d"),
        code("answer = x + 41  # the answer\ncheck('9.1', answer)", "e"),
        markdown("Adding 41 does it.\n\n```{solution-end}\n```\n\n:::{exercise} 9.2: Next\n:::", "f"),
        code("print(answer)", "g"),
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_fold_splits_folds_and_adds_the_line_once():
    notebook = unfolded_lesson()
    assert solutions.unfolded(notebook)  # the book's notebook is not folded
    assert solutions.fold(notebook)
    cells = notebook["cells"]
    sources = [solutions.source_of(cell) for cell in cells]
    assert sources[3].startswith("**Solution below: try first.** Exercise 9.1's solution")
    assert cells[3]["metadata"]["tags"] == ["remove-cell"]
    assert sources[5].startswith("# Solution to exercise 9.1\nanswer = x + 41")
    assert sources[6] == "\nAdding 41 does it.\n\n```{solution-end}\n```"  # closing words stay in the solution
    assert sources[7] == ":::{exercise} 9.2: Next\n:::"  # the next exercise is no longer folded with it
    for cell in cells[4:7]:
        assert cell["metadata"]["jupyter"]["source_hidden"] is True
    assert cells[5]["metadata"]["jupyter"]["outputs_hidden"] is True
    assert "jupyter" not in cells[7]["metadata"]
    assert len({cell["id"] for cell in cells}) == len(cells)
    assert solutions.unfolded(notebook) == []
    again = copy.deepcopy(notebook)
    assert not solutions.fold(again) and again == notebook  # idempotent


def test_unfolded_names_each_fault():
    notebook = unfolded_lesson()
    solutions.fold(notebook)
    cells = notebook["cells"]
    broken = copy.deepcopy(notebook)
    del broken["cells"][5]["metadata"]["jupyter"]["outputs_hidden"]
    assert solutions.unfolded(broken) == ["ex-9-1: cell 5 (e) is not folded"]
    broken = copy.deepcopy(notebook)
    broken["cells"][5]["source"] = solutions.as_lines("answer = x + 41\ncheck('9.1', answer)")
    assert solutions.unfolded(broken) == ["ex-9-1: cell 5 (e) shows more than its name on the fold"]
    broken = copy.deepcopy(notebook)
    del broken["cells"][3]
    assert solutions.unfolded(broken)[0].startswith("ex-9-1: no 'Solution below: try first' line")
    assert cells[3]["id"] == "ex-9-1-try-first"


def test_a_later_cell_that_needs_a_solution_is_named():
    notebook = unfolded_lesson()
    solutions.fold(notebook)
    # the last cell prints `answer`, which only the solution gives a value (the exercise leaves it ...)
    needing = solutions.later_cells_needing_solutions(notebook)
    assert needing == [(8, "g", ["answer"])]
    notebook["cells"][-1]["source"] = solutions.as_lines("answer = 2\nprint(answer)")
    assert solutions.later_cells_needing_solutions(notebook) == []


def test_the_command_folds_checks_and_refuses_what_is_not_a_notebook(tmp_path, capsys):
    path = tmp_path / "lesson.ipynb"
    path.write_text(json.dumps(unfolded_lesson()))
    assert solutions.main(["--check", str(path)]) == 1
    assert "is not folded" in capsys.readouterr().out
    assert solutions.main([str(path)]) == 0
    assert "1 of 1 notebook(s) changed" in capsys.readouterr().out
    assert solutions.main([str(path)]) == 0
    assert "0 of 1 notebook(s) changed" in capsys.readouterr().out
    assert solutions.main(["--check", str(path)]) == 0
    for bad, said in ((tmp_path / "notes.txt", "is not a notebook file"), (tmp_path / "none.ipynb", "is not a notebook")):
        if bad.suffix == ".txt":
            bad.write_text("x")
        with pytest.raises(SystemExit):
            solutions.main([str(bad)])
        assert said in capsys.readouterr().err
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    with pytest.raises(SystemExit):
        solutions.main([str(broken)])
    assert "is not a readable notebook" in capsys.readouterr().err
