"""Continuous batching (lesson 19; Orca, Yu et al. 2022; vLLM, Kwon et al. 2023): a scheduler over a paged KV cache.

Each ``step`` admits waiting requests while the batch has room and the pool has pages for their first chunk
(their shared prefix found by name first), then runs ONE forward pass for every running request: a decoding
request feeds its newest token, a request still reading its prompt feeds the next chunk of it (chunked prefill).
A request whose chunk reaches the end of what it has gets its next token (greedy); a finished one leaves and its
pages go back at once. When the running requests need more pages than are free, the latest admitted is
preempted: its pages are freed and it waits again, to be recomputed from its prompt and the tokens it already has.

The scheduler also takes lesson 10's caches and lesson 21's compressed ones (attn.KVCache, QuantizedKVCache,
EvictingKVCache): given a function that makes one, each admitted request gets one such cache per layer, and each step
runs every running request's chunk through the model with its own caches (one forward pass a request: these caches
hold one sequence each, so the batch is scheduled together but not computed together, and there are no pages to share
or run out of: no prefix caching and no preemption). The tokens are those of decoding each request alone with the
same kind of cache.
"""

import collections
from dataclasses import dataclass, field

import torch

from attn.common.validate import positive_int, type_name, whole_count
from attn.compressed_cache import caches_for
from attn.kvcache import KVCache
from attn.serving.pages import PagedKVCache
from attn.serving.runner import check_servable, forward_step, model_shape

__all__ = ["Scheduler", "check_prompt", "generate_batch"]

@dataclass
class Request:
    """One request: its tokens so far (prompt, then generated), how many of them are cached, and its limit."""

    id: int
    tokens: list
    prompt_length: int
    max_new_tokens: int
    computed: int = 0  # positions held in the cache
    admitted: list = field(default_factory=list)  # the steps it was admitted at (more than one: it was preempted)
    caches: list = None  # its own caches, one per layer, when the scheduler makes them (not pages)

    @property
    def generated(self):
        return self.tokens[self.prompt_length:]

    @property
    def finished(self):
        return len(self.tokens) - self.prompt_length >= self.max_new_tokens


