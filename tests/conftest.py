"""Shared test settings and fixtures."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# One math thread per process. pytest-xdist runs two workers and nbval starts a notebook kernel in each, so
# two threads each (PyTorch's default on two cores) would ask for twice the cores there are, and oversubscribed
# threads spin and wait for each other: tests ran up to 15 times slower. Set here, in the environment, before
# the workers start and before any of them imports torch, so the workers and the kernels they start inherit it.
# ATTN_TEST_THREADS chooses another number (for example with -n 0 on a machine with many cores).
THREADS = os.environ.get("ATTN_TEST_THREADS", "1")
for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[variable] = THREADS
if "torch" in sys.modules:  # imported before this file by a plugin: set it directly too
    sys.modules["torch"].set_num_threads(int(THREADS))

# Property tests are derandomised so that CI and a learner's machine try the same examples.
settings.register_profile(
    "course", derandomize=True, deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the book with -W -n --keep-going into a temporary folder; return its html folder."""
    output = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", "--warningiserror", "--nitpick", "--keep-going", "--path-output", str(output), "."]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return output / "_build" / "html"
