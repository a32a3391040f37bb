"""Lesson 19 against transformers: assisted generation (a draft model) and prompt-lookup decoding give the tokens of
the course's greedy speculative decoding, and transformers' own continuous batching (``model.generate_batch``, through
``attn.serving.reference.transformers_batch``) gives the tokens of the course's scheduler, on a tiny random Llama
copied into the course's LlamaLM."""

import os

import pytest
import torch

from attn.models.llama import LlamaLM
from attn.serving import PromptLookupDraft, generate_batch, speculative_generate
from attn.serving.reference import transformers_batch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


def tiny_llama(seed, layers=2):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.3)
    return model


PROMPT = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2]


def their_tokens(model, **options):
    config = transformers.GenerationConfig(max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), generation_config=config, **options)
    return out[0, len(PROMPT):].tolist()


def test_assisted_generation_and_prompt_lookup_give_the_courses_speculative_tokens():
    target, assistant = tiny_llama(0, layers=3), tiny_llama(1)
    ours, our_draft = LlamaLM.from_transformers(target), LlamaLM.from_transformers(assistant)
    greedy = their_tokens(target)
    assert len(set(greedy)) > 2  # the tokens vary
    assert their_tokens(target, assistant_model=assistant) == greedy
    assert their_tokens(target, prompt_lookup_num_tokens=3) == greedy
    assert speculative_generate(ours, our_draft, PROMPT, 16, draft_tokens=4) == greedy
    assert speculative_generate(ours, PromptLookupDraft(2), PROMPT, 16, draft_tokens=3) == greedy
    assert generate_batch(ours, [PROMPT, PROMPT[:3]], 16, page_size=4)[0] == greedy


def test_transformers_continuous_batching_gives_the_courses_scheduler_tokens():
    """Four prompts of different lengths; ours through pages of 4 in a pool too small for all at once (preemption),
    in batches of 2 with chunks of 3; theirs through its own paged cache and scheduler."""
    model = tiny_llama(2, layers=3)
    prompts = [PROMPT, PROMPT[:3], [7, 8, 9, 10, 11, 12, 13], [5]]
    theirs = transformers_batch(model, prompts, 12)
    assert len({tuple(tokens) for tokens in theirs}) > 1  # the requests differ
    ours = generate_batch(LlamaLM.from_transformers(model), prompts, 12, page_size=4, num_pages=10, max_batch_size=2,
                          chunk_size=3)
    assert ours == theirs
