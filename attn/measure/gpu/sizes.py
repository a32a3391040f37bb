"""The sizes of the GPU suite: the real run's (``GPU``) and the dry run's on the CPU (``DRY``).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Every size the suite uses: the GPU run's (``GPU``) or the dry run's (``DRY``)."""

    dtype: str
    batch: int
    heads: int
    head_dims: tuple
    lengths: tuple
    matmul_size: int
    copy_mib: int
    layer: dict
    decode: dict
    warmup: int
    repeats: int
    case_budget_s: float
    test_timeout_s: int


GPU = Sizes(
    dtype="bfloat16", batch=4, heads=16, head_dims=(64, 128), lengths=(512, 1024, 2048, 4096, 8192, 16384, 32768),
    matmul_size=8192, copy_mib=2048,
    layer={"batch": 4, "length": 4096, "embed_dim": 1024, "heads": 16},
    decode={"batch": 4, "embed_dim": 1024, "heads": 16, "cache_lengths": (1024, 2048, 4096, 8192, 16384, 32768), "steps": 16},
    warmup=3, repeats=10, case_budget_s=2.0, test_timeout_s=240,
)


DRY = Sizes(
    dtype="float32", batch=1, heads=2, head_dims=(16, 32), lengths=(32, 64),
    matmul_size=128, copy_mib=4,
    layer={"batch": 1, "length": 32, "embed_dim": 32, "heads": 4},
    decode={"batch": 1, "embed_dim": 32, "heads": 4, "cache_lengths": (32, 64), "steps": 4},
    warmup=1, repeats=2, case_budget_s=1.0, test_timeout_s=300,
)
