"""The whole layer: the course's MultiHeadAttention against nn.MultiheadAttention, forward and forward+backward.

Like is compared with like. nn.MultiheadAttention has two paths: in inference it takes a "fast path"
(torch._native_multi_head_attention) that drops ``is_causal`` and, given a mask, multiplies with bmm
and runs a masked softmax over the stored T x T scores; otherwise (training, or the fast path turned
off) it calls scaled_dot_product_attention with ``is_causal``, as the course's layer does. The ratio
is the course's layer against that standard path, both letting PyTorch choose the same kernel; the
fast path is timed beside it (forward only) and reported as its own ratio. Each side's path is not
assumed but observed: the attention operations one untimed call runs are recorded in the row.
The course's layer is timed without its input checks (their reduction and wait are timed on their
own, as ``ours_with_checks``), since nn.MultiheadAttention checks no values.
"""

import contextlib
from unittest import mock

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from attn import multihead
from attn.measure.gpu.cases import attempt, measure, random_tensor, relative_error, seeded
from attn.multihead import MultiHeadAttention

PATHS = (
    "ours: attn.MultiHeadAttention, its value checks (attn.common.layer_checks.check_inputs) replaced by nothing in a "
    "context entered once outside the timing; ours_with_checks: the same layer as a learner calls it; reference: "
    "nn.MultiheadAttention with its inference fast path turned off (torch.backends.mha.set_fastpath_enabled(False), "
    "entered once outside the timing), so that it calls scaled_dot_product_attention with is_causal as ours does; "
    "reference_fast_path (forward only): nn.MultiheadAttention as it runs by default in inference. ratio: ours / "
    "reference; ratio_to_fast_path: ours / reference_fast_path. Each row's ops: the attention operations one "
    "untimed call of each side ran"
)


ATTENTION_OPS = ("attention", "softmax", "bmm", "baddbmm")  # the operations that say which path ran


class _OpNames(TorchDispatchMode):
    """Records the name of every PyTorch operation run while it is active."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def attention_ops(call):
    """The attention operations (by their ATen names, in order, each once) that ``call()`` runs."""
    with _OpNames() as recorder:
        call()
    return list(dict.fromkeys(name for name in recorder.names if any(part in name for part in ATTENTION_OPS)))


@contextlib.contextmanager
def fast_path(enabled):
    """nn.MultiheadAttention's inference fast path turned on or off within the block (as it was, after)."""
    switch = getattr(torch.backends, "mha", None)
    if switch is None:  # a torch without the switch
        yield
        return
    before = switch.get_fastpath_enabled()
    switch.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        switch.set_fastpath_enabled(before)


@contextlib.contextmanager
def without_value_checks():
    """The course's layer with its input checks replaced by nothing, within the block (its core is already unchecked)."""
    with mock.patch.object(multihead, "check_inputs", lambda *arguments: None), \
            mock.patch.object(multihead, "split_heads", multihead._split_heads), \
            mock.patch.object(multihead, "merge_heads", multihead._merge_heads), \
            mock.patch.object(multihead, "check_projected", lambda *arguments: None), \
            mock.patch.object(multihead, "check_output_finite", lambda *arguments: None), \
            mock.patch.object(multihead, "check_weights_fit", lambda *arguments: None):
        yield


def layer_pair(device, dtype, embed_dim, heads):
    """nn.MultiheadAttention and the course's layer with the same weights, on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(embed_dim, heads, batch_first=True).to(device, dtype)
    return MultiHeadAttention.from_torch(reference), reference


def layer_calls(ours, reference, x, causal):
    """(ours(x), theirs(x)) as functions of nothing, causal or not, each returning the (B, T, E) output."""
    length = x.shape[1]
    if not causal:
        return (lambda: ours(x, x, x)), (lambda: reference(x, x, x, need_weights=False)[0])
    blocked = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(diagonal=1)  # theirs: True = blocked
    return ((lambda: ours(x, x, x, is_causal=True)),
            (lambda: reference(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)[0]))


def time_layer_mode(call, mode, upstream, device, sizes, context=None):
    """Median time of one layer call: forward only (eval, inference mode) or forward and backward (train)."""
    if mode == "forward":
        with torch.inference_mode():
            return measure(lambda _: call(), device, sizes, context=context)
    return measure(lambda _: call().backward(upstream), device, sizes, context=context)


def sides(ours_call, reference_call, mode):
    """Each timed side: name -> (call, the context entered once around it)."""
    found = {"ours": (ours_call, without_value_checks), "ours_with_checks": (ours_call, None),
             "reference": (reference_call, lambda: fast_path(False))}
    if mode == "forward":
        found["reference_fast_path"] = (reference_call, lambda: fast_path(True))
    return found


def observed_ops(found, mode):
    """The attention operations each side runs, from one untimed call (inference mode for the forward)."""
    ops = {}
    for name, (call, context) in found.items():
        with contextlib.ExitStack() as stack:
            if context is not None:
                stack.enter_context(context())
            if mode == "forward":
                stack.enter_context(torch.inference_mode())
            ops[name] = attention_ops(call)
    return ops


def ratio(numerator, denominator):
    both = numerator["status"] == denominator["status"] == "ok"
    return numerator["seconds"] / denominator["seconds"] if both else None


def layer_comparison(device, sizes):
    """The course's layer against nn.MultiheadAttention, like with like: ratios of median times, forward and forward+backward."""
    shape = sizes.layer
    dtype = getattr(torch, sizes.dtype)
    ours, reference = layer_pair(device, dtype, shape["embed_dim"], shape["heads"])
    generator = seeded(device)
    x = random_tensor((shape["batch"], shape["length"], shape["embed_dim"]), device, dtype, generator)
    upstream = random_tensor(x.shape, device, dtype, generator)
    rows = []
    for causal in (False, True):
        for mode in ("forward", "forward+backward"):
            for module in (ours, reference):
                module.train(mode != "forward")
            inputs = x if mode == "forward" else x.detach().requires_grad_()
            ours_call, reference_call = layer_calls(ours, reference, inputs, causal)
            row = {"mode": mode, "causal": causal, **shape, "dtype": sizes.dtype}
            with torch.inference_mode(), fast_path(False):
                checked, failure = attempt(lambda ours_call=ours_call, reference_call=reference_call:
                                           relative_error(ours_call(), reference_call()), device)
            row["relative_error"] = checked
            found = sides(ours_call, reference_call, mode)
            row["ops"] = observed_ops(found, mode)
            for name, (call, context) in found.items():
                row[name] = time_layer_mode(call, mode, upstream, device, sizes, context)
            row.update(check_failure=failure, ratio=ratio(row["ours"], row["reference"]))
            if mode == "forward":
                row["ratio_to_fast_path"] = ratio(row["ours"], row["reference_fast_path"])
            rows.append(row)
    return rows
