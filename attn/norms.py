"""RMSNorm (lesson 15, and every block of lesson 16's Llama model): LayerNorm without the mean.

RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight over the last axis (Zhang and Sennrich 2019). Lesson 9's
LayerNorm subtracts the mean and adds a bias as well; RMSNorm keeps only the rescaling, which is what
made LayerNorm help, and costs one reduction instead of two.
"""

import torch
from torch import nn

from attn.common.layer_checks import check_features, check_parameters
from attn.common.validate import non_negative_number, positive_int


class RMSNorm(nn.Module):
    """RMSNorm(dim, eps=1e-6): x (..., dim) -> x / sqrt(mean(x^2) + eps) * weight, the same shape and dtype.

    ``weight`` (dim,) starts at ones. The normalisation is computed in float32 at least, as transformers'
    LlamaRMSNorm does: a float16 or bfloat16 input is normalised in float32, turned back to its own dtype,
    and only then scaled by the weight; float32 and float64 inputs are computed in their own dtype (so a
    float64 check stays at float64's rounding). eps: a number >= 0 (1e-6 here, 1e-5 in SmolLM2).
    """

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        dim = positive_int("dim", dim)
        check_parameters(f"RMSNorm(dim={dim})", dim)
        self.eps = non_negative_number("eps", eps)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        """x (..., dim) -> (..., dim)."""
        check_features("x", x, self.weight)
        compute = torch.promote_types(x.dtype, torch.float32)  # float32 at least, float64 kept
        wide = x.to(compute)
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., dim)
        return self.weight * normed.to(x.dtype)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"
