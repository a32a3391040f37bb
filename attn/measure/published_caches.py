"""KV-cache bytes of published models, all-global against windowed (lesson 14).

Each configuration lists what its paper, model card or released configuration gives: layers,
key/value heads, head size and each layer's window (None for a global layer). A global layer
caches every position; a windowed layer at most ``window`` of them. Keys and values are counted
at 2 bytes each (bfloat16, how all three models are released).
"""

import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedAttention:
    """The attention shapes of one published model; ``windows``: one entry per layer, None = global."""

    name: str
    kv_heads: int
    head_dim: int
    windows: tuple
    source: str  # key in book/references.bib
    bytes_per_element: int = 2

    def __post_init__(self):
        for name in ("kv_heads", "head_dim", "bytes_per_element"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a whole number of 1 or more, got {value!r}")
        windows = self.windows
        if not isinstance(windows, tuple) or not windows or not all(
            w is None or (isinstance(w, numbers.Integral) and not isinstance(w, bool) and w >= 1) for w in windows
        ):
            raise ValueError(f"windows must be a non-empty tuple of window sizes (1 or more) or None (global), "
                             f"got {windows!r:.80}")

    @property
    def layers(self):
        return len(self.windows)

    def bytes_per_position(self):
        """Cache bytes one position costs in one layer: keys and values, 2 * H_kv * d * bytes."""
        return 2 * self.kv_heads * self.head_dim * self.bytes_per_element

    def cache_bytes(self, length, windowed=True):
        """Bytes of the whole model's cache for one sequence of ``length`` positions; windowed=False
        counts every layer as global (what the cache would be without the windows)."""
        if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 0:
            raise ValueError(f"length must be a whole number of positions, 0 or more, got {length!r}")
        kept = (length if window is None or not windowed else min(length, window) for window in self.windows)
        return self.bytes_per_position() * sum(kept)


def _alternating(layers, window, every):
    """Gemma 3's pattern: every ``every``-th layer global, the others local (layer 0 local)."""
    return tuple(None if (index + 1) % every == 0 else window for index in range(layers))


PUBLISHED = (
    # Mistral 7B: 32 layers, 8 key/value heads of 128, every layer a 4096-token window (Jiang et al. 2023, table 1).
    PublishedAttention("Mistral 7B", 8, 128, (4096,) * 32, "jiang2023mistral"),
    # Gemma 3 27B: 62 layers, 16 key/value heads of 128, five local layers (1024 tokens) per global one
    # (Gemma Team 2025; layer counts and heads from the released configuration).
    PublishedAttention("Gemma 3 27B", 16, 128, _alternating(62, 1024, 6), "gemmateam2025gemma3"),
    # gpt-oss-120b: 36 layers alternating a 128-token band and full attention, 8 key/value heads of 64
    # (OpenAI 2025, model card).
    PublishedAttention("gpt-oss-120b", 8, 64, _alternating(36, 128, 2), "openai2025gptoss"),
)


def cache_table(lengths=(4096, 32768, 131072)):
    """Rows (name, length, global bytes, windowed bytes) for every published model and length."""
    if not isinstance(lengths, list | tuple):
        raise TypeError(f"lengths must be a list or tuple of whole numbers of positions, got {type(lengths).__name__}")
    return [(model.name, length, model.cache_bytes(length, windowed=False), model.cache_bytes(length))
            for model in PUBLISHED for length in lengths]
