"""Lesson 16's reading command (attn.experiments.smollm2_reading): its pieces on small inputs, its tiny setting
reproducing itself, the shipped record's claims, a sentence for every wrong input, and (where the converted
model and the corpus are present) the shipped record's first passage measured again."""

import json

import pytest
import torch

from attn.experiments import smollm2_reading
from attn.models import lm
from tests.notebooks import ROOT

RESULTS = ROOT / "lessons" / "records" / smollm2_reading.RESULTS_NAME


def small_model(vocab_size=300, seed=0):
    torch.manual_seed(seed)
    return lm.AustenLM(vocab_size=vocab_size, context_length=64, embed_dim=16, num_heads=2, num_layers=2).eval()


def corpus_or_skip():
    from attn.data.corpus import austen

    try:
        return austen()
    except FileNotFoundError:
        pytest.skip("the Austen corpus is not fetched here (python -m attn.corpus)")


def smollm2_or_skip():
    from attn.pretrained import load

    try:
        return load()
    except FileNotFoundError:
        pytest.skip("SmolLM2 is not fetched here (python -m attn.pretrained)")


def test_heads_drawn_and_chosen():
    scores = torch.tensor([[0.1, 0.9], [0.5, 0.2]])
    assert smollm2_reading.top_heads(scores, 2) == [(0, 1), (1, 0)]
    generator = torch.Generator().manual_seed(0)
    drawn = smollm2_reading.random_heads(2, 2, 2, generator, excluded={(0, 1), (1, 0)})
    assert sorted(drawn) == [(0, 0), (1, 1)]
    with pytest.raises(ValueError, match="cannot draw 3 heads from the 2 left"):
        smollm2_reading.random_heads(2, 2, 3, generator, excluded={(0, 1), (1, 0)})


def test_paired_interval_and_t_quantiles():
    record = smollm2_reading.paired_interval(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 2.5, 4.5]))
    assert record["mean"] == 1.0 and record["count"] == 3
    half = 4.303 * torch.tensor([1.0, 0.5, 1.5]).std().item() / 3**0.5
    assert record["low"] == pytest.approx(1 - half, abs=1e-4) and record["high"] == pytest.approx(1 + half, abs=1e-4)
    assert smollm2_reading.paired_interval(torch.tensor([1.0]), torch.tensor([3.0]))["low"] is None
    assert smollm2_reading.t_quantile(1) == 12.706 and smollm2_reading.t_quantile(60) == pytest.approx(2.0, abs=0.003)


@pytest.mark.parametrize(("first", "second"), [
    (torch.ones(3), torch.ones(4)), ([1.0, 2.0], [1.0, 2.0]), (torch.ones(2, 2), torch.ones(2, 2)),
    (torch.ones(0), torch.ones(0)),
])
def test_paired_interval_refuses_what_is_not_paired(first, second):
    with pytest.raises(ValueError, match="must be 1-D tensors of paired values"):
        smollm2_reading.paired_interval(first, second)


def test_ablate_heads_refuses_a_wrong_list_with_a_sentence():
    from attn.experiments import austen_heads

    model = small_model()
    for heads, words in (((0, 1), "the entry 0"), ("01", "got str"), (None, "got NoneType"),
                         ([(0, 5)], "head must be from 0 to 1")):
        with pytest.raises((TypeError, ValueError), match=words), austen_heads.ablate_heads(model, heads):
            pass


def test_bits_per_character_and_chunks():
    per_chunk, overall = smollm2_reading.bits_per_character(torch.tensor([2.0, 4.0]).double(),
                                                               torch.tensor([10.0, 10.0]).double())
    assert overall == pytest.approx(6 / 20 / 0.6931471805599453)
    assert per_chunk.tolist() == pytest.approx([0.2 / 0.6931471805599453, 0.4 / 0.6931471805599453])
    text = " ".join(f"word{i}" for i in range(2000))
    chunks = smollm2_reading.text_chunks(text, 3, 100)
    assert len(chunks) == 3 and all(len(chunk) <= 100 and chunk in text for chunk in chunks)
    assert all(not chunk.startswith(" ") and not chunk.endswith(" ") for chunk in chunks)
    with pytest.raises(ValueError, match="need a longer text"):
        smollm2_reading.text_chunks("a b c", 3, 100)


