"""The exercises' self-checks, one function per exercise, looked up by its id.

In a lesson: ``check("1.2", my_answer)`` prints either "Correct: ..." or
"Not yet: ..." with what is wrong, so a learner never has to compare numbers
by eye. The expected answers are computed here from the course's own data and
functions, not typed in.
"""

import numpy as np

from attn import fruit
from attn.attention import causal_mask, padding_mask, scaled_dot_product_attention
from attn.checks import describe_array_problem, report
from attn.softmax import softmax

_CHECKS = {}


def _exercise(exercise_id, success):
    def register(function):
        _CHECKS[exercise_id] = (function, success)
        return function

    return register


def _is_number(answer, value):
    """True when ``answer`` is a single number equal to ``value``: used to recognise a common mistake."""
    if answer is None or answer is Ellipsis or np.ndim(answer) != 0:
        return False
    try:
        return bool(np.isclose(float(answer), value))
    except (TypeError, ValueError):
        return False


def check(exercise_id, answer):
    """Run the self-check of exercise ``exercise_id`` (for example "1.2") on ``answer``."""
    if exercise_id not in _CHECKS:
        known = ", ".join(sorted(_CHECKS))
        raise ValueError(f"there is no exercise {exercise_id!r}; the exercises are {known}")
    function, success = _CHECKS[exercise_id]
    report(function(answer), success)


# Lesson 1 ---------------------------------------------------------------


@_exercise("1.1", "these one-hot weights select banana, and weights @ prices gives its price, 6.")
def _one_hot_banana(answer):
    expected = np.array([0.0, 1.0, 0.0])
    problem = describe_array_problem(answer, expected, "your weight vector")
    if problem is None or answer is None or answer is Ellipsis:
        return problem
    weights = np.asarray(answer, dtype=float)
    if weights.shape == expected.shape and np.isclose(weights.sum(), 1) and set(np.unique(weights)) <= {0.0, 1.0}:
        picked = fruit.NAMES[int(np.argmax(weights))]
        return f"your weights are one-hot, but they pick {picked!r}; banana is item {fruit.NAMES.index('banana')}."
    return problem


@_exercise("1.2", "half apple and half banana gives 0.5 * 9 + 0.5 * 6 = 7.5, a price no single item has.")
def _blend_price(answer):
    prices = np.array([fruit.PRICES[name] for name in fruit.NAMES], dtype=float)
    expected = np.array([0.5, 0.5, 0.0]) @ prices
    if isinstance(answer, np.ndarray) and answer.shape == (3,):
        return "you have a vector of three numbers; multiply the weights by the prices and add them up (weights @ prices)."
    return describe_array_problem(answer, expected, "your blended price")


@_exercise("1.3", "your lookup returns every price through one-hot weights and refuses unknown names with a KeyError.")
def _weighted_lookup(answer):
    if not callable(answer):
        return f"pass the function itself (no brackets), not a {type(answer).__name__}."
    for name, price in fruit.PRICES.items():
        try:
            got = answer(name)
        except Exception as error:  # noqa: BLE001 - any failure is reported to the learner
            return f"looking up {name!r} raised {type(error).__name__}: {error}"
        if got is None or not np.isclose(float(got), price):
            return f"looking up {name!r} gave {got!r}, expected {price}."
    try:
        got = answer("fruit")
    except KeyError:
        return None
    except Exception as error:  # noqa: BLE001
        return f"'fruit' should raise KeyError, but it raised {type(error).__name__}."
    return f"'fruit' is not a key, so it should raise KeyError, but your function returned {got!r}."


# Lesson 2 ---------------------------------------------------------------

DURABLE_QUERY = np.array([0.1, 0.9, 0.2])  # "something hard-wearing": the query of the exercises


def _argmax_one_hot(scores):
    weights = np.zeros_like(scores)
    weights[np.argmax(scores)] = 1.0
    return weights


@_exercise("2.1", "the durable query matches chair best (0.84), then banana (0.28), then apple (0.22).")
def _durable_scores(answer):
    problem = describe_array_problem(answer, fruit.KEYS @ DURABLE_QUERY, "your scores")
    if problem and np.shape(answer) == (3,) and np.allclose(answer, DURABLE_QUERY @ fruit.KEYS.T / np.sqrt(3)):
        return "these are scaled by 1/sqrt(3); this exercise asks for the plain dot products (scaling is lesson 3)."
    return problem


@_exercise("2.2", "cosine similarity divides the dot product by both lengths, so it lies between -1 and 1.")
def _cosine_banana(answer):
    banana = fruit.KEYS[fruit.NAMES.index("banana")]
    expected = banana @ fruit.QUERY / (np.linalg.norm(banana) * np.linalg.norm(fruit.QUERY))
    if _is_number(answer, banana @ fruit.QUERY):
        return "that is the plain dot product; divide it by the lengths of both vectors (np.linalg.norm)."
    return describe_array_problem(answer, expected, "your cosine similarity")


