"""Lesson 23's exercises: a picture's patches as tokens, the grid place each token turns by, one vector turned by 2D
rotary, and the shape of a ViT's output with registers.

Each names the mistakes the lesson warns of where they give another answer: patches read column-first (the grid, or
the pixels inside a patch) or divided by 255, the class token given a patch position, rotary pairs split by row for both
halves (or by column, or the halves swapped, or 1D rotary's frequencies, or lesson 8's base 10000, or every pair turned
by row and column together, or angles in degrees, or the query left unturned), and registers kept in the output (or
the axes out of order, or a patch's pixels as the width). The expected value is never shown.
"""

import numpy as np

from attn.course.exercises.answers import Array, Shape
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.registry import exercise

# Exercise 23.1: a 4 x 4 grayscale picture whose pixels are 0 .. 15 read row by row, cut into 2 x 2 patches.
SIDE, PATCH = 4, 2
# Exercise 23.2: a 2 x 3 grid of patches (2 rows, 3 columns) after a class token and one register; pair 0 of a head
# turns with the row at frequency 1, so its angle is the token's row.
GRID_ROWS, GRID_COLS, PREFIX = 2, 3, 2
# Exercise 23.3: one query of d = 8 features at row 1, column 2; 2D rotary with base 100.
QUERY = (1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0)
ROW, COL, BASE = 1, 2, 100.0
# Exercise 23.4: a course ViT with 4 registers reading a batch of 2 pictures of 28 x 28 with 7 x 7 patches, width 32.
BATCH, IMAGE, VIT_PATCH, REGISTERS, WIDTH = 2, 28, 7, 4, 32


def _picture():
    return np.arange(SIDE * SIDE, dtype=np.float64).reshape(SIDE, SIDE)


