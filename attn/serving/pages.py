"""A paged KV cache (lesson 19): fixed-size pages in one preallocated pool, a free list, a block table per sequence.

What vLLM's PagedAttention keeps (Kwon et al. 2023): instead of one contiguous buffer per sequence, sized for the
longest it might grow to, every layer's keys and values live in pages of ``page_size`` positions taken from one
pool made once. Sequence ``s``'s position ``p`` sits in page ``block_tables[s][p // page_size]`` at offset
``p % page_size``; a sequence wastes at most one page's unused tail.

Shared prefixes (vLLM's prefix cache): a full page is named by a hash of its tokens and of the page before it, so
requests that start with the same tokens find and share those pages (a reference count per page). A hash can
collide, so a page found by name is shared only if the tokens it was written for are the request's own. A page freed by
its last user goes back to the free list but keeps its name until it is handed out again, so a later request can
still find it. A shared page is copied before it is written (copy-on-write): ``fork`` shares even a sequence's
last, partly filled page, and a prompt found whole recomputes its last position, which lands in a shared page.
"""

import collections

import torch

from attn.common.sizes import check_allocation, readable_bytes
from attn.common.validate import positive_int, type_name, whole_count, whole_number

__all__ = ["PagedKVCache"]

MAX_PAGES = 2**24  # more pages than any pool here needs: a bigger number is surely a mistake
MAX_PAGE_SIZE = 2**16


