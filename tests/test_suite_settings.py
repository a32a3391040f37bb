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


def test_a_notebook_kernel_started_as_nbval_starts_it_uses_one_math_thread():
    """nbval (with --nbval-current-env) starts each notebook's kernel with this function; the kernel asks torch itself."""
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, start_new_kernel

    manager, client = start_new_kernel(startup_timeout=60, kernel_name=CURRENT_ENV_KERNEL_NAME, stderr=subprocess.DEVNULL)
    printed = []

    def keep_printed(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    try:
        client.execute_interactive("import torch; print(torch.get_num_threads())", timeout=60, output_hook=keep_printed)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "".join(printed).split() == [THREADS]


def test_the_suite_prints_its_ten_slowest_tests():
    """make test ends with the ten slowest tests, so that growth is seen when it happens (issue 50's 5-minute goal)."""
    import tomllib

    from tests.conftest import ROOT

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert "--durations=10" in options
