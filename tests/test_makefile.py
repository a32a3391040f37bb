"""The Makefile refuses a Python older than the pins support, with one sentence, before creating a venv."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/bin/sh
# A stand-in for Python {version}: answers the version check as it would, and records any other use.
case "$*" in
  *version_info*) exit {status} ;;
  *python_version*) echo {version}; exit 0 ;;
  *) echo "$*" >> "$(dirname "$0")/used"; exit 1 ;;
esac
"""


def make_setup(tmp_path, version, status):
    """Run `make setup` on a copy of the Makefile, with PYTHON a stand-in that reports `version`."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(version=version, status=status))
    python.chmod(0o755)
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return subprocess.run(["make", "setup", f"PYTHON={python}"], cwd=tmp_path, capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_refuses_an_old_python_before_creating_a_venv(tmp_path):
    result = make_setup(tmp_path, "3.9.18", 1)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "This course needs Python 3.11 or newer, and" in output
    assert "is Python 3.9.18" in output
    assert not (tmp_path / ".venv").exists()
    assert not (tmp_path / "used").exists(), "the old Python was asked to do more than report its version"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_goes_on_to_create_the_venv_with_a_supported_python(tmp_path):
    result = make_setup(tmp_path, "3.11.7", 0)
    assert "This course needs" not in result.stdout + result.stderr
    assert (tmp_path / "used").read_text().startswith("-m venv .venv")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_says_where_it_opens_and_how_to_stop_it(tmp_path):
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".ready").touch()  # set up already: `make -n` only prints what it would run
    result = subprocess.run(["make", "-n", "lab"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "http://127.0.0.1:8888/lab" in result.stdout and "Ctrl+C twice" in result.stdout, result.stdout
    assert "jupyter lab --ip=127.0.0.1 --port=8888 lessons" in result.stdout, result.stdout


def test_make_portability_runs_strict_nbval_with_the_avx2_and_the_generic_kernels():
    """Printed, not run (make -n): the lessons are checked twice, once per kernel set, with one math thread."""
    completed = subprocess.run(["make", "-n", "portability", "LESSONS=lessons/01_lookup_table.ipynb"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    commands = [line for line in completed.stdout.splitlines() if "pytest" in line]
    assert len(commands) == 2
    for command, kernels in zip(commands, ("avx2", "default"), strict=True):
        assert f"ATEN_CPU_CAPABILITY={kernels} " in command and "OMP_NUM_THREADS=1" in command
        assert command.endswith("-m pytest -p no:cacheprovider lessons/01_lookup_table.ipynb")
