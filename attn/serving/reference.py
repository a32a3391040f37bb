"""PyTorch's own paged attention on the course's pages (lesson 19's check against the real thing).

``torch.nn.attention.experimental._paged_attention.PagedAttention`` (PyTorch 2.5 on) keeps a page table per
sequence and a (1, H_kv, N * P, d) cache, and runs flex_attention with a block mask converted from logical to
physical pages. ``torch_paged_attention`` gives it the course's pool and block tables and runs flex_attention in
eager mode (on the CPU it cannot compile here), so the two can be compared on the same pages.
"""

import logging
import warnings

import torch

from attn.common.validate import whole_number
from attn.serving.pages import PagedKVCache

__all__ = ["torch_paged_attention", "transformers_batch"]

def torch_paged_attention(cache, seqs, query, layer=0):
    """PyTorch's PagedAttention + flex_attention on ``cache``'s pages: query (S, H, 1, d), one decoding query per
    sequence of ``seqs`` (it sees every cached position). Returns output (S, H, 1, d)."""
    from torch.nn.attention.experimental._paged_attention import PagedAttention  # PyTorch >= 2.5
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be an attn.serving.PagedKVCache, got {type(cache).__name__}")
    seqs = list(seqs)
    lengths = torch.tensor([cache.lengths[seq] for seq in seqs])  # (S,)
    if any(page is None for seq in seqs for page in cache.block_tables[seq]) or not seqs:
        raise ValueError("torch_paged_attention needs sequences with every page (no window freed any)")
    pages, size = cache.num_pages, cache.page_size
    theirs = PagedAttention(pages, size, len(seqs), device="cpu")
    for row, seq in enumerate(seqs):  # their page table filled with the course's block tables
        for index, page in enumerate(cache.block_tables[seq]):
            theirs.page_table[row, index] = page
            theirs.physical_to_logical[row, page] = index
    shape = (1, cache.num_kv_heads, pages * size, cache.head_dim)
    keys = cache.key_pages[layer].permute(2, 0, 1, 3).reshape(shape)  # (1, H_kv, N * P, d): page p at p * P
    values = cache.value_pages[layer].permute(2, 0, 1, 3).reshape(shape)
    width = max(len(cache.block_tables[seq]) for seq in seqs) * size
    logical = create_block_mask(lambda b, h, q, k: k >= 0, len(seqs), 1, 1, width, device="cpu", BLOCK_SIZE=(1, size))
    physical = theirs.convert_logical_block_mask(logical, kv_len=lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention warns that eager mode is for debugging
        return flex_attention(query, keys, values, block_mask=physical, enable_gqa=cache.num_kv_heads != query.shape[1])


def transformers_batch(model, prompts, max_new_tokens):
    """transformers' continuous batching (``model.generate_batch``, transformers 4.54 on) on ``model``, a
    transformers causal language model: one list of greedy new token ids per prompt, in order. Its pool is sized
    to the requests (pages of 16): by default it sizes the pool from the machine's free memory, which on a CPU took
    20 to 35 s to set up for three tiny requests."""
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "generate_batch", None)):
        raise TypeError(f"model must be a transformers model with generate_batch, got {type(model).__name__}")
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, list) and p for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty lists of token ids")
    whole_number("max_new_tokens", max_new_tokens, minimum=1, maximum=100_000)
    import transformers  # here: only this check needs it
    config = transformers.GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None,
                                           pad_token_id=0)
    pages = sum(-(-(len(prompt) + max_new_tokens) // 16) for prompt in prompts) + 1  # every request at once
    batching = transformers.ContinuousBatchingConfig(page_size=16, num_blocks=pages, max_batch_tokens=256)
    quiet = logging.getLogger("ContinuousBatchingLogger")  # it warns that no end token is set: none is wanted
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = model.generate_batch(inputs=prompts, generation_config=config, progress_bar=False,
                                           warmup=False, continuous_batching_config=batching)
    finally:
        quiet.setLevel(level)
    ordered = sorted(outputs.values(), key=lambda output: int(output.request_id.split("_")[-1]))
    return [list(output.generated_tokens) for output in ordered]
