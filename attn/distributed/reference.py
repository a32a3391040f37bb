"""Other people's attention across devices (lesson 20's checks against the real thing).

Each function runs inside every process of an initialised process group (a function ``attn.distributed.spawn``
runs), takes this process's shards (B, H, T_r, d) like ``attn.distributed.ring_attention``, and returns its
output shard, differentiable where the reference is:

- ``torch_flex_context_parallel``: PyTorch's context parallelism, flex-attention path. PyTorch's
  ``_ContextParallel`` style all-gathers keys and values (its backward is a reduce-scatter) and
  ``_create_cp_block_mask`` rewrites the mask for this shard's global query positions. Two things are changed
  for the CPU, in eager mode, while the call lasts: ``create_block_mask`` runs eagerly instead of through
  ``torch.compile``, with blocks small enough to divide T_r (PyTorch asks for T divisible by N * 128), and
  ``flex_attention``'s refusal of a backward on the CPU is lifted (its eager backward then runs).
- ``torch_sdpa_ring_attempt``: PyTorch's ``context_parallel`` ring of SDPA kernels; on the CPU it stops at the
  first call, and the function says why in a sentence.
- ``lucidrains_ring_attention`` and ``lucidrains_zig_zag_attention``: the ``ring-attention-pytorch`` package's
  ring (keys and values passed with isend/irecv) and its all-gather ("Llama 3") zigzag attention.

``torch_head_tail_positions`` gives the positions of PyTorch's head-tail load balancer, ``striped_positions``
those of the striped layout that ring-attention-pytorch's ``striped_ring_attn`` expects.
"""

import contextlib
import math
import re
import warnings

import torch
import torch.distributed as dist

from attn.common.validate import require_choice, whole_number
from attn.distributed.group import describe_shards
from attn.distributed.layouts import MAX_LENGTH

__all__ = ["lucidrains_ring_attention", "lucidrains_zig_zag_attention", "striped_positions", "torch_flex_context_parallel",
           "torch_head_tail_positions", "torch_sdpa_ring_attempt"]

RING_LAYOUTS = ("contiguous", "striped")  # ring-attention-pytorch's two ways of holding positions
SENTENCE_LENGTH = 300  # characters of PyTorch's message kept in torch_sdpa_ring_attempt's sentence
MISSING = ("the ring-attention-pytorch package is not installed, so its attention cannot be checked here; "
           "install the course's pins with pip install -r requirements.txt")


# ---------------------------------------------------------------------------------------------------- positions


def torch_head_tail_positions(length, world_size):
    """The positions PyTorch's ``_HeadTailLoadBalancer`` gives each of ``world_size`` processes: a list of
    ``world_size`` int64 tensors (length / world_size,), in rank order.

    It reorders the sequence, then cuts it into equal shards: process r gets run r and run 2N - 1 - r of 2N
    equal runs. PyTorch asks for 2N to divide ``length``."""
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    length, world_size = _length_and_size(length, world_size)
    if length % (2 * world_size):
        raise ValueError(f"PyTorch's head-tail load balancer cuts {length} positions into 2 x {world_size} equal runs, "
                         f"so 2 x {world_size} must divide the length")
    order = _HeadTailLoadBalancer(length, world_size, "cpu")._generate_indices()[0].long()  # (T,)
    return list(order.chunk(world_size))


def striped_positions(length, world_size):
    """The striped layout (Striped Attention; ring-attention-pytorch's ``striped_ring_attn``): process r holds
    positions r, r + N, r + 2N, ... A list of ``world_size`` int64 tensors, in rank order."""
    length, world_size = _length_and_size(length, world_size)
    if length < world_size:
        raise ValueError(f"{length} positions cannot be striped over {world_size} processes: each needs one at least")
    return [torch.arange(rank, length, world_size) for rank in range(world_size)]


def _length_and_size(length, world_size):
    return (whole_number("length", length, minimum=1, maximum=MAX_LENGTH),
            whole_number("world_size", world_size, minimum=1, maximum=MAX_LENGTH))


