"""attn.models.massive_activations (lesson 22): the residual stream's norms by layer and position, equal to the norms
of the stream run block by block, for the Llama model and the Austen model; refusals leave no hook behind."""

import pytest
import torch

import attn.models
from attn.models.llama import LlamaLM
from attn.models.lm import AustenLM


def llama():
    torch.manual_seed(0)
    return LlamaLM(vocab_size=32, context_length=16, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=3,
                   mlp_hidden_dim=32).eval()


def austen():
    torch.manual_seed(0)
    return AustenLM(vocab_size=32, context_length=16, embed_dim=16, num_heads=4, num_layers=2).eval()


@pytest.mark.parametrize("make", [llama, austen])
def test_norms_equal_the_stream_run_block_by_block(make):
    model = make()
    tokens = torch.randint(0, 32, (2, 7), generator=torch.Generator().manual_seed(1))
    norms = attn.models.massive_activations(model, tokens)
    assert norms.shape == (len(model.blocks) + 1, 2, 7) and norms.dtype == torch.float32
    with torch.no_grad():
        stream = model.token_embedding(tokens)
        expected = [stream.norm(dim=-1)]
        for block in model.blocks:
            stream = block(stream, None, is_causal=True)
            expected.append(stream.norm(dim=-1))
    assert (norms - torch.stack(expected)).abs().max() < 1e-5
    assert all(not block._forward_pre_hooks and not block._forward_hooks for block in model.blocks)


def test_a_planted_massive_activation_shows_at_its_position_from_its_layer_on():
    """Add 1000 to one feature of position 0 in block 1's output: from row 2 on, position 0 is far louder."""
    model = llama()
    tokens = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(2))
    plain = attn.models.massive_activations(model, tokens)
    handle = model.blocks[1].register_forward_hook(lambda block, args, output: output + torch.eye(16)[3] * 1000.0 *
                                                   (torch.arange(6) == 0)[None, :, None])
    try:
        planted = attn.models.massive_activations(model, tokens)
    finally:
        handle.remove()
    assert torch.equal(planted[:2], plain[:2])
    assert (planted[2:, 0, 0] > 500).all() and (planted[2:, 0, 1:] < 100).all()


@pytest.mark.parametrize(("model", "tokens", "error", "words"), [
    (torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.int64), TypeError, "a course language model"),
    (None, torch.zeros(1, 3, dtype=torch.int64), TypeError, "a course language model"),
    (llama(), torch.zeros(1, 3), TypeError, "integer token ids"),
    (llama(), torch.full((1, 3), 99, dtype=torch.int64), ValueError, "token ids from 0 to 31"),
    (llama(), torch.zeros(3, dtype=torch.int64), ValueError, "shape \\(B, T\\)"),
])
def test_hostile_input_gets_a_sentence_and_leaves_no_hook(model, tokens, error, words):
    with pytest.raises(error, match=words):
        attn.models.massive_activations(model, tokens)
    for block in getattr(model, "blocks", []):
        assert not block._forward_pre_hooks and not block._forward_hooks


def test_smollm2s_first_position_is_a_hundred_times_louder_in_its_middle_layers():
    """SmolLM2-135M on eight tokens: before its early blocks the first position is not louder than the rest; from
    block 12 to block 20 its residual vector is 50 times the median of the others or more (Sun et al.'s massive
    activation), nearly all of it in one feature."""
    from attn.pretrained import load

    try:
        model, tokenizer = load()
    except FileNotFoundError:
        pytest.skip("SmolLM2 is not fetched here (python -m attn.pretrained)")
    tokens = torch.tensor([tokenizer.encode("Sir Walter Elliot, of Kellynch Hall")[:8]])
    norms = attn.models.massive_activations(model, tokens)[:, 0]  # (L + 1, T)
    ratio = norms[:, 0] / norms[:, 1:].median(dim=-1).values
    assert (ratio[:3] < 5).all() and (ratio[12:21] > 50).all()
    seen = {}

    def keep(block, args):
        seen["x"] = args[0][0, 0]  # returns None: the block's input is left as it is

    handle = model.blocks[15].register_forward_pre_hook(keep)
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
    squares = seen["x"].pow(2)
    assert squares.max() / squares.sum() > 0.9  # one feature of 576 holds nine tenths of the vector's squared length
