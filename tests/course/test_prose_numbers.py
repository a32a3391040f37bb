"""Every number with a decimal point in a lesson's prose comes from somewhere a reader can check.

The prose is a lesson's markdown cells (without their fenced code blocks) and its figures' alt texts.
Each number in it with a decimal point must be one of:

- printed by one of the lesson's cells, or written in its code (a code cell, or a fenced block in its
  markdown); a printed number with more decimals counts when it rounds to the prose's number, so that
  "about 0.33" may quote a printed 0.3312 but never a printed 0.3412;
- a cited fact: a sentence that carries a ``{cite}`` role;
- derived: listed for its lesson in tests/course/prose_numbers_derived.py with the expression that derives it,
  which this test evaluates.

Exercise ids (exercise 16.4), version numbers (torch 2.13) and model names (Llama 3.1) are not numbers.
Numbers are compared by magnitude (the prose says "lower by 0.04" where a cell prints -0.04), and
"6.1 \\times 10^{-6}" or "6.1e-6" is one number, compared at the precision its mantissa gives.
"""

import math
import re
from decimal import Decimal, InvalidOperation

import pytest

from tests.course.prose_numbers_derived import DERIVED
from tests.notebooks import LESSONS, load

# A number with a decimal point, with an optional thousands separator and a power of ten written the three
# ways the lessons write one (6.1e-6, $6.1 \times 10^{-6}$, 6.1 × 10^-6).
POWER = r"(?:[eE](?P<e1>[-+−]?\d+)|\s*(?:\\times|×)\s*10\^\{?(?P<e2>[-+−]?\d+)\}?)"
PROSE_NUMBER = re.compile(rf"(?<![\w.,\\{{])(?P<mantissa>(?:\d{{1,3}}(?:,\d{{3}})+|\d+)?\.\d+)(?!\.?\d){POWER}?")
# Any number a cell prints or its code writes (integers too, since a prose 2.0 may quote a printed 2).
PRINTED_NUMBER = re.compile(r"(?<![\w.])(?P<mantissa>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE](?P<e1>[-+]?\d+))?")
FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1", flags=re.DOTALL | re.MULTILINE)
LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
HTML_COMMENT = re.compile(r"<!--.*?-->", flags=re.DOTALL)
# Not numbers: what is named with digits.
NOT_NUMBERS = [
    re.compile(r"\b(?:[Ee]xercises?|[Ss]elf-checks?|check\(\"?)\s*"
               r"(?P<list>\d+\.\d+(?:(?:,\s*|,?\s*and\s*|\s*(?:to|-|–)\s*)\d+\.\d+)*)"),
    re.compile(r"\{exercise\}\s*(?P<list>\d+\.\d+)"),
    re.compile(r"\{ref\}`(?P<list>\d+\.\d+)"),
    re.compile(r"\b(?:torch|PyTorch|[Tt]ransformers|Python|Triton|NumPy|version|CUDA|pytest|nbval|Jupyter Book|GGUF)"
               r"\s*(?:v|version\s*)?(?P<list>\d+\.\d+(?:\.\d+)*)"),
    re.compile(r"\b(?:Llama|Qwen|Gemma|GPT|DeepSeek|Kimi|Mistral|Phi|Claude|Gemini|SmolLM|OLMo|GLM)[- ]?(?:V|v)?"
               r"(?P<list>\d+\.\d+)"),
]
SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z(*$`])|\n\s*\n|\n(?=\s*(?:[-*|]|\d+\.)\s)")
TEXT_OUTPUTS = ("text/plain", "text/markdown", "text/html", "text/latex")


def _magnitude(mantissa, exponent):
    return abs(Decimal(mantissa.replace(",", "")).scaleb(int(exponent.replace("−", "-")) if exponent else 0))


def _decimals(mantissa):
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def prose_of(notebook):
    """(cell index, text) for every piece of a notebook's prose: its markdown without fenced code, and its alt texts."""
    pieces = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "markdown":
            text = FENCE.sub("", "".join(cell["source"]))
            pieces.append((index, HTML_COMMENT.sub("", LINK_TARGET.sub("]", text))))
        else:
            alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
            if alt:
                pieces.append((index, alt))
    return pieces


def checkable_texts(notebook):
    """Everything a lesson prints or writes as code: code cells, their text outputs, fenced code in its markdown."""
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            yield from (match.group(0) for match in FENCE.finditer(source))
            continue
        yield source
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream":
                yield "".join(output["text"])
            elif output["output_type"] == "error":
                yield output.get("evalue", "")
            for kind in TEXT_OUTPUTS:
                yield "".join(output.get("data", {}).get(kind, ""))


def printed_numbers(notebook):
    """{magnitude: most decimals it is printed with} over everything the lesson prints or writes as code."""
    numbers = {}
    for text in checkable_texts(notebook):
        for match in PRINTED_NUMBER.finditer(text):
            try:
                value = _magnitude(match.group("mantissa"), match.group("e1"))
            except (InvalidOperation, ValueError):
                continue
            places = _decimals(match.group("mantissa")) - int(match.group("e1") or 0)
            numbers[value] = max(numbers.get(value, places), places)
    return numbers


def quoted(value, places, numbers):
    """Whether a prose number (its magnitude, shown to ``places`` decimals) is printed, exactly or rounded."""
    if value in numbers:
        return True
    half = Decimal(5).scaleb(-places - 1)
    return any(more > places and abs(printed - value) <= half for printed, more in numbers.items())


def not_numbers(sentence):
    """The spans of a sentence that name things with digits (exercise ids, versions, model names)."""
    spans = []
    for pattern in NOT_NUMBERS:
        spans += [match.span("list") for match in pattern.finditer(sentence)]
    return spans


def prose_numbers(notebook):
    """(cell index, number as written, its magnitude, its decimals, the sentence) for each number the prose gives."""
    found = []
    for index, text in prose_of(notebook):
        for sentence in SENTENCE_END.split(text):
            if "{cite" in sentence:
                continue  # a cited fact
            skip = not_numbers(sentence)
            for match in PROSE_NUMBER.finditer(sentence):
                if any(start <= match.start() < end for start, end in skip):
                    continue
                exponent = match.group("e1") or match.group("e2")
                value = _magnitude(match.group("mantissa"), exponent)
                places = _decimals(match.group("mantissa")) - int(exponent.replace("−", "-") if exponent else 0)
                found.append((index, match.group(0), value, places, sentence.strip()))
    return found


def derived_value(expression):
    """Evaluate a derivation from the table: arithmetic and the math module's functions only."""
    names = {name: getattr(math, name) for name in dir(math) if not name.startswith("_")}
    return eval(expression, {"__builtins__": {}}, {**names, "abs": abs, "min": min, "max": max, "round": round})  # noqa: S307


def unexplained(path, notebook=None):
    """Each prose number of a lesson that no cell prints, no code writes, no citation carries and no derivation gives."""
    notebook = load(path) if notebook is None else notebook
    numbers = printed_numbers(notebook)
    derived = DERIVED.get(path.stem, {})
    missing = []
    for index, written, value, places, sentence in prose_numbers(notebook):
        if quoted(value, places, numbers) or written in derived:
            continue
        start = max(sentence.find(written) - 70, 0)
        missing.append(f"cell {index}: {written} in '...{sentence[start : start + 150]}...'")
    return missing


@pytest.mark.parametrize("path", LESSONS, ids=[path.stem for path in LESSONS])
def test_every_prose_number_is_printed_cited_or_derived(path):
    missing = unexplained(path)
    assert not missing, f"{path.name}: numbers the prose gives that no cell prints:\n" + "\n".join(missing)


@pytest.mark.parametrize("lesson", sorted(DERIVED))
def test_each_derived_number_is_used_and_follows_from_its_line(lesson):
    (path,) = [path for path in LESSONS if path.stem == lesson]
    written = {number for _, number, *_ in prose_numbers(load(path))}
    for number, expression in DERIVED[lesson].items():
        assert number in written, f"{lesson}: the derived number {number} is no longer in the prose; drop it from the table"
        match = PROSE_NUMBER.fullmatch(number)
        exponent = match.group("e1") or match.group("e2")
        shown = _magnitude(match.group("mantissa"), exponent)
        places = _decimals(match.group("mantissa")) - int(exponent.replace("−", "-") if exponent else 0)
        value = Decimal(repr(abs(derived_value(expression))))
        assert abs(value - shown) <= Decimal(5).scaleb(-places - 1), f"{lesson}: {number} is not {expression} = {value}"


def test_the_table_stays_small():
    assert sum(len(entries) for entries in DERIVED.values()) <= 40, "the derived table is for derivations, not for padding"


def _plant(notebook, old, new):
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and old in text:
            cell["source"] = text.replace(old, new, 1)
            return notebook
    raise AssertionError(f"{old} is in no markdown cell")


def test_a_changed_number_is_caught():
    path = next(path for path in LESSONS if path.stem.startswith("04_"))
    assert not unexplained(path)
    assert any("0.9957" in line for line in unexplained(path, _plant(load(path), "0.9975", "0.9957")))


def test_rounding_is_allowed_but_only_to_the_printed_number():
    notebook = {"cells": [
        {"cell_type": "code", "source": "print(x)", "metadata": {}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "loss 1.296, weight 3.3312e-01\n"}]},
        {"cell_type": "markdown", "metadata": {}, "source": "About 1.3 nats, a weight of 0.33; not 1.31 or 0.34."},
    ]}
    path = LESSONS[0].with_name("none.ipynb")
    assert [line.split(":")[1].split(" in ")[0].strip() for line in unexplained(path, notebook)] == ["1.31", "0.34"]


def test_names_and_citations_are_not_numbers():
    text = ("Exercise 16.4 and exercises 17.2 and 17.3 use torch 2.13 and Llama 3.1. "
            "Its window is 4.5 {cite}`x`. A loss of 2.75 here.")
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": text}]}
    assert [written for _, written, *_ in prose_numbers(notebook)] == ["2.75"]
    assert [written for _, written, *_ in prose_numbers(
        {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "weights of $6.1 \\times 10^{-6}$ and 2.5e-3"}]}
    )] == ["6.1 \\times 10^{-6}", "2.5e-3"]
