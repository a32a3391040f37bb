"""How long a learner needs in class for each notebook: a stated rule, computed from the notebook.

The instructors' guide gives every notebook a reading time. Rather than a guess, it is this rule,
applied to what a learner meets on the way through (a hidden solution is not counted: a learner
opens it only after trying):

    minutes = prose words / WORDS_PER_MINUTE
            + code characters / CODE_CHARACTERS_PER_MINUTE
            + figures * MINUTES_PER_FIGURE
            + display formulas * MINUTES_PER_FORMULA
            + exercises done in class * MINUTES_PER_EXERCISE

rounded to the nearest multiple of ROUND_TO. Code counts twice over where a cell prints code: the
source that a lesson prints from the package (``inspect.getsource``, the Triton kernel's
``kernel_source`` and ``launch_source``) is code the learner reads line by line, so its printed
characters count as code too (before issue 30 only the one line that printed it counted, which made
lesson 12, most of whose code is printed, look 30 minutes shorter than a learner took).
Reading speed is slow because the prose is technical:
it carries shapes and numbers to check against the code. A display formula is a step to work
through, a figure is read against the text, code is read, run and its output compared with the
prose. Code is measured in characters (each line stripped of its indentation), not lines, so that
wrapping a long line to fit the column does not make a lesson longer. The constants were fitted
once, by a search for the ones that come closest, to a learner's walkthrough of four notebooks as
they were then (the interlude 25-30 minutes; lesson 8, before it was split into lessons 8 and 9,
65-75; lesson 10 50-60; lesson 11 60-70; the rule gives 30, 67, 55 and 61 with every exercise
counted), and are applied unchanged to every notebook.

Run ``python -m attn.course.reading_time`` to print the counts and minutes for every lesson.
"""

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from attn.common.validate import is_whole_number

WORDS_PER_MINUTE = 150
CODE_CHARACTERS_PER_MINUTE = 500
MINUTES_PER_FIGURE = 4
MINUTES_PER_FORMULA = 5
MINUTES_PER_EXERCISE = 2
ROUND_TO = 5

EXERCISE = re.compile(r"^:::\{exercise\} ([0-9A-Z]+\.[0-9]+):", flags=re.MULTILINE)
SOLUTION_START = "```{solution-start}"
PRINTS_SOURCE = re.compile(r"getsource\(|\b(?:kernel|launch)_source\(\)")  # a cell that prints package code
SOLUTION_END = re.compile(r"```\{solution-end\}\s*\n```")
DISPLAY_FORMULA = re.compile(r"\$\$.+?\$\$|^```\{math\}", flags=re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Counts:
    """What a learner meets in one notebook, hidden solutions left out."""

    words: int
    code_characters: int  # each line without its indentation, printed source included
    figures: int
    formulas: int  # display formulas: $$...$$ or a {math} block
    exercises: tuple  # their ids, e.g. ("8.1", "8.2", "8.3")


def _visible_prose(cells):
    """The markdown a learner reads on the way through: everything outside solution blocks."""
    visible, in_solution = [], False
    for cell in cells:
        if cell["cell_type"] != "markdown" or "remove-cell" in cell.get("metadata", {}).get("tags", []):
            continue  # the line over a folded solution, for JupyterLab only (attn/course/solutions.py), is not read
        text = "".join(cell["source"])
        if in_solution:
            end = SOLUTION_END.search(text)
            if not end:
                continue
            text, in_solution = text[end.end() :], False
        if SOLUTION_START in text:
            text, in_solution = text[: text.index(SOLUTION_START)], True
        visible.append(text)
    return visible


def _visible_code(cells):
    """The code cells a learner runs on the way through: those outside solution blocks."""
    visible, in_solution = [], False
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            if SOLUTION_START in text:
                in_solution = True
            if SOLUTION_END.search(text):
                in_solution = SOLUTION_START in text[SOLUTION_END.search(text).end() :]
        elif not in_solution:
            visible.append(cell)
    return visible


def _cells(path):
    """The cells of the notebook at ``path``, or a ValueError that says what ``path`` is instead."""
    if not isinstance(path, str | Path):
        raise ValueError(f"give the path of a notebook (a str or a Path), not {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such notebook: {path}")
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        if not isinstance(cells, list):
            raise TypeError("its cells are not a list")
        for index, cell in enumerate(cells):
            _check_cell(index, cell)
    except (ValueError, KeyError, TypeError) as error:  # not JSON, not UTF-8, or not a notebook's layout
        raise ValueError(f"{path} is not a notebook saved by Jupyter ({error})") from None
    return cells


def _check_cell(index, cell):
    """TypeError naming the cell unless it has the layout nbformat gives: a type, a source of text, outputs a list."""
    if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str) or "source" not in cell:
        raise TypeError(f"cell {index} has no type or no source")
    source = cell["source"]
    if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(line, str) for line in source)):
        raise TypeError(f"cell {index}'s source is not text (a string or a list of strings)")
    outputs = cell.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(output, dict) for output in outputs):
        raise TypeError(f"cell {index}'s outputs are not a list of outputs")
    if not all(isinstance(output.get("data", {}), dict) for output in outputs):
        raise TypeError(f"cell {index} has an output whose data is not a dictionary")


