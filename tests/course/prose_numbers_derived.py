"""The derived numbers of the lessons' prose: lesson -> {number as the prose writes it: the expression that derives it}.

tests/course/test_prose_numbers.py evaluates each expression (arithmetic and the math module) and checks that it rounds
to the number as written. A number belongs here only when the prose derives it in the same sentence from a
constant or from numbers the lesson prints (e^2, 1/6, the sum of two printed weights); a measured number belongs
in a cell's output instead. Keep it short: every entry is a sentence of the prose that does its own arithmetic.
"""

DERIVED = {
    "02_matching_vectors": {"7.4": "exp(2)"},  # cosines lie in [-1, 1]: scores differ by at most 2, weights by e^2
    "04_softmax_first_output": {"1.7": "sqrt(3)"},  # dividing by sqrt(d_k), d_k = 3, is a temperature of sqrt(3)
    "07_train_lookup": {"0.17": "1 / 6"},  # an even spread over six pairs
    "10_generating": {"0.85": "0.53 + 0.32"},  # top-p: the first two printed probabilities added
    "12_inside_the_kernel": {
        "1.2 \\times 10^{-38}": "2 ** -126",  # float32's smallest normal number, 2^-126
        "2.5": "5 / 2",  # five matrix products against a forward pass's two
    },
    "21_compressed_caches": {"9.10": "log(9000)"},  # chance for four digits whose first is not 0: -ln 9,000
}