# --------------------------------------------------------------------------------- PyTorch's context parallelism


def torch_flex_context_parallel(query, key, value, is_causal=False, layout="contiguous"):
    """PyTorch's flex-attention context parallelism on this process's shards, in every process of the default group.

    query (B, H, T_r, d_k), key and value (B, H_kv, T_r, d): the positions ``attn.distributed.shard`` gives this
    process in ``layout`` ("contiguous", or "zigzag", which is PyTorch's head-tail layout). PyTorch all-gathers
    the keys and values, so every shard must have the same length: N must divide T (2N for zigzag). Returns
    this process's output shard (B, H, T_r, d_v), differentiable (every process must call backward too).
    """
    from torch.distributed.tensor.experimental._context_parallel._attention import _ContextParallel, _create_cp_block_mask
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer
    from torch.distributed.tensor.parallel import parallelize_module

    what = "torch_flex_context_parallel"
    shards = describe_shards(what, query, key, value, is_causal, layout, None, split_heads=False)
    length, size = _equal_shards(what, shards, 2 if layout == "zigzag" else 1)
    mesh = _mesh(query)
    attention = parallelize_module(_FlexAttention(), mesh, _ContextParallel(seq_dim=2,
                                   attention_type=_ContextParallel.AttentionType.FLEX))
    block_mask = None
    if is_causal:
        balancer = _HeadTailLoadBalancer(length, size, query.device) if layout == "zigzag" else None
        with _eager_cp_block_mask(math.gcd(length // size, 128), load_balance=balancer is not None):
            block_mask = _create_cp_block_mask(_causal, 1, 1, length, length, mesh, load_balancer=balancer)
    with _flex_backward_on_cpu():
        return attention(query, key, value, block_mask, query.shape[1] != key.shape[1])


class _FlexAttention(torch.nn.Module):
    """flex_attention as a module, for PyTorch's ``_ContextParallel`` style to hook (it gathers keys and values)."""

    def forward(self, query, key, value, block_mask, enable_gqa):
        from torch.nn.attention.flex_attention import flex_attention

        return flex_attention(query, key, value, block_mask=block_mask, enable_gqa=enable_gqa)


def _causal(batch, head, query_index, key_index):
    return query_index >= key_index  # global positions: _create_cp_block_mask maps the shard's to them


@contextlib.contextmanager
def _eager_cp_block_mask(block_size, load_balance):
    """While it lasts, ``_create_cp_block_mask`` builds its mask with eager ``create_block_mask`` (not
    torch.compile, which on the CPU needs a C++ compiler and many seconds) in blocks of ``block_size``, a divisor
    of T_r: its rewrite of the shard's query index is exact then, and eager flex_attention reads only the
    mask function. ``load_balance`` False stops it assuming the head-tail layout of its default balancer."""
    import torch.distributed.tensor.experimental._context_parallel._attention as cp
    import torch.nn.attention.flex_attention as flex

    saved = cp._compiled_create_block_mask, flex._DEFAULT_SPARSE_BLOCK_SIZE, cp._cp_options.enable_load_balance
    cp._compiled_create_block_mask, flex._DEFAULT_SPARSE_BLOCK_SIZE = flex.create_block_mask, block_size
    cp._cp_options.enable_load_balance = load_balance
    try:
        yield
    finally:
        cp._compiled_create_block_mask, flex._DEFAULT_SPARSE_BLOCK_SIZE, cp._cp_options.enable_load_balance = saved


@contextlib.contextmanager
def _flex_backward_on_cpu():
    """flex_attention refuses inputs that need gradients on the CPU at its door (``_validate_device``); its eager
    implementation has a backward all the same. While this lasts the door lets them in; its warning that eager
    mode is unfused is silenced."""
    import torch.nn.attention.flex_attention as flex

    saved = flex._validate_device
    flex._validate_device = lambda query, key, value: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        flex._validate_device = saved


def torch_sdpa_ring_attempt(query, key, value, is_causal=False, search=False):
    """Try PyTorch's ``context_parallel`` (its ring of SDPA kernels) on this process's contiguous shards.

    query, key, value (B, H, T_r, d): ``attn.distributed.shard(x, rank, N)``, every shard the same length.
    Returns (output shard (B, H, T_r, d_v), None) if it runs, or (None, a sentence: the exception's type and
    PyTorch's message, without addresses or paths) if it does not. Forward only.

    ``context_parallel`` turns the tensors into DTensors and routes SDPA's CUDA kernels to its ring; the CPU's
    kernel is not among them, so DTensor looks for a sharding of it, first by searching its decomposition
    (about 25 s here, ending in the same NotImplementedError). ``search=False`` skips that search.
    """
    from torch.distributed.tensor.experimental._context_parallel import context_parallel, context_parallel_unshard

    what = "torch_sdpa_ring_attempt"
    if not isinstance(search, bool):
        raise TypeError(f"search must be True or False, got {type(search).__name__}")
    shards = describe_shards(what, query, key, value, is_causal, "contiguous", None, split_heads=False)
    _equal_shards(what, shards, 1)
    mesh = _mesh(query)
    buffers = [_gathered(tensor, shards.world_size) for tensor in (query, key, value)]  # (B, H, T, d) each
    try:
        with warnings.catch_warnings(), torch.no_grad(), _decomposition_search(search):
            warnings.simplefilter("ignore")
            with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2]):  # shards them in place
                output = torch.nn.functional.scaled_dot_product_attention(*buffers, is_causal=is_causal)
    except Exception as error:  # noqa: BLE001 - the point is to report whatever stops it
        return None, _sentence(error)
    whole = context_parallel_unshard(mesh, [output], [2])[0]  # its own layout undone: (B, H, T, d_v)
    return whole[:, :, shards.positions[shards.rank]], None


