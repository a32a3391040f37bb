"""Shared test settings and fixtures."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
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


def _cuda_available():
    """Whether PyTorch sees a CUDA GPU; torch is imported here, after the thread settings above."""
    import torch

    return torch.cuda.is_available()


# Lesson 12's Triton kernel runs on a CPU only through Triton's interpreter, which Triton chooses when it is
# first imported (some of PyTorch's modules import it): set before any test can import it.
if not _cuda_available():
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
def built_book(tmp_path_factory, worker_id):
    """Build the book with -W -n --keep-going into a temporary folder; return its html folder.

    Built once per test run: pytest-xdist workers share the run's temporary folder, and a lock (filelock comes
    with PyTorch) makes the others wait for the first worker's build instead of building it again.
    """
    if worker_id == "master":  # no workers: this process's own folder
        return _build_book(tmp_path_factory.mktemp("book"))
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, above each worker's own
    with FileLock(str(shared / "book.lock")):
        output = shared / "book"
        if not (output / "built").exists():  # the first worker here builds it; a failed build is tried again
            output.mkdir(exist_ok=True)
            _build_book(output)
            (output / "built").touch()
        return output / "_build" / "html"


def book_build_command(output):
    """The jupyter-book build the tests check: `make book`'s, written to ``output`` (tests/book/test_publishing.py)."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    return [str(jupyter_book), "build", "--warningiserror", "--nitpick", "--keep-going", "--path-output", str(output), "."]


def _build_book(output):
    result = subprocess.run(book_build_command(output), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return output / "_build" / "html"


# How the suite is shared (pyproject.toml: -n 2 --dist loadscope): pytest-xdist hands each worker whole modules,
# largest first by their number of tests, and the next one when it is nearly done. The browser test (one module:
# every page at two widths, about 110 s) stays one unit on purpose: split into two classes that the two workers
# ran side by side, make test took 371 s on a fresh clone against 296 s, since each Chromium keeps more than a
# core busy and two at once starve each other and every other test.