@_exercise("2.3", "hard attention over vectors returns the whole value row of the best-matching key: chair's.")
def _hard_attention_durable(answer):
    expected = _argmax_one_hot(fruit.KEYS @ DURABLE_QUERY) @ fruit.VALUES
    if np.shape(answer) == (3,) and np.allclose(answer, _argmax_one_hot(fruit.KEYS @ DURABLE_QUERY)):
        return "that is the one-hot weight vector; multiply it by VALUES to get the value it selects."
    return describe_array_problem(answer, expected, "your output")


# Lesson 3 ---------------------------------------------------------------


@_exercise("3.1", "scaled by 1/sqrt(3) the durable query scores apple 0.13, banana 0.16, chair 0.48.")
def _scaled_durable(answer):
    expected = fruit.KEYS @ DURABLE_QUERY / np.sqrt(fruit.KEYS.shape[1])
    if np.shape(answer) == (3,) and np.allclose(answer, fruit.KEYS @ DURABLE_QUERY):
        return "these are the unscaled dot products; divide by sqrt(d_k) = sqrt(3)."
    if np.shape(answer) == (3,) and np.allclose(answer, fruit.KEYS @ DURABLE_QUERY / 3):
        return "you divided by d_k = 3; divide by its square root instead."
    return describe_array_problem(answer, expected, "your scaled scores")


@_exercise("3.2", "one matrix product scores both queries against all three keys: a (2, 3) matrix.")
def _two_queries(answer):
    queries = np.stack([fruit.QUERY, DURABLE_QUERY])  # (2, d_k)
    expected = queries @ fruit.KEYS.T / np.sqrt(fruit.KEYS.shape[1])  # (2, 3)
    if np.shape(answer) == (3, 2):
        return "your matrix has shape (3, 2), one row per key; put the queries in rows: queries @ KEYS.T."
    return describe_array_problem(answer, expected, "your score matrix")


@_exercise("3.3", "at d_k = 256 the unscaled scores are 16 times larger than the scaled ones, and softmax saturates.")
def _saturation_ratio(answer):
    return describe_array_problem(answer, np.sqrt(256), "your ratio")


# Lesson 4 ---------------------------------------------------------------


@_exercise("4.1", "subtracting the maximum first gives exp(-2), exp(-1), exp(0) over their sum: no overflow.")
def _stable_softmax(answer):
    expected = softmax(np.array([1000.0, 1001.0, 1002.0]))
    problem = describe_array_problem(answer, expected, "your weights")
    if problem is not None and "NaN or inf" in problem:
        return "your weights contain NaN or inf: exp(1000) overflows; subtract the largest score before exp."
    return problem


@_exercise("4.2", "the durable query's output leans towards the chair's value: a lower price, a higher use.")
def _durable_output(answer):
    expected, _ = scaled_dot_product_attention(DURABLE_QUERY[None, :], fruit.KEYS, fruit.VALUES)
    expected = expected[0]  # (d_v,)
    unscaled_weights = np.exp(fruit.KEYS @ DURABLE_QUERY) / np.exp(fruit.KEYS @ DURABLE_QUERY).sum()
    if np.shape(answer) == (3,) and np.allclose(answer, unscaled_weights @ fruit.VALUES):
        return "close, but the scores were not scaled: divide by sqrt(d_k) before the softmax."
    return describe_array_problem(answer, expected, "your output", atol=1e-4)


@_exercise("4.3", "at temperature 0.5 the fruit weights sharpen: the best match gains and the worst loses.")
def _temperature(answer):
    scores = fruit.KEYS @ fruit.QUERY / np.sqrt(fruit.KEYS.shape[1])
    if np.shape(answer) == (3,) and np.allclose(answer, softmax(scores * 0.5)):
        return "you multiplied by the temperature; divide the scores by it (a low temperature makes them larger)."
    return describe_array_problem(answer, softmax(scores / 0.5), "your weights", atol=1e-4)


# Lesson 5 ---------------------------------------------------------------


@_exercise("5.1", "position i may attend to positions 0..i: ones on and below the diagonal.")
def _causal_four(answer):
    expected = causal_mask(4)
    if answer is None or answer is Ellipsis:
        return describe_array_problem(answer, expected, "your mask")
    if np.shape(answer) == (4, 4) and np.array_equal(np.asarray(answer, dtype=bool), expected.T):
        return "this mask lets each position see the future, not the past: rows are queries, so keep the lower triangle."
    if np.shape(answer) == (4, 4) and np.asarray(answer).dtype != bool:
        return "the numbers are right only if the mask is boolean; use dtype=bool (True = may attend)."
    return describe_array_problem(answer, expected, "your mask")


