"""How much arithmetic the attention core does: the count that turns a measured time into TFLOP/s (lessons 6 and 12)."""

from attn.common.validate import positive_int


def attention_flops(batch, heads, length, head_dim, causal=False):
    """Floating-point operations of attention over (B, H, T, d) queries, keys and values.

    Q K^T and A V each take 2 B H T^2 d (a multiply and an add per term): 4 B H T^2 d in all.
    ``causal=True`` counts half, 2 B H T^2 d: about half the query-key pairs are masked (exactly
    T (T + 1) / 2 are kept) and fused kernels skip the masked blocks.
    """
    sizes = {"batch": batch, "heads": heads, "length": length, "head_dim": head_dim}
    batch, heads, length, head_dim = (positive_int(name, value) for name, value in sizes.items())
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {type(causal).__name__} {causal!r}")
    full = 4 * batch * heads * length**2 * head_dim
    return full // 2 if causal else full
