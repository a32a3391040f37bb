"""Lesson 23's self-checks: right answers pass, each planted mistake is named, and no reply gives the answer away.
The expected answers are the course's own: attn.vision.patches, grid_positions, apply_rotary_2d and the
VisionTransformer's features."""

import numpy as np
import pytest
import torch

from attn.course.exercises.lesson23 import _angles, _patches, _turned
from attn.course.exercises.registry import verdict
from attn.models.vit import VisionTransformer
from attn.vision import apply_rotary_2d_loop, patches_loop, rotary_2d_frequencies
from tests.verdicts import names_the_mistake

PATCHES = [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]
ANGLES = [0, 0, 0, 0, 0, 1, 1, 1]
TURNED = [np.cos(1), np.sin(1), np.cos(0.1), np.sin(0.1), np.cos(2), np.sin(2), np.cos(0.2), np.sin(0.2)]
# The expected values as a learner would see them printed; none may appear in a "Not yet" reply.
ANSWERS = {"23.1": ("[0, 1, 4, 5]", "0, 1, 4, 5"), "23.2": ("[0, 0, 0, 0, 0, 1, 1, 1]", "0, 0, 0, 0, 0, 1"),
           "23.3": ("0.5403", "0.8414", "-0.4161"), "23.4": ("(2, 17, 32)", "17")}


def not_yet(exercise_id, answer, words):
    names_the_mistake(exercise_id, answer, words, ANSWERS[exercise_id])


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("23.1", PATCHES), ("23.1", np.array(PATCHES, dtype=np.float32)), ("23.1", torch.tensor(PATCHES)),
    ("23.2", ANGLES), ("23.2", torch.tensor(ANGLES)), ("23.3", TURNED), ("23.3", torch.tensor(TURNED)),
    ("23.4", (2, 17, 32)), ("23.4", torch.Size([2, 17, 32])),
])
def test_right_answers_are_correct(exercise_id, answer):
    assert verdict(exercise_id, answer).startswith("Correct: ")


def test_the_right_answers_are_the_course_s_own():
    picture = torch.arange(16, dtype=torch.float64).reshape(1, 1, 4, 4)
    assert patches_loop(picture, 2)[0].tolist() == PATCHES
    query = torch.tensor([[1.0, 0, 1, 0, 1, 0, 1, 0]], dtype=torch.float64)
    turned = apply_rotary_2d_loop(query, torch.tensor([1]), torch.tensor([2]), rotary_2d_frequencies(8, 100.0))
    np.testing.assert_allclose(turned[0].numpy(), TURNED, atol=1e-12)
    model = VisionTransformer(28, 7, 32, 4, 1, 0, registers=4)
    assert model.residual_stream(torch.zeros(2, 1, 28, 28)).shape[2] == 21  # the registers in the stream: 1 + 4 + 16
    assert tuple(model.features(torch.zeros(2, 1, 28, 28)).shape) == (2, 17, 32)


@pytest.mark.parametrize(("answer", "words"), [
    (_patches(grid_column_first=True), "read column-first: the grid"), (_patches(pixels_column_first=True), "pixels"),
    (_patches(True, True), "twice"), (np.arange(16).reshape(4, 4), "picture's rows"),
    (np.arange(16).reshape(4, 4).T, "picture's columns"), ([PATCHES], "drop the batch axis"),
    ([[0, 1], [2, 3]], "one row per patch"), (np.array(PATCHES) / 255, "divided by 255"),
    ([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 16]], "one of the 16 entries in your tokens is wrong"),
    ([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 16]], "index (3, 3)"), ("patches", "array of numbers"),
])
def test_exercise_23_1_names_the_mistake(answer, words):
    not_yet("23.1", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_angles(class_on_grid=True), "class token a patch position"), (_angles(register_on_grid=True), "register a patch"),
    (_angles(by_column=True), "columns"), (_angles(grid_column_first=True), "column-first"),
    ([0, 0, 0, 1, 1, 1], "8 in all"), ([0, 0, 0, 0, 0, 1, 1, 2], "index 7"), (None, "nothing yet"),
    ([0, 0, 0, 0, 0, 1, 1, 2], "its index among the patches (0 to 5)"),
])
def test_exercise_23_2_names_the_mistake(answer, words):
    not_yet("23.2", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    (_turned(("row", "row")), "by row for both halves"), (_turned(("col", "col")), "with the column"),
    (_turned(("col", "row")), "swaps the halves"), (_turned(one_d=True), "1D rotary's frequencies"),
    (_turned(backwards=True), "wrong way"), ([1.0, 0.0], "8 numbers"), ([1, 0, 2, 0, 1, 0, 1, 0], "entries"),
    ([1, 0, 1, 0, 1, 0, 1, 0], "the query as it was"), (_turned(base=10000.0), "base 10000, lesson 8's"),
    (_turned(base=10000.0), "uses base 100:"), (_turned(mixed=True), "the row and the column together"),
    (_turned(degrees=True), "degrees"), ([TURNED], "drop the batch axis"), (torch.tensor([TURNED]), "shape (1, 8)"),
    (float("nan"), "NaN"),
])
def test_exercise_23_3_names_the_mistake(answer, words):
    not_yet("23.3", answer, words)


@pytest.mark.parametrize(("answer", "words"), [
    ((2, 21, 32), "keeps the registers"), ((2, 16, 32), "drops the class token as well"),
    ((2, 20, 32), "other way round"), ((2, 50, 32), "7 x 7"), ((17, 32), "batch axis"), ((2, 17), "three sizes"),
    ((2, 18, 32), "after the registers are dropped"), ("two by many", "text"),
    ((2, 17, 49), "a patch's 7 x 7 pixels"), ((2, 32, 17), "wrong order"), ((2, 17, 16), "check E, the width"),
    ((1, 17, 32), "check B, the batch"),
])
def test_exercise_23_4_names_the_mistake(answer, words):
    not_yet("23.4", answer, words)
