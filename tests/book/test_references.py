"""book/references.bib parses, names each entry once, and every citation in the course has an entry.

A fast check that fails with the entry's line, before the book build (minutes) fails on the same thing.
"""

import re

import pybtex.database

from tests.notebooks import LESSONS, ROOT, load

BIB = ROOT / "book" / "references.bib"
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")


def test_every_entry_parses_and_is_named_once():
    text = BIB.read_text()
    keys = re.findall(r"^@\w+\{([^,]+),", text, flags=re.MULTILINE)
    assert len(keys) == len(set(keys)), sorted(key for key in keys if keys.count(key) > 1)
    database = pybtex.database.parse_string(text, "bibtex")
    assert sorted(database.entries) == sorted(keys)
    assert text.count("{") == text.count("}")


def test_every_citation_has_an_entry():
    keys = set(pybtex.database.parse_file(str(BIB)).entries)
    pages = [path.read_text() for path in (ROOT / "book").glob("*.md")]
    pages += ["".join("".join(cell["source"]) for cell in load(path)["cells"]) for path in LESSONS]
    cited = {key.strip() for page in pages for group in CITE.findall(page) for key in group.split(",")}
    assert cited, "no citations found: has the {cite} syntax changed?"
    assert cited <= keys, sorted(cited - keys)


def test_no_two_entries_cite_alike():
    """Author-year citations tell entries apart: no two share a first author and a year (2024a, 2024b where needed)."""
    database = pybtex.database.parse_file(str(BIB))
    labels = {}
    for key, entry in database.entries.items():
        first = entry.persons["author"][0]
        label = (" ".join(first.last_names) or str(first), entry.fields["year"])
        assert label not in labels, f"{key} and {labels[label]} both cite as {label}"
        labels[label] = key