def count(path):
    """Count a notebook's visible prose words, code characters, figures, display formulas and exercises."""
    cells = _cells(path)
    prose = _visible_prose(cells)
    code = _visible_code(cells)
    return Counts(
        words=sum(len(text.split()) for text in prose),
        code_characters=sum(_characters("".join(cell["source"])) + _printed_source(cell) for cell in code),
        figures=sum("image/png" in output.get("data", {}) for cell in code for output in cell.get("outputs", [])),
        formulas=sum(len(DISPLAY_FORMULA.findall(text)) for text in prose),
        exercises=tuple(found for text in prose for found in EXERCISE.findall(text)),
    )


def _characters(text):
    return sum(len(line.strip()) for line in text.splitlines())


def _printed_source(cell):
    """The characters of the code a cell prints from the package (its printed output), or 0."""
    if not PRINTS_SOURCE.search("".join(cell["source"])):
        return 0
    printed = (output for output in cell.get("outputs", []) if output.get("output_type") == "stream")
    return sum(_characters("".join(output.get("text", ""))) for output in printed)


def unrounded_minutes(counts, in_class):
    """The rule before rounding; ``in_class`` is how many of the exercises are done in class."""
    in_class = _check_in_class(counts, in_class)
    return (
        counts.words / WORDS_PER_MINUTE
        + counts.code_characters / CODE_CHARACTERS_PER_MINUTE
        + counts.figures * MINUTES_PER_FIGURE
        + counts.formulas * MINUTES_PER_FORMULA
        + in_class * MINUTES_PER_EXERCISE
    )


def reading_minutes(counts, in_class):
    """The rule, rounded to the nearest multiple of ROUND_TO minutes."""
    return ROUND_TO * math.floor(unrounded_minutes(counts, in_class) / ROUND_TO + 0.5)


def _check_in_class(counts, in_class):
    """``in_class`` as an int from 0 to the number of exercises ``counts`` holds (NumPy integers too)."""
    if not isinstance(counts, Counts):
        raise TypeError(f"counts must be what count(path) returns (a Counts), got {type(counts).__name__}")
    if not is_whole_number(in_class) or not 0 <= in_class <= len(counts.exercises):
        raise ValueError(f"in_class must be a whole number from 0 to {len(counts.exercises)}, the notebook's exercises, "
                         f"got {in_class!r:.40}")
    return int(in_class)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="?", default="lessons", help="the folder of notebooks (default: lessons)")
    args = parser.parse_args(argv)
    from attn.common.destinations import name_problem

    if name_problem(args.lessons) is not None:
        parser.error(name_problem(args.lessons))
    folder = Path(args.lessons)
    paths = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
    if not paths:
        parser.error(f"{folder} is not a folder of notebooks")
    print("| Notebook | Words | Code characters | Figures | Formulas | Exercises | Minutes, all exercises in class |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        counted = [(path, count(path)) for path in paths]
    except ValueError as error:
        parser.error(str(error))
    for path, counts in counted:
        minutes = reading_minutes(counts, len(counts.exercises))
        cells = (counts.words, counts.code_characters, counts.figures, counts.formulas, len(counts.exercises), minutes)
        print(f"| {path.stem} | " + " | ".join(map(str, cells)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
