"""attn.measure.memory.peak_bytes counts what a function holds, and lesson 12's memory claims hold when measured with it.

The explicit path's peak grows like T^2 (4x per doubling), the tiled one's is its output (like T) plus
one tile's temporaries (the same at every T), the input checks allocate nothing large, and the
recomputing backward keeps a training step's memory linear.
"""

import pytest
import torch

from attn.common.layer_checks import check_flash_inputs
from attn.common.validate import has_only_finite, require_finite
from attn.flash import flash_attention, tiled_attention
from attn.measure.memory import peak_bytes
from attn.multihead import explicit_attention

MIB = 2**20


def test_peak_counts_new_tensors_while_they_live():
    def two_at_once():
        first = torch.ones(1000)  # 4,000 bytes
        second = torch.ones(500, dtype=torch.float64)  # 4,000 bytes, alive with the first
        return first + 1, second

    def one_after_another():
        for _ in range(3):
            temporary = torch.zeros(250)  # 1,000 bytes, freed at the next turn
            del temporary

    assert peak_bytes(two_at_once) == 4000 + 4000 + 4000  # first, second and the sum
    assert peak_bytes(one_after_another) == 1000


def test_views_in_place_results_and_inputs_add_nothing():
    data = torch.ones(1000)

    def views_and_in_place(tensor):
        tensor.mul_(2)  # in place: the input's memory
        return tensor[10:].view(-1, 10).transpose(0, 1)

    assert peak_bytes(views_and_in_place, data) == 0


def inputs(length, requires_grad=False):
    generator = torch.Generator().manual_seed(length)
    return [torch.randn(1, 1, length, 64, generator=generator, requires_grad=requires_grad) for _ in range(3)]


def tiled(query, key, value):
    return tiled_attention(query, key, value, block_q=128, block_k=128)


def test_explicit_peak_grows_4x_per_doubling_and_tiled_is_its_output_plus_one_tiles_worth():
    explicit = [peak_bytes(explicit_attention, *inputs(length)) for length in (1024, 2048)]
    assert 3.8 < explicit[1] / explicit[0] < 4.2, explicit
    assert explicit[1] >= 2 * 2048**2 * 4  # the scores and the weights, T x T float32 each
    rest = {length: peak_bytes(tiled, *inputs(length)) - length * (64 + 1) * 4 for length in (512, 1024, 2048)}
    assert len(set(rest.values())) == 1, rest  # minus the output (T, d) and log-sum-exps (T,): the same at every T
    assert 128 * 128 * 4 < rest[512] < 8 * 128 * 128 * 4  # a few arrays of one 128 x 128 tile


def test_the_input_checks_allocate_nothing_large():
    """What lesson 12 measures is the algorithm: the finite checks reduce to two numbers, no mask as large as the input."""
    query, key, value = inputs(4096)
    assert peak_bytes(check_flash_inputs, query, key, value, False, 64, 64) <= 64
    assert peak_bytes(require_finite, "query", query) <= 64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64])
def test_the_finite_check_finds_every_nan_and_inf(dtype):
    tensor = torch.randn(3, 257).to(dtype)
    assert has_only_finite(tensor) and has_only_finite(tensor[:0])
    assert has_only_finite(torch.full((5,), torch.finfo(tensor.real.dtype).max, dtype=dtype))
    for bad in (float("nan"), float("inf"), float("-inf")):
        for where in ((0, 0), (2, 256), (1, 100)):
            spoiled = tensor.clone()
            spoiled[where] = bad
            assert not has_only_finite(spoiled), (bad, where)
            with pytest.raises(ValueError, match="contains NaN or inf"):
                require_finite("x", spoiled)


def test_recomputing_backward_keeps_training_memory_linear():
    def step(attend, length):
        query, key, value = inputs(length, requires_grad=True)
        return peak_bytes(lambda: attend(query, key, value).sum().backward())

    explicit = step(lambda q, k, v: explicit_attention(q, k, v)[0], 2048)
    recomputed = step(lambda q, k, v: flash_attention(q, k, v, block_q=128, block_k=128), 2048)
    assert explicit > 20 * recomputed, (explicit / MIB, recomputed / MIB)
    assert recomputed < 3 * 2048 * 64 * 4 * 2  # about the three gradients, T x d each


@pytest.mark.parametrize("not_a_function", [3, None, "tiled", torch.ones(2)])
def test_peak_bytes_refuses_what_it_cannot_call(not_a_function):
    with pytest.raises(TypeError, match="peak_bytes measures a function, got .*; pass the function itself"):
        peak_bytes(not_a_function)


def test_a_function_that_raises_leaves_no_counter_behind():
    with pytest.raises(ZeroDivisionError):
        peak_bytes(lambda: 1 / 0)
    assert peak_bytes(lambda: torch.ones(10)) == 40
