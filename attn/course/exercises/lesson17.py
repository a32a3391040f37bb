"""Lesson 17's exercises: which pairs YaRN keeps, YaRN's temperature on the scores, dynamic NTK's base at a length
read, and the weight a key keeps among many with log-n scaling.

Each names the mistakes the lesson warns of (interpolating the high frequencies, forgetting the temperature, scaling
by the wrong length) where they give another answer; the expected value is never shown.
"""

import math

import numpy as np

from attn.course.exercises.answers import Array, Number
from attn.course.exercises.directions import direction_only
from attn.course.exercises.judging import compare, matches
from attn.course.exercises.registry import exercise

# Exercise 17.1: a head of 64 features, base 10,000, trained at 2,048 positions, read with YaRN at s = 8.
YARN_DIM, YARN_BASE, YARN_TRAINED, YARN_FACTOR = 64, 10000.0, 2048, 8.0
# Exercise 17.2: YaRN at s = 16, its own temperature.
TEMPERATURE_FACTOR = 16.0
# Exercise 17.3: heads of 64, base 10,000, trained at 4,096, dynamic NTK with s = 4, after 6,144 tokens.
NTK_DIM, NTK_BASE, NTK_TRAINED, NTK_FACTOR, NTK_READ = 64, 10000.0, 4096, 4.0, 6144
# Exercise 17.4: trained at 256, 1,024 keys read with log-n scaling, one key 3 above 1,023 keys at 0.
DILUTION_TRAINED, DILUTION_KEYS, DILUTION_MARGIN = 256, 1024, 3.0


def _yarn_pairs(trained=YARN_TRAINED, rounded=True, fast=32.0, slow=1.0):
    """[kept, interpolated]: how many of the head's pairs YaRN keeps unchanged and how many it divides by s."""
    pairs = YARN_DIM // 2

    def pair_turning(turns):  # the pair index whose pair turns `turns` times within the trained length
        return YARN_DIM * math.log(trained / (turns * 2 * math.pi)) / (2 * math.log(YARN_BASE))

    low, high = pair_turning(fast), pair_turning(slow)
    if rounded:
        low, high = math.floor(low), math.ceil(high)
    indices = np.arange(pairs)
    kept = int((indices <= max(low, 0)).sum()) if rounded else int((indices <= low).sum())
    interpolated = int((indices >= min(high, YARN_DIM - 1)).sum())
    return np.array([kept, interpolated], dtype=np.int64)


