"""The PyTorch primer's exercises (read between lessons 5 and 6): nn.Linear by hand, cross-entropy by hand,
and, in its section for Part 2, the shape torch.stack gives (P.3) and a causal keep-mask with padding (P.4).

torch is imported inside the functions, so that ``import attn`` stays free of it. P.1's solution
is PyTorch's own function; P.2's is the computation by hand, since the exercise asks for it without
calling functional.cross_entropy (the check watches for that call). P.3 is predict-first: its
replies name the mistake (cat's shape, the new axis in the wrong place) but never the shape.
"""

import contextlib

import numpy as np

from attn.course.exercises.answers import Array, Function, Number, Shape, attempt
from attn.course.exercises.judging import compare, compare_without_answer, matches
from attn.course.exercises.registry import exercise

LINEAR_CASES = ((5, 3, 11), (2, 4, 12))  # (N, features, seed): square weights, so a missing .T gives numbers, not an error
# (N examples, C classes, seed, logit scale): the last has logits in the hundreds, where exp overflows float32,
# so that a softmax without its maximum subtracted (exp, then divide, then log) gives inf or NaN
LOSS_CASES = ((4, 5, 21, 2.0), (6, 3, 22, 2.0), (3, 4, 23, 300.0))


def _linear_calls():
    """Fresh inputs each time (seeded, float32), so a function that changes its arguments spoils nothing."""
    import torch

    calls = []
    for n_rows, features, seed in LINEAR_CASES:
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(n_rows, features, generator=generator)  # (N, in)
        weight = torch.randn(features, features, generator=generator)  # (out, in)
        bias = torch.randn(features, generator=generator)  # (out,)
        calls.append((f"with x {tuple(x.shape)}, weight {tuple(weight.shape)} and bias {tuple(bias.shape)}", (x, weight, bias)))
    return calls


def _loss_calls():
    import torch

    calls = []
    for n_examples, n_classes, seed, scale in LOSS_CASES:
        generator = torch.Generator().manual_seed(seed)
        logits = scale * torch.randn(n_examples, n_classes, generator=generator)  # (N, C)
        targets = torch.randint(n_classes, (n_examples,), generator=generator)  # (N,)
        calls.append((f"with logits {tuple(logits.shape)} and targets {tuple(targets.shape)}", (logits, targets)))
    return calls


def _torch_linear(x, weight, bias):
    """PyTorch's own nn.Linear computation: x (N, in), weight (out, in), bias (out,) -> (N, out)."""
    from torch.nn import functional

    return functional.linear(x, weight, bias)


def _loss_by_hand(logits, targets):
    """The mean over the examples of -log softmax(logits)[right class]: logits (N, C), targets (N,) -> one number."""
    import torch

    log_probabilities = torch.log_softmax(logits, dim=-1)  # (N, C)
    return -log_probabilities[torch.arange(len(targets)), targets].mean()


@contextlib.contextmanager
def _watching_cross_entropy():
    """Inside the block, every call of PyTorch's cross-entropy is noted in the yielded list (and still computed).

    Both functional.cross_entropy and the kernel it calls are watched, so an imported alias or
    nn.CrossEntropyLoss is seen too.
    """
    import torch
    from torch.nn import functional

    seen = []
    watched = [(functional, "cross_entropy"), (torch._C._nn, "cross_entropy_loss")]
    originals = [getattr(owner, name) for owner, name in watched]

    def watch(original):
        def noted(*arguments, **options):
            seen.append(True)
            return original(*arguments, **options)

        return noted

    for (owner, name), original in zip(watched, originals, strict=True):
        setattr(owner, name, watch(original))
    try:
        yield seen
    finally:
        for (owner, name), original in zip(watched, originals, strict=True):
            setattr(owner, name, original)


def _calls_cross_entropy(function):
    """True when ``function``, called as the check calls it, uses PyTorch's cross-entropy."""
    _, arguments = _loss_calls()[0]
    with _watching_cross_entropy() as seen:
        attempt(function, *arguments)
    return bool(seen)


def _all_match(answer, mistake, calls):
    """True when the learner's outputs equal ``mistake(*arguments)`` for every call."""
    return all(
        matches(output, _plain(mistake(*arguments))) for output, (_, arguments) in zip(answer.outputs, calls(), strict=True)
    )


def _plain(output):
    return output.detach().double().numpy()


