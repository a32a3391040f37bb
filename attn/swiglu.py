"""SwiGLU, the MLP of Llama and most recent decoders (lesson 16), beside lesson 9's GELU MLP.

Lesson 9's MLP is down(gelu(up(x))): one matrix up to F features, a nonlinearity, one matrix down.
SwiGLU (Shazeer 2020) reads x twice on the way up: a gate, passed through SiLU (x * sigmoid(x), also
called Swish), multiplies an ungated copy feature by feature, and the product goes down:

    SwiGLU(x) = down(silu(gate(x)) * up(x))

Three matrices instead of two, so models shrink F to about 8/3 E (rather than 4 E) to keep the
parameter count; SmolLM2-135M has E = 576 and F = 1536. No biases, as in Llama.
"""

from torch import nn
from torch.nn import functional

from attn.common.layer_checks import check_features, check_parameters, largest_magnitude
from attn.common.validate import has_only_finite, positive_int, require_finite


class SwiGLU(nn.Module):
    """SwiGLU(embed_dim E, hidden_dim F): x (..., E) -> down_proj(silu(gate_proj(x)) * up_proj(x)) (..., E).

    gate_proj and up_proj are nn.Linear(E, F, bias=False), down_proj nn.Linear(F, E, bias=False): the names
    and shapes of transformers' LlamaMLP, whose weights load into this layer as they are.
    """

    def __init__(self, embed_dim, hidden_dim):
        super().__init__()
        embed_dim, hidden_dim = positive_int("embed_dim", embed_dim), positive_int("hidden_dim", hidden_dim)
        check_parameters(f"SwiGLU(embed_dim={embed_dim}, hidden_dim={hidden_dim})", 3 * embed_dim * hidden_dim)
        self.gate_proj = nn.Linear(embed_dim, hidden_dim, bias=False)  # (F, E)
        self.up_proj = nn.Linear(embed_dim, hidden_dim, bias=False)  # (F, E)
        self.down_proj = nn.Linear(hidden_dim, embed_dim, bias=False)  # (E, F)

    def forward(self, x):
        """x (..., E) -> (..., E)."""
        check_features("x", x, self.gate_proj.weight)
        output = self._mlp(x)  # (..., E)
        if not has_only_finite(output):  # the door check, once, on the output: NaN in, or an overflow on the way
            require_finite("x", x, "the MLP would spread it")
            raise ValueError(f"x is finite, but SwiGLU overflowed {x.dtype} on it (the largest |x| is "
                             f"{largest_magnitude(x):.3g}, and the gate multiplies two projections of it); scale x "
                             "down, or use float64")
        return output

    def _mlp(self, x):
        """forward's arithmetic without its checks, for a model that checked its input at its door and checks its
        output once (lesson 19's LlamaLM). x (..., E) -> (..., E)."""
        gated = functional.silu(self.gate_proj(x)) * self.up_proj(x)  # (..., F)
        return self.down_proj(gated)  # (..., E)
