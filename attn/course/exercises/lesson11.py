"""Lesson 11's exercises: where the two heads look, what the induction head does without the previous-token
head, and what the model predicts after a single repeated token.

torch is imported inside the functions, so that ``import attn`` stays free of it.
"""

import functools
from pathlib import Path

import numpy as np

from attn.course.exercises.answers import AnswerError, Array, Number
from attn.course.exercises.judging import compare_without_answer, matches
from attn.course.exercises.registry import exercise

# Where exercise 11.2's check looks for the lesson's trained weights, in this order: the clone's lessons/weights
# beside the attn package (an editable install), then weights/ and lessons/weights/ under the current folder (the
# lesson runs in lessons/, so an installed package finds the weights there too).
WEIGHTS = Path(__file__).resolve().parents[3] / "lessons" / "weights"
MODEL_FOLDERS = (WEIGHTS, Path("weights"), Path("lessons") / "weights")

SEQUENCE_SEED, QUERY = 16, 21  # exercise 11.1: make_repeat_data(1, seed=16), whose query 21 is in the second copy
BLOCK_LENGTH = 8  # that sequence's block: positions 10-17, again at 18-25 (the tests check it)
SINGLE_SEED, EARLIER, LATER = 3, 7, 22  # exercise 11.3: 32 distinct tokens, then token 22 set to token 7

# Exercise 11.2's options: what zeroing the previous-token head does to the induction head's score.
UNCHANGED, HALVED, COLLAPSED = 1, 2, 3


def _sequence():
    """Exercise 11.1's sequence, (T,) as a list of token ids."""
    from attn.models.induction import make_repeat_data

    return make_repeat_data(1, seed=SEQUENCE_SEED).tokens[0].tolist()


def _earlier_position(tokens, query):
    return max(position for position in range(query) if tokens[position] == tokens[query])


def _where_heads_look():
    tokens = _sequence()
    return np.array([QUERY - 1, _earlier_position(tokens, QUERY) + 1])  # (previous-token key, induction key)


def single_repeat_sequence():
    """Exercise 11.3's sequence, (1, T) = (1, 32): distinct random tokens, except that token LATER equals token EARLIER."""
    import torch

    generator = torch.Generator().manual_seed(SINGLE_SEED)
    tokens = torch.randperm(64, generator=generator)[:32]  # (T,): 32 distinct tokens
    tokens[LATER] = tokens[EARLIER]
    return tokens[None]


@functools.cache
def _induction_score_without_previous_token_head():
    """Layer 1's induction head's score on the second copy with layer 0's previous-token head zeroed, measured
    (layers counted from 0, as the code and the lesson count them)."""
    from attn.models.induction import TEST_SEED, ablate_head, head_scores, make_repeat_data

    model = _trained_two_layer_model()
    data = make_repeat_data(500, seed=TEST_SEED)
    previous, induction = head_scores(model, data)  # (layers, heads) each
    previous_token_head, induction_head = int(previous[0].argmax()), int(induction[1].argmax())
    with ablate_head(model, 0, previous_token_head):
        _, ablated = head_scores(model, data)
    return ablated[1, induction_head].item()


def _trained_two_layer_model():
    """The lesson's two-layer model, from the first of MODEL_FOLDERS that holds it; AnswerError if none can be read."""
    from attn.models.induction import load_trained, weights_path

    folder = next((folder for folder in MODEL_FOLDERS if weights_path(folder, 2).is_file()), None)
    if folder is None:
        looked = ", ".join(str(folder) for folder in dict.fromkeys(MODEL_FOLDERS))
        raise AnswerError(
            f"this check measures lesson 11's trained model, {weights_path('', 2)}, and it is in none of the folders "
            f"it looks in ({looked}); run the check from the lesson's folder, or make the models with "
            "python -m attn.models.induction --out lessons/weights."
        )
    try:
        return load_trained(folder, 2)
    except (OSError, ValueError, TypeError) as error:
        raise AnswerError(f"this check measures lesson 11's trained model, but it cannot be loaded: {error}") from None


def _option_measured():
    score = _induction_score_without_previous_token_head()
    return UNCHANGED if score > 0.8 else HALVED if score > 0.3 else COLLAPSED