@_exercise("5.2", "nn.MultiheadAttention's key_padding_mask marks the padding with True: the opposite of a keep-mask.")
def _padding_for_torch(answer):
    keep = padding_mask([2, 4], 4)[:, 0, :]  # (B, T_k)
    if np.shape(answer) == (2, 4) and np.array_equal(np.asarray(answer, dtype=bool), keep):
        return "that is the course's keep-mask (True = may attend); PyTorch's key_padding_mask wants True = blocked."
    if np.shape(answer) == (2, 1, 4):
        return "key_padding_mask has shape (B, T_k) = (2, 4): drop the middle axis."
    return describe_array_problem(answer, ~keep, "your key_padding_mask")


@_exercise("5.3", "a float32 T x T matrix at T = 32,768 takes 32768**2 * 4 bytes = 4 GiB, for one head of one sequence.")
def _memory_32k(answer):
    expected = 32768**2 * 4 / 2**30
    if _is_number(answer, 32768**2 * 8 / 2**30):
        return "that counts 8 bytes per number (float64); float32 uses 4."
    return describe_array_problem(answer, expected, "your size in GiB")


# Lesson 6 ---------------------------------------------------------------


@_exercise("6.1", "(B, T, E) = (2, 10, 64) split into 8 heads is (B, H, T, d) = (2, 8, 10, 8).")
def _split_shape(answer):
    if answer is None or answer is Ellipsis:
        return "nothing yet for your shape: replace the ... with a tuple."
    shape = tuple(int(size) for size in answer) if isinstance(answer, tuple | list) else None
    if shape is None:
        return f"give the shape as a tuple of four numbers, not a {type(answer).__name__}."
    if shape == (2, 10, 8, 8):
        return "that is the shape after view, before transpose: the heads axis must come before the tokens."
    if shape != (2, 8, 10, 8):
        return f"{shape} is not it: the order is (B, H, T, d), and d = E / H."
    return None


@_exercise("6.2", "4 E^2 weights and 4 E biases: 1,050,624 parameters at E = 512, whatever the number of heads.")
def _parameter_count(answer):
    if _is_number(answer, 4 * 512 * 512):
        return "that counts the weights only; each of the four projections also has E biases."
    return describe_array_problem(answer, 4 * 512 * 512 + 4 * 512, "your count")


@_exercise("6.3", "4 * B * H * T^2 * d / t = 4 * 4 * 16 * 4096^2 * 64 / 0.002 s is about 137 TFLOP/s.")
def _tflops(answer):
    from attn.bench import attention_flops  # imported here: attn.bench needs torch, the NumPy lessons do not

    expected = attention_flops(4, 16, 4096, 64) / 0.002 / 1e12
    if _is_number(answer, expected * 1e12):
        return "that is in FLOP/s; divide by 1e12 for TFLOP/s."
    if _is_number(answer, expected / 2):
        return "each of Q K^T and A V takes 2 * B * H * T^2 * d operations (a multiply and an add): 4 in total."
    return describe_array_problem(answer, expected, "your TFLOP/s", atol=0.05)


# Lesson 7 ---------------------------------------------------------------


@_exercise("7.1", "guessing among 16 equally likely values is right 1 time in 16: 0.0625.")
def _chance(answer):
    return describe_array_problem(answer, 1 / 16, "your accuracy")


@_exercise("7.2", "one-hot weights from key == query, times the values: lesson 1's hard attention, exact on every example.")
def _hard_recall(answer):
    import torch  # imported here: the NumPy lessons do not need torch

    from attn.recall import make_recall_data

    if not callable(answer):
        return f"pass the function itself (no brackets), not a {type(answer).__name__}."
    data = make_recall_data(200, seed=7)
    try:
        predicted = torch.as_tensor(answer(data.keys, data.values, data.query))
    except Exception as error:  # noqa: BLE001 - any failure is reported to the learner
        return f"calling your function raised {type(error).__name__}: {error}"
    if predicted.shape != data.target.shape:
        expected = tuple(data.target.shape)
        return f"your function returned shape {tuple(predicted.shape)}; expected one value per example, {expected}."
    wrong = int((predicted.long() != data.target).sum())
    if wrong:
        return f"{wrong} of {len(data)} lookups are wrong; the weights should be 1 exactly where keys == query[:, None]."
    return None


@_exercise("7.3", "2 * 16 * 32 embeddings + (4 * 32^2 + 4 * 32) attention + (32 * 16 + 16) readout = 5,776 parameters.")
def _recall_parameters(answer):
    embed_dim, n_keys, n_values = 32, 16, 16
    embeddings = (n_keys + n_values) * embed_dim
    attention = 4 * embed_dim**2 + 4 * embed_dim
    readout = embed_dim * n_values + n_values
    if _is_number(answer, embeddings + attention):
        return "you left out the readout, a Linear(32, 16) with its bias."
    return describe_array_problem(answer, embeddings + attention + readout, "your count")
