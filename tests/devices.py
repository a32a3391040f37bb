"""The devices a test runs on: the CPU always, a CUDA GPU where there is one.

The CUDA case carries the ``cuda`` marker, so ``pytest -m cuda`` selects exactly the package's
CUDA tests; ``python -m attn.measure.bench --suite gpu`` runs that selection and records its counts.
Without a GPU the CUDA cases are collected and skipped, so the selection is never empty.
"""

import pytest
import torch

CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")],
)
DEVICES = [pytest.param("cpu"), CUDA]
