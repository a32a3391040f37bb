"""Lesson 19's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away.
The expected answers are the course's own: a PagedKVCache's slots, its free list, and speculative decoding's accept."""

import numpy as np
import pytest
import torch

from attn.course.exercises.lesson19 import (
    BLOCK_TABLE,
    CHOICES,
    GUESSES,
    OWN_PAGES,
    PAGE_SIZE,
    POOL_PAGES,
    POSITION,
    SHARED_PAGES,
    _free_after,
    _kept,
    _where,
)
from attn.course.exercises.registry import verdict
from attn.serving import PagedKVCache
from attn.serving.speculative import accept
from tests.verdicts import names_the_mistake

# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"19.1": ("[9, 5]", "page 9", "149"), "19.2": ("6 free", "are 6", "is 6"), "19.3": ("[5, 9, 4]", "5, 9, 4")}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS.get(exercise_id, ()))


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("19.1", [9, 5]), ("19.1", np.array([9, 5])), ("19.1", torch.tensor([9, 5])), ("19.2", 6), ("19.2", 6.0),
    ("19.3", [5, 9, 4]), ("19.3", np.array([5, 9, 4])),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_own():
    """A PagedKVCache holding the exercises' pages gives their slot and free count; accept gives the round."""
    cache = PagedKVCache(16, PAGE_SIZE, 1, 1)
    cache.add_sequence("s")
    cache.block_tables["s"], cache.lengths["s"] = list(BLOCK_TABLE), len(BLOCK_TABLE) * PAGE_SIZE
    page, offset = _where()
    assert int(cache.slots("s")[POSITION]) == page * PAGE_SIZE + offset
    pool = PagedKVCache(POOL_PAGES, 4, 1, 1)
    pool.add_sequence("A")
    pool.reserve("A", 4 * len(SHARED_PAGES))  # the shared pages 0 and 1
    for name in ("B", "C"):
        pool.fork("A", name)
    for name, own in OWN_PAGES.items():
        pool.reserve(name, 4 * len(own))
    assert sorted(pool.block_tables["C"]) == [*SHARED_PAGES, *OWN_PAGES["C"]]
    for name in ("A", "B"):
        pool.free(name)
    assert pool.num_free_pages == _free_after()
    logits = torch.full((len(CHOICES), 12), -1.0, dtype=torch.float64)
    logits[torch.arange(len(CHOICES)), torch.tensor(CHOICES)] = 1.0
    assert accept(logits, list(GUESSES), None, 0.0) == _kept().tolist()


@pytest.mark.parametrize(("answer", "words"), [
    ([4, 5], "off-by-one page"), ([3, 5], "off-by-one page"), ([2, 5], "index in the block table"),
    ([9, 6], "one too large"), ([9, 4], "one too small"), ([8, 5], "not in the sequence's block table"),
    ([9, 20], "between 0 and"), ([9, 11], "the offset is not"), ([7, 5], "other positions"), ([9], "two whole numbers"),
])
def test_exercise_19_1_names_the_mistake(answer, words):
    not_yet("19.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (8, "freeing a shared page"), (3, "before anyone left"), (5, "not B"), (4, "not A"), (10, "C is still running"),
    (7, "too large"), (1, "too small"), ([6, 6], "one whole number"),
])
def test_exercise_19_2_names_the_mistake(answer, words):
    not_yet("19.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    ([5, 9, 2], "accepting the first rejected draft token"), ([5, 9, 2, 7, 1], "keeps every guess"),
    ([5, 9], "adds nothing there"), ([5, 9, 4, 7, 1], "discarded"), ([5, 9, 4, 7, 1, 3], "at most 5"),
    ([5, 8, 4], "stop at the first difference"), ([[5, 9, 4]], "one list"),
])
def test_exercise_19_3_names_the_mistake(answer, words):
    not_yet("19.3", answer, words)


@pytest.mark.parametrize("exercise_id", ["19.1", "19.2", "19.3"])
@pytest.mark.parametrize("answer", [None, ..., "nine", float("nan"), [], {"a": 1}])
def test_any_input_gets_a_sentence(exercise_id, answer):
    reply = verdict(exercise_id, answer)
    assert reply.startswith(("Not yet: ", "Correct: ")) is True and not reply.startswith("Correct: ")