@exercise(
    "17.1",
    Array("your two counts", kind="whole"),
    solution=_yarn_pairs,
    success="pair i turns 2,048 theta_i / (2 pi) times within L: pairs 0 to 8 turn more than 32 times and keep their "
            "frequency, pairs 21 to 31 turn less than once and are divided by 8, and pairs 9 to 20 are on the ramp.",
)
def _which_pairs(counts, expected):
    if counts.shape != expected.shape:
        return f"give two whole numbers, the pairs kept and the pairs interpolated, not shape {counts.shape}."
    for mistake, hint in (
        ([0, YARN_DIM // 2], "that interpolates every pair, the high frequencies too: that is position interpolation; "
                             "YaRN keeps the pairs that turn more than beta_fast = 32 times within L"),
        ([YARN_DIM // 2, 0], "nothing would change: YaRN divides the pairs that turn less than once within L by s"),
        (expected[::-1], "the two counts are swapped: the fast pairs (low i) are kept, the slow ones interpolated; "
                         "give the kept ones first"),
        (_yarn_pairs(trained=YARN_TRAINED * YARN_FACTOR), "that counts turns within the length read, s L = 16,384; "
                                                          "YaRN counts them within the trained length L = 2,048"),
        (_yarn_pairs(fast=1.0, slow=32.0), "the bounds are swapped: a pair is kept when it turns MORE than "
                                           "beta_fast = 32 times within L, interpolated when it turns less than once"),
        ([YARN_DIM // 2 - int(expected[1]), int(expected[1])], "that leaves no pair on the ramp: the pairs between "
                                                               "32 turns and one turn are blended, neither kept nor "
                                                               "divided by s"),
    ):
        if not matches(np.asarray(mistake), expected) and matches(counts, mistake):
            return hint + "."
    if compare(counts, expected, "your two counts") is None:
        return None
    wrong = [f"the pairs {name} are too {'many' if got > want else 'few'}"
             for name, got, want in zip(("kept", "interpolated"), counts, expected, strict=True) if got != want]
    return "; ".join(wrong) + ": count the turns r_i = L theta_i / (2 pi) of each pair within L again."


def _score_factor(power=2, log=math.log, inverted=False):
    factor = (0.1 * log(TEMPERATURE_FACTOR) + 1) ** power
    return 1 / factor if inverted else factor


@exercise(
    "17.2",
    Number("your factor"),
    solution=_score_factor,
    success="YaRN multiplies the rotated query and the rotated key each by 0.1 ln 16 + 1 = 1.277, so their dot "
            "product by its square, about 1.63: a sharper softmax for a text 16 times longer.",
)
def _temperature(factor, expected):
    if factor.shape != ():
        return "give one number: what every score is multiplied by."
    if compare(factor, np.asarray(expected), "your factor") is None:
        return None
    for mistake, hint in (
        (1.0, "that forgets the temperature: YaRN changes the frequencies AND multiplies queries and keys by "
              "0.1 ln s + 1, unless attention_factor says otherwise"),
        (_score_factor(power=1), "that is the factor on the query alone (or the key alone); a score multiplies the "
                                 "two, so it gets the factor twice"),
        (_score_factor(inverted=True), "that divides; the temperature sharpens the softmax, so the scores grow"),
        (_score_factor(power=1, inverted=True), "that divides, and counts the factor once; the scores are multiplied "
                                                "by it twice, once for the query and once for the key"),
        (_score_factor(log=math.log10), "that uses log10; YaRN's formula takes the natural logarithm, ln s"),
        (_score_factor(log=math.log2), "that uses log2; YaRN's formula takes the natural logarithm, ln s"),
        (TEMPERATURE_FACTOR, "that is the factor s itself; the temperature grows only with ln s, as 0.1 ln s + 1"),
    ):
        if matches(factor, mistake):
            return hint + "."
    return direction_only(factor, expected, "your factor")


def _ntk_base(factor=None):
    if factor is None:
        factor = NTK_FACTOR * NTK_READ / NTK_TRAINED - (NTK_FACTOR - 1)
    return NTK_BASE * factor ** (NTK_DIM / (NTK_DIM - 2))


@exercise(
    "17.3",
    Number("your base"),
    solution=_ntk_base,
    success="at n = 6,144 the factor is s n / L - (s - 1) = 4 x 1.5 - 3 = 3, and NTK-aware scaling raises the base "
            "to 10,000 x 3^(64/62), about 31,100: it grows with the length read, reaching s = 4 at n = L (2 - 1/s) = 7,168 "
            "tokens and passing it after.",
)
def _dynamic_base(base, expected):
    if base.shape != ():
        return "give one number: the base used at 6,144 tokens."
    if compare(base, np.asarray(expected), "your base", atol=1e-3) is None:
        return None
    grown = NTK_FACTOR * NTK_READ / NTK_TRAINED - (NTK_FACTOR - 1)
    for mistake, hint in (
        (NTK_BASE, "that is the plain base; dynamic NTK changes nothing up to L = 4,096, but 6,144 tokens are past it"),
        (_ntk_base(NTK_FACTOR), "that uses the full factor s = 4 whatever the length: static NTK-aware scaling; "
                                "dynamic NTK scales by the length read, s n / L - (s - 1)"),
        (_ntk_base(NTK_READ / NTK_TRAINED), "that scales by n / L alone; dynamic NTK's factor is s n / L - (s - 1), "
                                            "which is 1 at n = L and s at n = L (2 - 1/s)"),
        (_ntk_base(NTK_FACTOR * NTK_READ / NTK_TRAINED), "that leaves out the - (s - 1): dynamic NTK's factor is "
                                                         "s n / L - (s - 1), so that it is 1 at n = L"),
        (NTK_BASE * grown, "that multiplies the base by the factor; NTK-aware scaling raises it to base x "
                           "factor^(d / (d - 2))"),
        (NTK_BASE * grown ** ((NTK_DIM - 2) / NTK_DIM), "the exponent is upside down: NTK-aware scaling uses "
                                                        "factor^(d / (d - 2)), a little more than the factor"),
        (NTK_BASE / grown, "that divides the base; NTK-aware scaling raises it, so that the slow pairs turn slower"),
    ):
        if matches(base, mistake, atol=1e-3):
            return hint + "."
    return direction_only(base, expected, "your base")


def _diluted_weight(scale=None, others=DILUTION_KEYS - 1):
    if scale is None:
        scale = math.log(DILUTION_KEYS) / math.log(DILUTION_TRAINED)
    chosen = math.exp(DILUTION_MARGIN * scale)
    return chosen / (chosen + others)


@exercise(
    "17.4",
    Number("your weight"),
    solution=_diluted_weight,
    success="log-n multiplies every score by log 1,024 / log 256 = 1.25: the key's 3 becomes 3.75 and the others "
            "stay 0, so it keeps e^3.75 / (e^3.75 + 1,023), about 0.040, against 0.019 without the scaling.",
)
def _log_n_weight(weight, expected):
    if weight.shape != ():
        return "give one number: the softmax weight of the key that stands out."
    if compare(weight, np.asarray(expected), "your weight") is None:
        return None
    for mistake, hint in (
        (_diluted_weight(scale=1.0), "that leaves the scores as they are; log-n scaling multiplies them by "
                                     "log T / log L past the trained length"),
        (_diluted_weight(scale=math.log(DILUTION_KEYS)), "that multiplies by log T alone; past a trained length "
                                                         "the factor is log T / log L, so that it is 1 at T = L"),
        (_diluted_weight(scale=math.log(DILUTION_TRAINED) / math.log(DILUTION_KEYS)),
         "the factor is upside down: log T / log L, more than 1 past L, so that the softmax sharpens"),
        (_diluted_weight(scale=DILUTION_KEYS / DILUTION_TRAINED), "that multiplies by T / L; log-n scaling grows "
                                                                   "with the logarithm, log T / log L"),
        (_diluted_weight(scale=math.log(DILUTION_KEYS / DILUTION_TRAINED)), "that multiplies by log(T / L); the "
                                                                           "factor is log T / log L"),
        (_diluted_weight(others=DILUTION_KEYS), "that counts 1,024 other keys; the key itself is one of the 1,024, "
                                                "so 1,023 others share the rest"),
        (_diluted_weight(scale=1.0, others=DILUTION_TRAINED - 1), "that is the weight at the trained length, 256 "
                                                                  "keys; here 1,024 keys share the softmax"),
    ):
        if matches(weight, mistake):
            return hint + "."
    return direction_only(weight, expected, "your weight")