def test_chunk_costs_are_the_loss_of_every_token_after_the_first():
    from attn.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["the cat sat on the mat, and the dog sat on the log. " * 20], vocab_size=280)
    model = small_model(tokenizer.vocab_size)
    chunk = "the dog sat on the mat"
    nats, characters = smollm2_reading.chunk_costs(model, tokenizer, [chunk])
    ids = torch.tensor(tokenizer.encode(chunk))
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(ids[None, :-1])[0], ids[1:], reduction="sum")
    assert nats.item() == pytest.approx(expected.item(), rel=1e-6)
    assert characters.item() == len(chunk) - len(tokenizer.decode(ids[:1].tolist()))
    with pytest.raises(ValueError, match="more than the 64 the model was trained on"):
        smollm2_reading.chunk_costs(model, tokenizer, ["the dog sat " * 40])


def test_sink_and_head_measures_on_a_small_model():
    model = small_model()
    passages = torch.randint(300, (2, 12), generator=torch.Generator().manual_seed(1))
    sink = smollm2_reading.sink_measures(model, passages, replacement=5)
    assert sink["first_token_weight"].shape == (2, 2, 2) and sink["key_norms"].shape == (2, 2, 2)
    assert sink["loss"].shape == (2,)
    replaced = passages.clone()
    replaced[:, 0] = 5
    assert torch.allclose(sink["loss_first_token_replaced"], smollm2_reading.passage_losses(model, replaced))
    repeated = torch.cat((passages[:, :6], passages[:, :6]), dim=1)
    heads = smollm2_reading.head_measures(model, repeated, top_count=1, draws=2, seed=0)
    assert heads["induction_score_by_passage"].shape == (2, 2, 2)
    assert len(heads["random_heads"]) == 2 and heads["top_induction_heads"][0] not in heads["random_heads"][0]
    weight = model.blocks[0].attention.out_proj.weight.clone()
    assert torch.equal(model.blocks[0].attention.out_proj.weight, weight), "the ablations are undone"


def test_the_tiny_setting_reproduces_itself():
    novels = corpus_or_skip()
    model, tokenizer = lm.load()
    first = smollm2_reading.measure(model, tokenizer, model, tokenizer, novels, "tiny", progress=lambda line: None)
    second = smollm2_reading.measure(model, tokenizer, model, tokenizer, novels, "tiny", progress=lambda line: None)
    assert first == second
    assert json.loads(json.dumps(first)) == first
    cache = [c for c in first["streaming"]["conditions"] if c.get("sink_positions") == "cache"]
    assert cache and all(c["sink_tokens"] == 2 for c in cache)


def test_the_shipped_record_says_what_the_lesson_reads():
    record = json.loads(RESULTS.read_text())
    full = smollm2_reading.SIZES["full"]
    assert record["size"] == "full" and record["settings"]["streams"] == full["streams"]
    assert (record["num_layers"], record["num_heads"]) == (30, 9)
    assert len(record["sink"]["first_token_weight"]) == 30 and len(record["heads"]["induction_score"][0]) == 9
    assert len(record["heads"]["random_heads"]) == full["random_draws"]
    names = [condition["name"] for condition in record["streaming"]["conditions"]]
    assert "window 64 + 4 sinks (cache places)" in names and "window 256 + 4 sinks" in names
    assert set(record["bits_per_character"]["overall"]) == {"SmolLM2-135M", "Austen model", "unigram (Austen tokens)",
                                                            "bigram (Austen tokens)",
                                                            "kneser_ney_trigram (Austen tokens)"}
    assert record["provenance"]["threads"] == 1


def test_the_shipped_first_passage_measured_again():
    record = json.loads(RESULTS.read_text())
    novels = corpus_or_skip()
    model, tokenizer = smollm2_or_skip()
    settings = smollm2_reading.SIZES["full"]
    tokens = torch.tensor(tokenizer.encode(novels[lm.HELD_OUT]), dtype=torch.long)
    passages = smollm2_reading.spaced_passages(tokens, settings["sink_passages"], settings["sink_length"])
    loss = smollm2_reading.passage_losses(model, passages[:1])
    assert round(loss.item(), 4) == pytest.approx(record["sink"]["loss"][0], abs=2e-4)


@pytest.mark.parametrize(("arguments", "words"), [
    (["--size", "tiny"], "the following arguments are required: --out"),
    (["--out", "x", "--size", "huge"], "invalid choice: 'huge'"),
])
def test_the_command_line_refuses_with_a_sentence(arguments, words, capsys):
    with pytest.raises(SystemExit):
        smollm2_reading.main(arguments)
    assert words in capsys.readouterr().err


