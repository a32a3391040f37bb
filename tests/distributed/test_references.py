"""Lesson 20 against the real thing beyond one device: PyTorch's own context parallelism and ring-attention-pytorch.

Each case runs in N gloo processes (``attn.distributed.spawn``). Every process gives the reference and the course's
``ring_attention`` its shards of the same float64 inputs, and backpropagates the same upstream gradient through
both; the shards are put back in order here and compared with one-device ``scaled_dot_product_attention`` and
with each other. The largest differences are printed (``pytest -s`` shows them).

What each reference reaches (measured, and asserted below):

- PyTorch's flex-attention context parallelism: output and every gradient to 1e-12 (4e-15 at most).
- ring-attention-pytorch's ``ring_flash_attn``: output and query gradient to 1e-12 without a causal mask, 1e-8
  with one (it clamps a block's row sum to 1e-10 when the mask hides the whole block, and adds it); its key and
  value gradients are wrong: it hands back dk + dv of the process's own shard as dk, and dk + dv of the next
  process's shard as dv (its last ring pass returns a pair that autograd sums).
- its ``zig_zag_attn``: output and query gradient to 1e-12; its all-gather's backward keeps only the gradient of
  the process's own queries (a reduce-scatter would add every process's).
- PyTorch's SDPA ring (``context_parallel``) does not run on the CPU.

Grouped-query heads: ring-attention-pytorch pairs query head i with key head i mod H_kv, PyTorch and the course
with i // (H / H_kv); its two functions here reorder the query heads around the call.
"""

import warnings

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention

from attn.distributed import ring_attention, shard, shard_positions, spawn
from attn.distributed.reference import (
    lucidrains_ring_attention,
    lucidrains_zig_zag_attention,
    striped_positions,
    torch_flex_context_parallel,
    torch_head_tail_positions,
    torch_sdpa_ring_attempt,
)

try:  # imported here once, so that every process forked from this one has it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # beartype's deprecation of the package's typing.Tuple hints
        import ring_attention_pytorch
        import ring_attention_pytorch.zig_zag_attention  # noqa: F401
except ImportError:
    ring_attention_pytorch = None
needs_lucidrains = pytest.mark.skipif(ring_attention_pytorch is None, reason="ring-attention-pytorch is not installed "
                                      "(pip install -r requirements.txt installs its pin)")

EXACT = 1e-12  # float64, every difference from the order of the sums
LUCIDRAINS_CAUSAL = 1e-8  # ring_flash_attn's 1e-10 floor on the row sums of blocks the causal mask hides
REFERENCES = {"flex": torch_flex_context_parallel, "lucidrains": lucidrains_ring_attention,
              "zigzag": lucidrains_zig_zag_attention}
NOT_ON_CPU = ("NotImplementedError: Operator aten._scaled_dot_product_flash_attention_for_cpu.default does not have a "
              "sharding strategy registered.")


def positions_of(length, world_size, layout):
    if layout == "striped":
        return striped_positions(length, world_size)
    return shard_positions(length, world_size, layout)


def backward_through(attention, inputs, upstream, positions, **options):
    """This process's output and its query, key and value gradients: four (B, H, T_r, d) shards."""
    query, key, value = (x[:, :, positions].clone().requires_grad_() for x in inputs)
    output = attention(query, key, value, **options)
    (output * upstream[:, :, positions]).sum().backward()
    return output.detach(), query.grad, key.grad, value.grad


def attend(rank, world_size, inputs, upstream, cases):
    """For each case (reference, is_causal, layout): the reference's shards and the course's, with positions."""
    length, found = inputs[0].shape[2], []
    for name, is_causal, layout in cases:
        theirs_at = positions_of(length, world_size, layout)[rank]
        options = {"is_causal": is_causal} | ({} if name == "zigzag" else {"layout": layout})
        theirs = backward_through(REFERENCES[name], inputs, upstream, theirs_at, **options)
        ours_layout = "contiguous" if layout == "striped" else layout  # the course has no striped layout
        ours_at = shard_positions(length, world_size, ours_layout)[rank]
        ours = backward_through(ring_attention, inputs, upstream, ours_at, is_causal=is_causal, layout=ours_layout)
        found.append(((theirs_at, theirs), (ours_at, ours)))
    return found


