"""The PyTorch primer's exercises (read between lessons 5 and 6): nn.Linear by hand, cross-entropy by hand.

torch is imported inside the functions, so that ``import attn`` stays free of it. P.1's solution
is PyTorch's own function; P.2's is the computation by hand, since the exercise asks for it without
calling functional.cross_entropy (the check watches for that call).
"""

import contextlib

from attn.exercises.answers import Array, Function, Number, attempt, compare, compare_without_answer, matches
from attn.exercises.registry import exercise

LINEAR_CASES = ((5, 3, 11), (2, 4, 12))  # (N, features, seed): square weights, so a missing .T gives numbers, not an error
LOSS_CASES = ((4, 5, 21), (6, 3, 22))  # (N examples, C classes, seed)


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
    for n_examples, n_classes, seed in LOSS_CASES:
        generator = torch.Generator().manual_seed(seed)
        logits = 2 * torch.randn(n_examples, n_classes, generator=generator)  # (N, C)
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


_WHOLE_COLUMNS = (
    "indexing with [:, targets] picks a whole column for every target: an (N, N) block that pairs every example with "
    "every example's class; pair each row with its own class instead: log_probabilities[torch.arange(N), targets]."
)


@exercise(
    "P.2",
    Function("your loss function", calls=_loss_calls, returns=Number("the loss")),
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
