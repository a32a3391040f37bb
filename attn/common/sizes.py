"""Sizes nobody can allocate, refused before anything is allocated: each with one sentence saying how many bytes.

No PyTorch at import time, so that the NumPy lessons' helpers (masks, positions) can use it too.
"""

import os


def memory_of(device=None):
    """Bytes of memory ``device`` has (RAM for the CPU, the card's for CUDA), or None where it is not known."""
    kind = "cpu" if device is None else str(device).split(":")[0]
    if kind == "cuda":
        import torch  # only here: the NumPy lessons' helpers check sizes without importing PyTorch

        return torch.cuda.get_device_properties(device).total_memory if torch.cuda.is_available() else None
    if kind == "cpu":
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # not every system reports it (Windows)
            return None
    return None


def readable_bytes(count):
    """12.0 GB, 4.4 TB: a number of bytes as a person reads it (powers of 1000)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if count < 1000 or unit == "PB":
            return f"{count:,.0f} {unit}" if unit == "bytes" else f"{count:,.1f} {unit}"
        count /= 1000
    return None


def check_allocation(what, nbytes, device=None, advice="use smaller sizes"):
    """ValueError, before anything is allocated, if ``what`` would need more bytes than ``device`` has.

    ``nbytes`` is the size asked for; the device's whole memory is the limit (a size above it cannot
    be allocated, whatever else is running). Devices whose memory is not known (meta, MPS) pass.
    """
    limit = memory_of(device)
    if limit is not None and nbytes > limit:
        where = "this machine's memory" if device is None or str(device) == "cpu" else f"the memory of {device}"
        raise ValueError(
            f"{what} would need {readable_bytes(nbytes)}, more than the {readable_bytes(limit)} of {where}; "
            f"{advice}"
        )
