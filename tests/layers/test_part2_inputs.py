"""Part 2's functions answer each wrong input of issue 21 with one sentence, raised before any arithmetic goes wrong.

(The self-checks are swept in test_exercises_hostile.py, the command lines in test_command_lines.py and test_bench_cli.py.)
"""

import math
import re

import pytest
import torch
from torch import nn

from attn import MultiHeadAttention, TransformerBlock, apply_rotary
from attn.measure.timing import seconds_per_token
from attn.models.decoder import Decoder, generate, sequence_accuracy
from attn.models.induction import AttentionOnlyTransformer, load_trained, make_repeat_data, train, training_batches, weights_path


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_rotary_refuses_nan_and_inf_in_x(value):
    x = torch.randn(2, 5, 8)
    x[1, 3, 2] = value
    with pytest.raises(ValueError, match="^x contains NaN or inf; rotating it would carry it into every score it enters$"):
        apply_rotary(x)


@pytest.mark.parametrize("dtype, base", [(torch.float32, 1e-60), (torch.float32, 1e-45), (torch.float64, 1e-320)])
def test_rotary_refuses_a_base_so_small_that_the_angles_overflow(dtype, base):
    with pytest.raises(ValueError, match=rf"^base={base!r} makes the rotation angles overflow {dtype}.*such as the usual 10000$"):
        apply_rotary(torch.randn(3, 64, dtype=dtype), base=base)


def test_rotary_still_takes_any_base_whose_angles_fit():
    for base in (0.5, 1.0, 2.0, 1e6):
        assert torch.isfinite(apply_rotary(torch.randn(5, 8), base=base)).all()


def test_a_block_names_its_input_and_the_layernorm_that_overflowed():
    block = TransformerBlock(8, 2)
    x = torch.randn(1, 3, 8) * 1e20  # finite, but its squares are not in float32
    with pytest.raises(ValueError, match=r"^the block's input x is finite, but its first LayerNorm \(norm1\) overflowed on it"):
        block(x)
    assert torch.isfinite(block(x.double().div(1e20).float())).all()
    assert torch.isfinite(block.double()(x.double())).all(), "float64 holds it, as the sentence says"


@pytest.mark.parametrize("mlp_ratio", [1e12, 2**40])
def test_a_block_refuses_an_mlp_too_large_to_allocate(mlp_ratio):
    with pytest.raises(ValueError, match=r"^mlp_ratio=.* gives an MLP of .* hidden features, whose two weight matrices"):
        TransformerBlock(8, 2, mlp_ratio=mlp_ratio)


@pytest.mark.parametrize("norm", ["norm1", "norm2"])
def test_from_torch_names_a_layernorm_without_scale_and_shift(norm):
    layer = nn.TransformerEncoderLayer(8, 2, norm_first=True, batch_first=True)
    setattr(layer, norm, nn.LayerNorm(8, elementwise_affine=False))
    expected = rf"^this layer's {norm} has no learned scale and shift \(elementwise_affine=False\)"
    with pytest.raises(ValueError, match=expected) as error:
        TransformerBlock.from_torch(layer)
    assert "bias=True" not in str(error.value)


def test_multihead_attention_on_the_meta_device_is_a_sentence():
    layer = MultiHeadAttention(8, 2).to("meta")
    x = torch.empty(1, 3, 8, device="meta")
    with pytest.raises(ValueError, match="^query is on the meta device, which keeps shapes but no numbers") as error:
        layer(x, x, x)
    assert "item" not in str(error.value)