@exercise(
    "11.1",
    Array("your two key positions", kind="whole"),
    solution=_where_heads_look,
    success=(
        f"the previous-token head looks one back, at {QUERY - 1}; the query's token occurred before at "
        f"{QUERY - BLOCK_LENGTH}, so the induction head looks at the position after it, {QUERY - BLOCK_LENGTH + 1}."
    ),
)
def _where_they_look(positions, expected):
    tokens = _sequence()
    earlier = _earlier_position(tokens, QUERY)
    if positions.shape != (2,):
        return "give two positions in a list: [the previous-token head's key, the induction head's key]."
    if matches(positions, expected[::-1]):
        return "those are the right two positions the other way round: the previous-token head's key comes first."
    if matches(positions, [tokens[QUERY - 1], tokens[earlier + 1]]):
        return "those are the tokens at the two positions; give the positions themselves, counted from 0."
    problems = []
    if positions[0] == QUERY:
        problems.append(f"position {QUERY} is the query itself; the previous-token head looks one position back")
    elif positions[0] != expected[0]:
        problems.append(f"the previous-token head's key is the position just before the query {QUERY}")
    if positions[1] == earlier:
        problems.append(
            f"position {earlier} is where the query's token occurred before (a duplicate-token head looks there); "
            "the induction head looks one position further, at the token that followed it"
        )
    elif positions[1] > QUERY:
        problems.append(f"key {positions[1]} comes after the query; the causal mask hides it")
    elif positions[1] != expected[1]:
        problems.append(f"find where the query's token, {tokens[QUERY]}, occurred before, and take the position after it")
    if problems:
        return "; ".join(problems) + "."
    return compare_without_answer(positions, expected, "your two key positions")


@exercise(
    "11.2",
    Number("your option", whole=True),
    solution=_option_measured,
    success=(
        "without the previous-token head no key says which token came before it, so the induction head cannot find "
        "its key: its weight there falls to near 0, although its own weights are unchanged."
    ),
)
def _without_the_previous_token_head(option, expected):
    if option.shape != ():
        return compare_without_answer(option, expected, "your option")
    option = int(option)
    if option not in (UNCHANGED, HALVED, COLLAPSED):
        return "give the number of one option: 1, 2 or 3."
    if option == expected:
        return None
    if option == UNCHANGED:
        return (
            "the induction head's own weights are untouched, but what it matches against is not: its keys carry "
            "'the token before me' only because the previous-token head wrote it there."
        )
    if option == HALVED:
        return (
            "the previous-token head is the only head that writes the token before each position; "
            "the other layer-0 head looks at earlier copies of the current token, which does not say what came before."
        )
    return "look again at the score table and the ablation table above."


@exercise(
    "11.3",
    Number("your predicted token", whole=True),
    solution=lambda: int(single_repeat_sequence()[0, EARLIER + 1]),
    success=(
        f"the token at {LATER} occurred before at {EARLIER}, and the token after that is the one the induction head "
        "copies: one earlier pair is enough, no repeated block needed."
    ),
)
def _after_a_single_repeat(token, expected):
    tokens = single_repeat_sequence()[0].tolist()
    if token.shape != () or matches(token, expected):
        return compare_without_answer(token, expected, "your predicted token")
    token = int(token)
    if token == tokens[LATER]:
        return (
            f"{token} is the repeated token itself, at positions {EARLIER} and {LATER}, and the model copies the token "
            f"that follows its earlier occurrence; positions count from 0, as printed above the tokens, and counted "
            f"from 1, 'the token after position {EARLIER}' lands on the repeated token."
        )
    if token == tokens[EARLIER - 1]:
        return f"{token} came before the earlier occurrence; the induction head looks at the token after it."
    if token == tokens[LATER - 1]:
        return f"{token} is the token just before the query; the induction head looks back to position {EARLIER}."
    if len(tokens) > LATER + 1 and token == tokens[LATER + 1]:
        return f"{token} is the token actually at position {LATER + 1}, which the model cannot see; nothing predicts it."
    if token == tokens[EARLIER + 2]:
        return (
            f"{token} is two tokens after the earlier occurrence, one too far; positions count from 0, as printed "
            f"above the tokens, and the induction head copies the token right after position {EARLIER}."
        )
    if token == EARLIER + 1:
        return f"{EARLIER + 1} is the position of the answer; give the token at that position."
    if token == EARLIER + 2:
        return (
            f"{EARLIER + 2} is not the token the model predicts; if it is a position counted from 1, positions count "
            "from 0, as printed above the tokens, and the answer is the token id at a position, not the position."
        )
    if not 0 <= token < 64:
        return "a token id lies between 0 and 63."
    return (
        f"{token} is not the token the model predicts: find the earlier position that holds the same token as "
        f"position {LATER}, and give the token right after it."
    )
