"""Every door of the course, found by itself and tried with hostile values (issue 38): see tests/hostile_sweep.py.

A failure names the callable (or command line), the argument, the value and what escaped. Failures known and not
yet fixed are listed, one a line, in tests/hostile_sweep_open.txt (a ratchet: a new failure fails the test, and so
does a listed one that now passes, so the list only shrinks); cases listed as hangs are not run (each would take
the full time limit). A new module, function or command line is swept the day it lands, with no list to update.
"""

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from tests import hostile_sweep as sweep

OPEN_FILE = Path(__file__).with_name("hostile_sweep_open.txt")


def open_failures():
    """key -> what escaped, for each failure known and not yet fixed."""
    known = {}
    for line in OPEN_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, escaped = line.partition(" -> ")
            known[key] = escaped
    return known


def hangs(known):
    return {key for key, escaped in known.items() if escaped.startswith("still running")}


@pytest.fixture
def paths(tmp_path):
    return sweep.hostile_paths(tmp_path)


def compare(failures, cases, known):
    """Assert that ``failures`` are exactly the known ones among ``cases`` (hangs not run)."""
    keys = {case.key() for case in cases}
    expected = {key for key in known if key in keys and key not in hangs(known)}
    new = [failure for failure in failures if failure.key() not in known]
    fixed = sorted(expected - {failure.key() for failure in failures})
    report = []
    if new:
        report.append(f"{len(new)} door(s) let a hostile value through (callable: argument = value -> what escaped):")
        report += [f"  {failure}" for failure in new]
    if fixed:
        report.append(f"{len(fixed)} case(s) listed in {OPEN_FILE.name} now pass; remove these lines from it:")
        report += [f"  {key}" for key in fixed]
    assert not report, "\n".join(report)


def test_the_sweep_finds_every_module_and_command_line_itself():
    modules = {module.__name__ for module in sweep.public_modules()}
    on_disk = {
        ".".join(path.relative_to(sweep.ATTN.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in sweep.ATTN.rglob("*.py")
    }
    public_on_disk = {name for name in on_disk if not any(part.startswith("_") for part in name.split("."))}
    assert public_on_disk <= modules
    commands = {name for name, _ in sweep.entry_points()}
    for command in ("attn.corpus", "attn.lm", "attn.models.induction", "attn.course.execute", "attn.measure.bench"):
        assert command in commands
    assert len(sweep.public_callables()) > 300


def test_every_public_callable_answers_hostile_values_with_a_sentence(paths):
    cases, skipped = sweep.callable_cases(paths)
    assert all(reason for reason in skipped.values())
    known = open_failures()
    compare(sweep.run_cases(cases, skip=hangs(known)), cases, known)


def test_every_command_line_refuses_hostile_arguments_before_any_work(paths, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cases = sweep.cli_cases(paths)
    known = open_failures()
    compare(sweep.run_cases(cases, skip=hangs(known)), cases, known)


def test_every_self_check_answers_hostile_answers_quickly():
    cases = sweep.check_cases()
    known = open_failures()
    compare(sweep.run_cases(cases, skip=hangs(known)), cases, known)


PLANTED = '''
import argparse
import torch


def unchecked(query, window):
    """Forgets to check its arguments: the sweep must find it and say so."""
    return (query @ query.transpose(-2, -1)) / window


def checked(query, window):
    if not isinstance(query, torch.Tensor) or query.dim() != 3 or not query.is_floating_point():
        raise TypeError("query must be a float tensor of shape (B, T, d)")
    if query.device.type == "meta" or not torch.isfinite(query).all() or abs(query).max() > 1e6:
        raise ValueError("query must hold finite numbers of moderate size")
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 2**20:
        raise ValueError("window must be a whole number from 1 to 2**20")
    return query.sum(-1) / window


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.parse_args(argv)
    raise RuntimeError("went on to work with any --out")


if __name__ == "__main__":
    main()
'''


def test_a_planted_unchecked_function_and_command_line_are_caught(tmp_path, monkeypatch, paths):
    package = tmp_path / "planted_course"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layer.py").write_text(textwrap.dedent(PLANTED))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sweep, "ATTN", package.resolve())
    importlib.invalidate_caches()
    try:
        found = sweep.public_callables(sweep.public_modules("planted_course"))
        assert set(found) == {"planted_course.layer.unchecked", "planted_course.layer.checked", "planted_course.layer.main"}
        cases, _ = sweep.callable_cases(paths, found)
        failures = sweep.run_cases(cases)
        doors = {failure.door for failure in failures}
        assert doors == {"planted_course.layer.unchecked"}, [str(f) for f in failures]
        assert {f.argument for f in failures} >= {"query", "window"}, [str(f) for f in failures]
        commands = sweep.entry_points("planted_course")
        assert [name for name, _ in commands] == ["planted_course.layer"]
        cli_failures = sweep.run_cases(sweep.cli_cases(paths, commands))
        assert cli_failures and all("RuntimeError" in f.escaped or "accepted" in f.escaped for f in cli_failures)
    finally:
        for name in [name for name in sys.modules if name.startswith("planted_course")]:
            del sys.modules[name]