def in_order(pieces):
    """(positions, four shards) of every process -> four whole (B, H, T, d) tensors."""
    wholes = []
    for index in range(4):
        first = pieces[0][1][index]
        whole = first.new_empty(*first.shape[:2], sum(len(at) for at, _ in pieces), first.shape[3])
        for at, shards in pieces:
            whole[:, :, at] = shards[index]
        wholes.append(whole)
    return wholes


def one_device(inputs, upstream, is_causal):
    query, key, value = (x.clone().requires_grad_() for x in inputs)
    output = scaled_dot_product_attention(query, key, value, is_causal=is_causal)
    (output * upstream).sum().backward()
    return output.detach(), query.grad, key.grad, value.grad


def largest(these, those):
    return [(a - b).abs().max().item() for a, b in zip(these, those, strict=True)]


def compare(world_size, length, cases, seed=0, heads=2):
    """Run every case in one spawn; per case, the largest differences (output, dq, dk, dv) of the reference
    from one-device attention, of the course's ring from it, and of the two from each other."""
    generator = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(2, heads, length, 8, generator=generator, dtype=torch.float64) for _ in range(3)]
    upstream = torch.randn(2, heads, length, 8, generator=generator, dtype=torch.float64)
    results = spawn(attend, world_size, inputs, upstream, cases)
    report = {}
    for index, (name, is_causal, layout) in enumerate(cases):
        truth = one_device(inputs, upstream, is_causal)
        theirs = in_order([found[index][0] for found in results])
        ours = in_order([found[index][1] for found in results])
        report[name, is_causal, layout] = (largest(theirs, truth), largest(ours, truth), largest(theirs, ours))
        print(f"N={world_size} T={length} {name} causal={is_causal} {layout}: (output, dq, dk, dv) vs one device "
              f"{fmt(report[name, is_causal, layout][0])}; course's ring vs it {fmt(report[name, is_causal, layout][2])}")
    return report, inputs, upstream


def fmt(differences):
    return "(" + ", ".join(f"{d:.1e}" for d in differences) + ")"


CASES_ALL = [(causal, layout) for causal in (False, True) for layout in ("contiguous", "zigzag")]