def test_a_destination_that_is_a_file_is_refused_first(tmp_path, capsys):
    taken = tmp_path / "a_file"
    taken.write_text("")
    with pytest.raises(SystemExit):
        smollm2_reading.main(["--out", str(taken), "--size", "tiny"])
    assert "a_file" in capsys.readouterr().err


def test_wrong_models_and_sizes_get_a_sentence():
    model, tokenizer = lm.load()
    with pytest.raises(ValueError, match="size must be one of full, tiny"):
        smollm2_reading.measure(model, tokenizer, model, tokenizer, {}, "huge")
    with pytest.raises(TypeError, match="must be an attn.lm.AustenLM"):
        smollm2_reading.measure(torch.nn.Linear(2, 2), tokenizer, model, tokenizer, {}, "tiny")


@pytest.mark.parametrize(("call", "message"), [
    (lambda model: smollm2_reading.passage_losses(1, torch.zeros(1, 4, dtype=torch.long)), "model must be an attn.lm"),
    (lambda model: smollm2_reading.passage_losses(model, 2**63), "passages must be a tensor of integer token ids"),
    (lambda model: smollm2_reading.passage_losses(model, torch.zeros(1, 2, dtype=torch.long)), "T >= 3"),
    (lambda model: smollm2_reading.sink_measures(model, torch.zeros(1, 4, dtype=torch.long), 300), "at most 299"),
    (lambda model: smollm2_reading.top_heads(torch.randn(3), 1), r"scores must be \(L, H\)"),
    (lambda model: smollm2_reading.top_heads(torch.randn(2, 2), 5), "cannot choose 5 heads of 4"),
    (lambda model: smollm2_reading.random_heads(2**63, 2, 1, torch.Generator()), "more than the 1,000,000"),
    (lambda model: smollm2_reading.random_heads(2, 2, "2", torch.Generator()), "count must be a positive int"),
    (lambda model: smollm2_reading.random_heads(2, 2, 1, -1), "generator must be a torch.Generator"),
    (lambda model: smollm2_reading.random_heads(2, 2, 1, torch.Generator(), None), "excluded must be a set"),
    (lambda model: smollm2_reading.head_measures(model, torch.zeros(1, 8, dtype=torch.long), 3, 1, 0), "top_count=3"),
    (lambda model: smollm2_reading.head_measures(model, torch.zeros(1, 8, dtype=torch.long), 1, 10**9, 0), "at most 1000"),
    (lambda model: smollm2_reading.head_measures(model, torch.zeros(1, 8, dtype=torch.long), 1, 1, 2**70), "seed must lie"),
    (lambda model: smollm2_reading.text_chunks("\ud800", 1, 10), "lone surrogate"),
    (lambda model: smollm2_reading.text_chunks("x" * 500, 1, 10), "no space to cut"),
    (lambda model: smollm2_reading.text_chunks("a b " * 200, 1, None), "characters must be a positive int"),
    (lambda model: smollm2_reading.chunk_costs(model, object(), ["a b"]), "tokenizer must be the model's tokenizer"),
    (lambda model: smollm2_reading.bits_per_character(None, None), "nats must be a torch.Tensor"),
    (lambda model: smollm2_reading.bits_per_character(torch.ones(2), torch.zeros(2)), "at least one character"),
    (lambda model: smollm2_reading.t_quantile(float("nan")), "degrees must be a positive int"),
    (lambda model: smollm2_reading.paired_interval(torch.tensor([1.0, float("nan")]), torch.ones(2)), "first contains NaN"),
    (lambda model: smollm2_reading.run("out", progress=None), "progress must be a function"),
])
def test_the_measures_refuse_wrong_arguments_before_any_work(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(small_model())


def test_a_missing_model_gets_the_sentence_that_names_its_command(tmp_path, monkeypatch, capsys):
    import attn.models.pretrained as pretrained

    monkeypatch.setattr(pretrained, "FOLDER", tmp_path / "nothing here")
    corpus_or_skip()
    with pytest.raises(SystemExit):
        smollm2_reading.main(["--out", str(tmp_path / "out"), "--size", "tiny"])
    error = capsys.readouterr().err
    assert "python -m attn.pretrained" in error and "Traceback" not in error
    assert not (tmp_path / "out" / smollm2_reading.RESULTS_NAME).exists()
