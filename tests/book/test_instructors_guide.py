"""The instructors' guide (book/instructors.md) agrees with the notebooks in lessons/.

Everything expected is read from the notebooks themselves, so a new lesson or exercise fails
here until the guide has it: one outcome row per notebook, in reading order; session tables
whose minutes add up to their stated total and session length, with every lesson given its
reading time; every exercise placed exactly once in each schedule, in a session that teaches
its lesson; and the measured running times included, with one row per notebook.
"""

import functools
import json
import re

import pytest

from attn.course import reading_time
from tests.notebooks import LESSONS, ROOT, load

GUIDE = ROOT / "book" / "instructors.md"
TIMES = ROOT / "book" / "lesson_times.md"
SCHEDULES = {"Workshop": "### Workshop", "Weekly course": "### Weekly course"}
EXERCISE_HEADING = re.compile(r"^:::\{exercise\} ([0-9A-Z]+\.[0-9]+):", flags=re.MULTILINE)
CHECK_CALL = re.compile(r"""\bcheck\(\s*["']([0-9A-Z]+\.[0-9]+)["']""")
SESSION_HEADING = re.compile(r"^\*\*((?:Session|Week) (\d+)\b.*) \((\d+) minutes\)\*\*$", flags=re.MULTILINE)
LESSON_ITEM = re.compile(r"(Lesson \d+|Interlude): ")  # a schedule item that is a whole notebook
PLACEMENT = re.compile(r"(?:(class|home), ([SW])(\d+)|pre-work)")  # "class, S2": in class in session 2; W: a week
SESSION_KINDS = {"S": "session", "W": "week"}


@functools.cache
def notebook(path):
    cells = load(path)["cells"]
    return {
        kind: "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == kind) for kind in ("markdown", "code")
    }


def title(path):
    """A notebook's first heading, without the '# '."""
    heading = re.search(r"^# (.+)$", notebook(path)["markdown"], flags=re.MULTILINE)
    assert heading, f"{path.name} has no title"
    return heading.group(1).strip()


def exercises(path):
    """The exercise ids a notebook asks, from its exercise headings and its check calls."""
    return set(EXERCISE_HEADING.findall(notebook(path)["markdown"])) | set(CHECK_CALL.findall(notebook(path)["code"]))


