"""Lesson 8's exercises: a rotary score predicted from the distance, cross-attention's weight shape, a block's size.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

from attn.exercises.answers import Number, Shape, compare_without_answer, matches
from attn.exercises.registry import exercise

HEAD_DIM, SEED = 8, 8  # the lesson's q and k: torch.randn(2, 1, 8, float64) from a generator seeded with 8
ASKED = (20, 17)  # exercise 8.1: (query position, key position); the lesson prints the score at (5, 2)
BATCH, T_Q, T_K, EMBED, HEADS = 2, 3, 11, 16, 4  # exercise 8.2's cross-attention
BLOCK_EMBED, BLOCK_HEADS = 64, 8  # exercise 8.3's TransformerBlock


def _rotary_vectors():
    """The lesson's q and k, each (1, d) float64."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    return torch.randn(2, 1, HEAD_DIM, dtype=torch.float64, generator=generator)


def rotary_score(q_position, k_position):
    """q . k after rotating q to ``q_position`` and k to ``k_position``, as in the lesson."""
    import torch

    from attn.positions import apply_rotary

    q, k = _rotary_vectors()
    rotated_q = apply_rotary(q, positions=torch.tensor([q_position]))
    rotated_k = apply_rotary(k, positions=torch.tensor([k_position]))
    return (rotated_q @ rotated_k.T).item()


def _plain_score():
    q, k = _rotary_vectors()
    return (q @ k.T).item()


def _weights_shape():
    import torch

    from attn.multihead import MultiHeadAttention

    with torch.random.fork_rng(devices=[]), torch.no_grad():  # the learner's random numbers are left alone
        layer = MultiHeadAttention(EMBED, HEADS)
        query, key = torch.zeros(BATCH, T_Q, EMBED), torch.zeros(BATCH, T_K, EMBED)
        _, weights = layer(query, key, key, need_weights=True)
    return tuple(weights.shape)


def _block_parameters():
    import torch

    from attn.block import TransformerBlock

    with torch.device("meta"):
        block = TransformerBlock(BLOCK_EMBED, BLOCK_HEADS)
    return sum(parameter.numel() for parameter in block.parameters())


@exercise(
    "8.1",
    Number("your score"),
    solution=lambda: rotary_score(*ASKED),
    success="positions 20 and 17 are 3 apart, like 5 and 2, so after the rotary embedding the score is the same.",
)
def _rotary_prediction(score, expected):
    if matches(score, _plain_score()):
        return "that is q . k without the rotation; both vectors are rotated by their positions first."
    if matches(score, rotary_score(ASKED[1], ASKED[0])):
        return "that puts q at 17 and k at 20 (distance -3); here q is at 20 and k at 17 (distance 3)."
    return compare_without_answer(score, expected, "your score")


@exercise(
    "8.2",
    Shape("your shape"),
    solution=_weights_shape,
    success="the weights are (B, H, T_q, T_k) = (2, 4, 3, 11): per head, one row per query and one column per key.",
)
def _cross_weights_shape(shape, expected):
    if shape == (BATCH, HEADS, T_K, T_Q):
        return "rows are queries and columns keys: (B, H, T_q, T_k), not (B, H, T_k, T_q)."
    if shape == (BATCH, T_Q, T_K):
        return "that leaves out the heads: each of the 4 heads has its own weights, (B, H, T_q, T_k)."
    if shape == (BATCH, T_Q, EMBED):
        return "that is the shape of the output, one row per query; the weights have one column per key."
    if shape == (BATCH, HEADS, T_Q, T_Q) or shape == (BATCH, HEADS, T_K, T_K):
        return "in cross-attention the weights are not square: T_q = 3 queries against T_k = 11 keys."
    if shape != expected:
        return f"{shape} is not it: the weights are (B, H, T_q, T_k)."
    return None


@exercise(
    "8.3",
    Number("your count", whole=True),
    solution=_block_parameters,
    success="4E^2 + 4E attention, 4E for two LayerNorms, 8E^2 + 5E for the MLP: 12E^2 + 13E = 49,984 at E = 64.",
)
def _block_count(count, expected):
    embed = BLOCK_EMBED
    attention, norms = 4 * embed**2 + 4 * embed, 4 * embed
    if matches(count, 12 * embed**2):
        return "that counts the weight matrices only; the linear layers have biases, and each LayerNorm a scale and a shift."
    if matches(count, expected - norms):
        return "you left out the two LayerNorms: each has a scale and a shift per feature, 2E parameters."
    if matches(count, attention):
        return "that is the attention layer alone; add the two LayerNorms and the MLP (E -> 4E -> E, with biases)."
    if matches(count, expected - attention):
        return "that leaves out the attention layer: four E x E projections with biases (lesson 6)."
    if matches(count, expected - 2 * embed):
        return (
            "you counted each LayerNorm's scale but not its shift: a LayerNorm learns both, one of each per feature, "
            "so each of the two has 2E parameters."
        )
    if matches(count, expected - (embed**2 + embed)):
        return (
            "you left out the output projection, out_proj: after the heads are joined again, one more E x E matrix "
            "with E biases mixes them, so the attention layer has four projections, not three."
        )
    return compare_without_answer(count, expected, "your count")
