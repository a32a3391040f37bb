"""attn.sinusoidal_positions (NumPy) and attn.apply_rotary (PyTorch): the formulas, their properties, their errors."""

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attn
from attn import apply_rotary, sinusoidal_positions


def test_import_attn_does_not_import_torch():
    code = "import sys, attn; attn.sinusoidal_positions(4, 2); assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names():
    assert {"KVCache", "MultiHeadAttention", "TransformerBlock", "apply_rotary", "sinusoidal_positions"} <= set(attn.__all__)
    for name in attn.__all__:
        assert getattr(attn, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'Transformer'"):
        attn.Transformer  # noqa: B018


@pytest.mark.parametrize("length, dim", [(1, 2), (5, 4), (12, 16), (50, 6)])
def test_sinusoidal_positions_follow_the_formula(length, dim):
    table = sinusoidal_positions(length, dim)
    assert table.shape == (length, dim) and table.dtype == np.float64
    for position in range(length):
        for i in range(dim // 2):
            angle = position / 10000 ** (2 * i / dim)
            assert table[position, 2 * i] == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[position, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-12)


@pytest.mark.parametrize(
    "length, dim, error, expected",
    [
        (0, 4, ValueError, "length must be positive, got 0"),
        (-3, 4, ValueError, "length must be positive, got -3"),
        (2.5, 4, TypeError, "length must be a positive int, got float 2.5"),
        (True, 4, TypeError, "length must be a positive int, got bool True"),
        ("8", 4, TypeError, "length must be a positive int, got str '8'"),
        (None, 4, TypeError, "length must be a positive int, got NoneType None"),
        (8, 5, ValueError, r"dim must be even \(columns come in sin/cos pairs\), got 5"),
        (8, 0, ValueError, "dim must be positive, got 0"),
        (8, 4.0, TypeError, "dim must be a positive int, got float 4.0"),
    ],
)
def test_sinusoidal_positions_refuse_bad_sizes(length, dim, error, expected):
    with pytest.raises(error, match=f"^{expected}$"):
        sinusoidal_positions(length, dim)


def test_sinusoidal_positions_accept_numpy_ints():
    assert sinusoidal_positions(np.int64(3), np.int32(4)).shape == (3, 4)


def rotate_with_complex_numbers(x, positions, base=10000.0):
    """RoFormer's definition: pair (x_2i, x_2i+1) is the complex number x_2i + i x_2i+1, multiplied by e^(i p theta_i)."""
    dim = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / dim) for i in range(dim // 2)], dtype=torch.float64)
    turn = torch.polar(torch.ones(len(positions), dim // 2, dtype=torch.float64), positions[:, None].double() * theta)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], dim // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).reshape(x.shape)


@pytest.mark.parametrize("dim", [2, 4, 8])
def test_rotary_equals_the_complex_number_definition(dim):
    x = torch.randn(2, 3, 5, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(5)
    torch.testing.assert_close(apply_rotary(x), rotate_with_complex_numbers(x, positions))
    torch.testing.assert_close(apply_rotary(x, base=100.0), rotate_with_complex_numbers(x, positions, base=100.0))


def test_rotary_pairs_neighbouring_features():
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0]]).repeat(3, 1).double()  # (T=3, d=4)
    rotated = apply_rotary(x)
    for p in range(3):
        slow = p * 10000 ** (-2 / 4)  # pair 1 turns 100 times slower than pair 0
        expected = [math.cos(p), math.sin(p), math.cos(slow), math.sin(slow)]
        assert rotated[p].tolist() == pytest.approx(expected, abs=1e-12)


def test_rotary_positions_can_be_offset_for_a_cache():
    x = torch.randn(1, 2, 9, 8, generator=torch.Generator().manual_seed(1))
    whole = apply_rotary(x)
    torch.testing.assert_close(apply_rotary(x[:, :, 6:], positions=torch.arange(6, 9)), whole[:, :, 6:])
    per_batch = torch.arange(9).expand(1, 2, 9)  # any shape that broadcasts to x.shape[:-1]
    torch.testing.assert_close(apply_rotary(x, positions=per_batch), whole)
    torch.testing.assert_close(apply_rotary(x, positions=torch.arange(9.0)), whole)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rotary_keeps_dtype_and_passes_gradients(dtype):
    x = torch.randn(2, 4, 6, dtype=dtype, requires_grad=True)
    rotated = apply_rotary(x)
    assert rotated.dtype == dtype and rotated.shape == x.shape
    rotated.square().sum().backward()
    assert torch.isfinite(x.grad).all()


positions_strategy = st.integers(0, 2000)


@given(st.integers(1, 8), positions_strategy, positions_strategy, st.integers(-500, 500), st.integers(0, 2**16))
def test_rotary_scores_depend_only_on_the_distance(half_dim, m, n, shift, seed):
    """q at m and k at n, or both moved by the same shift: the same dot product, and the same lengths."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(1, 2 * half_dim, dtype=torch.float64, generator=generator) for _ in range(2))
    m, n = max(m, -shift), max(n, -shift)  # keep every position >= 0

    def score(q_position, k_position):
        rotated_q = apply_rotary(q, positions=torch.tensor([q_position]))
        rotated_k = apply_rotary(k, positions=torch.tensor([k_position]))
        return (rotated_q @ rotated_k.T).item(), rotated_q.norm().item()

    (original, q_norm), (shifted, _) = score(m, n), score(m + shift, n + shift)
    assert shifted == pytest.approx(original, abs=1e-9)
    assert q_norm == pytest.approx(q.norm().item(), rel=1e-12)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**16))
def test_rotary_preserves_every_vectors_length(length, half_dim, seed):
    x = torch.randn(3, length, 2 * half_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(apply_rotary(x).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        ({"x": np.zeros((3, 4))}, TypeError, r"x must be a torch.Tensor, got numpy.ndarray; .*torch.as_tensor\(x\)"),
        ({"x": None}, TypeError, "x must be a torch.Tensor, got None"),
        ({"x": torch.zeros(3, 4, dtype=torch.int64)}, TypeError, "x must hold floating-point numbers, got torch.int64"),
        ({"x": torch.zeros(3, 5)}, ValueError, r"x must have shape \(..., T, d\) with d even .*got \(3, 5\)"),
        ({"x": torch.zeros(4)}, ValueError, r"x must have shape \(..., T, d\)"),
        ({"positions": [0, 1, 2]}, TypeError, r"positions must be a torch.Tensor, got list; convert it with torch.tensor"),
        ({"positions": torch.ones(3, dtype=torch.bool)}, TypeError, "positions must hold integers or real numbers"),
        ({"positions": torch.arange(4)}, ValueError, r"positions of shape \(4,\) must be \(T,\) or broadcast to .* \(2, 3\)"),
        ({"positions": torch.tensor(1)}, ValueError, r"positions of shape \(\) must be"),
        ({"positions": torch.tensor([0.0, float("nan"), 2.0])}, ValueError, "positions contains NaN or inf"),
        ({"positions": torch.arange(3, device="meta")}, ValueError, "positions is on device meta but x is on cpu"),
        ({"base": 0.0}, ValueError, "base must be a positive finite number, got 0.0"),
        ({"base": float("inf")}, ValueError, "base must be a positive finite number, got inf"),
        ({"base": "10000"}, TypeError, "base must be a positive number, got str"),
        ({"base": True}, TypeError, "base must be a positive number, got bool"),
    ],
)
def test_rotary_refuses_bad_arguments(kwargs, error, expected):
    arguments = {"x": torch.zeros(2, 3, 4), **kwargs}
    with pytest.raises(error, match=expected):
        apply_rotary(**arguments)


def rotary_scores(q, k, distances, start=0):
    """q . k with k at ``start`` and q at start + distance, for each distance (lesson 8's curves)."""
    positions = start + torch.tensor(list(distances))  # (N,)
    rotated_k = apply_rotary(k, positions=torch.tensor([start]))  # (1, d)
    rotated_q = apply_rotary(q.repeat(len(positions), 1), positions=positions)  # (N, d)
    return (rotated_q @ rotated_k.T)[:, 0].numpy()


@given(st.integers(1, 32), st.integers(0, 2**16), st.integers(0, 500))
def test_a_vector_scores_highest_against_itself_at_distance_0(half_dim, seed, start):
    """Lesson 8: for q = k, pair i adds |q_i|^2 cos(distance theta_i), so distance 0 is the top score."""
    vector = torch.randn(1, 2 * half_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    scores = rotary_scores(vector, vector, range(0, 65), start)
    assert scores[0] == pytest.approx((vector @ vector.T).item(), rel=1e-12)
    assert scores.max() <= scores[0] + 1e-9


def test_lesson_8s_measured_near_and_far():
    """The lesson's d = 64 vectors: for q = k the score falls overall but not at every step; for q != k it
    peaks far from distance 0."""
    generator = torch.Generator().manual_seed(8)
    torch.randn(2, 1, 8, dtype=torch.float64, generator=generator)  # the lesson's q and k come first
    vector, other = (torch.randn(1, 64, dtype=torch.float64, generator=generator) for _ in range(2))
    same, different = rotary_scores(vector, vector, range(65)), rotary_scores(vector, other, range(65))
    assert same.argmax() == 0 and same[-1] < same[0] / 3
    assert 0 < (np.diff(same) > 0).sum() < 32, "a trend with bumps, not a monotone fall"
    assert different.argmax() == 57 and different[57] > different[0] + 10
    far = rotary_scores(vector, vector, range(4096))
    means = [far[low:high].mean() for low, high in ((0, 64), (64, 256), (256, 1024), (1024, 4096))]
    assert means == sorted(means, reverse=True), "on average the score falls, window after window"
    assert far[1024:].max() > 2 * far[64], "but single far distances still beat nearer ones"