def _patches(grid_column_first=False, pixels_column_first=False):
    """The picture's patches as rows (N, p * p), or as one of the column-first mistakes reads them."""
    picture = _picture()
    places = [(r, c) for r in range(SIDE // PATCH) for c in range(SIDE // PATCH)]
    if grid_column_first:
        places = [(r, c) for c in range(SIDE // PATCH) for r in range(SIDE // PATCH)]
    tokens = []
    for r, c in places:
        patch = picture[r * PATCH:(r + 1) * PATCH, c * PATCH:(c + 1) * PATCH]
        tokens.append((patch.T if pixels_column_first else patch).reshape(-1))
    return np.stack(tokens)


def _package_patches():
    """23.1's answer from the course's attn.vision.patches."""
    import torch  # here, not at the top: ``import attn`` and check() must not import torch

    from attn.vision import patches

    return patches(torch.from_numpy(_picture())[None, None], PATCH)[0].numpy()


@exercise(
    "23.1",
    Array("your tokens"),
    solution=_package_patches,
    success="the grid is read row by row, left to right, and each patch's pixels row by row too: the order in which a "
            "convolution with kernel and stride 2 reads them, so a linear layer on these tokens is that convolution.",
)
def _tokens(answer, expected):
    if answer.ndim == 3 and answer.shape[0] == 1 and matches(answer[0], expected):
        return "drop the batch axis: give the one picture's tokens, one row per patch."
    if matches(answer, expected):
        return None
    for mistake, hint in (
        (_patches(grid_column_first=True), "those patches are read column-first: the grid is read row by row, left "
                                           "to right, then the next row down"),
        (_patches(pixels_column_first=True), "each patch's pixels are read column-first: a patch is flattened row "
                                             "by row, as reshape flattens it"),
        (_patches(True, True), "that reads the picture column-first twice, the grid and each patch: both are read "
                               "row by row"),
        (_picture(), "those are the picture's rows, not its patches: a reshape alone does not gather a patch's "
                     "pixels, which sit on two rows; split each side, then permute"),
        (_picture().T, "those are the picture's columns, not its patches"),
        (_patches() / 255, "those pixels are divided by 255: this picture holds the whole numbers 0 to 15, "
                                   "not bytes to scale; turn them into floats with .float() alone"),
    ):
        if matches(answer, mistake):
            return hint + "."
    if answer.shape != expected.shape:
        grid = SIDE // PATCH
        return (f"give one row per patch and one column per pixel of a patch: the {SIDE} x {SIDE} picture cut into "
                f"patches of {PATCH} x {PATCH} pixels makes a grid of {grid} x {grid} patches.")
    return compare(answer, expected, "your tokens") + " Read the grid row by row, and each patch row by row."


def _angles(class_on_grid=False, register_on_grid=False, by_column=False, grid_column_first=False):
    """Pair 0's angle for every token (frequency 1, so the row), or a mistake's."""
    count = GRID_ROWS * GRID_COLS
    if class_on_grid:  # the tokens counted from the class token: token t at patch t
        return np.array([t // GRID_COLS for t in range(PREFIX + count)], dtype=np.float64)
    if register_on_grid:  # the class token skipped, but the register given patch 0's place
        return np.array([0.0] + [t // GRID_COLS for t in range(count + 1)], dtype=np.float64)
    places = range(count)
    if grid_column_first:
        rows = [n % GRID_ROWS for n in places]
    elif by_column:
        rows = [n % GRID_COLS for n in places]
    else:
        rows = [n // GRID_COLS for n in places]
    return np.array([0.0] * PREFIX + rows, dtype=np.float64)


def _package_angles():
    """23.2's answer from attn.vision.grid_positions: the class token and the register are not turned."""
    import torch

    from attn.vision import grid_positions

    rows, _ = grid_positions(GRID_ROWS, GRID_COLS)
    return torch.cat([torch.zeros(PREFIX, dtype=torch.long), rows]).double().numpy()


@exercise(
    "23.2",
    Array("your angles"),
    solution=_package_angles,
    success="the class token and the register have no place on the grid, so they are not turned; the patches, read "
            "row by row, turn pair 0 by their row.",
)
def _rows(answer, expected):
    if matches(answer, expected):
        return None
    for mistake, hint in (
        (_angles(class_on_grid=True), "that gives the class token a patch position: the grid starts at the first "
                                      "patch, after the class token and the register, which are not turned"),
        (_angles(register_on_grid=True), "that gives the register a patch position: registers, like the class token, "
                                         "have no place on the grid, and the first patch comes after both"),
        (_angles(by_column=True), "those are the patches' columns: pair 0 is among the first d/4 pairs, which turn "
                                  "with the row"),
        (_angles(grid_column_first=True), "that reads the grid column-first: the patches are read row by row, left "
                                          "to right"),
    ):
        if matches(answer, mistake):
            return hint + "."
    if answer.ndim != 1 or answer.size != expected.size:
        return (f"give one angle per token, {PREFIX + GRID_ROWS * GRID_COLS} in all: the class token, the register, "
                "then the patches.")
    return compare(answer, expected, "your angles") + (" A patch's row is its index among the patches (0 to "
                                                      f"{GRID_ROWS * GRID_COLS - 1}) divided by the grid's width, rounded down.")


def _turned(halves=("row", "col"), one_d=False, backwards=False, base=BASE, mixed=False, degrees=False):
    """QUERY turned at (ROW, COL), or as a mistake turns it: the axis of each half, 1D frequencies, the wrong way,
    another base, every pair turned by row and column together (``mixed``), angles taken as degrees."""
    query = np.array(QUERY)
    d = len(query)
    quarter = d // 4
    place = {"row": ROW, "col": COL}
    angles = []
    for i in range(d // 2):
        half = halves[0] if i < quarter else halves[1]
        frequency = base ** (-2 * i / d) if one_d else base ** (-4 * (i % quarter) / d)
        turn = (ROW + COL) if mixed else place[half]
        angles.append(turn * frequency * (-1 if backwards else 1))
    angles = np.radians(angles) if degrees else np.array(angles)
    even, odd = query[0::2], query[1::2]
    out = np.empty(d)
    out[0::2] = even * np.cos(angles) - odd * np.sin(angles)
    out[1::2] = even * np.sin(angles) + odd * np.cos(angles)
    return out


def _package_turned():
    """23.3's answer from attn.vision.apply_rotary_2d."""
    import torch

    from attn.vision import apply_rotary_2d, rotary_2d_frequencies

    x = torch.tensor(QUERY, dtype=torch.float64)[None]  # (T = 1, d)
    frequencies = rotary_2d_frequencies(len(QUERY), BASE)
    return apply_rotary_2d(x, torch.tensor([ROW]), torch.tensor([COL]), frequencies)[0].numpy()


@exercise(
    "23.3",
    Array("your vector"),
    solution=_package_turned,
    success="the first two pairs turn by the row times the two frequencies, the last two by the column times the same "
            "frequencies: a score between two patches then depends on their row offset and their column offset.",
)
def _rotated(answer, expected):
    if matches(answer, expected):
        return None
    if answer.ndim > 1 and answer.size == expected.size and matches(answer.reshape(-1), expected):
        return f"drop the batch axis: give the one turned vector, {len(QUERY)} numbers, not an array of shape {answer.shape}."
    for mistake, hint in (
        (np.array(QUERY), "that is the query as it was: turn it, each pair by its axis's place times its frequency"),
        (_turned(base=10000.0), "that uses base 10000, lesson 8's: this exercise's 2D rotary, like DINOv3's, uses base "
                                "100: at 10000 the slow pairs would barely turn across a grid a few patches wide"),
        (_turned(mixed=True), "that turns every pair by the row and the column together: in axial 2D rotary the first "
                              "d/4 pairs turn with the row alone, the rest with the column alone"),
        (_turned(degrees=True), "that reads the angles as degrees: rotary's angles are in radians, as np.cos and "
                                "torch.cos take them"),
        (_turned(("row", "row")), "that splits the rotary pairs by row for both halves: the second half of the "
                                  "pairs turns with the column"),
        (_turned(("col", "col")), "that turns every pair with the column: the first half of the pairs turns with "
                                  "the row"),
        (_turned(("col", "row")), "that swaps the halves: the first d/4 pairs turn with the row, the rest with the "
                                  "column"),
        (_turned(one_d=True), "that uses 1D rotary's frequencies, one per pair: in 2D each axis has d/4 pairs, "
                              "with the frequencies base**(-4i/d), the same for both axes"),
        (_turned(backwards=True), "that turns each pair the wrong way: a pair (a, b) becomes "
                                  "(a cos t - b sin t, a sin t + b cos t)"),
    ):
        if matches(answer, mistake):
            return hint + "."
    if answer.shape != expected.shape:
        return f"give the turned vector: {len(QUERY)} numbers, as many as the query has."
    return compare(answer, expected, "your vector") + " Turn pair i by its axis's place times its frequency."


def _features_shape(registers_kept=False, class_dropped=False, grid=IMAGE // VIT_PATCH, batch=True):
    tokens = grid * grid + (0 if class_dropped else 1) + (REGISTERS if registers_kept else 0)
    return (BATCH, tokens, WIDTH) if batch else (tokens, WIDTH)


def _package_shape():
    """23.4's answer from the course's VisionTransformer.features."""
    import torch

    from attn.models.vit import VisionTransformer

    with torch.random.fork_rng(), torch.no_grad():  # its random weights leave the learner's random numbers alone
        model = VisionTransformer(image_size=IMAGE, patch_size=VIT_PATCH, embed_dim=WIDTH, num_heads=4, num_layers=1,
                                  num_classes=0, registers=REGISTERS)
        return tuple(model.features(torch.zeros(BATCH, 1, IMAGE, IMAGE)).shape)


@exercise(
    "23.4",
    Shape("your shape"),
    solution=_package_shape,
    success="the registers take part in every layer's attention and are dropped at the output: what comes out is the "
            "class token and one token per patch, as in a ViT without registers.",
)
def _shape(shape, expected):
    if shape == expected:
        return None
    for mistake, hint in (
        (_features_shape(registers_kept=True), "that keeps the registers in the output: they are dropped at the end, "
                                               "leaving the class token and the patches"),
        (_features_shape(class_dropped=True), "that drops the class token as well: only the registers are dropped"),
        (_features_shape(registers_kept=True, class_dropped=True), "that drops the class token and keeps the "
                                                                   "registers: it is the other way round"),
        (_features_shape(grid=VIT_PATCH), "that counts a grid of 7 x 7 patches: 7 is a patch's side in pixels, "
                                          "not the grid's side in patches"),
        (_features_shape(batch=False), "features keeps the batch axis first: (B, T, E)"),
    ):
        if shape == mistake:
            return hint + "."
    if len(shape) != 3:
        return "give three sizes: (B, T, E), the batch, the tokens and the width."
    if sorted(shape) == sorted(expected):
        return "those are the right sizes in the wrong order: features gives (B, T, E), the batch, the tokens, the width."
    if shape[2] == VIT_PATCH * VIT_PATCH:
        return (f"{shape[2]} is a patch's {VIT_PATCH} x {VIT_PATCH} pixels, the token before it is embedded: features "
                "gives every token at the model's width, E.")
    wrong = [name for name, got, right in zip(("B, the batch", "T, the tokens", "E, the width"), shape, expected, strict=True)
             if got != right]
    if wrong == ["T, the tokens"]:
        return f"{shape} is the wrong shape: count the tokens that come out, after the registers are dropped."
    return f"that is not the shape features gives: check {' and '.join(wrong)}, in (B, T, E)."
