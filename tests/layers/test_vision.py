"""Lesson 23's layers: patches as tokens and 2D rotary positions, each loop equal to its vectorised form, the patches
equal to a convolution's patch embedding, 2D rotary equal to DINOv3's; hostile input gets a sentence."""

import math

import pytest
import torch

from attn import vision

torch.manual_seed(23)


def test_patches_equal_their_loop_and_are_read_row_major():
    images = torch.randn(2, 3, 8, 12)
    tokens = vision.patches(images, 4)
    assert tokens.shape == (2, 6, 48)
    assert torch.equal(tokens, vision.patches_loop(images, 4))
    picture = torch.arange(16.0).reshape(1, 1, 4, 4)  # pixel values are their row-major index
    assert vision.patches(picture, 2)[0].tolist() == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]


def test_each_patch_is_read_channel_then_row_then_column():
    picture = torch.stack([torch.zeros(2, 2), torch.ones(2, 2)])[None]  # (1, 2, 2, 2): channel 0 zeros, channel 1 ones
    picture[0, 0, 0, 1] = 5.0
    assert vision.patches(picture, 2)[0, 0].tolist() == [0, 5, 0, 0, 1, 1, 1, 1]


def test_a_linear_layer_on_patches_is_a_convolutions_patch_embedding():
    images = torch.randn(2, 3, 12, 8, dtype=torch.float64)
    conv = torch.nn.Conv2d(3, 10, kernel_size=4, stride=4).double()
    reference = conv(images).flatten(2).transpose(1, 2)  # (B, N, E), as ViT, DINOv2 and DINOv3 read it
    ours = vision.patches(images, 4) @ conv.weight.reshape(10, -1).T + conv.bias
    difference = (ours - reference).abs().max().item()
    assert difference < 1e-12, difference


def test_the_grid_is_read_row_major():
    rows, cols = vision.grid_positions(2, 3)
    assert rows.tolist() == [0, 0, 0, 1, 1, 1] and cols.tolist() == [0, 1, 2, 0, 1, 2]


@pytest.mark.parametrize("images, message", [
    (torch.rand(28, 28), r"one picture of shape \(28, 28\).*images\[None, None\]"),
    (torch.rand(5, 28, 28), r"images\[:, None\]"),
    (torch.rand(1, 1, 28, 30), "does not divide the image of 28 x 30"),
    (torch.rand(1, 1, 0, 28), "no empty axis"),
    (torch.full((1, 1, 28, 28), math.nan), "NaN"),
    (torch.zeros(1, 1, 28, 28, dtype=torch.uint8), r"convert them with images.float\(\), .*only for bytes"),
    (torch.rand(2, 28, 28, 1), r"channels-last \(B, H, W, C\): .*images.permute\(0, 3, 1, 2\)"),
    (torch.rand(2, 28, 28, 3), r"images.permute\(0, 3, 1, 2\)"),
])
def test_hostile_pictures_get_a_sentence(images, message):
    with pytest.raises((ValueError, TypeError), match=message):
        vision.patches(images, 4)
    with pytest.raises((ValueError, TypeError), match=message):
        vision.patches_loop(images, 4)


def test_rotary_2d_equals_its_loop():
    x = torch.randn(2, 3, 6, 16, dtype=torch.float64)
    rows, cols = vision.grid_positions(2, 3)
    frequencies = vision.rotary_2d_frequencies(16)
    fast, slow = vision.apply_rotary_2d(x, rows, cols, frequencies), vision.apply_rotary_2d_loop(x, rows, cols, frequencies)
    assert (fast - slow).abs().max().item() < 1e-14


