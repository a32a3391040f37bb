"""The package's CUDA tests (``pytest -m cuda``), run in a subprocess, with their counts parsed from pytest's summary.
"""

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # the course folder: attn/measure/gpu/ is three below it


def cuda_test_files(tests_folder):
    """The test files that hold CUDA cases: those using tests/devices.py's parametrisation or the cuda marker."""
    uses_cuda = ("from tests.devices import", "pytest.mark.cuda")
    return sorted(path for path in Path(tests_folder).rglob("test_*.py") if any(word in path.read_text() for word in uses_cuda))


SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)")


def parse_pytest_summary(output):
    """pytest's last summary line ('3 passed, 2 skipped in 1.2s') and its counts."""
    lines = [line.strip(" =") for line in output.strip().splitlines() if re.search(r"\bin [\d.]+s\b", line)]
    summary = lines[-1] if lines else ""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "deselected": 0}
    for number, word in SUMMARY.findall(summary):
        word = "errors" if word.startswith("error") else word
        counts[word] = counts.get(word, 0) + int(number)
    return summary, counts


def run_cuda_tests(timeout_s, root=REPO):
    """Run the CUDA cases (``pytest -m cuda``) in a subprocess and record its counts, summary and failures."""
    tests = root / "tests"
    files = cuda_test_files(tests) if tests.is_dir() else []
    if not files:
        return {"status": "not run", "reason": f"no test files with CUDA cases under {tests.name}/"}
    if importlib.util.find_spec("pytest") is None:
        return {"status": "not run", "reason": "pytest is not installed here"}
    relative = [str(path.relative_to(root)) for path in files]
    # addopts from pyproject.toml is dropped: it needs nbval and xdist, which a GPU machine may lack.
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "-rfE", "-m", "cuda", *relative]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timed out", "reason": f"pytest ran past {timeout_s} s", "command": " ".join(command[1:])}
    summary, counts = parse_pytest_summary(completed.stdout)
    failures = [line for line in completed.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {
        "status": "ran", "exit_code": completed.returncode, "summary": summary, **counts,
        "failures": failures[:30], "files": relative, "command": " ".join(["python", *command[1:]]),
        "seconds": time.perf_counter() - started,
        "output_tail": None if completed.returncode in (0, 5) and summary else (completed.stdout + completed.stderr)[-3000:],
    }