def _first_problem(answer, expected, what):
    for output, right in zip(answer.outputs, expected.outputs, strict=True):
        problem = compare(output, right, what, atol=1e-5)
        if problem is not None:
            return problem
    return None


def _first_miss(answer, expected):
    """How far the first wrong loss is from the right one, in words: the loss itself is never shown."""
    for (label, _), output, right in zip(_loss_calls(), answer.outputs, expected.outputs, strict=True):
        problem = compare_without_answer(output, right, "the loss your function returned", atol=1e-5)
        if problem is not None:
            return f"called {label}, {problem}"
    return None


@exercise(
    "P.1",
    Function("your linear function", calls=_linear_calls, returns=Array("the outputs")),
    solution=lambda: _torch_linear,
    success="x @ weight.T + bias is what nn.Linear computes: the weight is stored as (out, in), so it is transposed.",
)
def _linear_by_hand(answer, expected):
    shapes = [output.shape for output in answer.outputs]
    right_shapes = [output.shape for output in expected.outputs]
    if shapes != right_shapes and shapes == [shape[::-1] for shape in right_shapes]:
        return "your outputs are (out, N); nn.Linear returns one row per input row, (N, out): compute x @ weight.T + bias."
    if _all_match(answer, lambda x, weight, bias: x @ weight + bias, _linear_calls):
        return "that is x @ weight + bias: nn.Linear stores its weight as (out, in), so the product is x @ weight.T."
    if _all_match(answer, lambda x, weight, bias: x @ weight.T, _linear_calls):
        return "the bias is missing: add it after the product (it broadcasts over the N rows)."
    return _first_problem(answer, expected, "what your function returned")


def _loss_mistakes():
    """(wrong loss function, hint) for the common mistakes of exercise P.2; torch is imported only when it runs."""
    import torch

    def right_class(log_probabilities, targets):  # (N, C), (N,) -> (N,): each example's entry for its right class
        return log_probabilities[torch.arange(len(targets)), targets]

    return [
        (
            lambda logits, targets: right_class(logits.log_softmax(-1), targets).mean(),
            "the loss is minus the log probability: put a minus sign in front.",
        ),
        (
            lambda logits, targets: -right_class(logits.log_softmax(-1), targets).sum(),
            "that is the sum over the examples; F.cross_entropy returns their mean.",
        ),
        (
            lambda logits, targets: -right_class(logits.log_softmax(0), targets).mean(),
            "the softmax ran over the examples (dim=0); each example needs its own distribution over the classes: dim=-1.",
        ),
        (
            lambda logits, targets: -right_class(logits.softmax(-1), targets).mean(),
            "that uses the probability itself; the loss is minus its log: -log softmax(logits)[right class].",
        ),
        (
            lambda logits, targets: -logits.log_softmax(-1).mean(),
            "that averages over every class; take only each example's right class, "
            "log_probabilities[torch.arange(N), targets].",
        ),
        (
            lambda logits, targets: -right_class(logits, targets).mean(),
            "the logits are not log probabilities yet: take log_softmax over the classes first.",
        ),
        (lambda logits, targets: -logits.log_softmax(-1)[:, targets].mean(), _WHOLE_COLUMNS),
        (lambda logits, targets: -logits.log_softmax(-1)[:, targets], _WHOLE_COLUMNS),
    ]


_UNSTABLE = (
    "with logits in the hundreds, exp overflows float32 to inf, or a probability underflows to 0, whose log is "
    "-inf: compute the log probabilities with torch.log_softmax, which subtracts each row's largest logit first, "
    "not as the log of exp(logits) over its sum, nor as the log of softmax"
)
_WHOLE_COLUMNS = (
    "indexing with [:, targets] picks a whole column for every target: an (N, N) block that pairs every example with "
    "every example's class; pair each row with its own class instead: log_probabilities[torch.arange(N), targets]."
)


@exercise(
    "P.2",
    Function("your loss function", calls=_loss_calls, returns=Number("the loss", if_not_finite=_UNSTABLE)),
    solution=lambda: _loss_by_hand,
    success="the mean over the examples of -log softmax(logits)[right class] is exactly what F.cross_entropy computes.",
)
def _cross_entropy_by_hand(answer, expected):
    per_example = [(len(targets),) for _, (_, targets) in _loss_calls()]
    if [output.shape for output in answer.outputs] == per_example:
        return "that is one loss per example; F.cross_entropy returns their mean: finish with .mean()."
    for mistake, hint in _loss_mistakes():
        if _all_match(answer, mistake, _loss_calls):
            return hint
    problem = _first_miss(answer, expected)
    if problem is None and _calls_cross_entropy(answer.function):
        return (
            "the number is right, but your function calls functional.cross_entropy (or nn.CrossEntropyLoss), which the "
            "exercise asks you to do without: compute log_softmax, pick each example's right class, take the mean and negate it."
        )
    return problem