@pytest.mark.parametrize(
    "embed_dim, error, message",
    [(8.0, TypeError, "embed_dim must be a positive int, got float 8.0"), (-8, ValueError, "embed_dim must be positive, got -8"),
     ("8", TypeError, "embed_dim must be a positive int, got str '8'"), (0, ValueError, "embed_dim must be positive, got 0")],
)
def test_decoder_checks_embed_dim_before_building_its_embeddings(embed_dim, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        Decoder(10, 8, embed_dim=embed_dim, num_heads=2)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_decoder_names_token_dtypes_the_embedding_cannot_read(dtype):
    model = Decoder(10, 8, embed_dim=8, num_heads=2)
    tokens = torch.zeros(1, 3, dtype=dtype)
    with pytest.raises(TypeError, match=rf"^tokens must be int64 \(or int32\).*got {dtype}; convert it with tokens.long\(\)$"):
        model(tokens)
    with pytest.raises(TypeError, match=r"^prompt must be int64"):
        generate(model, tokens, 2)
    assert model(tokens.long()).shape == model(tokens.int()).shape == (1, 3, 10)


@pytest.mark.parametrize("shape", [(0, 3), (2, 0), (0, 0)])
def test_sequence_accuracy_of_nothing_is_refused_not_nan(shape):
    empty = torch.zeros(shape, dtype=torch.long)
    expected = f"generated and expected are empty, shape {tuple(shape)}: there is no sequence to score"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        sequence_accuracy(empty, empty)


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(repeats=0), ValueError, "repeats must be positive, got 0"),
        (dict(repeats=1.5), TypeError, "repeats must be a positive int"),
        (dict(warmup=-1), ValueError, "warmup must be 0 or more, got -1"),
        (dict(use_cache=None), TypeError, "use_cache must be True or False"),
        (dict(seed=2**64), ValueError, r"seed must lie between -2\*\*63 and 2\*\*64 - 1"),
        (dict(seed="0"), TypeError, "seed must be a whole number"),
    ],
)
def test_seconds_per_token_checks_its_arguments(options, error, message):
    model = Decoder(10, 32, embed_dim=8, num_heads=2)
    with pytest.raises(error, match=f"^{message}"):
        seconds_per_token(model, 3, **({"use_cache": True} | options))


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 10**30])
def test_induction_seeds_beyond_what_pytorch_takes_are_a_sentence(seed):
    message = r"^seed must lie between -2\*\*63 and 2\*\*64 - 1 \(what PyTorch's generator takes\)"
    for call in (lambda: make_repeat_data(2, seed=seed), lambda: AttentionOnlyTransformer(seed=seed),
                 lambda: next(training_batches(seed=seed)), lambda: train(AttentionOnlyTransformer(), steps=1, seed=seed)):
        with pytest.raises(ValueError, match=message):
            call()


def test_induction_takes_every_seed_pytorch_takes():
    for seed in (-(2**63), 2**63, 2**64 - 1):
        assert make_repeat_data(1, seed=seed).tokens.shape == (1, 32)


def test_load_trained_names_the_missing_folder_and_how_to_make_it(tmp_path):
    missing = tmp_path / "models"
    expected = (f"there is no folder {missing}, so no induction_2layer.pt in it; "
                f"python -m attn.models.induction --out {missing} trains")
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(expected)}"):
        load_trained(missing, 2)
    missing.mkdir()
    expected = f"{missing} holds no induction_1layer.pt (the 1-layer model's weights); python -m attn.models.induction --out"
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(expected)}"):
        load_trained(missing, 1)


def test_load_trained_names_a_file_given_as_the_folder(tmp_path):
    a_file = tmp_path / "induction_2layer.pt"
    a_file.write_bytes(b"")
    expected = f"{a_file} is a file, not a folder; give the folder that holds induction_2layer.pt"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        load_trained(a_file, 2)


@pytest.mark.parametrize("folder", [None, 3, "", ["lessons/weights"]])
def test_load_trained_needs_a_path(folder):
    with pytest.raises(TypeError, match=r"^folder must be a path such as 'lessons/weights' \(text or a pathlib.Path\)"):
        load_trained(folder, 2)


class _Unsafe:
    def __reduce__(self):
        return (print, ("a pickle that runs code",))


@pytest.mark.parametrize(
    "content",
    [b"not a model", b"", lambda path: torch.save({"x": _Unsafe()}, path), lambda path: torch.save([1, 2], path)],
    ids=["text", "empty", "a pickle that runs code", "a list"],
)
def test_load_trained_refuses_what_is_not_a_weights_file_without_unsafe_advice(tmp_path, content):
    path = weights_path(tmp_path, 2)
    content(path) if callable(content) else path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        load_trained(tmp_path, 2)
    message = str(error.value)
    assert message.startswith(str(path)) and f"make it with python -m attn.models.induction --out {tmp_path}" in message
    assert "weights_only" not in message


def test_load_trained_names_a_model_of_the_wrong_depth(tmp_path):
    torch.save(AttentionOnlyTransformer(num_layers=3).state_dict(), weights_path(tmp_path, 2))
    expected = f"{weights_path(tmp_path, 2)} holds another model's weights, not the lesson's 2-layer one"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        load_trained(tmp_path, 2)
    torch.save(AttentionOnlyTransformer(num_layers=2).state_dict(), weights_path(tmp_path, 2))
    assert load_trained(tmp_path, 2).num_layers == 2