@pytest.fixture(scope="module")
def warm_flex():
    """flex_attention in eager mode traces itself with dynamo on its first call (about 2 s of CPU); done once here,
    every process forked from this one starts warm."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex_attention says it is unfused
        for length in (4, 6):
            mask = create_block_mask(lambda b, h, q, k: q >= k, 1, 1, length, length, device="cpu", BLOCK_SIZE=2)
            inputs = [torch.randn(1, 1, length, 4, dtype=torch.float64) for _ in range(3)]
            flex_attention(*inputs, block_mask=mask)
            flex_attention(*inputs)


@pytest.mark.usefixtures("warm_flex")
@pytest.mark.parametrize(("world_size", "length"), [(2, 12), (3, 18)])
def test_pytorch_flex_context_parallel_equals_one_device_attention_and_the_courses_ring(world_size, length):
    cases = [("flex", causal, layout) for causal, layout in CASES_ALL]
    report, _, _ = compare(world_size, length, cases)
    for theirs, ours, between in report.values():
        assert max(theirs) < EXACT and max(ours) < EXACT and max(between) < EXACT


@needs_lucidrains
@pytest.mark.parametrize(("world_size", "length"), [(2, 12), (4, 16)])
def test_ring_attention_pytorch_output_and_query_gradient_equal_one_device_attention_and_the_courses_ring(
        world_size, length):
    cases = [("lucidrains", causal, layout) for causal in (False, True) for layout in ("contiguous", "striped")]
    cases += [("zigzag", causal, "zigzag") for causal in (False, True)]
    report, _, _ = compare(world_size, length, cases)
    for (name, is_causal, _), (theirs, ours, between) in report.items():
        tolerance = LUCIDRAINS_CAUSAL if name == "lucidrains" and is_causal else EXACT
        assert max(theirs[:2]) < tolerance and max(between[:2]) < tolerance  # output and dq
        assert max(ours) < EXACT
        assert min(theirs[2:]) > 0.1  # dk and dv: see the next two tests


@needs_lucidrains
def test_ring_attention_pytorch_hands_back_key_plus_value_gradients():
    """Its backward carries the right dk and dv around the ring, but returns the pair (received, sent) of its
    last pass as (dk, dv), each a stack of [dk, dv] that autograd sums: dk + dv of this shard, and of the next."""
    world_size, length = 3, 12
    cases = [("lucidrains", causal, "contiguous") for causal in (False, True)]
    generator = torch.Generator().manual_seed(1)
    inputs = [torch.randn(1, 2, length, 4, generator=generator, dtype=torch.float64) for _ in range(3)]
    upstream = torch.randn(1, 2, length, 4, generator=generator, dtype=torch.float64)
    results = spawn(attend, world_size, inputs, upstream, cases)
    for index, (_, is_causal, _) in enumerate(cases):
        _, _, true_key, true_value = one_device(inputs, upstream, is_causal)
        both = true_key + true_value
        for rank, found in enumerate(results):
            at, (_, _, their_key, their_value) = found[index][0]
            after = positions_of(length, world_size, "contiguous")[(rank + 1) % world_size]
            assert (their_key - both[:, :, at]).abs().max() < LUCIDRAINS_CAUSAL
            assert (their_value - both[:, :, after]).abs().max() < LUCIDRAINS_CAUSAL


@needs_lucidrains
def test_ring_attention_pytorch_zig_zag_keeps_only_its_own_queries_key_gradients():
    """zig_zag_attn's all-gather gives each process the slice of the gathered keys' gradient that its own
    queries produced; the true gradient adds the slices of every process (the backward of an all-gather is a
    reduce-scatter, which PyTorch's flex path does)."""
    world_size, length = 2, 8
    generator = torch.Generator().manual_seed(2)
    inputs = [torch.randn(1, 2, length, 4, generator=generator, dtype=torch.float64) for _ in range(3)]
    upstream = torch.randn(1, 2, length, 4, generator=generator, dtype=torch.float64)
    results = spawn(attend, world_size, inputs, upstream, [("zigzag", True, "zigzag")])
    for found in results:
        at, (_, _, their_key, their_value) = found[0][0]
        only_mine = torch.zeros_like(upstream)
        only_mine[:, :, at] = upstream[:, :, at]  # the loss of this process's queries alone
        _, _, key_from_mine, value_from_mine = one_device(inputs, only_mine, True)
        assert (their_key - key_from_mine[:, :, at]).abs().max() < EXACT
        assert (their_value - value_from_mine[:, :, at]).abs().max() < EXACT


def grouped(rank, world_size, inputs, upstream, name, layout):
    at = positions_of(inputs[0].shape[2], world_size, layout)[rank]
    options = {"is_causal": True} | ({} if name == "zigzag" else {"layout": layout})
    return at, backward_through(REFERENCES[name], inputs, upstream, at, **options)[:2]


@pytest.mark.usefixtures("warm_flex")
@pytest.mark.parametrize(("name", "layout"), [("flex", "zigzag"), pytest.param("lucidrains", "striped", marks=needs_lucidrains),
                                              pytest.param("zigzag", "zigzag", marks=needs_lucidrains)])
def test_grouped_query_heads_pair_as_in_pytorch(name, layout):
    """Four query heads on two key heads: query head i reads key head i // 2 (ring-attention-pytorch pairs i with
    i mod 2, so its functions reorder the query heads around the call)."""
    generator = torch.Generator().manual_seed(6)
    query, upstream = (torch.randn(1, 4, 8, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    key, value = (torch.randn(1, 2, 8, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    found = spawn(grouped, 2, [query, key, value], upstream, name, layout)
    leaf = query.clone().requires_grad_()
    truth = scaled_dot_product_attention(leaf, key, value, is_causal=True, enable_gqa=True)
    (truth * upstream).sum().backward()
    tolerance = LUCIDRAINS_CAUSAL if name == "lucidrains" else EXACT
    for at, (output, grad_query) in found:
        assert (output - truth.detach()[:, :, at]).abs().max() < tolerance
        assert (grad_query - leaf.grad[:, :, at]).abs().max() < tolerance


def float32_ring(rank, world_size, inputs):
    shards = [shard(x, rank, world_size) for x in inputs]
    return lucidrains_ring_attention(*shards, is_causal=True)


@needs_lucidrains
def test_ring_attention_pytorch_in_float32():
    inputs = [torch.randn(1, 2, 8, 4, generator=torch.Generator().manual_seed(3)) for _ in range(3)]
    output = torch.cat(spawn(float32_ring, 2, inputs), dim=2)
    difference = (output - scaled_dot_product_attention(*inputs, is_causal=True)).abs().max().item()
    print(f"ring-attention-pytorch in float32, causal: largest difference {difference:.1e}")
    assert output.dtype == torch.float32 and difference < 1e-5


def sdpa_attempts(rank, world_size, inputs):
    shards = [shard(x, rank, world_size) for x in inputs]
    return [torch_sdpa_ring_attempt(*shards, is_causal=is_causal) for is_causal in (False, True)]


def test_pytorchs_sdpa_ring_says_why_it_does_not_run_on_the_cpu():
    inputs = [torch.randn(1, 2, 8, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64) for _ in range(3)]
    results = spawn(sdpa_attempts, 2, inputs)
    for index, is_causal in enumerate((False, True)):
        attempts = [found[index] for found in results]
        if attempts[0][1] is None:  # it ran (a later PyTorch?): then it is a reference like the others
            output = torch.cat([output for output, _ in attempts], dim=2)
            assert (output - scaled_dot_product_attention(*inputs, is_causal=is_causal)).abs().max() < EXACT
            continue
        assert [sentence for _, sentence in attempts] == [NOT_ON_CPU] * 2
        print(f"PyTorch's SDPA ring path does not run on the CPU: {attempts[0][1]}")


@pytest.mark.parametrize(("length", "world_size"), [(4, 2), (12, 3), (16, 4), (40, 4)])
def test_pytorchs_head_tail_balancer_is_the_zigzag_layout_where_2n_divides_t(length, world_size):
    theirs, ours = torch_head_tail_positions(length, world_size), shard_positions(length, world_size, "zigzag")
    assert all(torch.equal(a, b) for a, b in zip(theirs, ours, strict=True))


def test_pytorchs_head_tail_balancer_refuses_what_the_zigzag_layout_splits_unevenly():
    assert [len(p) for p in shard_positions(10, 2, "zigzag")] == [5, 5]  # runs 3, 3, 2, 2: rank 0 has 3 + 2
    with pytest.raises(ValueError, match="2 x 2 must divide the length"):
        torch_head_tail_positions(10, 2)


def pytorchs_shards(rank, world_size, x):
    """PyTorch's _context_parallel_shard with its head-tail balancer, and ring-attention-pytorch's zig_zag_shard."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental._context_parallel import _context_parallel_shard, _HeadTailLoadBalancer

    mesh = init_device_mesh("cpu", (world_size,))
    balancer = _HeadTailLoadBalancer(x.shape[2], world_size, "cpu")
    torch_shard = _context_parallel_shard(mesh, [x], [2], load_balancer=balancer)[0]
    theirs = None
    if ring_attention_pytorch is not None:
        ring_attention_pytorch.distributed.get_rank.cache_clear()
        ring_attention_pytorch.distributed.get_world_size.cache_clear()
        (theirs, _, _), _ = ring_attention_pytorch.zig_zag_attention.zig_zag_shard(x)
    return torch_shard, theirs


def test_pytorchs_context_parallel_shard_and_zig_zag_shard_cut_the_courses_zigzag_shards():
    x = torch.randn(2, 3, 12, 4, generator=torch.Generator().manual_seed(5))
    for rank, (torch_shard, their_shard) in enumerate(spawn(pytorchs_shards, 3, x)):
        ours = shard(x, rank, 3, "zigzag")
        assert torch.equal(torch_shard, ours)
        assert their_shard is None or torch.equal(their_shard, ours)


def refused(rank, world_size, name, length, layout):
    cut = layout if layout in ("contiguous", "zigzag") else "contiguous"
    inputs = [shard(torch.randn(1, 2, length, 4, dtype=torch.float64), rank, world_size, cut) for _ in range(3)]
    options = {} if name in ("zigzag", "sdpa") else {"layout": layout}
    function = {**REFERENCES, "sdpa": torch_sdpa_ring_attempt}[name]
    return function(*inputs, **options)


@pytest.mark.parametrize(("name", "length", "layout", "message"), [
    ("flex", 5, "contiguous", "needs shards of one length"),
    ("flex", 6, "zigzag", "needs shards of one length"),
    ("zigzag", 6, "zigzag", "needs shards of one length"),
    ("lucidrains", 5, "contiguous", "needs shards of one length"),
    ("lucidrains", 6, "zigzag", "layout must be one of 'contiguous', 'striped'"),
    ("sdpa", 7, "contiguous", "needs shards of one length"),
])
def test_uneven_or_unknown_splits_get_a_sentence_in_every_process(name, length, layout, message):
    if name in ("lucidrains", "zigzag") and ring_attention_pytorch is None and "layout" not in message:
        pytest.skip("ring-attention-pytorch is not installed")
    with pytest.raises(ValueError, match=message):
        spawn(refused, 2, name, length, layout)


@pytest.mark.parametrize("function", [torch_flex_context_parallel, lucidrains_ring_attention,
                                      lucidrains_zig_zag_attention, torch_sdpa_ring_attempt])
def test_outside_a_process_group_each_reference_says_so(function):
    shards = [torch.randn(1, 2, 4, 4) for _ in range(3)]
    with pytest.raises(ValueError, match="initialised process group"):
        function(*shards)


def test_the_sdpa_sentence_keeps_no_address_path_or_process_id():
    from attn.distributed.reference import _sentence

    error = NotImplementedError("Operator at 0x7f3a2b1c0d90 in /home/someone/.venv/lib/torch/x.py failed in process 4242"
                                "\nsecond line")
    assert _sentence(error) == "NotImplementedError: Operator at 0x... in <path> failed in process ..."
    assert len(_sentence(ValueError("word " * 200))) < 330


def auto_sharded(rank, world_size, inputs, upstream):
    """RingAttention(auto_shard_seq=True) on this process's sequence, and the same module without the ring: both
    outputs and both gradients of the input (float64)."""
    from ring_attention_pytorch.ring_attention import RingAttention

    length = inputs.shape[2]
    torch.set_default_dtype(torch.float64)  # this process only: the package builds its masks in the default dtype
    torch.manual_seed(0)
    ring = RingAttention(dim=8, dim_head=4, heads=2, causal=True, ring_attn=True, auto_shard_seq=True,
                         ring_seq_size=length // world_size, bucket_size=length // world_size, use_cuda_kernel=False)
    plain = RingAttention(dim=8, dim_head=4, heads=2, causal=True, bucket_size=length // world_size, use_cuda_kernel=False)
    plain.load_state_dict(ring.state_dict())
    found = []
    for module in (ring, plain):
        x = inputs[rank].clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            output = module(x)
        output.backward(upstream[rank])
        found.append((output.detach(), x.grad))
    return found


@needs_lucidrains
def test_ring_attention_pytorch_auto_shard_seq_drops_the_gradient_other_processes_computed():
    """RingAttention(auto_shard_seq=True) all-gathers every process's sequence with the same all-gather, whose
    backward keeps only this process's slice: the gradient of a process's input is zero outside the positions
    its own shard computed, where the true gradient is not. The outputs agree."""
    world_size, length = 2, 16
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(world_size, 1, length, 8, generator=generator, dtype=torch.float64)
    upstream = torch.randn(world_size, 1, length, 8, generator=generator, dtype=torch.float64)
    for rank, ((ring_output, ring_grad), (output, grad)) in enumerate(spawn(auto_sharded, world_size, inputs, upstream)):
        assert (ring_output - output).abs().max() < LUCIDRAINS_CAUSAL
        others = [p for p in range(length) if p // (length // world_size) != rank]  # positions of the other shard
        assert ring_grad[0, others].abs().max() == 0
        assert grad[0, others].abs().min() > 0
