"""Argument checks shared by every layer, model and measurement: each wrong input becomes one sentence that says what to do.

The layers call these before any arithmetic, so a bad call never gets as far as a traceback from
inside PyTorch and never changes a cache.
"""

import math
import numbers

import torch


def type_name(value):
    """``numpy.ndarray`` for a NumPy array, ``list`` for a list: the name a learner recognises."""
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def require_tensor(name, value):
    """TypeError unless ``value`` is a dense torch.Tensor, with the conversion to use where there is one.

    Sparse and other non-strided layouts are refused here, for every function at once: the course's
    layers index, reshape and reduce their inputs, which those layouts do not support.
    """
    if isinstance(value, torch.Tensor):
        require_dense(name, value)
        return
    message = f"{name} must be a torch.Tensor, got {type_name(value)}"
    if type(value).__module__ == "numpy":
        message += f"; convert it with torch.as_tensor({name})"
    elif isinstance(value, list | tuple):
        message += f"; convert it with torch.tensor({name})"
    raise TypeError(message)


def require_dense(name, tensor):
    """TypeError if ``tensor`` is sparse (or any layout but the ordinary strided one)."""
    if tensor.layout != torch.strided:
        raise TypeError(
            f"{name} has layout {tensor.layout}; this function needs an ordinary dense tensor (torch.strided): "
            f"convert it with {name}.to_dense()"
        )


def require_numbers(name, tensor):
    """ValueError if ``tensor`` is on the meta device: it has a shape but no numbers to compute with."""
    if tensor.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device, which keeps shapes but no numbers, so nothing can be computed from it; "
            "create the layer and the inputs on a real device such as 'cpu' (a meta layer: layer.to_empty(device='cpu'))"
        )


def require_computable(name, tensor):
    """``tensor`` must be a dense torch.Tensor on a real device (not meta): the checks every layer needs first."""
    require_tensor(name, tensor)
    require_numbers(name, tensor)


def require_floating(name, tensor):
    """TypeError unless ``tensor`` holds floating-point numbers (attention averages, so ints and bools cannot work)."""
    if not tensor.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers, got {tensor.dtype}; convert it with {name}.float()")


def require_finite(name, tensor, consequence="attention would spread it to every output that sees it"):
    """ValueError if ``tensor`` holds NaN or inf (one reduction over the tensor, and a wait for its result).

    The reduction is the tensor's smallest and largest entry (torch.aminmax, which passes NaN on), so the
    check allocates two numbers, not a boolean mask as large as the tensor: the memory a lesson measures
    is the algorithm's, not the check's. A tensor on the meta device (shapes without numbers) is refused
    with a sentence, since nothing can be computed.
    """
    require_numbers(name, tensor)
    if not has_only_finite(tensor):
        raise ValueError(f"{name} contains NaN or inf; {consequence}")


def has_only_finite(tensor):
    """True if ``tensor`` holds no NaN and no inf, found without a temporary as large as the tensor.

    NaN anywhere makes the smallest and largest entries NaN; an infinity is one of them itself.
    """
    require_tensor("tensor", tensor)
    require_numbers("tensor", tensor)
    if tensor.numel() == 0 or not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    if tensor.is_complex():
        return has_only_finite(torch.view_as_real(tensor))
    smallest, largest = torch.aminmax(tensor)
    return bool(torch.isfinite(smallest) & torch.isfinite(largest))


def require_like(name, tensor, reference):
    """``tensor`` must have the dtype and device of ``reference``, a weight of the layer it is given to."""
    require_tensor(name, tensor)
    require_tensor("reference", reference)
    if tensor.dtype != reference.dtype:
        raise TypeError(
            f"{name} is {tensor.dtype} but the layer's weights are {reference.dtype}; convert the layer with "
            f"layer.to({tensor.dtype}) or the input with {name}.to({reference.dtype})"
        )
    if tensor.device != reference.device:
        raise ValueError(
            f"{name} is on device {tensor.device} but the layer is on device {reference.device}; move one of them: "
            f"{name}.to('{reference.device}') or layer.to('{tensor.device}')"
        )


def is_whole_number(value):
    """True for a Python or NumPy integer (np.int64 included), False for a bool, a float (even 4.0) or text."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)  # numpy.bool_ is not Integral


def whole_number(name, value, minimum=None, maximum=None):
    """``value`` as a Python int if it is a whole number (Python's or NumPy's) in [minimum, maximum]."""
    if not is_whole_number(value):
        raise TypeError(f"{name} must be a whole number (an int), got {type_name(value)} {value!r:.60}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


def positive_int(name, value):
    """``value`` as an int if it is a positive whole number (not a bool, a float or a string; NumPy ints are fine)."""
    if not is_whole_number(value):
        raise TypeError(f"{name} must be a positive int, got {type_name(value)} {value!r:.60}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def whole_count(name, value):
    """``value`` as an int >= 0 (a whole number, not a bool, a float or a string)."""
    if not is_whole_number(value):
        raise TypeError(f"{name} must be a whole number of 0 or more, got {type_name(value)} {value!r:.60}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, got {value}")
    return int(value)


def positive_number(name, value):
    """``value`` as a float if it is a positive finite real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number, got {type_name(value)} {value!r:.60}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def non_negative_number(name, value):
    """``value`` as a float if it is a finite real number >= 0 (not a bool): an epsilon, for example."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number >= 0, got {type_name(value)} {value!r:.60}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def require_text(name, text):
    """TypeError unless ``text`` is a str; ValueError if it holds a lone surrogate, which no text file can store."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type_name(text)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} holds a lone surrogate ({text[error.start]!r} at position {error.start}), half of a character that "
            "no UTF-8 text can hold; it usually comes from reading a file with the wrong encoding"
        ) from None
    return text


def require_module(name, value, what="a model (a torch.nn.Module)"):
    """TypeError unless ``value`` is a torch.nn.Module (a model or a layer)."""
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be {what}, got {type_name(value)}")
    return value


def require_choice(name, value, choices):
    """ValueError (TypeError for a non-string) unless ``value`` is one of ``choices`` (strings)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, choices))}, got {type_name(value)} {value!r:.60}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r:.60}")
    return value


def require_token_ids(name, tensor, dims):
    """``tensor`` must be an integer tensor (token ids, not bool) of ``dims`` dimensions on a real device."""
    if not isinstance(tensor, torch.Tensor) or tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        got = f"{tensor.dtype} tensor" if isinstance(tensor, torch.Tensor) else type_name(tensor)
        raise TypeError(f"{name} must be a tensor of integer token ids, got {got}")
    require_dense(name, tensor)
    require_numbers(name, tensor)
    if tensor.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimension{'s' if dims > 1 else ''}, got shape {tuple(tensor.shape)}")
    return tensor


def require_callable(name, value):
    """TypeError unless ``value`` can be called (a function, a lambda, a layer)."""
    if not callable(value):
        raise TypeError(f"{name} must be a function to call, got {type_name(value)} {value!r:.60}; pass the function itself")


def seed_value(value):
    """``value`` as a seed PyTorch's generator takes: a whole number from -2**63 to 2**64 - 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"seed must be a whole number, got {type_name(value)} {value!r}")
    if not -(2**63) <= value <= 2**64 - 1:
        raise ValueError(f"seed must lie between -2**63 and 2**64 - 1 (what PyTorch's generator takes), got {value}")
    return int(value)


def probability(name, value):
    """``value`` as a float if it is a number in [0, 1): a dropout probability."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in [0, 1), got {type_name(value)} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1) (the probability of dropping a weight), got {value}")
    return float(value)