def test_half_the_pairs_turn_with_the_row_and_half_with_the_column():
    x = torch.randn(1, 16, dtype=torch.float64)
    frequencies = vision.rotary_2d_frequencies(16)
    row_only = vision.apply_rotary_2d(x, torch.tensor([3]), torch.tensor([0]), frequencies)
    col_only = vision.apply_rotary_2d(x, torch.tensor([0]), torch.tensor([3]), frequencies)
    assert torch.equal(row_only[:, 8:], x[:, 8:]) and not torch.allclose(row_only[:, :8], x[:, :8])  # pairs 0-3: row
    assert torch.equal(col_only[:, :8], x[:, :8]) and not torch.allclose(col_only[:, 8:], x[:, 8:])  # pairs 4-7: column


def test_a_score_depends_only_on_the_offset_between_two_patches():
    q, k = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)
    frequencies = vision.rotary_2d_frequencies(16)

    def score(query_at, key_at, shift=(0, 0)):
        turned_q = vision.apply_rotary_2d(q, torch.tensor([query_at[0] + shift[0]]), torch.tensor([query_at[1] + shift[1]]),
                                          frequencies)
        turned_k = vision.apply_rotary_2d(k, torch.tensor([key_at[0] + shift[0]]), torch.tensor([key_at[1] + shift[1]]),
                                          frequencies)
        return (turned_q * turned_k).sum().item()

    assert score((1, 2), (4, 0)) == pytest.approx(score((1, 2), (4, 0), shift=(5, 9)), abs=1e-12)
    assert score((1, 2), (4, 0)) != pytest.approx(score((1, 2), (0, 4)), abs=1e-6)  # the axes are told apart


