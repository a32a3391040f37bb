"""Attention over pictures (lesson 23): patches as tokens, and rotary positions in two dimensions.

A Vision Transformer (Dosovitskiy et al. 2021) cuts an image into p x p patches and reads each as a token:
``patches`` (a loop over the grid in ``patches_loop``, then one reshape and permute) gives them in row-major
order over the grid, each patch's values in (channel, row, column) order, the order in which a convolution
with kernel and stride p (the patch embedding of ViT, DINOv2 and DINOv3) reads them.

2D rotary (axial RoPE; DINOv3, Simeoni et al. 2025): lesson 8's pairs, split between the two axes. In a head of
d features, pairs 0 to d/4 - 1 turn by the patch's row times their frequency, pairs d/4 to d/2 - 1 by its column
times the same frequencies (``rotary_2d_frequencies``: base^(-4i / d)). A query and a key then meet with a score
that depends on the row offset and the column offset between them, not on where they stand.
``apply_rotary_2d_loop`` turns one pair at a time; ``apply_rotary_2d`` does the same at once.

The mixed-axis form (RoPE-Mixed, Heo et al. 2024) lets every pair turn with both axes,
angle = row * theta_row_i + col * theta_col_i, with the frequencies learned per head, so that a head can
measure offsets along diagonals: ``apply_rotary_mixed``. Axial 2D rotary is its special case in which
theta_col is 0 for the first half of the pairs and theta_row is 0 for the second.

Pairing, as in attn.apply_rotary: features (2i, 2i + 1) form pair i (DINOv3's code pairs i with i + d/2, the
same rotation once the features are permuted: attn.models.llama.rotate_half_to_pairs).
"""

import math

import torch

from attn.common.validate import has_only_finite, positive_int, positive_number, require_computable, require_finite


def check_images(images, patch_size):
    """images: a float tensor (B, C, H, W) of finite pixels whose H and W the patch size divides; returns p."""
    patch_size = positive_int("patch_size", patch_size)
    require_computable("images", images)
    if images.dim() == 2:
        raise ValueError(f"images must have shape (B, C, H, W), got one picture of shape {tuple(images.shape)}; a grayscale "
                         "picture needs a batch and a channel axis: images[None, None]")
    if images.dim() == 3:
        raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}; a batch of grayscale pictures "
                         "(B, H, W) needs a channel axis, images[:, None], and one colour picture (C, H, W) a batch axis, "
                         "images[None]")
    if images.dim() != 4 or 0 in images.shape:
        raise ValueError(f"images must have shape (B, C, H, W) with no empty axis, got {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"images must hold floating-point pixels, got {images.dtype}; convert them with "
                        "images.float(), and divide by 255 as well only for bytes (0 to 255) that are to be scaled to "
                        "0 to 1 (images.float() / 255)")
    height, width = images.shape[-2:]
    if height % patch_size or width % patch_size:
        channels_last = ""
        if images.shape[-1] in (1, 3) and images.shape[1] not in (1, 3):
            channels_last = (f"; shape {tuple(images.shape)} looks like pictures stored channels-last (B, H, W, C): "
                             "put the channels second with images.permute(0, 3, 1, 2)")
        raise ValueError(f"a patch of {patch_size} x {patch_size} pixels does not divide the image of {height} x {width}: "
                         f"crop or pad the image to a multiple of {patch_size} on each side, or choose another patch size"
                         f"{channels_last}")
    require_finite("images", images, "every patch that holds it would carry it into attention")
    return patch_size