def section(text, heading):
    """The text under the heading line that starts with ``heading``, up to the next heading of its level or higher."""
    level = heading.split(" ")[0]
    start = re.search(rf"^{re.escape(heading)}.*$", text, flags=re.MULTILINE)
    assert start, f"the guide has no section {heading!r}"
    rest = text[start.end() :]
    end = re.search(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def tables(text):
    """Every Markdown table in ``text`` as (header cells, body rows of cells), in order."""
    found, lines = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            lines.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif lines:
            found.append((lines[0], [row for row in lines[1:] if not set("".join(row)) <= set("-: ")]))
            lines = []
    return found


@pytest.fixture(scope="module")
def guide():
    return GUIDE.read_text()


@pytest.fixture(scope="module")
def reading(guide):
    """Notebook title -> reading minutes, from the outcomes table."""
    header, rows = tables(section(guide, "## Outcomes and reading time"))[0]
    assert header == ["Notebook", "After it, a learner can", "Reading (min)"]
    result = {}
    for name, outcome, minutes in rows:
        link = re.fullmatch(r"\[(.+)\]\(\.\./lessons/(\w+)\.ipynb\)", name)
        assert link, f"outcome row {name!r} does not link to its notebook"
        assert (ROOT / "lessons" / f"{link.group(2)}.ipynb") in LESSONS, f"{name}: no such notebook"
        assert link.group(1) == title(ROOT / "lessons" / f"{link.group(2)}.ipynb"), f"{name}: not the notebook's title"
        assert len(outcome.split()) >= 8, f"{name}: say what a learner can do afterwards"
        result[link.group(1)] = int(minutes)
    return result


def test_one_outcome_row_per_notebook_in_reading_order(guide, reading):
    assert list(reading) == [title(path) for path in LESSONS]
    stated = re.search(r"(\d+) minutes of reading", section(guide, "## Outcomes and reading time"))
    assert stated and int(stated.group(1)) == sum(reading.values()), "the stated total reading time"


def sessions(guide, schedule):
    """(name, number, length, rows) for every session table of a schedule."""
    text = section(guide, SCHEDULES[schedule])
    headings = list(SESSION_HEADING.finditer(text))
    found = []
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        body = text[heading.end() : following.start() if following else len(text)]
        header, rows = tables(body)[0]
        assert header == ["Item", "Minutes"], heading.group(0)
        found.append((heading.group(1), int(heading.group(2)), int(heading.group(3)), rows))
    return found


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_every_session_adds_up_to_its_length(guide, reading, schedule):
    found = sessions(guide, schedule)
    assert len(found) >= 3, f"{schedule}: no session tables found"
    scheduled = []
    for name, _, length, rows in found:
        *items, (total_label, total) = rows
        assert total_label == "**Total**", f"{name}: the last row gives the total"
        minutes = [int(value) for _, value in items]
        assert sum(minutes) == int(total.strip("*")) == length, f"{name}: items add up to {sum(minutes)}, total {total}"
        for item, value in items:
            if LESSON_ITEM.match(item):
                assert item in reading, f"{name}: {item!r} is not a notebook's title"
                assert int(value) == reading[item], f"{name}: {item} takes {reading[item]} min to read, not {value}"
                scheduled.append(item)
    assert len(scheduled) == len(set(scheduled)), f"{schedule} teaches a notebook twice"


def test_the_weekly_course_covers_every_notebook(guide, reading):
    taught = [item for *_, rows in sessions(guide, "Weekly course") for item, _ in rows if item in reading]
    assert sorted(taught) == sorted(reading)


def test_every_exercise_is_placed_once_in_each_schedule(guide):
    asked = {exercise: path for path in LESSONS for exercise in exercises(path)}
    assert all(exercises(path) for path in LESSONS), "every notebook asks exercises; were they not found?"
    header, rows = tables(section(guide, "## Where each exercise belongs"))[0]
    assert header == ["Exercise", *SCHEDULES, "Why it suits homework"]
    placed = [row[0].split(" ", 1)[0] for row in rows]
    assert sorted(placed) == sorted(asked), "every exercise of the notebooks once, and nothing else"
    taught = {
        schedule: {
            (kind.split(" ")[0].lower(), number): {item for item, _ in rows}
            for kind, number, _, rows in sessions(guide, schedule)
        }
        for schedule in SCHEDULES
    }
    for exercise, *where, reason in rows:
        lesson = title(asked[exercise.split(" ", 1)[0]])
        for schedule, place in zip(SCHEDULES, where, strict=True):
            match = PLACEMENT.fullmatch(place)
            assert match, f"{exercise}, {schedule}: {place!r} is not 'class, S1', 'home, W2' (say) or 'pre-work'"
            if place == "pre-work":
                assert all(lesson not in items for items in taught[schedule].values()), f"{exercise}: its lesson is taught"
                continue
            kind, number = SESSION_KINDS[match.group(2)], match.group(3)
            items = taught[schedule].get((kind, int(number)))
            assert items is not None, f"{exercise}, {schedule}: there is no {kind} {number}"
            assert lesson in items, f"{exercise}, {schedule}: {kind} {number} does not teach {lesson}"
        at_home = any(not place.startswith("class") for place in where)
        assert bool(reason) == at_home, f"{exercise}: a reason for homework, and only for homework"


def test_running_times_are_included_with_one_row_per_notebook(guide):
    assert "```{include} lesson_times.md\n```" in section(guide, "## Running times")
    if not TIMES.exists():
        pytest.skip("book/lesson_times.md is written by python -m attn.course.execute --times book/lesson_times.md")
    header, rows = tables(TIMES.read_text())[0]
    assert header == ["Notebook", "Running time (s)"]
    assert [name for name, _ in rows] == [title(path) for path in LESSONS]
    assert all(seconds.isdigit() for _, seconds in rows)


def test_reading_times_follow_the_stated_rule(guide, reading):
    """Each notebook's reading time is attn.course.reading_time's rule applied to the notebook, with the
    exercises the workshop does in class (or as pre-work) counted in and its homework left out."""
    _, rows = tables(section(guide, "## Where each exercise belongs"))[0]
    workshop = {row[0].split(" ", 1)[0]: row[1] for row in rows}
    for path in LESSONS:
        counts = reading_time.count(path)
        in_class = sum(not workshop[exercise].startswith("home") for exercise in counts.exercises)
        expected = reading_time.reading_minutes(counts, in_class)
        assert reading[title(path)] == expected, (
            f"{path.stem}: the guide says {reading[title(path)]} min, the rule gives {expected} "
            f"({counts}, {in_class} exercises in class)"
        )
    rule = section(guide, "## Outcomes and reading time")
    constants = ("WORDS_PER_MINUTE", "CODE_CHARACTERS_PER_MINUTE", "MINUTES_PER_FIGURE", "MINUTES_PER_FORMULA")
    for constant in (*constants, "MINUTES_PER_EXERCISE"):
        assert str(getattr(reading_time, constant)) in rule, f"the guide states the rule's {constant}"


def test_the_reading_rule_counts_what_a_learner_meets():
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": ["# Title\n\nFour words of prose.\n\n$$a = b$$"]},
            {"cell_type": "code", "source": ["x = 1\n", "\n", "y = 2\n"], "outputs": [{"data": {"image/png": "..."}}]},
            {"cell_type": "markdown", "source": [":::{exercise} 1.1: Try\n:::\n\n```{solution-start} ex\n```"]},
            {"cell_type": "code", "source": ["hidden = True\n"], "outputs": []},
            {"cell_type": "markdown", "source": ["hidden words\n\n```{solution-end}\n```\n\nshown again"]},
        ]
    }
    path = ROOT / ".pytest-reading-rule.ipynb"
    try:
        path.write_text(json.dumps(notebook))
        counts = reading_time.count(path)
    finally:
        path.unlink(missing_ok=True)
    assert counts == reading_time.Counts(words=15, code_characters=10, figures=1, formulas=1, exercises=("1.1",))
    for wrong in (None, "2", 2.0, True, -1, 2):
        with pytest.raises(ValueError, match="in_class must be a whole number from 0 to 1"):
            reading_time.reading_minutes(counts, wrong)
    assert reading_time.reading_minutes(counts, 1) % reading_time.ROUND_TO == 0


def test_code_a_cell_prints_from_the_package_counts_as_code():
    """Issue 30: lesson 12 prints most of its code (inspect.getsource, the kernel); the rule reads it as code."""
    printed = "def f(x):\n    return x + 1\n"  # 8 + 12 characters once stripped
    cells = [
        {"cell_type": "code", "source": ["print(inspect.getsource(f))"], "outputs": [{"output_type": "stream", "text": printed}]},
        {"cell_type": "code", "source": ["print(42)"], "outputs": [{"output_type": "stream", "text": "42\n"}]},
    ]
    assert reading_time._printed_source(cells[0]) == len("def f(x):") + len("return x + 1")
    assert reading_time._printed_source(cells[1]) == 0  # ordinary output is part of reading the code, not extra
