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
    """nbval's notebook kernels are started like this: a new Python that imports torch and reads its environment."""
    command = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == THREADS
