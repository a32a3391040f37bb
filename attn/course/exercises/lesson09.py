"""Lesson 9's exercises: a LayerNorm by hand, and the size of a Transformer block.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

from attn.course.exercises.answers import Number
from attn.course.exercises.judging import compare_without_answer, matches
from attn.course.exercises.registry import exercise

NORMALISED = (1.0, 2.0, 3.0, 6.0)  # exercise 9.1: the token that nn.LayerNorm(4) normalises
BLOCK_EMBED, BLOCK_HEADS = 64, 8  # exercise 9.2's TransformerBlock


def _layer_norm_last(values=NORMALISED, unbiased=False, centred=True, root=True, eps=1e-5):
    """The last entry of nn.LayerNorm(len(values)) at initialisation (scale 1, shift 0), by hand.

    The keywords make the common mistakes: ``unbiased`` divides the squared deviations by n - 1,
    ``centred=False`` forgets to subtract the mean from the entry (not from the variance),
    ``root=False`` divides by the variance instead of its square root.
    """
    n = len(values)
    mean = sum(values) / n
    variance = sum((value - mean) ** 2 for value in values) / (n - 1 if unbiased else n)
    spread = (variance + eps) ** 0.5 if root else variance + eps
    return ((values[-1] - mean) if centred else values[-1]) / spread


def _layer_norm_by_torch():
    import torch

    with torch.random.fork_rng(devices=[]), torch.no_grad():  # the learner's random numbers are left alone
        norm = torch.nn.LayerNorm(len(NORMALISED), dtype=torch.float64)
        return norm(torch.tensor(NORMALISED, dtype=torch.float64))[-1].item()


def _block_parameters():
    import torch

    from attn.block import TransformerBlock

    with torch.device("meta"):
        block = TransformerBlock(BLOCK_EMBED, BLOCK_HEADS)
    return sum(parameter.numel() for parameter in block.parameters())


@exercise(
    "9.1",
    Number("your last entry"),
    solution=_layer_norm_by_torch,
    success=(
        "the mean is 3 and the variance (14 / 4, dividing by n = 4) is 3.5, so the last entry is "
        "(6 - 3) / sqrt(3.5 + eps) = 1.60357 to 6 significant digits."
    ),
)
def _layer_norm_entry(entry, expected):
    values = NORMALISED
    if matches(entry, _layer_norm_last(unbiased=True)):
        return (
            "you divided the squared deviations by n - 1 = 3 (the unbiased estimator, the default of "
            "torch.var); LayerNorm divides by n = 4."
        )
    if matches(entry, _layer_norm_last(centred=False)):
        return "you divided the entry itself; subtract the mean from it first, then divide."
    if matches(entry, values[-1] / (sum(value**2 for value in values) / len(values)) ** 0.5):
        return (
            "that divides the entry by the root of the mean of the squares, without subtracting the mean "
            "first; LayerNorm centres the token before it measures its spread."
        )
    if matches(entry, _layer_norm_last(root=False)):
        return "you divided by the variance; divide by its square root, the standard deviation."
    if matches(entry, values[-1] - sum(values) / len(values)):
        return "you subtracted the mean but did not divide by the standard deviation."
    if matches(entry, _layer_norm_last(values=values[::-1])):
        return "that is the first entry's value; the exercise asks for the last one, the 6."
    return compare_without_answer(entry, expected, "your last entry")


@exercise(
    "9.2",
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
