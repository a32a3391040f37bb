"""Lesson 23's Vision Transformer: equal to transformers' ViT, DINOv2 with registers and DINOv3 (each built offline from
a tiny random configuration, in float64, weights copied), its class token, registers and positions as the lesson
says, and hostile pictures refused with a sentence."""

import math
import os

import pytest
import torch

from attn.models.vit import VisionTransformer

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded: every reference is built from a config

IMAGES = torch.randn(2, 3, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(23))


def randomized(model):
    """``model`` in float64 and eval mode, every weight drawn afresh (layer scales and norms far from 1, so that a
    weight copied to the wrong place, or a layer scale not folded, shows)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            fresh = torch.rand(parameter.shape, generator=generator) + 0.5 if "norm" in name or "lambda" in name else (
                torch.randn(parameter.shape, generator=generator) * 0.3)
            parameter.copy_(fresh)
    return model.double().eval()


def largest_difference(a, b):
    return (a - b).abs().max().item()


def test_vit_for_image_classification_equals_transformers():
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=12, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, num_labels=5)
    theirs = randomized(ViTForImageClassification(config))
    ours = VisionTransformer.from_transformers(theirs)
    difference = largest_difference(ours(IMAGES), theirs(pixel_values=IMAGES).logits)
    assert difference < 1e-12, difference
    assert ours.position_embedding.shape == (1, 9, 16)  # one per patch: the class token's is folded into the token


def test_vit_model_equals_transformers_also_at_a_larger_grid():
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(image_size=12, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64)
    theirs = randomized(ViTModel(config))
    ours = VisionTransformer.from_transformers(theirs)
    difference = largest_difference(ours.features(IMAGES), theirs(pixel_values=IMAGES).last_hidden_state)
    assert difference < 1e-12, difference
    larger = torch.randn(1, 3, 20, 20, dtype=torch.float64)  # a 5 x 5 grid: learned positions resized (bicubic)
    reference = theirs(pixel_values=larger, interpolate_pos_encoding=True).last_hidden_state
    difference = largest_difference(ours.features(larger), reference)
    assert difference < 1e-12, difference


def test_dinov2_with_registers_equals_transformers_with_the_registers_dropped():
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    config = Dinov2WithRegistersConfig(image_size=12, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, mlp_ratio=4, num_register_tokens=3)
    theirs = randomized(Dinov2WithRegistersModel(config))
    ours = VisionTransformer.from_transformers(theirs)
    reference = theirs(pixel_values=IMAGES).last_hidden_state  # (B, 1 + 3 + 9, E): class token, registers, patches
    difference = largest_difference(ours.features(IMAGES), torch.cat([reference[:, :1], reference[:, 4:]], dim=1))
    assert difference < 1e-12, difference
    stream = ours.residual_stream(IMAGES)
    assert stream.shape == (3, 2, 13, 16)  # the registers are in the residual stream, and only dropped at the output


def test_dinov3_equals_transformers_at_its_grid_and_a_larger_one():
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    config = DINOv3ViTConfig(image_size=12, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64, num_register_tokens=2)
    theirs = randomized(DINOv3ViTModel(config))
    ours = VisionTransformer.from_transformers(theirs)
    for images in (IMAGES, torch.randn(1, 3, 20, 16, dtype=torch.float64)):
        reference = theirs(pixel_values=images).last_hidden_state
        difference = largest_difference(ours.features(images), torch.cat([reference[:, :1], reference[:, 3:]], dim=1))
        # DINOv3 computes its rotary cos and sin in float32 whatever the model's dtype; the course in float64
        assert difference < 1e-6, difference


def test_a_model_the_course_cannot_express_is_refused():
    from transformers import DINOv3ViTConfig, DINOv3ViTModel, ViTConfig, ViTModel

    with pytest.raises(ValueError, match="use_gated_mlp"):
        VisionTransformer.from_transformers(DINOv3ViTModel(DINOv3ViTConfig(hidden_size=32, num_attention_heads=2,
                                                                           num_hidden_layers=1, use_gated_mlp=True)))
    with pytest.raises(ValueError, match="hidden_act"):
        VisionTransformer.from_transformers(ViTModel(ViTConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                                               intermediate_size=64, hidden_act="relu")))
    with pytest.raises(TypeError, match="model must be one of"):
        VisionTransformer.from_transformers(torch.nn.Linear(2, 2))


def small(**changes):
    settings = dict(image_size=8, patch_size=4, embed_dim=16, num_heads=2, num_layers=2, num_classes=3)
    torch.manual_seed(0)
    return VisionTransformer(**{**settings, **changes}).double()


PICTURES = torch.rand(4, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("positions", ["learned", "rotary_2d"])
def test_the_weights_cover_every_token_and_the_fused_path_agrees(positions):
    model = small(positions=positions, registers=2).eval()
    logits, weights = model(PICTURES, need_weights=True)
    assert weights.shape == (2, 4, 2, 7, 7)  # (layers, B, H, T, T): T = class token + 2 registers + 4 patches
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 2, 7, dtype=torch.float64))
    assert largest_difference(logits, model(PICTURES)) < 1e-12


def test_registers_change_the_answer_but_not_the_outputs_shape():
    model = small(registers=2).eval()
    before = model(PICTURES)
    assert model.features(PICTURES).shape == (4, 5, 16)  # the class token and 4 patches: registers dropped
    with torch.no_grad():
        model.register_tokens.add_(torch.randn(1, 2, 16, dtype=torch.float64))
    assert largest_difference(model(PICTURES), before) > 1e-6  # they take part in attention


def test_rotary_positions_turn_patches_only_and_read_a_larger_grid():
    model = small(positions="rotary_2d").eval()
    assert model.position_embedding is None and model.frequencies.shape == (2,)
    assert model(torch.rand(2, 1, 16, 12, dtype=torch.float64)).shape == (2, 3)  # a 4 x 3 grid, no table to resize


def test_a_few_steps_of_training_lower_the_loss():
    model = small(positions="rotary_2d", registers=1)
    labels = torch.tensor([0, 1, 2, 1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(25):
        loss = torch.nn.functional.cross_entropy(model(PICTURES), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], losses  # four pictures memorised


@pytest.mark.parametrize("images, message", [
    (torch.rand(8, 8, dtype=torch.float64), r"images\[None, None\]"),
    (torch.rand(2, 1, 8, 10, dtype=torch.float64), "does not divide the image of 8 x 10"),
    (torch.full((1, 1, 8, 8), math.nan, dtype=torch.float64), "NaN"),
    (torch.rand(1, 3, 8, 8, dtype=torch.float64), "3 channels but the model reads 1"),
    (torch.rand(1, 1, 8, 8), "float32 but the layer's weights are torch.float64"),
])
def test_hostile_pictures_get_a_sentence_and_change_nothing(images, message):
    model = small()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises((ValueError, TypeError), match=message):
        model(images)
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


@pytest.mark.parametrize("changes, message", [
    ({"image_size": 10}, "does not divide an image of 10 x 10"),
    ({"positions": "sinusoidal"}, "positions must be one of"),
    ({"positions": "rotary_2d", "embed_dim": 12}, "multiple of 4"),
    ({"num_heads": 3}, "cannot be split into 3 equal heads"),
    ({"registers": -1}, "registers must be at least 0"),
    ({"num_layers": 10**8}, "num_layers must be at most"),
])
def test_hostile_sizes_get_a_sentence(changes, message):
    with pytest.raises((ValueError, TypeError), match=message):
        small(**changes)
