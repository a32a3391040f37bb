"""Shared test settings and fixtures."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# Lesson 11's Triton kernel runs on a CPU only through Triton's interpreter, which Triton chooses when it is
# first imported (some of PyTorch's modules import it): set before any test can import it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Property tests are derandomised so that CI and a learner's machine try the same examples.
settings.register_profile(
    "course", derandomize=True, deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


def pytest_configure(config):
    """Register the ``cuda`` marker (see tests/devices.py), which ``pytest -m cuda`` selects."""
    config.addinivalue_line("markers", "cuda: runs on a CUDA GPU, skipped where there is none (pytest -m cuda selects these)")


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the book with -W -n --keep-going into a temporary folder; return its html folder."""
    output = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", "--warningiserror", "--nitpick", "--keep-going", "--path-output", str(output), "."]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return output / "_build" / "html"
