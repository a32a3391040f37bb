"""Serving many requests at once (lesson 19, the first of Part 4, "Attention at scale").

``attn.serving.pages``: the paged KV cache (fixed-size pages in one pool, a free list, block tables, shared
prefixes found by name, copy-on-write). ``attn.serving.paged_attention``: attention over a sequence's pages
(vectorised: one gather), and the log-sum-exp merge that chunked prefill needs. ``attn.serving.runner``: one
step of a model over the paged cache, each sequence at its own position. ``attn.serving.scheduler``: continuous
batching (admission, chunked prefill, retirement, preemption) and ``generate_batch``. ``attn.serving.speculative``:
speculative decoding with a draft model or prompt lookup.

Imports: attn.serving may import attn.common, the layers and attn.models; attn.measure and attn.course may import it.
"""

from attn.serving.paged_attention import chunk_attention, merge_attention, paged_attention
from attn.serving.pages import PagedKVCache
from attn.serving.scheduler import Scheduler, generate_batch
from attn.serving.speculative import FirstLayers, ModelDraft, PromptLookupDraft, speculative_generate

__all__ = ["FirstLayers", "ModelDraft", "PagedKVCache", "PromptLookupDraft", "Scheduler", "chunk_attention",
           "generate_batch", "merge_attention", "paged_attention", "speculative_generate"]
