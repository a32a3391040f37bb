"""Lesson 23's teaching versions (the IDX header read with struct, patches as a loop and as a reshape, the ViT step by
step, 2D rotary as a loop, and the ViT's features with registers dropped, written out in the lesson) equal the
package's: attn.data.fashion.read_idx, attn.vision and attn.models.vit."""

import struct

import numpy as np
import pytest
import torch

from attn.data.fashion import read_idx
from attn.models.vit import VisionTransformer
from attn.vision import apply_rotary_2d, grid_positions, patches, rotary_2d_frequencies
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson23():
    return teaching_namespace(ROOT / "lessons" / "23_attention_beyond_text.ipynb")


def test_the_idx_header_is_the_package_s_reading(lesson23):
    values = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    data = struct.pack(">HBB3I", 0, 0x08, 3, 2, 3, 5) + values.tobytes()
    kind, shape, start = lesson23["idx_header"](data)
    assert (kind, shape, start) == (0x08, (2, 3, 5), 16)
    np.testing.assert_array_equal(np.frombuffer(data[start:], dtype=np.uint8).reshape(shape), read_idx(data))


@pytest.mark.parametrize(("channels", "height", "width", "p"), [(1, 28, 28, 7), (3, 8, 12, 4), (2, 6, 6, 1)])
def test_patches_as_a_loop_and_as_a_reshape_are_the_package_s(lesson23, channels, height, width, p):
    images = torch.randn(2, channels, height, width, generator=torch.Generator().manual_seed(p))
    package = patches(images, p)
    assert torch.equal(lesson23["patches_as_tokens"](images, p), package)
    assert torch.equal(lesson23["patches_by_reshape"](images, p), package)


def test_the_vit_step_by_step_is_the_model(lesson23):
    torch.manual_seed(0)
    model = VisionTransformer(28, 7, 16, 2, 2, 5).double().eval()
    images = torch.rand(3, 1, 28, 28, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(lesson23["vit_forward"](model, images), model(images), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("head_dim", "base"), [(8, 100.0), (16, 10_000.0)])
def test_rotary_2d_as_a_loop_is_the_package_s(lesson23, head_dim, base):
    rows, cols = grid_positions(3, 5)
    x = torch.randn(15, head_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(head_dim))
    package = apply_rotary_2d(x, rows, cols, rotary_2d_frequencies(head_dim, base))
    torch.testing.assert_close(lesson23["rotary_2d_loop"](x, rows, cols, base), package, rtol=0, atol=1e-12)


@pytest.mark.parametrize("registers", [0, 3])
def test_the_features_with_registers_dropped_are_the_model_s(lesson23, registers):
    torch.manual_seed(1)
    model = VisionTransformer(14, 7, 16, 2, 2, 0, registers=registers).double().eval()
    images = torch.rand(2, 1, 14, 14, dtype=torch.float64)
    with torch.no_grad():
        ours = lesson23["vit_features"](model, images)
        assert ours.shape == (2, 1 + 4, 16)
        torch.testing.assert_close(ours, model.features(images), rtol=0, atol=1e-12)