# The section "What Part 2 uses" ---------------------------------------------------------------

STACKED = (3, 2, 5)  # exercise P.3: three tensors, each (2, 5), stacked along STACK_DIM
STACK_DIM = 1
# exercise P.4: (the real tokens of each sequence, where the padding is); the padding is at the end, as in lesson 6,
# or at the start, so that a function which assumes where it is fails one of the two calls
PADDED = (((5, 3), "end"), ((6, 4, 2), "start"))


def _stacked_shape():
    """The shape of torch.stack of STACKED[0] tensors of shape STACKED[1:] along STACK_DIM, from the rule."""
    count, *each = STACKED
    return tuple(each[:STACK_DIM]) + (count,) + tuple(each[STACK_DIM:])


def _concatenated_shape(dim):
    """The shape torch.cat would give for the same tensors along ``dim``."""
    count, *each = STACKED
    each[dim] *= count
    return tuple(each)


def _stacked_at(dim):
    count, *each = STACKED
    return tuple(each[:dim]) + (count,) + tuple(each[dim:])


@exercise(
    "P.3",
    Shape("your shape"),
    solution=_stacked_shape,
    success="torch.stack adds a new axis, one entry per tensor, at position dim=1: (2, 3, 5); "
    "torch.cat([a, b, c], dim=1) would lengthen the axis that is there instead, to (2, 15).",
)
def _stack_shape(shape, expected):
    count, *each = STACKED
    if shape in {_concatenated_shape(dim) for dim in range(len(each))}:
        return (
            "that is a shape torch.cat would give: cat joins tensors along an axis they already have, so the result keeps "
            f"{len(each)} axes; stack puts them side by side along a new axis, of size {count}, so it has {len(each) + 1}."
        )
    if len(shape) != len(each) + 1:
        return (
            f"your shape has {len(shape)} axes; torch.stack keeps every axis of its tensors, which have {len(each)}, "
            "and adds one more."
        )
    if shape in {_stacked_at(dim) for dim in range(len(each) + 1) if dim != STACK_DIM}:
        return (
            "that is stack along another dim: the new axis goes exactly at position dim (counted from 0), and the "
            "tensors' own axes keep their order around it."
        )
    if shape != expected:
        return (
            f"{shape} is the wrong shape: torch.stack keeps each tensor's axes, in order, and inserts one new axis whose size is "
            "the number of tensors, at position dim."
        )
    return None


def _real_flags(lengths, padding):
    """(B, T) booleans, True = real token, for sequences of the given lengths padded to the longest at the
    ``padding`` end ("end" or "start")."""
    import torch

    length = max(lengths)
    positions = torch.arange(length)[None, :]  # (1, T)
    sizes = torch.tensor(lengths)[:, None]  # (B, 1)
    return positions < sizes if padding == "end" else positions >= length - sizes  # (B, T)


def _padded_calls():
    """Fresh inputs each time, so a function that changes its argument in place spoils nothing."""
    calls = []
    for lengths, padding in PADDED:
        sizes = ", ".join(map(str, lengths))
        label = f"with real of shape {(len(lengths), max(lengths))} (lengths {sizes}, padded at the {padding})"
        calls.append((label, (_real_flags(lengths, padding),)))
    return calls


def _causal_padded_keep_mask(real):
    """The course's keep-mask: query i of sequence b may attend to key j when j <= i and key j is real.

    real (B, T) bool -> (B, T, T) bool, True = may attend.
    """
    import torch

    length = real.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()  # (T, T): j <= i
    return causal & real[:, None, :]  # (T, T) & (B, 1, T) -> (B, T, T)


