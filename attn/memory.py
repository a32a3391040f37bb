"""Peak memory of a function on the CPU, measured from the operating system's count of resident memory.

PyTorch reports peak memory only for GPUs. On Linux the kernel keeps each process's high-water mark of
resident memory (VmHWM) and lets the process reset it; with glibc told to hand every allocation of
64 KiB or more straight back to the system when it is freed, the mark rises and falls with the tensors
a function holds. Other systems get a sentence saying the measurement needs Linux.
"""

import ctypes
import functools
import re
import sys
from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
M_MMAP_THRESHOLD = -3  # glibc's mallopt option: allocations at least this large get their own mapping


def peak_bytes(function, *arguments):
    """How far the process's resident memory rose above its level at the call while ``function`` ran.

    Returns bytes (an int). The result of ``function`` is dropped before returning. Small allocations
    (under 64 KiB) may be served from memory the process already holds, so sizes below about 1 MiB are
    not meaningful; compare sizes of megabytes.
    """
    if not callable(function):
        raise TypeError(f"peak_bytes measures a function, got {type(function).__name__}; pass the function itself")
    _prepare()
    CLEAR_REFS.write_text("5")  # reset the high-water mark to the current resident size
    before = _status_bytes("VmRSS")
    result = function(*arguments)
    del result
    return max(0, _status_bytes("VmHWM") - before)


@functools.cache
def _prepare():
    """Check that this is Linux with glibc, and make large frees go back to the system at once."""
    if not (sys.platform.startswith("linux") and STATUS.exists() and CLEAR_REFS.exists()):
        raise RuntimeError(f"peak_bytes reads Linux's /proc/self/status, which {sys.platform} does not have")
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        raise RuntimeError("peak_bytes needs glibc (libc.so.6), the C library of most Linux systems") from None
    libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)


def _status_bytes(field):
    """One memory field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    found = re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.MULTILINE)
    return int(found.group(1)) * 1024
