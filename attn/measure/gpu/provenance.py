"""Where a GPU suite run happened: the device, the versions, the date, the command, and the data-sheet peaks that apply.
"""

import datetime
import importlib.metadata
import importlib.util
import platform
import shutil
import subprocess

import torch

from attn.measure.peaks import DATA_SHEET_PEAKS, DATA_SHEET_SOURCE, data_sheet_peaks


def package_version(name):
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_driver():
    """The NVIDIA driver version as nvidia-smi reports it, or None where there is no nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        completed = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else None


def triton_kernel_status():
    """Lesson 12's sentence on how its Triton kernel runs here (compiled, interpreted, or not at all)."""
    if importlib.util.find_spec("attn.triton_kernels") is None:
        return "this copy of the course has no attn/triton_kernels.py (lesson 12's kernel)"
    from attn.triton_kernels import triton_status

    return triton_status()


def provenance(device, command):
    """Where and with what the suite ran: device, versions, date and the exact command."""
    info = {
        "device_type": device.type,
        "device_name": "cpu",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": package_version("triton"),
        "numpy": package_version("numpy"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "driver": None,
        "triton_kernel": triton_kernel_status(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        info.update(
            device_name=properties.name,
            driver=nvidia_driver(),
            memory_gib=round(properties.total_memory / 2**30, 1),
            multiprocessors=properties.multi_processor_count,
            compute_capability=f"{properties.major}.{properties.minor}",
        )
    return info


def peak_table(device):
    """The data-sheet peaks that apply to this device (None on a CPU or an unknown GPU), the table and its source."""
    matched = data_sheet_peaks(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    return {"matched": matched, "source": DATA_SHEET_SOURCE, "table": DATA_SHEET_PEAKS}