@contextlib.contextmanager
def _decomposition_search(search):
    """Unless ``search``, DTensor does not look for a sharding of the CPU's SDPA kernel through its decomposition."""
    from torch.distributed.tensor._decompositions import DecompShardingStrategy

    cpu_kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    saved = DecompShardingStrategy.__dict__["has_decomp"]
    if not search:
        DecompShardingStrategy.has_decomp = staticmethod(lambda op: op is not cpu_kernel and saved.__func__(op))
    try:
        yield
    finally:
        DecompShardingStrategy.has_decomp = saved


def _sentence(error):
    """The exception's type and the first line of its message, without addresses, paths or process ids."""
    lines = str(error).strip().splitlines() or [""]
    message = re.sub(r"0x[0-9a-fA-F]+", "0x...", lines[0])
    message = re.sub(r"(?:[A-Za-z]:)?(?:/[\w.+-]+){2,}/?", "<path>", message)
    message = re.sub(r"\b(pid|PID|process) \d+", r"\1 ...", message)
    if len(message) > SENTENCE_LENGTH:
        message = message[:SENTENCE_LENGTH].rsplit(" ", 1)[0] + " ..."
    return f"{type(error).__name__}: {message}".strip()


def _gathered(tensor, world_size):
    pieces = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(pieces, tensor.contiguous())
    return torch.cat(pieces, dim=2)


def _mesh(query):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(query.device.type, (dist.get_world_size(),))


def _equal_shards(what, shards, runs):
    """(T, N) if every shard has T / N positions, with ``runs`` x N dividing T; a sentence if not."""
    length, size = sum(len(p) for p in shards.positions), shards.world_size
    if length % (runs * size):
        raise ValueError(f"{what} needs shards of one length ({runs} x {size} processes dividing the {length} "
                         f"positions), as its keys and values are all-gathered or passed in equal blocks")
    return length, size


# --------------------------------------------------------------------------------------- ring-attention-pytorch