def patches_loop(images, patch_size):
    """``patches`` one patch at a time: the grid read row by row, each patch flattened as (C, p, p)."""
    p = check_images(images, patch_size)
    batch, _, height, width = images.shape
    tokens = []
    for row in range(height // p):  # the grid's rows, top to bottom
        for col in range(width // p):  # within a row, left to right
            patch = images[:, :, row * p:(row + 1) * p, col * p:(col + 1) * p]  # (B, C, p, p)
            tokens.append(patch.reshape(batch, -1))  # (B, C * p * p): channel, then row, then column
    return torch.stack(tokens, dim=1)  # (B, N, p * p * C)


def patches(images, patch_size):
    """The image's p x p patches as tokens: images (B, C, H, W) -> (B, N, p * p * C), N = (H / p) (W / p).

    Patch n is at grid row n // (W / p) and column n % (W / p) (row-major); its values in (channel, row, column)
    order, as nn.Conv2d(C, E, kernel_size=p, stride=p) reads them: a linear layer on these tokens with the
    convolution's weight reshaped to (E, C * p * p) gives the convolution's output.
    """
    p = check_images(images, patch_size)
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, height // p, p, width // p, p)  # (B, C, H/p, p, W/p, p)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, H/p, W/p, C, p, p)
    return grid.reshape(batch, (height // p) * (width // p), channels * p * p)


def grid_positions(grid_height, grid_width):
    """The row and the column of each patch, read row-major: two int64 tensors (N,), N = grid_height * grid_width."""
    grid_height, grid_width = positive_int("grid_height", grid_height), positive_int("grid_width", grid_width)
    if grid_height * grid_width > 2**24:
        raise ValueError(f"a grid of {grid_height} x {grid_width} patches is far larger than any picture here; "
                         "use a grid of at most 2**24 patches")
    rows = torch.arange(grid_height).repeat_interleave(grid_width)  # 0, 0, ..., 1, 1, ...
    cols = torch.arange(grid_width).repeat(grid_height)  # 0, 1, ..., 0, 1, ...
    return rows, cols


def rotary_2d_frequencies(head_dim, base=100.0):
    """The frequencies theta_i = base^(-4i / d) of 2D rotary, i = 0 ... d/4 - 1: a float64 tensor (d/4,).

    Each axis gets d/4 pairs, so the exponent steps by 4/d where lesson 8's 1D rotary steps by 2/d: both axes span
    the same range of speeds, from 1 down to about 1/base. DINOv3's default base is 100.
    """
    head_dim = positive_int("head_dim", head_dim)
    if head_dim % 4:
        raise ValueError(f"head_dim must be a multiple of 4 for 2D rotary (pairs of features, half for rows and half "
                         f"for columns), got {head_dim}")
    base = positive_number("base", base)
    if base == 1:
        raise ValueError("base must not be 1: every pair would turn at the same speed")
    return base ** (-torch.arange(0, head_dim // 4, dtype=torch.float64) * 4 / head_dim)


def _check_positions(name, positions, length, device):
    require_computable(name, positions)
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must hold integers or real numbers, got {positions.dtype}")
    if positions.shape != (length,):
        raise ValueError(f"{name} must have shape (T,) = ({length},), one position per token, got {tuple(positions.shape)}")
    if positions.device != device:
        raise ValueError(f"{name} is on device {positions.device} but x is on {device}; move it with {name}.to(x.device)")
    if positions.is_floating_point():
        require_finite(name, positions, "every angle it makes would be NaN")
    if positions.numel() and positions.abs().max().item() > 2**24:
        raise ValueError(f"{name} holds positions beyond 2**24, where float32 angles lose whole turns: use smaller positions")


def _check_frequencies(name, frequencies, count):
    require_computable(name, frequencies)
    if not frequencies.is_floating_point():
        raise TypeError(f"{name} must hold real numbers, got {frequencies.dtype}")
    if frequencies.shape[-1:] != (count,) or frequencies.dim() not in (1, 2):
        raise ValueError(f"{name} must have shape ({count},) or (H, {count}), got {tuple(frequencies.shape)}")
    require_finite(name, frequencies, "every angle it makes would be NaN")
    if frequencies.abs().max().item() > 1e6:
        raise ValueError(f"{name} holds frequencies above 1e6 turns per position, which float32 cannot turn by; use smaller ones")


def _check_rotary_input(x, rows, cols, pairs_per_axis=4):
    """x (..., T, d) finite floats with d divisible by ``pairs_per_axis``; rows and cols (T,) positions."""
    require_computable("x", x)
    if not x.is_floating_point():
        raise TypeError(f"x must hold floating-point numbers, got {x.dtype}; convert it with x.float()")
    if x.dim() < 2 or x.shape[-1] == 0 or x.shape[-1] % pairs_per_axis:
        raise ValueError(f"x must have shape (..., T, d) with d a multiple of {pairs_per_axis} (pairs of features, "
                         f"{'half turning with the row, half with the column' if pairs_per_axis == 4 else 'each a pair'}), "
                         f"got {tuple(x.shape)}")
    require_finite("x", x, "rotating it would carry it into every score it enters")
    _check_positions("rows", rows, x.shape[-2], x.device)
    _check_positions("cols", cols, x.shape[-2], x.device)


def _turn_pairs(x, angles):
    """Pair i of x (..., T, d) turned by angles (..., T, d/2): features (2i, 2i + 1) rotated as one point."""
    pairs = x.unflatten(-1, (x.shape[-1] // 2, 2))  # (..., T, d/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = angles.cos(), angles.sin()
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def _compute_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _finite_result(x, turned):
    """``turned`` in x's dtype, or a sentence where turning overflowed it (float16: a turned pair can be sqrt(2) times
    longer than its largest feature, past 65,504)."""
    turned = turned.to(x.dtype)
    if x.dtype in (torch.float16, torch.bfloat16) and not has_only_finite(turned):
        raise ValueError(f"x is finite, but rotating it overflows {x.dtype}: the largest |x| is {x.abs().max().item():.3g}; "
                         "scale x down or use a wider dtype")
    return turned


def apply_rotary_2d_loop(x, rows, cols, frequencies):
    """``apply_rotary_2d`` one token and one pair at a time (slow; for reading and for tests)."""
    _check_rotary_input(x, rows, cols)
    quarter = x.shape[-1] // 4
    _check_frequencies("frequencies", frequencies, quarter)
    if frequencies.dim() != 1:
        raise ValueError(f"frequencies must have shape ({quarter},), got {tuple(frequencies.shape)}")
    compute = _compute_dtype(x)
    out = x.to(compute).clone()
    for t in range(x.shape[-2]):
        for i in range(2 * quarter):  # pair i: features 2i and 2i + 1
            position = rows[t] if i < quarter else cols[t]  # the first d/4 pairs read the row, the rest the column
            angle = torch.as_tensor(position, dtype=compute) * frequencies[i % quarter].to(compute)
            a, b = x[..., t, 2 * i].to(compute), x[..., t, 2 * i + 1].to(compute)
            out[..., t, 2 * i] = a * torch.cos(angle) - b * torch.sin(angle)
            out[..., t, 2 * i + 1] = a * torch.sin(angle) + b * torch.cos(angle)
    return _finite_result(x, out)


def apply_rotary_2d(x, rows, cols, frequencies):
    """2D rotary: x (..., T, d) turned pair by pair by each token's grid position; same shape and dtype.

    rows, cols: (T,) the row and the column of each token (integers, or real numbers such as DINOv3's
    coordinates); frequencies: (d/4,) from ``rotary_2d_frequencies``. Pair i < d/4 turns by rows * theta_i,
    pair d/4 + i by cols * theta_i. Apply it to the queries and keys of the patch tokens (not the class token
    or registers, which have no place on the grid). Angles in float64 for float64 x, else float32.
    """
    _check_rotary_input(x, rows, cols)
    quarter = x.shape[-1] // 4
    _check_frequencies("frequencies", frequencies, quarter)
    if frequencies.dim() != 1:
        raise ValueError(f"frequencies must have shape ({quarter},), got {tuple(frequencies.shape)}")
    compute = _compute_dtype(x)
    frequencies = frequencies.to(device=x.device, dtype=compute)
    angles = torch.cat([rows.to(compute)[:, None] * frequencies, cols.to(compute)[:, None] * frequencies], dim=-1)
    return _finite_result(x, _turn_pairs(x.to(compute), angles))  # angles (T, d/2) broadcast over the leading axes


def apply_rotary_mixed(x, rows, cols, row_frequencies, col_frequencies):
    """RoPE-Mixed (Heo et al. 2024): pair i turns by rows * row_frequencies[i] + cols * col_frequencies[i].

    x (..., T, d); rows, cols (T,); row_frequencies, col_frequencies (d/2,) or, per head, (H, d/2) with x
    (B, H, T, d). In the paper the frequencies are parameters, learned. Same shape and dtype as x.
    """
    _check_rotary_input(x, rows, cols, pairs_per_axis=2)
    half = x.shape[-1] // 2
    _check_frequencies("row_frequencies", row_frequencies, half)
    _check_frequencies("col_frequencies", col_frequencies, half)
    if row_frequencies.shape != col_frequencies.shape:
        raise ValueError(f"row_frequencies {tuple(row_frequencies.shape)} and col_frequencies {tuple(col_frequencies.shape)} "
                         "must have the same shape")
    if row_frequencies.dim() == 2 and (x.dim() != 4 or x.shape[1] != row_frequencies.shape[0]):
        raise ValueError(f"per-head frequencies {tuple(row_frequencies.shape)} need x of shape (B, H, T, d) with H = "
                         f"{row_frequencies.shape[0]}, got {tuple(x.shape)}")
    compute = _compute_dtype(x)
    row_frequencies = row_frequencies.to(device=x.device, dtype=compute)
    col_frequencies = col_frequencies.to(device=x.device, dtype=compute)
    if row_frequencies.dim() == 2:  # (H, d/2) -> (H, 1, d/2), against (T, 1)
        row_frequencies, col_frequencies = row_frequencies[:, None], col_frequencies[:, None]
    angles = rows.to(compute)[:, None] * row_frequencies + cols.to(compute)[:, None] * col_frequencies
    return _finite_result(x, _turn_pairs(x.to(compute), angles))


def dinov3_coordinates(grid_height, grid_width):
    """DINOv3's positions for a grid: each patch's centre scaled to [-1, 1] along each axis, times 2 pi.

    Two float64 tensors (N,), rows and cols, read row-major: row r of h becomes 2 pi (2 (r + 1/2) / h - 1). A
    grid of any size then spans the same range, so a larger picture is read by interpolating positions rather
    than extrapolating them (lesson 17's choice, in two dimensions).
    """
    rows, cols = grid_positions(grid_height, grid_width)
    scale = 2 * math.pi
    return (scale * (2 * (rows + 0.5) / grid_height - 1)).double(), (scale * (2 * (cols + 0.5) / grid_width - 1)).double()




# --- reading a trained ViT's attention (lesson 23's measures) --------------------------------------------------------


def _check_weights(weights, grid_height, grid_width, prefix):
    """weights (..., T, T) of finite real numbers with T = prefix + grid_height * grid_width; returns the ints."""
    grid_height, grid_width = positive_int("grid_height", grid_height), positive_int("grid_width", grid_width)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise TypeError(f"prefix must be a whole number of 0 or more (the class token and registers), got {prefix!r:.40}")
    require_computable("weights", weights)
    if not weights.is_floating_point():
        raise TypeError(f"weights must hold real numbers, got {weights.dtype}")
    tokens = prefix + grid_height * grid_width
    if weights.dim() < 2 or weights.shape[-2:] != (tokens, tokens):
        raise ValueError(f"weights must have shape (..., T, T) with T = {prefix} + {grid_height} x {grid_width} = {tokens}, "
                         f"got {tuple(weights.shape)}")
    require_finite("weights", weights, "every distance read from it would be NaN")
    return grid_height, grid_width, prefix


def _patch_distances(grid_height, grid_width, dtype, device):
    """(N, N): the distance between patch centres, in patches (Euclidean)."""
    rows, cols = grid_positions(grid_height, grid_width)
    offsets = torch.stack([rows, cols], dim=-1).to(dtype=dtype, device=device)  # (N, 2)
    return torch.cdist(offsets, offsets)


def attention_distance_loop(weights, grid_height, grid_width, prefix=1):
    """``attention_distance`` one query patch at a time (slow; for reading and for tests)."""
    grid_height, grid_width, prefix = _check_weights(weights, grid_height, grid_width, prefix)
    rows, cols = grid_positions(grid_height, grid_width)
    patches_count = grid_height * grid_width
    total = torch.zeros(weights.shape[:-2], dtype=weights.dtype, device=weights.device)
    for q in range(patches_count):
        row = weights[..., prefix + q, prefix:]  # (..., N): what patch q gives to each patch
        mass = row.sum(-1).clamp_min(torch.finfo(weights.dtype).tiny)
        for k in range(patches_count):
            distance = math.hypot(rows[q] - rows[k], cols[q] - cols[k])
            total = total + row[..., k] / mass * distance
    return total / patches_count


def attention_distance(weights, grid_height, grid_width, prefix=1):
    """How far, in patches, the patches read: the mean over query patches of sum_k w_qk |pos_q - pos_k|, (...,).

    weights (..., T, T), T = prefix + N, the tokens ordered as the ViT orders them (class token and registers, then
    the patches row-major); each query patch's weights on the patch keys are renormalised to sum to 1 (the share it
    gives the class token or registers is set aside). A layer reading only its neighbours scores about 1; one
    reading the whole grid evenly, the mean distance between two patches (about 3.6 on a 7 x 7 grid).
    """
    grid_height, grid_width, prefix = _check_weights(weights, grid_height, grid_width, prefix)
    among = weights[..., prefix:, prefix:]  # (..., N, N): patches reading patches
    among = among / among.sum(-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
    distances = _patch_distances(grid_height, grid_width, weights.dtype, weights.device)  # (N, N)
    return (among * distances).sum(-1).mean(-1)


def attention_rollout(weights):
    """Attention rollout (Abnar and Zuidema 2020): how much each token's input reaches each token's output, (B, T, T).

    weights (num_layers, B, H, T, T), as VisionTransformer(..., need_weights=True) returns them. Each layer's heads
    are averaged, the residual path added as an identity (0.5 W + 0.5 I, rows summing to 1), and the layers
    multiplied from the first up. Row 0, from the class token, over the patches, is the map lessons draw.
    """
    require_computable("weights", weights)
    if not weights.is_floating_point():
        raise TypeError(f"weights must hold real numbers, got {weights.dtype}")
    if weights.dim() != 5 or weights.shape[-1] != weights.shape[-2] or 0 in weights.shape:
        raise ValueError(f"weights must have shape (num_layers, B, H, T, T), got {tuple(weights.shape)}")
    require_finite("weights", weights, "the rollout would carry it to every token")
    tokens = weights.shape[-1]
    identity = torch.eye(tokens, dtype=weights.dtype, device=weights.device)
    rollout = identity.expand(weights.shape[1], tokens, tokens)
    for layer in weights:  # (B, H, T, T), first layer first
        mixed = 0.5 * layer.mean(1) + 0.5 * identity
        mixed = mixed / mixed.sum(-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
        rollout = mixed @ rollout
    return rollout


__all__ = ["patches", "patches_loop", "grid_positions", "rotary_2d_frequencies", "apply_rotary_2d", "apply_rotary_2d_loop",
           "apply_rotary_mixed", "dinov3_coordinates", "check_images", "attention_distance", "attention_distance_loop",
           "attention_rollout"]