def test_axial_rotary_is_mixed_rotary_with_one_axis_zero_per_pair():
    x = torch.randn(2, 2, 6, 16, dtype=torch.float64)
    rows, cols = vision.grid_positions(3, 2)
    frequencies, zeros = vision.rotary_2d_frequencies(16), torch.zeros(4, dtype=torch.float64)
    mixed = vision.apply_rotary_mixed(x, rows, cols, torch.cat([frequencies, zeros]), torch.cat([zeros, frequencies]))
    assert (mixed - vision.apply_rotary_2d(x, rows, cols, frequencies)).abs().max().item() < 1e-14
    per_head = torch.rand(2, 8, dtype=torch.float64)
    turned = vision.apply_rotary_mixed(x, rows, cols, per_head, per_head.flip(0))
    assert turned.shape == x.shape and torch.allclose(turned.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths


def test_the_frequencies_equal_dinov3s():
    from transformers import DINOv3ViTConfig
    from transformers.models.dinov3_vit.modeling_dinov3_vit import DINOv3ViTRopePositionEmbedding

    config = DINOv3ViTConfig(hidden_size=64, num_attention_heads=2, image_size=16, patch_size=4)
    theirs = DINOv3ViTRopePositionEmbedding(config)
    ours = vision.rotary_2d_frequencies(32, config.rope_theta)
    assert (ours.float() - theirs.inv_freq).abs().max().item() < 1e-7


def test_dinov3s_coordinates_and_angles_equal_its_rope_embedding():
    from transformers import DINOv3ViTConfig
    from transformers.models.dinov3_vit.modeling_dinov3_vit import DINOv3ViTRopePositionEmbedding

    config = DINOv3ViTConfig(hidden_size=64, num_attention_heads=2, image_size=16, patch_size=4)
    cos, sin = DINOv3ViTRopePositionEmbedding(config).eval()(torch.zeros(1, 3, 12, 20))  # (N, d) in rotate_half layout
    rows, cols = vision.dinov3_coordinates(3, 5)
    frequencies = vision.rotary_2d_frequencies(32, config.rope_theta).float()
    angles = torch.cat([rows.float()[:, None] * frequencies, cols.float()[:, None] * frequencies], dim=-1)  # (N, d/2)
    assert (angles.cos() - cos[:, :16]).abs().max().item() < 1e-6
    assert (angles.sin() - sin[:, 16:]).abs().max().item() < 1e-6


X, T4 = torch.randn(4, 16), torch.arange(4)


@pytest.mark.parametrize("call, message", [
    (lambda: vision.rotary_2d_frequencies(18), "multiple of 4"),
    (lambda: vision.rotary_2d_frequencies(16, 1.0), "must not be 1"),
    (lambda: vision.apply_rotary_2d(X, torch.arange(3), T4, torch.ones(4)), r"rows must have shape"),
    (lambda: vision.apply_rotary_2d(X, T4, torch.full((4,), math.nan), torch.ones(4)), "cols contains"),
    (lambda: vision.apply_rotary_2d(torch.randn(4, 14), torch.arange(4), torch.arange(4), torch.ones(3)), "multiple of 4"),
    (lambda: vision.apply_rotary_2d(torch.randn(4, 16), torch.arange(4), torch.arange(4), torch.ones(8)), r"\(4,\)"),
    (lambda: vision.apply_rotary_mixed(torch.randn(4, 16), torch.arange(4), torch.arange(4), torch.ones(8), torch.ones(4)),
     "col_frequencies must have shape"),
    (lambda: vision.grid_positions(0, 3), "grid_height must be positive"),
])
def test_hostile_rotary_arguments_get_a_sentence(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_attention_distance_equals_its_loop_and_measures_patches():
    weights = torch.softmax(torch.randn(2, 3, 17, 17, dtype=torch.float64), dim=-1)  # class token + a 4 x 4 grid
    fast, slow = vision.attention_distance(weights, 4, 4), vision.attention_distance_loop(weights, 4, 4)
    assert fast.shape == (2, 3) and (fast - slow).abs().max().item() < 1e-12
    itself = torch.eye(17, dtype=torch.float64)
    assert vision.attention_distance(itself, 4, 4).item() == 0.0
    right = torch.zeros(1 + 6, 1 + 6, dtype=torch.float64)  # a 1 x 6 grid: each patch reads the one to its right
    for q in range(6):
        right[1 + q, 1 + (q + 1 if q < 5 else 4)] = 1.0
    assert vision.attention_distance(right, 1, 6).item() == pytest.approx(1.0)
    even = torch.full((50, 50), 1 / 50, dtype=torch.float64)  # a 7 x 7 grid read evenly
    rows, cols = vision.grid_positions(7, 7)
    pairs = [math.hypot(r1 - r2, c1 - c2) for r1, c1 in zip(rows.tolist(), cols.tolist(), strict=True)
             for r2, c2 in zip(rows.tolist(), cols.tolist(), strict=True)]
    assert vision.attention_distance(even, 7, 7).item() == pytest.approx(sum(pairs) / len(pairs))


def test_attention_rollout_keeps_rows_summing_to_one_and_mixes_layers_in_order():
    weights = torch.softmax(torch.randn(3, 2, 4, 5, 5, dtype=torch.float64), dim=-1)
    rollout = vision.attention_rollout(weights)
    assert rollout.shape == (2, 5, 5) and torch.allclose(rollout.sum(-1), torch.ones(2, 5, dtype=torch.float64))
    eye = torch.eye(5, dtype=torch.float64)
    first, second = (0.5 * weights[i].mean(1) + 0.5 * eye for i in (0, 1))
    expected = second @ first  # the second layer reads what the first produced
    assert torch.allclose(vision.attention_rollout(weights[:2]), expected)


@pytest.mark.parametrize("call, message", [
    (lambda: vision.attention_distance(torch.ones(5, 5), 2, 3), r"T = 1 \+ 2 x 3 = 7"),
    (lambda: vision.attention_distance(torch.full((5, 5), math.nan), 2, 2), "NaN"),
    (lambda: vision.attention_distance(torch.ones(5, 5), 2, 2, prefix=-1), "prefix must be"),
    (lambda: vision.attention_rollout(torch.ones(2, 5, 5)), r"\(num_layers, B, H, T, T\)"),
])
def test_hostile_attention_maps_get_a_sentence(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
