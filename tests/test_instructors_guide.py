"""The instructors' guide (book/instructors.md) is true of the course: one outcome row per notebook, schedules
whose minutes add up to their sessions and agree with the reading times, every exercise placed exactly once,
and a running-time table measured for every notebook."""

import re

import pytest

from attn.exercises import exercise_ids
from tests.notebooks import ROOT, load

GUIDE = ROOT / "book" / "instructors.md"
TIMES = ROOT / "book" / "lesson_times.md"


def toc_notebooks():
    """The lesson notebooks in reading order (the order of _toc.yml)."""
    stems = re.findall(r"file: lessons/(\S+)", (ROOT / "_toc.yml").read_text())
    return [ROOT / "lessons" / f"{stem}.ipynb" for stem in stems]


def title(notebook):
    """A notebook's first heading, without the '# '."""
    for cell in load(notebook)["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and source.startswith("# "):
            return source.splitlines()[0][2:].strip()
    raise AssertionError(f"{notebook.name} has no title")


def section(text, heading):
    """The text under a '## ' or '### ' heading, up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    following = re.search(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)
    return rest[: following.start()] if following else rest


def table_rows(text):
    """The cells of every Markdown table row in ``text``, header and separator rows left out."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]
    headers = ("Reading", "Minutes", "Why there", "Running time (s)")
    return [row for row in rows if not set("".join(row)) <= set("-: ") and row[-1] not in headers]


def minutes(cell):
    return int(cell.strip("*").removesuffix(" min"))


@pytest.fixture(scope="module")
def guide():
    return GUIDE.read_text()


@pytest.fixture(scope="module")
def reading(guide):
    """Notebook title -> reading minutes, from the outcomes table."""
    return {row[0]: minutes(row[2]) for row in table_rows(section(guide, "## Outcomes and reading time"))}


def test_one_outcome_row_per_notebook_in_reading_order(reading):
    assert list(reading) == [title(notebook) for notebook in toc_notebooks()]


def lesson_item_minutes(item, reading):
    """The reading minutes of the notebooks an item such as 'Lessons 1, 2 and 3' or 'The primer and lesson 6' names."""
    if not re.match(r"(Lessons?|The primer)\b", item):
        return None
    lessons = {name: value for name, value in reading.items() if name.startswith("Lesson ")}
    by_number = {re.match(r"Lesson (\d+):", name).group(1): value for name, value in lessons.items()}
    primer = sum(value for name, value in reading.items() if name.startswith("Interlude")) if "primer" in item else 0
    return primer + sum(by_number[number] for number in re.findall(r"\d+", item))


@pytest.mark.parametrize("heading", ["### A workshop: two 150-minute sessions, and a third for Part 2",
                                     "### A weekly course: five 90-minute sessions"])
def test_every_schedule_adds_up_to_its_sessions(guide, reading, heading):
    session_length = int(re.search(r"(\d+)-minute", heading).group(1))
    running, totals = 0, 0
    for row in table_rows(section(guide, heading)):
        item, value = row[-2], minutes(row[-1])
        if item == "**Total**":
            assert running == value == session_length, f"{heading}: items add up to {running}, total says {value}"
            running, totals = 0, totals + 1
            continue
        expected = lesson_item_minutes(item, reading)
        assert expected is None or expected == value, f"{item}: {value} min, but its reading time is {expected} min"
        running += value
    assert running == 0 and totals >= 3, "every session ends with its total"


def test_every_exercise_is_placed_once_under_its_own_title(guide):
    rows = table_rows(section(guide, "## Where each exercise belongs"))
    placed = [row[0].split(" ", 1)[0] for row in rows]
    assert sorted(placed) == sorted(exercise_ids()), "each registered exercise once, and nothing else"
    titles = {}
    for notebook in toc_notebooks():
        markdown = "".join("".join(cell["source"]) for cell in load(notebook)["cells"] if cell["cell_type"] == "markdown")
        titles.update(re.findall(r":::\{exercise\} (\S+): (.*)", markdown))
    assert placed == list(titles), "in the order the course asks them"
    for row in rows:
        exercise, name = row[0].split(" ", 1)
        assert name == titles[exercise], f"{exercise} is titled {titles[exercise]!r} in its lesson"
        assert row[1] in ("in class", "homework") and row[2], row


def test_running_times_are_measured_for_every_notebook(guide):
    assert "```{include} lesson_times.md\n```" in guide
    rows = table_rows(TIMES.read_text())
    assert [row[0] for row in rows] == [title(notebook) for notebook in toc_notebooks()]
    assert all(0 < int(row[1]) < 60 for row in rows), "every lesson runs in under a minute"
