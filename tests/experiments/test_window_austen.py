"""Lesson 14's StreamingLLM experiment on lesson 13's model: the machinery on a small random model, the
shipped measurement's claims, and (where the corpus is present) its first stretch re-run."""

import json

import pytest
import torch

from attn import RingKVCache
from attn.experiments import window_austen
from attn.models import lm, lm_training
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / window_austen.RESULTS_NAME


def small_model():
    torch.manual_seed(0)
    return lm.AustenLM(vocab_size=50, context_length=16, embed_dim=16, num_heads=2, num_layers=2).eval()


def test_a_windowed_model_decodes_through_ring_caches_as_in_one_pass():
    model = window_austen.set_window(small_model(), 6, 2)
    tokens = torch.randint(50, (2, 70), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        caches = [RingKVCache(6, 2) for _ in model.blocks]
        stepped = torch.cat([model(tokens[:, t:t + 1], caches) for t in range(70)], dim=1)
        window_austen.set_window(model, None)
        unwindowed = model(tokens)
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-4)
    assert (unwindowed - full).abs().max() > 1e-3, "the window changes what the model reads"


def test_streams_and_bins():
    tokens = torch.arange(100)
    streams = window_austen.held_out_streams(tokens, length=20, count=4)
    assert streams[:, 0].tolist() == [0, 25, 50, 75] and streams.shape == (4, 20)
    with pytest.raises(ValueError, match="5 stretches of 30 tokens need 150 tokens, the text has 100"):
        window_austen.held_out_streams(tokens, length=30, count=5)
    assert window_austen.binned(torch.tensor([1.0, 3.0, 5.0]), 2) == [2.0, 5.0]
    with pytest.raises(ValueError, match="window must be at least 1"):
        window_austen.set_window(small_model(), 0)


def test_measure_writes_every_condition():
    streams = torch.randint(50, (2, 40), generator=torch.Generator().manual_seed(2))
    record = window_austen.measure(small_model(), streams, windows=(4, 8), sink_counts=(0, 2), bin_size=8,
                                   progress=lambda _: None)
    assert [c["name"] for c in record["conditions"]] == [
        "full attention", "window 4", "window 4 + 2 sinks", "window 8", "window 8 + 2 sinks"]
    assert all(len(c["loss_by_bin"]) == 5 for c in record["conditions"])
    assert len(record["first_token_weight_by_layer"]) == 2 and all(0 < w < 1 for w in record["first_token_weight_by_layer"])


@pytest.mark.skipif(not RESULTS.exists(), reason="the measurement has not been shipped in this tree")
def test_the_shipped_measurement_and_its_first_stretch():
    record = json.loads(RESULTS.read_text())
    names = [c["name"] for c in record["conditions"]]
    assert names[0] == "full attention" and len(names) == 1 + len(record["windows"]) * len(record["sink_counts"])
    bins = -(-(record["stream_length"] - 1) // record["bin"])
    assert all(len(c["loss_by_bin"]) == bins for c in record["conditions"])
    try:
        from attn.data.corpus import austen

        novels = austen()
    except FileNotFoundError:
        pytest.skip("the corpus is not fetched here (python -m attn.data.corpus)")
    model, tokenizer = lm.load()
    streams = window_austen.held_out_streams(lm_training.token_tensor(tokenizer, [novels[lm.HELD_OUT]]),
                                             record["stream_length"], record["streams"])
    first = streams[:1, :4 * record["bin"] + 1]  # causal: the first bins need only the first tokens
    for condition in record["conditions"][:2]:
        window_austen.set_window(model, condition["window"], condition["sink_tokens"])
        again = window_austen.binned(window_austen.stream_losses(model, first)[0], record["bin"])
        assert again == pytest.approx(condition["first_stream_loss_by_bin"][:4], abs=2e-3)


def test_the_loss_by_position_is_the_mean_over_windows():
    model = small_model()
    tokens = torch.randint(50, (16 * 5 + 3,), generator=torch.Generator().manual_seed(3))
    by_position = window_austen.loss_by_position(model, tokens, batch_size=2)
    inputs, targets = lm_training.held_out_windows(tokens, 16)
    with torch.no_grad():
        each = torch.nn.functional.cross_entropy(model(inputs).transpose(1, 2), targets, reduction="none")
    assert len(by_position) == 16
    torch.testing.assert_close(torch.tensor(by_position, dtype=torch.float64), each.mean(dim=0).double(), rtol=0, atol=1e-6)
    if RESULTS.exists() and "loss_by_position" in json.loads(RESULTS.read_text()):
        assert len(json.loads(RESULTS.read_text())["loss_by_position"]) == lm.load()[0].context_length


def test_the_loss_by_position_refuses_what_is_not_a_language_model():
    tokens = torch.randint(50, (40,))
    for model, batch_size, error, words in (
        (None, 2, TypeError, "model must be a language model with a context_length"),
        (torch.nn.Linear(2, 2), 2, TypeError, "model must be a language model"),
        (small_model(), 0, ValueError, "batch_size"),
    ):
        with pytest.raises(error, match=words):
            window_austen.loss_by_position(model, tokens, batch_size)
