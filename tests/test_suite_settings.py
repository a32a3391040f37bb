"""The test processes, and the notebook kernels and programs they start, use the thread count conftest.py sets."""

import os
import subprocess
import sys

import torch

from tests.conftest import THREADS


def test_this_process_uses_the_set_number_of_math_threads():
    assert os.environ["OMP_NUM_THREADS"] == THREADS
    assert torch.get_num_threads() == int(THREADS)


def test_a_process_started_from_a_test_inherits_it():
    """nbval's notebook kernels are started like this, and PyTorch reads OMP_NUM_THREADS when they import it."""
    variables = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    command = [sys.executable, "-c", f"import os; print(*(os.environ[name] for name in {variables!r}))"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == [THREADS] * 3