def lucidrains_ring_attention(query, key, value, is_causal=False, layout="contiguous"):
    """ring-attention-pytorch's ``ring_flash_attn`` (keys and values passed around the ring with isend/irecv,
    ``ring_reduce_col=True``) on this process's shards, in every process of the default group.

    query (B, H, T_r, d_k), key and value (B, H_kv, T_r, d): for ``layout="contiguous"`` the positions
    ``attn.distributed.shard`` gives; for ``"striped"`` those of ``striped_positions`` (its
    ``striped_ring_attn``). N must divide T. Float64 runs with PyTorch's default dtype float64 while the call
    lasts (its row sums and maxima are made in the default dtype). With fewer key heads, the query heads are
    reordered for it (it pairs query head i with key head i mod H_kv). Returns the output shard (B, H, T_r, d_v),
    differentiable through the package's own backward.
    """
    what = "lucidrains_ring_attention"
    require_choice("layout", layout, RING_LAYOUTS)  # describe_shards checks the rest, lengths as if contiguous
    shards = describe_shards(what, query, key, value, is_causal, "contiguous", None, split_heads=False)
    length, size = _equal_shards(what, shards, 1)
    package, groups = _package(), query.shape[1] // key.shape[1]
    with _default_dtype(query.dtype):
        output = package.ring_flash_attn(*(tensor.transpose(1, 2) for tensor in (_their_heads(query, groups), key, value)),
                                         causal=is_causal, bucket_size=length // size, ring_reduce_col=True,
                                         striped_ring_attn=layout == "striped")  # (B, T_r, H, d_v)
    return _our_heads(output.transpose(1, 2), groups)


def lucidrains_zig_zag_attention(query, key, value, is_causal=False):
    """ring-attention-pytorch's ``zig_zag_attn`` (keys and values all-gathered, the Llama 3 scheme) on this
    process's zigzag shards, with the causal mask built from the positions its ``zig_zag_shard`` gives.

    query (B, H, T_r, d_k), key and value (B, H_kv, T_r, d): ``attn.distributed.shard(x, rank, N, "zigzag")``,
    2N dividing T. Returns the output shard (B, H, T_r, d_v), differentiable through the package's all-gather.
    """
    what = "lucidrains_zig_zag_attention"
    shards = describe_shards(what, query, key, value, is_causal, "zigzag", None, split_heads=False)
    length, _ = _equal_shards(what, shards, 2)
    zig_zag = _package().zig_zag_attention
    (_, query_positions, key_positions), _ = zig_zag.zig_zag_shard(query.new_zeros(length, 1))
    mask = query_positions[:, None] >= key_positions[None, :] if is_causal else None  # (T_r, T) over gathered keys
    groups = query.shape[1] // key.shape[1]
    with _default_dtype(query.dtype):
        return _our_heads(zig_zag.zig_zag_attn(_their_heads(query, groups), key, value, attn_mask=mask), groups)


def _their_heads(query, groups):
    """(B, H, T, d) in the order ring-attention-pytorch pairs with H_kv = H / groups key heads: it gives query head
    i key head i mod H_kv, PyTorch's enable_gqa and the course i // groups. Head j * groups + g moves to g * H_kv + j."""
    batch, heads = query.shape[:2]
    return query.reshape(batch, heads // groups, groups, *query.shape[2:]).transpose(1, 2).reshape(query.shape)


def _our_heads(output, groups):
    """The inverse of _their_heads: (B, H, T, d_v) back in the course's order of heads."""
    batch, heads = output.shape[:2]
    return output.reshape(batch, groups, heads // groups, *output.shape[2:]).transpose(1, 2).reshape(output.shape)


def _package():
    """ring_attention_pytorch, its cached rank and world size forgotten (this process may be a fresh fork)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # beartype's: the package's hints use typing.Tuple (PEP 585 deprecates it)
            import ring_attention_pytorch
            import ring_attention_pytorch.zig_zag_attention  # noqa: F401 - an attribute of the package from here on
            from ring_attention_pytorch import distributed
    except ImportError as error:
        raise ImportError(MISSING) from error
    for cached in (distributed.get_rank, distributed.get_world_size, distributed.is_distributed):
        cached.cache_clear()
    return ring_attention_pytorch


@contextlib.contextmanager
def _default_dtype(dtype):
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype in (torch.float32, torch.float64) else saved)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)
