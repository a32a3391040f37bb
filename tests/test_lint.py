"""ruff is clean for the package, the tests and the notebooks."""

import subprocess
import sys

from tests.notebooks import ROOT


def test_ruff_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "attn", "tests", "lessons"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