class PagedKVCache:
    """PagedKVCache(num_pages N, page_size P, num_kv_heads H_kv, head_dim d, dtype=torch.float32, *, num_layers=1).

    ``key_pages``, ``value_pages``: the pool, (num_layers, N, P, H_kv, d), made once. ``block_tables[seq]``: the
    list of page ids of sequence ``seq`` (None for a page freed because it left a window); ``lengths[seq]``: its
    positions. ``free_pages``: pages not in use, oldest freed first. ``ref_counts`` (N,): users of each page.

    append(seq, keys, values, layer=0): keys, values (H_kv, T_new, d) written after the sequence's positions.
    read(seq, layer=0) -> keys, values (H_kv, T, d): its pages read through its block table, as one contiguous
    cache would hold them. free(seq): its pages back to the free list (those it shared lose one user).
    For a model: ``reserve(seq, count, tokens)`` finds the slots (count,) of the next positions (a slot is
    page * P + offset), ``write(layer, slots, keys, values)`` writes (T, H_kv, d) there, one layer at a time.
    """

    def __init__(self, num_pages, page_size, num_kv_heads, head_dim, dtype=torch.float32, *, num_layers=1):
        num_pages, page_size = positive_int("num_pages", num_pages), positive_int("page_size", page_size)
        num_kv_heads, head_dim = positive_int("num_kv_heads", num_kv_heads), positive_int("head_dim", head_dim)
        num_layers = positive_int("num_layers", num_layers)
        if num_pages > MAX_PAGES or page_size > MAX_PAGE_SIZE:
            raise ValueError(f"num_pages={num_pages} and page_size={page_size} must be at most {MAX_PAGES} and "
                             f"{MAX_PAGE_SIZE}: a pool that size is surely a mistake")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32, got {type_name(dtype)} {dtype!r:.40}")
        shape = (num_layers, num_pages, page_size, num_kv_heads, head_dim)
        nbytes = 2 * num_layers * num_pages * page_size * num_kv_heads * head_dim * dtype.itemsize
        check_allocation(f"a pool of {num_pages} pages of {page_size} positions ({readable_bytes(nbytes)})", nbytes)
        self.num_pages, self.page_size, self.num_layers = num_pages, page_size, num_layers
        self.num_kv_heads, self.head_dim, self.dtype = num_kv_heads, head_dim, dtype
        self.key_pages = torch.zeros(shape, dtype=dtype)  # (L, N, P, H_kv, d)
        self.value_pages = torch.zeros(shape, dtype=dtype)
        self.free_pages = collections.OrderedDict.fromkeys(range(num_pages))  # an ordered set: oldest freed first
        self.ref_counts = [0] * num_pages
        self.block_tables, self.lengths, self.tokens = {}, {}, {}
        self.page_names = {}  # hash of a full page's tokens (and of the pages before) -> page id: the prefix cache
        self.name_of_page = {}  # page id -> its name, while it keeps one
        self.prefix_of_page = {}  # page id -> every token up to its end, while it keeps a name: a hit is checked on it
        self.copies = 0  # pages copied before a write (copy-on-write)

    # Sequences -------------------------------------------------------------------------------------

    @property
    def num_free_pages(self):
        return len(self.free_pages)

    def pages_needed(self, seq, count):
        """Pages that ``count`` more positions of ``seq`` would take from the free list (a copy-on-write included)."""
        length = self.lengths.get(seq, 0)
        table = self.block_tables.get(seq, [])
        needed = -(-(length + whole_count("count", count)) // self.page_size) - len(table)
        last = table[-1] if table and length % self.page_size else None
        shared_tail = last is not None and count > 0 and self.ref_counts[last] > 1
        return max(needed, 0) + shared_tail

    def add_sequence(self, seq, tokens=()):
        """Start sequence ``seq``; returns how many of ``tokens`` are already cached (full pages found by name).

        Those pages are shared with the sequences that wrote them; the caller computes the positions after them. A
        prompt found whole leaves its last position to compute (the model needs its logits): writing it copies the
        shared page first."""
        _check_sequence_name(seq)
        if seq in self.block_tables:
            raise ValueError(f"sequence {seq!r} is already in the cache; free it first")
        tokens = _token_list(tokens)
        self.block_tables[seq], self.lengths[seq], self.tokens[seq] = [], 0, []
        name = None
        for start in range(0, len(tokens) - self.page_size + 1, self.page_size):
            name = page_name(name, tokens[start:start + self.page_size])
            page = self.page_names.get(name)
            if page is None or self.prefix_of_page.get(page) != tuple(tokens[:start + self.page_size]):
                break  # not cached, or a hash that collides: the tokens, not the name, decide
            self._take(page)
            self.block_tables[seq].append(page)
            self.lengths[seq] += self.page_size
            self.tokens[seq] += tokens[start:start + self.page_size]
        if tokens and self.lengths[seq] == len(tokens):  # found whole: its last position is recomputed, for its logits
            self.lengths[seq] -= 1
            self.tokens[seq].pop()
        return self.lengths[seq]

    def fork(self, parent, child):
        """A new sequence ``child`` sharing every page of ``parent`` (its last one too, copied when first written)."""
        _check_sequence_name(child)
        if parent not in self.block_tables:
            raise ValueError(f"sequence {parent!r:.40} is not in the cache")
        if child in self.block_tables:
            raise ValueError(f"sequence {child!r} is already in the cache; free it first")
        for page in self.block_tables[parent]:
            if page is not None:
                self.ref_counts[page] += 1
        self.block_tables[child] = list(self.block_tables[parent])
        self.lengths[child], self.tokens[child] = self.lengths[parent], list(self.tokens[parent])

    def free(self, seq):
        """Give back every page of ``seq``; a page with no user left joins the free list (keeping its name)."""
        self._check_sequence(seq)
        for page in self.block_tables.pop(seq):
            if page is not None:
                self._release(page)
        del self.lengths[seq], self.tokens[seq]

    def free_outside_window(self, seq, window):
        """Free the pages of ``seq`` that no later query can see through a window of ``window`` keys.

        The next query sits at position T = lengths[seq] and sees keys T - window < j <= T, so a page whose
        last position is at most T - window is never read again. Returns the number of pages freed."""
        self._check_sequence(seq)
        window = positive_int("window", window)
        oldest_visible = self.lengths[seq] - window + 1
        table, freed = self.block_tables[seq], 0
        for index in range(min(len(table), max(oldest_visible, 0) // self.page_size)):
            if table[index] is not None:  # page `index` holds positions index * P .. (index + 1) * P - 1
                self._release(table[index])
                table[index], freed = None, freed + 1
        return freed

    # Writing and reading ---------------------------------------------------------------------------

    def reserve(self, seq, count, tokens=None):
        """The slots (count,) int64 of the next ``count`` positions of ``seq``, after taking the pages they need.

        A shared page about to be written is copied first (copy-on-write). ``tokens`` (count ids), when given,
        name each page that becomes full, so that later requests can find it. ValueError if the pool runs out
        (then nothing is taken)."""
        self._check_sequence(seq)
        count = whole_count("count", count)
        tokens = None if tokens is None else _token_list(tokens)
        if tokens is not None and len(tokens) != count:
            raise ValueError(f"tokens must hold one id per reserved position, {count}, got {len(tokens)}")
        needed = self.pages_needed(seq, count)
        if needed > self.num_free_pages:
            raise ValueError(f"the pool has {self.num_free_pages} free pages and sequence {seq!r} needs {needed} more: "
                             "free a sequence (or preempt one) first")
        table, length = self.block_tables[seq], self.lengths[seq]
        if count and length % self.page_size and self.ref_counts[table[-1]] > 1:
            table[-1] = self._copy_on_write(table[-1])
        while len(table) * self.page_size < length + count:
            table.append(self._take_fresh())
        positions = torch.arange(length, length + count)  # (count,)
        pages = torch.tensor([-1 if page is None else page for page in table], dtype=torch.int64)  # (pages,)
        pages = pages[positions // self.page_size] if count else positions  # (count,): only live pages are written
        self.lengths[seq] = length + count
        self._name_full_pages(seq, tokens)
        return pages * self.page_size + positions % self.page_size  # (count,)

    def write(self, layer, slots, keys, values):
        """Write keys and values (T, H_kv, d) of one layer at ``slots`` (T,) from ``reserve``."""
        layer = self._check_layer(layer)
        self._check_slots(slots)
        self._check_keys(keys, values, layout="(T, H_kv, d)")
        if keys.shape[0] != slots.shape[0]:
            raise ValueError(f"keys hold {keys.shape[0]} positions for {slots.shape[0]} slots: one slot a position")
        self._write(layer, slots, keys, values)

    def _write(self, layer, slots, keys, values):
        """``write`` without its checks: for callers whose slots come from ``reserve`` and keys from a checked model
        (the runner writes every layer at every step; its door checked the step once)."""
        self.key_pages[layer].view(-1, self.num_kv_heads, self.head_dim)[slots] = keys
        self.value_pages[layer].view(-1, self.num_kv_heads, self.head_dim)[slots] = values

    def append(self, seq, keys, values, layer=0):
        """Add keys and values (H_kv, T_new, d) after the positions of ``seq`` (started if new); returns the slots.

        With several layers, call ``reserve`` once and ``write`` for each layer instead. A refused call changes
        nothing: every check (the keys, the layer, room in the pool) comes before the first page is taken."""
        self._check_keys(keys, values)
        if self.num_layers != 1:
            raise ValueError(f"append writes one layer's keys; this pool has {self.num_layers}: use reserve and write")
        layer = self._check_layer(0 if layer is None else layer)
        _check_sequence_name(seq)
        needed = self.pages_needed(seq, keys.shape[1])
        if needed > self.num_free_pages:
            raise ValueError(f"the pool has {self.num_free_pages} free pages and sequence {seq!r:.40} needs {needed} "
                             "more: free a sequence (or preempt one) first")
        if seq not in self.block_tables:
            self.add_sequence(seq)
        slots = self.reserve(seq, keys.shape[1])
        self._write(layer, slots, keys.transpose(0, 1), values.transpose(0, 1))  # checked above
        return slots

    def slots(self, seq):
        """The slot (T,) of each position of ``seq`` (page * P + offset), -1 where a window freed the page."""
        self._check_sequence(seq)
        table = torch.tensor([-1 if page is None else page for page in self.block_tables[seq]], dtype=torch.int64)
        positions = torch.arange(self.lengths[seq])
        pages = table[positions // self.page_size]  # (T,)
        return torch.where(pages >= 0, pages * self.page_size + positions % self.page_size, -1)

    def read(self, seq, layer=0):
        """Keys and values (H_kv, T, d) of ``seq``, gathered page by page as a contiguous cache holds them
        (zeros at positions whose page a window freed)."""
        layer = self._check_layer(layer)
        slots = self.slots(seq)  # (T,)
        keys = self.key_pages[layer].view(-1, self.num_kv_heads, self.head_dim)[slots.clamp(min=0)]  # (T, H_kv, d)
        values = self.value_pages[layer].view(-1, self.num_kv_heads, self.head_dim)[slots.clamp(min=0)]
        gone = (slots < 0)[:, None, None]
        return keys.masked_fill(gone, 0).transpose(0, 1), values.masked_fill(gone, 0).transpose(0, 1)

    def block_table_tensor(self, seqs):
        """Block tables of ``seqs`` as one (S, max pages) int64 tensor, padded (and freed pages marked) with -1."""
        if not isinstance(seqs, list | tuple | range):
            raise TypeError(f"seqs must be a list of the cache's sequences, got {type_name(seqs)}")
        for seq in seqs:
            self._check_sequence(seq)
        tables = [[-1 if page is None else page for page in self.block_tables[seq]] for seq in seqs]
        width = max((len(table) for table in tables), default=0)
        return torch.tensor([table + [-1] * (width - len(table)) for table in tables], dtype=torch.int64).reshape(
            len(tables), width)

    # Inside ----------------------------------------------------------------------------------------

    def _take(self, page):
        """One more user of ``page``; a free page leaves the free list (and forgets its name if it gets new contents)."""
        if self.ref_counts[page] == 0:
            del self.free_pages[page]
        self.ref_counts[page] += 1
        return page

    def _take_fresh(self):
        """The free page freed longest ago, for new contents: its name (if it kept one) is forgotten."""
        page = next(iter(self.free_pages))
        self._forget_name(page)
        return self._take(page)

    def _release(self, page):
        self.ref_counts[page] -= 1
        if self.ref_counts[page] == 0:
            self.free_pages[page] = None  # last in line: a named page stays findable as long as possible

    def _copy_on_write(self, page):
        """A private copy of a shared page (every layer), for the sequence about to write into it."""
        copy = self._take_fresh()
        self.key_pages[:, copy] = self.key_pages[:, page]
        self.value_pages[:, copy] = self.value_pages[:, page]
        self._release(page)
        self.copies += 1
        return copy

    def _forget_name(self, page):
        self.prefix_of_page.pop(page, None)
        name = self.name_of_page.pop(page, None)
        if name is not None and self.page_names.get(name) == page:
            del self.page_names[name]

    def _name_full_pages(self, seq, tokens):
        """Record the new tokens of ``seq`` and name every page they fill (unless the name is taken)."""
        known = self.tokens[seq]
        if tokens is None:
            known.extend([None] * (self.lengths[seq] - len(known)))
            return
        first_new = len(known) // self.page_size
        known.extend(tokens)
        table = self.block_tables[seq]
        for index in range(first_new, len(known) // self.page_size):
            page = table[index]
            if page is None or page in self.name_of_page:
                continue
            words = known[index * self.page_size:(index + 1) * self.page_size]
            before = known[:index * self.page_size]
            if None in words or None in before:
                continue
            name = page_names_of(before + words, self.page_size)[-1]
            if name not in self.page_names:
                self.page_names[name], self.name_of_page[page] = page, name
                self.prefix_of_page[page] = tuple(before + words)

    def _check_sequence(self, seq):
        _check_sequence_name(seq)
        if seq not in self.block_tables:
            raise ValueError(f"sequence {seq!r:.40} is not in the cache; add it with add_sequence (or append) first")

    def _check_layer(self, layer):
        return whole_number("layer", layer, minimum=0, maximum=self.num_layers - 1)

    def _check_slots(self, slots):
        """slots: a 1-D int64 tensor of slots in the pool, 0 .. N * P - 1 (never -1: that would write another page)."""
        if not isinstance(slots, torch.Tensor) or slots.dtype != torch.int64 or slots.dim() != 1 \
                or slots.layout != torch.strided or slots.device.type != "cpu":
            raise TypeError(f"slots must be a 1-D int64 tensor on the CPU, as reserve returns them, got "
                            f"{type_name(slots)} {getattr(slots, 'dtype', '')}")
        last = self.num_pages * self.page_size - 1
        if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) > last):
            raise ValueError(f"slots must lie in the pool, 0 .. {last}; got {int(slots.min())} .. {int(slots.max())} "
                             "(a -1 marks a freed page: nothing may be written there)")

    def _check_keys(self, keys, values, layout="(H_kv, T_new, d)"):
        heads_first = layout.startswith("(H_kv")
        for name, tensor in (("keys", keys), ("values", values)):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a tensor {layout}, got {type_name(tensor)}")
            heads = tensor.shape[0 if heads_first else 1] if tensor.dim() == 3 else None
            if tensor.dim() != 3 or heads != self.num_kv_heads or tensor.shape[2] != self.head_dim:
                raise ValueError(f"{name} must have shape {layout} with H_kv = {self.num_kv_heads} and d = "
                                 f"{self.head_dim}, got {tuple(tensor.shape)}")
            if tensor.dtype != self.dtype or tensor.device.type != "cpu" or tensor.layout != torch.strided:
                raise TypeError(f"{name} must be a dense {self.dtype} tensor on the CPU (the pool's), got {tensor.dtype} "
                                f"on {tensor.device}")
            if not torch.isfinite(tensor).all():
                raise ValueError(f"{name} holds NaN or inf: every query that reads this page would spread it")
        if keys.shape != values.shape:
            raise ValueError(f"keys and values must have one shape, got {tuple(keys.shape)} and {tuple(values.shape)}")

    def __repr__(self):
        return (f"PagedKVCache(pages={self.num_pages} of {self.page_size} positions, free={self.num_free_pages}, "
                f"sequences={len(self.block_tables)}, layers={self.num_layers}, kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, dtype={self.dtype})")


def page_name(previous, tokens):
    """The name of a full page: a hash of its tokens and of the name of the page before it (None for the first)."""
    return hash((previous, tuple(tokens)))


def page_names_of(tokens, page_size):
    """The names of the full pages of ``tokens``, in order: the chain vLLM's prefix cache looks up."""
    names, name = [], None
    for start in range(0, len(tokens) - page_size + 1, page_size):
        name = page_name(name, tokens[start:start + page_size])
        names.append(name)
    return names


def _check_sequence_name(seq):
    """A sequence is named by any hashable value (an int, a str, a tuple of them): it is a key of the block tables."""
    try:
        hash(seq)
    except TypeError:
        raise TypeError(f"a sequence's name must be hashable (an int or a str, say), got {type_name(seq)}") from None


def _token_list(tokens):
    """Token ids as a list of ints, from a list, a tuple or a 1-D integer tensor."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be a 1-D integer tensor or a list of ints, got {tokens.dtype} {tuple(tokens.shape)}")
        return tokens.tolist()
    if not isinstance(tokens, list | tuple) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise TypeError(f"tokens must be a list of ints (token ids), got {type_name(tokens)}")
    return list(tokens)
