"""One place that chooses where PyTorch code runs."""

import torch


def pick_device():
    """The best available device: CUDA, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def check_device(name, device):
    """``device`` as a torch.device if it names one PyTorch knows and this machine has (None stays None); else a sentence."""
    if device is None:
        return None
    if isinstance(device, bool) or not isinstance(device, torch.device | str | int):
        raise TypeError(f"{name} must be a torch.device or a name such as 'cpu' or 'cuda', got {type(device).__name__}")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name}={device!r} is not a device PyTorch knows; use a name such as 'cpu', 'cuda' or 'mps'") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={str(device)!r}: no CUDA device is available on this machine; use 'cpu'")
    mps = getattr(torch.backends, "mps", None)
    if device.type == "mps" and not (mps is not None and mps.is_available()):
        raise ValueError(f"{name}={str(device)!r}: no Apple GPU (MPS) is available on this machine; use 'cpu'")
    return device


def describe_device(device):
    """A one-line description of ``device`` (a torch.device or a name such as "cuda"): its kind and, for a GPU, its name."""
    if isinstance(device, bool) or not isinstance(device, torch.device | str | int):
        raise TypeError(f"describe_device needs a torch.device or a name such as 'cpu' or 'cuda', got {type(device).__name__}")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{device!r} is not a device PyTorch knows; use a name such as 'cpu', 'cuda' or 'mps'") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("no CUDA device is available on this machine; attn.common.device.pick_device() chooses one that is")
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "mps":
        return "mps (Apple GPU)"
    return device.type
