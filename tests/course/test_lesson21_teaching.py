"""Lesson 21's teaching versions (one group quantized as a loop, every group at once, the bytes of a KIVI cache,
H2O's score and the choice of what stays, written out in the lesson) equal attn.compressed_cache's."""

import pytest
import torch

from attn.compressed_cache import QuantizedKVCache, eviction_scores, keep_indices, quantize
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson21():
    return teaching_namespace(ROOT / "lessons" / "21_compressed_caches.ipynb")


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_one_group_and_every_group_give_the_package_s_codes(lesson21, bits):
    x = torch.randn(3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(bits))
    x[1, 8:] = 0.5  # a group of equal numbers: scale 0, codes 0
    package = quantize(x, bits, 8)
    codes, scales, zeros = lesson21["quantize_groups"](x, bits, 8)
    assert torch.equal(codes.long(), package.codes) and torch.equal(scales, package.scales)
    assert torch.equal(zeros, package.zero_points)
    for row in range(3):
        for group in range(2):
            numbers = x[row, group * 8:(group + 1) * 8].tolist()
            loop_codes, scale, zero = lesson21["quantize_group"](numbers, bits)
            assert loop_codes == package.codes[row, group * 8:(group + 1) * 8].tolist()
            assert scale == pytest.approx(float(package.scales[row, group]), rel=1e-12, abs=1e-15)
            assert zero == float(package.zero_points[row, group])


@pytest.mark.parametrize(("bits", "positions"), [(16, 32), (8, 50), (4, 64), (2, 95), (2, 7)])
def test_the_bytes_counted_are_the_cache_s_nbytes(lesson21, bits, positions):
    cache = QuantizedKVCache(bits, 16, 32, scale_dtype=torch.float16)
    generator = torch.Generator().manual_seed(positions)
    cache.append(torch.randn(1, 2, positions, 32, generator=generator), torch.randn(1, 2, positions, 32, generator=generator))
    assert lesson21["kivi_bytes"](positions, 2, 32, bits, 16, 32, 2) == cache.nbytes


def test_h2o_s_loop_and_the_choice_of_what_stays_equal_the_package(lesson21):
    generator = torch.Generator().manual_seed(0)
    weights = torch.softmax(torch.randn(6, 5, 20, generator=generator, dtype=torch.float64), dim=-1)  # (H, R, S)
    keys = torch.randn(1, 2, 20, 4, dtype=torch.float64, generator=generator)
    positions = torch.arange(20).expand(1, 2, 20)
    package = eviction_scores("h2o", weights[None], keys, positions)[0]
    torch.testing.assert_close(lesson21["h2o_scores"](weights, 2), package, rtol=0, atol=1e-12)
    scores = torch.randint(0, 4, (2, 20), generator=generator).double()  # ties: the earlier entry stays
    for budget, sinks, window in ((8, 2, 3), (5, 0, 0), (20, 1, 1), (4, 4, 0)):
        kept = keep_indices(scores[None], positions, budget, sinks, window, 20)[0]
        for head in range(2):
            assert lesson21["keep"](scores[head], budget, sinks, window, 20) == kept[head].tolist()
