"""The whole layer: the course's MultiHeadAttention against nn.MultiheadAttention, forward and forward+backward.
"""


import torch
from torch import nn

from attn.measure.gpu.cases import attempt, measure, random_tensor, relative_error, seeded
from attn.multihead import MultiHeadAttention


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


def time_layer_mode(call, mode, upstream, device, sizes):
    """Median time of one layer call: forward only (eval, inference mode) or forward and backward (train)."""
    if mode == "forward":
        with torch.inference_mode():
            return measure(lambda _: call(), device, sizes)
    return measure(lambda _: call().backward(upstream), device, sizes)


def layer_comparison(device, sizes):
    """The course's layer against nn.MultiheadAttention: ratios of median times, forward and forward+backward."""
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
            with torch.inference_mode():
                checked, failure = attempt(lambda ours_call=ours_call, reference_call=reference_call:
                                           relative_error(ours_call(), reference_call()), device)
            row["relative_error"] = checked
            ours_time = time_layer_mode(ours_call, mode, upstream, device, sizes)
            reference_time = time_layer_mode(reference_call, mode, upstream, device, sizes)
            row.update(ours=ours_time, reference=reference_time, check_failure=failure)
            both = ours_time["status"] == reference_time["status"] == "ok"
            row["ratio"] = ours_time["seconds"] / reference_time["seconds"] if both else None
            rows.append(row)
    return rows
