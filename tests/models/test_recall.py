"""Lesson 7's task and model: the data is what it says, and the model learns to look up (on a small budget)."""

import pytest
import torch

from attn.models.recall import RecallModel, accuracy, make_recall_data, most_common_value_accuracy, train


def test_data_is_a_valid_lookup():
    data = make_recall_data(500, n_pairs=5, n_keys=8, n_values=4, seed=3)
    assert data.keys.shape == data.values.shape == (500, 5)
    assert all(len(set(row.tolist())) == 5 for row in data.keys), "keys are distinct within an example"
    rows = torch.arange(500)
    assert torch.equal(data.keys[rows, data.position], data.query)
    assert torch.equal(data.values[rows, data.position], data.target)
    assert int(data.keys.max()) < 8 and int(data.values.max()) < 4


def test_data_is_seeded():
    first, second, other = make_recall_data(50, seed=1), make_recall_data(50, seed=1), make_recall_data(50, seed=2)
    assert torch.equal(first.keys, second.keys) and torch.equal(first.target, second.target)
    assert not torch.equal(first.keys, other.keys)


def test_too_many_pairs_is_refused():
    with pytest.raises(ValueError, match="n_pairs=9 distinct keys cannot be drawn from n_keys=8"):
        make_recall_data(10, n_pairs=9, n_keys=8)


def test_model_shapes():
    model = RecallModel(n_keys=8, n_values=4, embed_dim=16, num_heads=2)
    data = make_recall_data(3, n_pairs=5, n_keys=8, n_values=4)
    logits, weights = model(data.keys, data.values, data.query)
    assert logits.shape == (3, 4) and weights.shape == (3, 2, 1, 5)


def test_the_model_learns_to_look_up():
    torch.manual_seed(0)
    train_data, test_data = make_recall_data(4000, seed=0), make_recall_data(500, seed=1)
    model = RecallModel()
    losses = train(model, train_data, steps=120, batch_size=64, seed=0)
    baseline = most_common_value_accuracy(train_data, test_data)
    assert losses[-1] < losses[0] / 4
    assert accuracy(model, test_data) > max(0.6, 5 * baseline)
    with torch.no_grad():
        _, weights = model(test_data.keys, test_data.values, test_data.query)
    on_match = weights[:, 0, 0][torch.arange(len(test_data)), test_data.position].mean()
    assert on_match > 0.5, "the query attends to the matching pair"


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"n_examples": 0}, ValueError, "n_examples must be 1 or more, got 0"),
        ({"n_examples": 2.5}, TypeError, "n_examples must be a whole number"),
        ({"n_examples": 10, "n_pairs": 0}, ValueError, "n_pairs must be 1 or more, got 0"),
        ({"n_examples": 10, "n_keys": 0}, ValueError, "n_keys must be 1 or more"),
        ({"n_examples": 10, "n_values": -1}, ValueError, "n_values must be 1 or more"),
        ({"n_examples": 10, "n_values": True}, TypeError, "n_values must be a whole number"),
        ({"n_examples": 10, "seed": -1}, ValueError, "seed must be 0 or more"),
        ({"n_examples": 10, "seed": "0"}, TypeError, "seed must be a whole number"),
        ({"n_examples": None}, TypeError, "n_examples must be a whole number"),
    ],
)
def test_bad_data_settings_are_named(kwargs, error, words):
    with pytest.raises(error, match=words):
        make_recall_data(**kwargs)


def test_ids_outside_the_vocabulary_are_refused():
    model = RecallModel(n_keys=8, n_values=4)
    data = make_recall_data(3, n_pairs=5, n_keys=8, n_values=4)
    with pytest.raises(ValueError, match=r"keys holds ids from \d+ to 8, but this model knows only 0..7"):
        model(data.keys.clamp(max=7).index_fill(1, torch.tensor([0]), 8), data.values, data.query)
    with pytest.raises(ValueError, match=r"values holds ids from -1 to \d+, but this model knows only 0..3"):
        model(data.keys, data.values.index_fill(1, torch.tensor([0]), -1), data.query)
    with pytest.raises(ValueError, match=r"query holds ids from \d+ to 99"):
        model(data.keys, data.values, torch.full((3,), 99))
    with pytest.raises(TypeError, match="integer ids, got torch.float32"):
        model(data.keys.float(), data.values, data.query)
    with pytest.raises(ValueError, match=r"query \(2,\)"):
        model(data.keys, data.values, data.query[:2])
    bigger = make_recall_data(3, n_pairs=5, n_keys=16, n_values=16, seed=1)
    with pytest.raises(ValueError, match="this model knows only"):
        model(bigger.keys, bigger.values, bigger.query)


def test_bad_training_settings_are_named():
    model, data = RecallModel(), make_recall_data(20)
    with pytest.raises(ValueError, match="batch_size must be 1 or more, got 0"):
        train(model, data, steps=1, batch_size=0)
    with pytest.raises(ValueError, match="steps must be 1 or more, got 0"):
        train(model, data, steps=0)
    with pytest.raises(TypeError, match="data must be RecallData"):
        train(model, [1, 2, 3], steps=1)
    empty = data.batch(torch.arange(0))
    with pytest.raises(ValueError, match="data holds no examples"):
        train(model, empty, steps=1)
    with pytest.raises(ValueError, match="data holds no examples"):
        accuracy(model, empty)
    with pytest.raises(ValueError, match="data holds no examples"):
        most_common_value_accuracy(empty, data)
    losses = train(model, data, steps=2, batch_size=4)
    assert len(losses) == 2 and all(loss == loss for loss in losses), "no NaN losses"
