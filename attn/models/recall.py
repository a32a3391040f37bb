"""Associative recall: a dictionary lookup learned from examples (lesson 7).

Each example is a context of (key, value) pairs with distinct keys, then a query key;
the target is the value paired with that key in the context.
"""

import numbers
from dataclasses import dataclass

import torch
from torch import nn

from attn.common.layer_checks import check_parameters
from attn.common.sizes import check_allocation
from attn.multihead import MultiHeadAttention


@dataclass
class RecallData:
    keys: torch.Tensor  # (N, P) key ids, distinct within an example
    values: torch.Tensor  # (N, P) value ids
    query: torch.Tensor  # (N,) the key asked for
    target: torch.Tensor  # (N,) its value
    position: torch.Tensor  # (N,) where the query's key sits in the context

    def __len__(self):
        return len(self.query)

    def batch(self, index):
        """The examples at ``index`` (an int, a slice, or a tensor of ints), as a RecallData."""
        if not (isinstance(index, int | slice) and not isinstance(index, bool)) and not (
                isinstance(index, torch.Tensor) and not index.is_floating_point() and index.device.type != "meta"):
            raise TypeError(f"index must be an int, a slice or a tensor of example numbers, got {type(index).__name__}")
        if isinstance(index, torch.Tensor) and index.dtype != torch.bool and index.numel() and (
                int(index.min()) < -len(self) or int(index.max()) >= len(self)):
            raise ValueError(f"index holds example numbers outside 0..{len(self) - 1}")
        return RecallData(self.keys[index], self.values[index], self.query[index], self.target[index], self.position[index])


def _count(value, name, smallest=1):
    """``value`` as an int >= ``smallest``; bools and floats (even 4.0) are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number (an int), got {value!r}")
    if value < smallest:
        raise ValueError(f"{name} must be {smallest} or more, got {value}")
    return int(value)


def make_recall_data(n_examples, n_pairs=6, n_keys=16, n_values=16, seed=0):
    """``n_examples`` seeded examples of ``n_pairs`` (key, value) pairs and one query each.

    Keys are ids in 0..n_keys-1, distinct within an example; values are ids in 0..n_values-1.
    """
    n_examples, n_pairs = _count(n_examples, "n_examples"), _count(n_pairs, "n_pairs")
    n_keys, n_values, seed = _count(n_keys, "n_keys"), _count(n_values, "n_values"), _count(seed, "seed", smallest=0)
    if seed > 2**63 - 1:
        raise ValueError(f"seed must be at most 2**63 - 1, got {seed}")
    check_allocation(f"make_recall_data(n_examples={n_examples}, n_keys={n_keys})", 12 * n_examples * n_keys)
    if n_pairs > n_keys:
        raise ValueError(f"n_pairs={n_pairs} distinct keys cannot be drawn from n_keys={n_keys}")
    generator = torch.Generator().manual_seed(seed)
    keys = torch.rand(n_examples, n_keys, generator=generator).argsort(dim=1)[:, :n_pairs]  # (N, P), distinct
    values = torch.randint(n_values, (n_examples, n_pairs), generator=generator)  # (N, P)
    position = torch.randint(n_pairs, (n_examples,), generator=generator)  # (N,)
    rows = torch.arange(n_examples)
    return RecallData(keys, values, keys[rows, position], values[rows, position], position)


class RecallModel(nn.Module):
    """Embeddings, one attention layer from the course, and a linear readout.

    Each pair becomes one token, key embedding + value embedding (B, P, E); the query key is
    the single query token (B, 1, E). Attention must find the pair whose key matches and copy
    out its value, which the readout turns into scores over the value vocabulary.
    """

    def __new__(cls, n_keys=16, n_values=16, embed_dim=32, num_heads=1):
        # The sizes are checked here, before __init__ (whose source lesson 7 prints) builds anything.
        n_keys, n_values, embed_dim = _count(n_keys, "n_keys"), _count(n_values, "n_values"), _count(embed_dim, "embed_dim")
        check_parameters(f"RecallModel(n_keys={n_keys}, n_values={n_values}, embed_dim={embed_dim})",
                         (n_keys + 2 * n_values + 4 * embed_dim) * embed_dim)
        return super().__new__(cls)

    def __init__(self, n_keys=16, n_values=16, embed_dim=32, num_heads=1):
        super().__init__()
        self.key_embedding = nn.Embedding(n_keys, embed_dim)
        self.value_embedding = nn.Embedding(n_values, embed_dim)
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.readout = nn.Linear(embed_dim, n_values)

    def forward(self, keys, values, query):
        """keys, values (B, P), query (B,) -> value logits (B, n_values),
        weights (B, H, 1, P)."""
        self._check_ids(keys, values, query)  # ids in range, shapes agree
        # one token per pair: key embedding + value embedding, (B, P, E)
        pairs = self.key_embedding(keys) + self.value_embedding(values)
        question = self.key_embedding(query)[:, None, :]  # (B, 1, E)
        attended, weights = self.attention(  # (B, 1, E), (B, H, 1, P)
            question, pairs, pairs, need_weights=True
        )
        return self.readout(attended[:, 0]), weights

    def _check_ids(self, keys, values, query):
        n_keys, n_values = self.key_embedding.num_embeddings, self.value_embedding.num_embeddings
        for name, ids, size in (("keys", keys, n_keys), ("values", values, n_values), ("query", query, n_keys)):
            if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
                kind = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
                raise TypeError(f"{name} must be a tensor of integer ids, got {kind}")
            if ids.numel() and (ids.min() < 0 or ids.max() >= size):
                raise ValueError(
                    f"{name} holds ids from {int(ids.min())} to {int(ids.max())}, but this model knows only 0..{size - 1}"
                )
        if keys.dim() != 2 or keys.shape != values.shape or query.shape != keys.shape[:1]:
            raise ValueError(
                f"keys and values must be (B, P) and query (B,): got keys {tuple(keys.shape)}, "
                f"values {tuple(values.shape)}, query {tuple(query.shape)}"
            )


def train(model, data, steps=300, batch_size=128, learning_rate=3e-3, seed=0):
    """Adam on cross-entropy, seeded mini-batches; the loss of each step."""
    steps = _count(steps, "steps")  # the checks of the arguments
    batch_size = _count(batch_size, "batch_size")
    _check_not_empty(data)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    losses = []
    model.train()
    for _ in range(steps):
        picked = torch.randint(len(data), (batch_size,), generator=generator)
        batch = data.batch(picked)  # batch_size examples, drawn with seed
        logits, _ = model(batch.keys, batch.values, batch.query)
        loss = nn.functional.cross_entropy(logits, batch.target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def _check_not_empty(data):
    if not isinstance(data, RecallData):
        raise TypeError(f"data must be RecallData (from make_recall_data), got {type(data).__name__}")
    if len(data) == 0:
        raise ValueError("data holds no examples; make it with make_recall_data(n_examples) for n_examples >= 1")


@torch.no_grad()
def accuracy(model, data):
    """Fraction of examples whose most likely value is the target."""
    _check_not_empty(data)
    logits, _ = model(data.keys, data.values, data.query)
    return (logits.argmax(dim=-1) == data.target).float().mean().item()


def most_common_value_accuracy(train_data, test_data):
    """Accuracy of always answering the value most common in the training targets: a model that cannot look up."""
    _check_not_empty(train_data)
    _check_not_empty(test_data)
    most_common = torch.bincount(train_data.target).argmax()
    return (test_data.target == most_common).float().mean().item()