class Scheduler:
    """Scheduler(model, cache, max_batch_size=8, chunk_size=32, prefix_caching=True).

    cache: an attn.serving.PagedKVCache (lesson 19's pool), or a function that returns a new cache of lesson 10's
    kind for one layer (``attn.KVCache``, ``lambda: QuantizedKVCache(4, 32, 32)``, ``lambda: EvictingKVCache(64,
    "h2o", 4, 16)``): each request then gets its own caches and is computed alone (prefix_caching applies to pages).

    add(prompt, max_new_tokens) -> request id (prompt: a list of token ids, or a 1-D integer tensor);
    step() -> ids finished in this step (one forward pass); run() steps until every request is done;
    results[id]: the generated token ids. Statistics: steps, preemptions, prefix_hits (positions found cached),
    batch_sizes (requests per step), widths (the longest chunk per step: 1 when every request decodes; the pass is
    padded to it for every request)."""

    def __init__(self, model, cache, max_batch_size=8, chunk_size=32, prefix_caching=True):
        self.model = check_servable(model)
        self.cache, self.make = _check_cache(model, cache)
        self.max_batch_size = positive_int("max_batch_size", max_batch_size)
        self.chunk_size = positive_int("chunk_size", chunk_size)
        if not isinstance(prefix_caching, bool):
            raise TypeError(f"prefix_caching must be True or False, got {type_name(prefix_caching)}")
        self.prefix_caching = prefix_caching
        self.waiting, self.running, self.requests, self.results = collections.deque(), [], {}, {}
        self.steps = self.preemptions = self.prefix_hits = 0
        self.batch_sizes, self.widths = [], []

    def add(self, prompt, max_new_tokens):
        """Queue a request; returns its id. Refused with a sentence if it could never fit the pool or the model."""
        tokens = check_prompt(prompt, self.model.vocab_size)
        max_new_tokens = whole_count("max_new_tokens", max_new_tokens)
        positions = len(tokens) + max(max_new_tokens - 1, 0)  # the last new token is never fed back
        if positions > self.model.max_length:
            raise ValueError(f"a prompt of {len(tokens)} tokens and {max_new_tokens} new ones need {positions} positions, "
                             f"more than the model's max_length = {self.model.max_length}")
        pages = 0 if self.cache is None else -(-positions // self.cache.page_size)
        if self.cache is not None and pages > self.cache.num_pages:
            raise ValueError(f"a prompt of {len(tokens)} tokens and {max_new_tokens} new ones need {pages} pages of "
                             f"{self.cache.page_size} positions, and the pool has {self.cache.num_pages}: it could never "
                             "run, even alone; give the cache more pages")
        request = Request(len(self.requests), tokens, len(tokens), max_new_tokens)
        self.requests[request.id] = request
        if request.finished:
            self.results[request.id] = []
        else:
            self.waiting.append(request)
        return request.id

    @property
    def has_work(self):
        return bool(self.waiting or self.running)

    def run(self):
        """Step until every request is done; returns results (id -> generated token ids)."""
        while self.has_work:
            self.step()
        return self.results

    @torch.no_grad()
    def step(self):
        """Admit, plan (preempting if the pages run out), run one forward pass, retire; returns the finished ids."""
        if not self.has_work:
            return []
        self._admit()
        plan = self._plan()
        chunks = [request.tokens[request.computed:request.computed + size] for request, size in plan]
        if self.cache is None:  # each request through its own caches
            logits = torch.stack([self.model(torch.tensor([chunk]), request.caches)[0, -1]
                                  for (request, _), chunk in zip(plan, chunks, strict=True)])  # (S, V)
        else:
            seqs = [request.id for request, _ in plan]
            starts = [request.computed for request, _ in plan]
            slots = [self.cache.reserve(request.id, size, chunk if self.prefix_caching else None)
                     for (request, size), chunk in zip(plan, chunks, strict=True)]
            logits = forward_step(self.model, self.cache, seqs, chunks, starts, slots)  # (S, V)
        self.steps += 1
        self.batch_sizes.append(len(plan))
        self.widths.append(max(size for _, size in plan))
        finished = []
        for row, (request, size) in enumerate(plan):
            request.computed += size
            if request.computed == len(request.tokens):  # its whole past is cached: it gets a next token
                request.tokens.append(int(logits[row].double().argmax()))
            if request.finished:
                self._retire(request)
                finished.append(request.id)
        return finished

    def _admit(self):
        """Move waiting requests into the batch while it has room and the pool has pages for their first chunk."""
        if self.cache is None:  # caches of its own: room in the batch is all a request needs
            while self.waiting and len(self.running) < self.max_batch_size:
                request = self.waiting.popleft()
                request.caches, request.computed = caches_for(self.model, self.make), 0
                request.admitted.append(self.steps)
                self.running.append(request)
            return
        promised = sum(self.cache.pages_needed(request.id, min(self.chunk_size, len(request.tokens) - request.computed))
                       for request in self.running)  # what the running requests take in this step
        while self.waiting and len(self.running) < self.max_batch_size:
            request = self.waiting[0]
            found = self.cache.add_sequence(request.id, request.tokens if self.prefix_caching else ())
            first = self.cache.pages_needed(request.id, min(self.chunk_size, len(request.tokens) - found))
            if promised + first > self.cache.num_free_pages:
                self.cache.free(request.id)
                if self.running:
                    return
                raise RuntimeError("a request alone cannot get its first pages: the pool's accounting is wrong")
            self.waiting.popleft()
            promised += first
            request.computed = found
            self.prefix_hits += found
            request.admitted.append(self.steps)
            self.running.append(request)

    def _plan(self):
        """(request, tokens to feed) for every running request, after preempting the latest admitted ones
        until the pages they need are free."""
        while True:
            plan = [(request, min(self.chunk_size, len(request.tokens) - request.computed)) for request in self.running]
            if self.cache is None:
                return plan
            needed = sum(self.cache.pages_needed(request.id, size) for request, size in plan)
            if needed <= self.cache.num_free_pages:
                return plan
            if len(self.running) == 1:
                raise RuntimeError("one request cannot get its pages alone: the pool's accounting is wrong")
            self._preempt(self.running.pop())

    def _preempt(self, request):
        """Free every page of ``request``; it waits at the front of the queue and is recomputed when readmitted."""
        self.cache.free(request.id)
        request.computed = 0
        self.waiting.appendleft(request)
        self.preemptions += 1

    def _retire(self, request):
        if self.cache is None:
            request.caches = None  # its caches go with it
        else:
            self.cache.free(request.id)
        self.running.remove(request)
        self.results[request.id] = request.generated


def _check_cache(model, cache):
    """(paged pool, None) for a PagedKVCache that fits ``model``; (None, make) for a function that makes one of lesson
    10's caches (checked by making one per layer once)."""
    if isinstance(cache, PagedKVCache):
        layers, kv_heads, head_dim, dtype = model_shape(model)
        if (cache.num_layers, cache.num_kv_heads, cache.head_dim, cache.dtype) != (layers, kv_heads, head_dim, dtype):
            raise ValueError(f"the cache holds {cache.num_layers} layers of {cache.num_kv_heads} x {cache.head_dim} "
                             f"{cache.dtype} and the model needs {layers} layers of {kv_heads} x {head_dim} {dtype}")
        return cache, None
    if isinstance(cache, KVCache):
        raise TypeError(f"cache is one {type_name(cache)}, which holds one layer of one sequence: pass the function that "
                        "makes one (such as attn.KVCache, or lambda: QuantizedKVCache(4, 32, 32)), so that every request "
                        "and layer gets its own")
    if not callable(cache):
        raise TypeError(f"cache must be an attn.serving.PagedKVCache, or a function that returns a new cache of lesson "
                        f"10's kind (attn.KVCache, QuantizedKVCache, EvictingKVCache), got {type_name(cache)}")
    caches_for(model, cache)  # a sentence unless it makes a new cache for each layer
    return None, cache


def check_prompt(prompt, vocab_size):
    """A prompt as a non-empty list of token ids below ``vocab_size`` (from a list or a 1-D integer tensor)."""
    if isinstance(prompt, torch.Tensor):
        if prompt.dim() != 1 or prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
            raise TypeError(f"a prompt must be a list of token ids or a 1-D integer tensor, got {prompt.dtype} "
                            f"{tuple(prompt.shape)}")
        prompt = prompt.tolist()
    if not isinstance(prompt, list | tuple) or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        raise TypeError(f"a prompt must be a list of token ids (ints), got {type_name(prompt)}")
    if not prompt:
        raise ValueError("a prompt must hold at least one token: the first new token is read from the last one's logits")
    if min(prompt) < 0 or max(prompt) >= vocab_size:
        raise ValueError(f"a prompt's token ids must be 0 .. {vocab_size - 1} (the model's vocabulary), got "
                         f"{min(prompt)} .. {max(prompt)}")
    return list(prompt)


def generate_batch(model, prompts, max_new_tokens, page_size=16, num_pages=None, *, max_batch_size=8, chunk_size=32):
    """Greedy decoding of every prompt, served together by continuous batching over a paged KV cache.

    prompts: a list of prompts (each a list of token ids or a 1-D integer tensor); max_new_tokens: new tokens per
    prompt. page_size: positions per page; num_pages: the pool (default: enough for every request at once).
    Returns one list of new token ids per prompt, in order: what greedy decoding of each prompt alone gives."""
    check_servable(model)
    if not isinstance(prompts, list | tuple):
        raise TypeError(f"prompts must be a list of prompts (lists of token ids), got {type_name(prompts)}")
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt to serve")
    max_new_tokens = whole_count("max_new_tokens", max_new_tokens)
    page_size = positive_int("page_size", page_size)
    prompts = [check_prompt(prompt, model.vocab_size) for prompt in prompts]
    if num_pages is None:
        num_pages = sum(-(-(len(prompt) + max_new_tokens) // page_size) for prompt in prompts)
    layers, kv_heads, head_dim, dtype = model_shape(model)
    cache = PagedKVCache(num_pages, page_size, kv_heads, head_dim, dtype, num_layers=layers)
    scheduler = Scheduler(model, cache, max_batch_size, chunk_size)
    ids = [scheduler.add(prompt, max_new_tokens) for prompt in prompts]
    results = scheduler.run()
    return [results[request_id] for request_id in ids]
