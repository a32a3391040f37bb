"""``attn.pretrained.load()`` runs SmolLM2-135M on the course's LlamaLM exactly as transformers runs the same GGUF file.

transformers reads the file itself (``LlamaForCausalLM.from_pretrained(folder, gguf_file=...)``, offline, float32:
its own dequantizer and its undoing of llama.cpp's row permutation), once per test session. The course's copy comes
from ``python -m attn.pretrained``'s converted file. A tiny Llama GGUF file written here checks the same path in a
moment, and shows that the rows of W_q and W_k must be taken as the file has them.
"""

import os
import time

import numpy as np
import pytest
import torch

from attn import pretrained
from attn.models.decoder import generate
from attn.models.llama import SMOLLM2_135M, LlamaLM, pairs_to_rotate_half
from attn.models.pretrained import FOLDER, GGUF_NAME, WEIGHTS_NAME, convert, read_converted
from tests.gguf_files import write_tiny_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REAL_ABSENT = "SmolLM2's files are not in data/smollm2: fetch them with 'python -m attn.pretrained' (make test does)"
TEXTS = ["Bill is going to the theatre to watch a new movie.",
         "Sir Walter Elliot, of Kellynch-hall, in Somersetshire, was a man who, for his own amusement, never took up "
         "any book but the Baronetage;",
         "def softmax(x):\n    return np.exp(x) / np.exp(x).sum()\n"]


def transformers_model(folder, name):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    convert(write_tiny_llama(folder / "tiny.gguf", seed=3), folder)
    return folder, pretrained.load(folder)[0], transformers_model(folder, "tiny.gguf")


@pytest.fixture(scope="module")
def real():
    if not (FOLDER / WEIGHTS_NAME).is_file() or not (FOLDER / GGUF_NAME).is_file():
        pytest.skip(REAL_ABSENT)
    start = time.perf_counter()
    ours, tokenizer = pretrained.load()
    seconds = time.perf_counter() - start
    return ours, tokenizer, transformers_model(FOLDER, GGUF_NAME), seconds


def largest_logit_difference(ours, theirs, tokens):
    with torch.no_grad():
        return (ours(tokens) - theirs(tokens).logits).abs().max().item()


def test_a_tiny_file_runs_as_transformers_runs_it(tiny):
    _, ours, theirs = tiny
    tokens = torch.randint(0, 260, (2, 24), generator=torch.Generator().manual_seed(0))
    assert largest_logit_difference(ours, theirs, tokens) < 1e-5


def test_the_files_rows_are_already_in_the_courses_rotary_layout(tiny):
    """Copying W_q and W_k as the file has them is right; taking them for transformers' layout (pairs_to_rotate_half,
    as transformers must for its own rotary) gives other logits. And transformers' weights, reordered to the course's
    layout by LlamaLM.from_transformers, are the file's rows exactly."""
    folder, ours, theirs = tiny
    tokens = torch.randint(0, 260, (1, 24), generator=torch.Generator().manual_seed(1))
    wrong = LlamaLM(**read_converted(folder, None)[0])
    wrong.load_state_dict(ours.state_dict())
    with torch.no_grad():
        for block in wrong.blocks:
            attention = block.attention
            attention.query_proj.weight.copy_(pairs_to_rotate_half(attention.query_proj.weight, attention.num_heads))
            attention.key_proj.weight.copy_(pairs_to_rotate_half(attention.key_proj.weight, attention.num_kv_heads))
    assert largest_logit_difference(wrong.eval(), theirs, tokens) > 1e-2
    copied = LlamaLM.from_transformers(theirs).state_dict()
    assert all(torch.equal(copied[name], tensor) for name, tensor in ours.state_dict().items())


def test_changing_the_loaded_model_never_changes_the_file(tiny):
    """The weights are mapped copy-on-write: an ablation that zeroes a head in place leaves the converted file alone."""
    folder = tiny[0]
    model, _ = pretrained.load(folder)
    before = model.blocks[0].attention.query_proj.weight.clone()
    with torch.no_grad():
        model.blocks[0].attention.query_proj.weight.zero_()
        model.token_embedding.weight.mul_(2)
    again, _ = pretrained.load(folder)
    assert torch.equal(again.blocks[0].attention.query_proj.weight, before)
    assert torch.equal(again.token_embedding.weight * 2, model.token_embedding.weight)


def test_smollm2_loads_in_about_a_second_as_course_md_names_it(real):
    ours, tokenizer, _, seconds = real
    print(f"attn.pretrained.load(): {seconds:.2f} s")
    assert not ours.training and ours.token_embedding.weight.dtype == torch.float32
    assert ours.readout.weight is ours.token_embedding.weight
    assert ours.context_length == 8192 and tokenizer.vocab_size == ours.vocab_size == 49152
    config, _ = read_converted(FOLDER, None)
    assert config == {**SMOLLM2_135M, "norm_eps": float(np.float32(1e-5))}  # the file's float32 epsilon, as transformers
    assert sum(p.numel() for p in ours.parameters()) == 134_515_008
    logits, weights = ours(torch.tensor([tokenizer.encode("Bill is going")]), need_weights=True)
    assert logits.shape == (1, 3, 49152) and weights.shape == (30, 1, 9, 3, 3)


def test_smollm2s_logits_equal_transformers(real):
    ours, tokenizer, theirs, _ = real
    differences = [largest_logit_difference(ours, theirs, torch.tensor([tokenizer.encode(text)])) for text in TEXTS]
    print(f"largest difference of SmolLM2's logits from transformers', by text: {[f'{d:.1e}' for d in differences]}")
    assert max(differences) < 1e-4


def test_smollm2_with_its_query_and_key_rows_taken_for_transformers_layout_is_wrong(real):
    ours, tokenizer, theirs, _ = real
    wrong, _ = pretrained.load()
    for block in wrong.blocks:
        attention = block.attention
        attention.query_proj.weight = torch.nn.Parameter(pairs_to_rotate_half(attention.query_proj.weight, attention.num_heads))
        attention.key_proj.weight = torch.nn.Parameter(pairs_to_rotate_half(attention.key_proj.weight, attention.num_kv_heads))
    tokens = torch.tensor([tokenizer.encode(TEXTS[0])])
    difference = largest_logit_difference(wrong, theirs, tokens)
    print(f"W_q and W_k rows reordered as transformers' rotary needs: logits differ by up to {difference:.1f}")
    assert difference > 1.0


def test_smollm2s_greedy_generation_equals_transformers(real):
    ours, tokenizer, theirs, _ = real
    prompt = torch.tensor([tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        cached = generate(ours, prompt, 12)
        expected = theirs.generate(prompt, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(prompt))
    print(f"greedy continuation: {tokenizer.decode(cached[0, prompt.shape[1]:].tolist())!r}")
    assert torch.equal(cached, expected)
    assert torch.equal(cached, generate(ours, prompt, 12, use_cache=False))