def _mask_variants(real):
    """(name, mask) for the common mistakes of exercise P.4, each (B, T, T) or (T, T) as NumPy booleans."""
    real = np.asarray(real, dtype=bool)  # (B, T)
    batch, length = real.shape
    ones = np.ones((length, length), dtype=bool)
    keys = real[:, None, :]  # (B, 1, T): the real keys, the same for every query
    queries = real[:, :, None]  # (B, T, 1)
    right = np.tril(ones) & keys
    return {
        "inverted": ~right,
        "diagonal too high": np.tril(ones, k=1) & keys,
        "diagonal too low": np.tril(ones, k=-1) & keys,
        "upper triangle": np.triu(ones) & keys,
        "no padding": np.broadcast_to(np.tril(ones), (batch, length, length)),
        "padding on the queries": np.tril(ones) & queries,
        "padding on both": np.tril(ones) & keys & queries,
        "no causal part": np.broadcast_to(keys, (batch, length, length)),
        "padding assumed at the end": np.tril(ones) & (np.arange(length) < real.sum(axis=1)[:, None])[:, None, :],
    }


_MASK_HINTS = {
    "inverted": (
        "that is the right pattern with True and False swapped, as if True meant blocked: the convention of "
        "nn.MultiheadAttention's attn_mask and key_padding_mask. The course's keep-masks, like "
        "scaled_dot_product_attention's, mean True = may attend: drop the ~ (or the == False)."
    ),
    "diagonal too high": (
        "each query also sees the key just after it: the diagonal is one too high. tril(diagonal=k) keeps j <= i + k, "
        "and causal attention keeps j <= i: diagonal=0, the default."
    ),
    "diagonal too low": (
        "each query misses its own key: the diagonal is one too low. A token may attend to itself, so causal attention "
        "keeps j <= i: tril with diagonal=0, the default."
    ),
    "upper triangle": (
        "that keeps the keys at and after each query (j >= i), the future: torch.triu keeps the upper triangle; "
        "causal attention keeps the lower one, torch.tril."
    ),
    "no padding": (
        "the padding is missing: every query may still attend to the padded keys. Combine the triangle with the "
        "real keys, real[:, None, :], using &."
    ),
    "padding on the queries": (
        "that hides the padded queries (rows) instead of the padded keys (columns): real[:, :, None] lies along "
        "the queries' axis; real[:, None, :] lies along the keys' axis, which is what the mask must hide."
    ),
    "padding on both": (
        "that also hides the padded queries' rows: only the padded keys (columns) must be hidden, with "
        "real[:, None, :]; a padded query may still attend to the real keys before it."
    ),
    "padding assumed at the end": (
        "your mask is right when the padding is at the end, but not when it is at the start: build it from real "
        "itself, real[:, None, :], rather than from lengths counted out of it."
    ),
    "no causal part": (
        "the causal part is missing: query i may attend to keys after it. Combine the padding with the lower "
        "triangle, torch.tril, using &."
    ),
}


def _first_mask_mistake(masks):
    """The hint for the first mistake that every one of the learner's masks matches, or None."""
    variants = [_mask_variants(real) for _, (real,) in _padded_calls()]
    for name, hint in _MASK_HINTS.items():
        if all(matches(mask.astype(bool), variant[name]) for mask, variant in zip(masks, variants, strict=True)):
            return hint
    return None


@exercise(
    "P.4",
    Function("your mask function", calls=_padded_calls, returns=Array("the mask", kind="mask", meaning="True = may attend")),
    solution=lambda: _causal_padded_keep_mask,
    success="tril() keeps the keys at and before each query, real[:, None, :] keeps the real keys, and & keeps "
    "what both allow: a (B, T, T) keep-mask, True = may attend.",
)
def _causal_padded(answer, expected):
    masks = answer.outputs
    calls = _padded_calls()
    for mask, right, (label, _) in zip(masks, expected.outputs, calls, strict=True):
        if mask.shape == right.shape[1:]:
            return (
                f"called {label}, your mask is {mask.shape}, one (T, T) mask for the whole batch; each sequence has its "
                "own padding, so the mask is (B, T, T): combine the (T, T) triangle with real[:, None, :], (B, 1, T)."
            )
        if mask.shape != right.shape:
            return f"called {label}, your mask has shape {mask.shape}, but it should be (B, T, T) = {right.shape}."
    hint = _first_mask_mistake(masks)
    if hint is not None:
        return hint
    for mask, right, (label, _) in zip(masks, expected.outputs, calls, strict=True):
        problem = compare(mask.astype(bool), right, "your mask")
        if problem is not None:
            return f"called {label}, {problem}"
    if any(mask.dtype != bool for mask in masks):
        kind = next(mask.dtype for mask in masks if mask.dtype != bool)
        return f"the pattern is right, but your mask holds {kind} numbers; attention functions want dtype=bool."
    return None
