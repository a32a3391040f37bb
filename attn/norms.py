"""RMSNorm (lesson 15, and every block of lesson 16's Llama model): LayerNorm without the mean.

RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight over the last axis (Zhang and Sennrich 2019). Lesson 9's
LayerNorm subtracts the mean and adds a bias as well; RMSNorm keeps only the rescaling, which is what
made LayerNorm help, and costs one reduction instead of two.
"""

import math

import torch
from torch import nn

from attn.common.layer_checks import check_features, check_parameters
from attn.common.validate import non_negative_number, positive_int, require_finite


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
        """x (..., dim) -> (..., dim).

        Any finite x gives a finite, right result: where a row's mean square is not a finite number above 0 (|x|
        of 1e30 squares to inf in float32, a row of zeros with eps=0 gives 0 / 0), that row is computed again,
        scaled by its largest |x| (a zero row gives zeros). The door check looks at the (..., 1) mean squares only.
        """
        check_features("x", x, self.weight)
        normed, every_row_plain = self._normalize(x)
        if not every_row_plain:  # the door check: (..., 1) numbers, not every entry
            require_finite("x", x, "RMSNorm would spread it to the whole row")
        return normed

    def _normalize(self, x, guard=True):
        """forward's arithmetic without its checks: (the normalised x (..., dim), whether every row's mean square was a
        finite number above 0). With ``guard``, a row that was not is computed again, scaled. A model that checks its
        input at its door and its output once (lesson 19's LlamaLM) calls it with guard=False: nothing in its layers
        reads the numbers, and a row too large to square is still too large when the model's one check reads it."""
        compute = torch.promote_types(x.dtype, torch.float32)  # float32 at least, float64 kept
        wide = x.to(compute)
        mean_square = wide.pow(2).mean(-1, keepdim=True)  # (..., 1)
        normed = wide * torch.rsqrt(mean_square + self.eps)  # (..., dim)
        if not guard:
            return self.weight * normed.to(x.dtype), True
        plain = torch.isfinite(mean_square) & (mean_square.gt(0) if self.eps == 0 else True)  # (..., 1)
        every_row_plain = not x.numel() or bool(plain.all())
        if not every_row_plain:
            normed = torch.where(plain, normed, _scaled_rms_norm(wide, self.eps))  # only the rows that need it
        return self.weight * normed.to(x.dtype), every_row_plain

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


def _scaled_rms_norm(x, eps):
    """x / sqrt(mean(x^2) + eps) computed as y / sqrt(mean(y^2) + eps / m^2), y = x / m, m = max |x| of the row:
    no square overflows or underflows to 0 for a finite x; a row of zeros gives zeros, even with eps = 0."""
    largest = x.abs().amax(-1, keepdim=True)  # (..., 1)
    largest = torch.where(largest > 0, largest, torch.ones_like(largest))
    scaled = x / largest  # (..., dim): every |entry| at most 1
    denominator = scaled.pow(2).mean(-1, keepdim=True) + (math.sqrt(eps) / largest) ** 2  # eps / m^2, m never squared
    return scaled * torch.where(denominator > 0, torch.rsqrt(denominator), torch.zeros_like(denominator))
