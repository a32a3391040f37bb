"""Lesson 7's task and model: the data is what it says, and the model learns to look up (on a small budget)."""

import pytest
import torch

from attn.recall import RecallModel, accuracy, make_recall_data, most_common_value_accuracy, train


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
