"""Lesson 13: the Austen corpus reader, the tokenizer, the language model, its command lines and its shipped files.

The reader is tested on R serialisations and a .deb built here byte by byte, so it needs no network; the
tests that read the real novels run where ``python -m attn.corpus`` has fetched them (CI does) and say how
to fetch them where it has not. The training command is re-run at its tiny size on six short texts written
for the course, twice, and must write the same log.
"""

import gzip
import io
import json
import math
import struct
import tarfile
import zlib
from pathlib import Path

import pytest
import torch

from attn import MultiHeadAttention, TransformerBlock, apply_rotary
from attn.data import corpus, tokenizer
from attn.experiments import austen_heads
from attn.models import lm, lm_training
from attn.models.decoder import generate, stepwise_logits
from tests.notebooks import ROOT

WEIGHTS = ROOT / "lessons" / "weights"
RECORDS = ROOT / "lessons" / "records"
CORPUS_ABSENT = "the Austen corpus is not fetched here; run 'python -m attn.corpus' (needs apt-get) to run this test"


def corpus_or_skip():
    try:
        return corpus.austen()
    except FileNotFoundError:
        pytest.skip(CORPUS_ABSENT)


# --- R's serialisation, written by hand --------------------------------------------------------

def xdr_int(value):
    return struct.pack(">i", value)


def r_string(text):
    data = text.encode("utf-8")
    return xdr_int(corpus.CHARSXP | 1 << 15) + xdr_int(len(data)) + data


def r_character_vector(lines):
    return xdr_int(corpus.STRSXP) + xdr_int(len(lines)) + b"".join(
        xdr_int(corpus.CHARSXP) + xdr_int(-1) if line is None else r_string(line) for line in lines)


def r_header(version=3):
    header = b"X\n" + xdr_int(version) + xdr_int(0x040200) + xdr_int(0x030500)
    return header + (xdr_int(5) + b"UTF-8" if version == 3 else b"")


def r_named_list(items):
    """A VECSXP with a names attribute (a pairlist whose tag is the symbol 'names')."""
    flags = corpus.VECSXP | corpus.HAS_ATTRIBUTES
    body = xdr_int(flags) + xdr_int(len(items)) + b"".join(value for _, value in items)
    names_tag = xdr_int(corpus.SYMSXP) + r_string("names")
    attributes = xdr_int(corpus.LISTSXP | corpus.HAS_TAG) + names_tag + r_character_vector([name for name, _ in items])
    return body + attributes + xdr_int(corpus.NILVALUE_SXP)


def lazy_load_files(novels):
    """(Rdata.rdx, Rdata.rdb) bytes holding ``novels`` (name -> list of lines), as R writes them."""
    rdb, positions = b"", []
    for name, lines in novels.items():
        serialised = r_header() + r_character_vector(lines)
        chunk = struct.pack(">I", len(serialised)) + zlib.compress(serialised)
        positions.append((name, len(rdb), len(chunk)))
        rdb += chunk
    integer_pair = lambda offset, size: xdr_int(corpus.INTSXP) + xdr_int(2) + xdr_int(offset) + xdr_int(size)  # noqa: E731
    variables = r_named_list([(name, integer_pair(offset, size)) for name, offset, size in positions])
    index = r_header(2) + r_named_list([("variables", variables), ("references", xdr_int(corpus.NILVALUE_SXP)),
                                        ("compressed", xdr_int(corpus.LGLSXP) + xdr_int(1) + xdr_int(1))])
    return gzip.compress(index), rdb


def a_deb(files):
    """A Debian package (ar archive with debian-binary, control.tar.xz, data.tar.xz) holding ``files``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as archive:
        for path, content in files.items():
            info = tarfile.TarInfo("./" + path)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b""), ("data.tar.xz", data.getvalue())]
    deb = b"!<arch>\n"
    for name, content in members:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(content):<10}`\n".encode()
        deb += header + content + (b"\n" if len(content) % 2 else b"")
    return deb


SHORT_NOVELS = {  # six short texts written for the course, hard-wrapped as the package's lines are
    name: [f"{title.upper()}", "", "CHAPTER 1", "", f"The family at {title} Hall was _very_ large,",
           "and very fond of walking in the rain.", "", f"Nobody at {title} Hall agreed with anybody,",
           "which made the dinners long and the walks longer."] * 3
    for name, title in corpus.TITLES.items()
}


def test_the_reader_reads_a_lazy_load_database_written_here():
    rdx, rdb = lazy_load_files({"emma": ["Emma Woodhouse,", None, "handsome £"], "persuasion": ["x"]})
    novels = corpus.read_lazy_load(rdx, rdb)
    assert novels == {"emma": ["Emma Woodhouse,", None, "handsome £"], "persuasion": ["x"]}


def test_paragraphs_join_lines_and_drop_italic_underscores():
    lines = ["CHAPTER 1", "", "It was _very_ wet,", "  and nobody walked.", "", "", "The end."]
    assert corpus.paragraphs(lines) == ["CHAPTER 1", "It was very wet, and nobody walked.", "The end."]


def test_the_command_reads_a_deb_and_writes_one_file_per_novel(tmp_path, capsys):
    rdx, rdb = lazy_load_files(SHORT_NOVELS)
    deb = tmp_path / "janeaustenr.deb"
    deb.write_bytes(a_deb({corpus.DATA_PATH + ".rdx": rdx, corpus.DATA_PATH + ".rdb": rdb}))
    corpus.main(["--deb", str(deb), "--out", str(tmp_path / "austen")])
    printed = capsys.readouterr().out
    assert "Wrote" in printed and "Persuasion" in printed
    novels = corpus.austen(tmp_path / "austen")
    assert list(novels) == list(corpus.TITLES)
    assert novels["emma"].splitlines()[:3] == ["EMMA", "CHAPTER 1", "The family at Emma Hall was very large, and very "
                                               "fond of walking in the rain."]


@pytest.mark.parametrize(("data", "message"), [
    (b"not a deb", "not a .deb file"),
    (a_deb({"usr/share/doc/readme": b"hello"}), "no file ending in"),
    (b"!<arch>\n", "no data.tar member"),
])
def test_a_wrong_deb_gets_a_sentence(tmp_path, data, message):
    deb = tmp_path / "wrong.deb"
    deb.write_bytes(data)
    with pytest.raises(SystemExit, match=message):
        corpus.main(["--deb", str(deb), "--out", str(tmp_path / "austen")])


def test_a_damaged_serialisation_gets_a_sentence():
    with pytest.raises(ValueError, match="not an R serialisation"):
        corpus.read_r_object(b"RDX3\n")
    with pytest.raises(ValueError, match="version 7"):
        corpus.read_r_object(b"X\n" + xdr_int(7) + bytes(8))
    with pytest.raises(ValueError, match="ends in the middle"):
        corpus.read_r_object(r_header() + xdr_int(corpus.STRSXP) + xdr_int(3))
    with pytest.raises(ValueError, match="type 25"):
        corpus.read_r_object(r_header() + xdr_int(25))


def test_the_corpus_command_checks_its_arguments_first(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("")
    for argv, message in (
        (["--out", str(a_file)], "is a file; give a folder"),
        (["--deb", str(tmp_path / "missing.deb")], "is not a file; give the path of r-cran-janeaustenr's .deb"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            corpus.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_austen_names_the_command_when_the_novels_are_absent(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m attn.corpus"):
        corpus.austen(tmp_path)
    with pytest.raises(TypeError, match="directory must be None or a path"):
        corpus.austen(42)


def test_the_public_paths_import_as_course_md_writes_them():
    import attn.corpus
    import attn.lm

    assert attn.corpus.austen is corpus.austen and attn.lm.load is lm.load
    assert attn.corpus.main is corpus.main and attn.lm.main is lm_training.main


def test_every_novel_round_trips_through_the_shipped_tokenizer():
    novels = corpus_or_skip()
    _, shipped = lm.load(WEIGHTS)
    for name, text in novels.items():
        assert shipped.decode(shipped.encode(text)) == text, name


# --- the tokenizer -----------------------------------------------------------------------------

def short_texts():
    return ["\n".join(corpus.paragraphs(lines)) + "\n" for lines in SHORT_NOVELS.values()]


def test_tokenizer_training_repeats_itself_byte_for_byte(tmp_path):
    for number in (1, 2):
        tokenizer.train_tokenizer(short_texts(), vocab_size=300).save(tmp_path / f"{number}.json")
    assert (tmp_path / "1.json").read_bytes() == (tmp_path / "2.json").read_bytes()


def test_the_loop_with_the_librarys_tie_rule_makes_the_librarys_merges():
    text = " ".join(short_texts())
    trained = tokenizer.train_tokenizer([text], vocab_size=256 + 40)
    merges = json.loads(trained.backend.to_str())["model"]["merges"]
    library = [tuple(trained.token_bytes([trained.backend.token_to_id(piece)]) for piece in pair) for pair in merges]
    loop = [pair for pair, _ in tokenizer.bpe_merges(tokenizer.pretokenize(text), 40, ties="library")]
    assert loop == library


def test_the_loop_and_the_library_differ_only_in_how_they_break_ties():
    from attn.course.exercises.lesson13 import PARAGRAPH

    words = tokenizer.pretokenize(PARAGRAPH)
    by_bytes, by_ids = tokenizer.bpe_merges(words, 10), tokenizer.bpe_merges(words, 10, ties="library")
    assert by_bytes != by_ids
    assert sorted(count for _, count in by_bytes) == sorted(count for _, count in by_ids)


def test_tokenizer_round_trips_any_text_and_refuses_bad_input():
    trained = tokenizer.train_tokenizer(short_texts(), vocab_size=300)
    for text in ("", "Æsop’s “fables” — 日本語 🙂\n\ttabs", "£5 and _italics_"):
        assert trained.decode(trained.encode(text)) == text
    with pytest.raises(TypeError, match="text must be a str"):
        trained.encode(b"bytes")
    with pytest.raises(ValueError, match="outside this tokenizer's 0..299"):
        trained.decode([3, 300])
    with pytest.raises(TypeError, match="whole numbers"):
        trained.decode([1.5])
    with pytest.raises(TypeError, match="list of int"):
        trained.decode("abc")
    for texts, vocab_size, error in ((["ok"], 100, ValueError), ([], 300, TypeError), ("text", 300, TypeError),
                                     (["ok"], 3.5, TypeError)):
        with pytest.raises(error):
            tokenizer.train_tokenizer(texts, vocab_size)
    with pytest.raises(ValueError, match="ties must be"):
        tokenizer.bpe_merges(["a"], 1, ties="random")
    with pytest.raises(ValueError, match="num_merges"):
        tokenizer.bpe_merges(["a"], -1)


def test_a_missing_or_damaged_tokenizer_file_gets_a_sentence(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        tokenizer.Tokenizer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a tokenizers JSON file"):
        tokenizer.Tokenizer.load(tmp_path / "bad.json")


# --- the model ---------------------------------------------------------------------------------

def test_rotary_inside_the_layer_is_lesson_8s_rotation_of_q_and_k():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 2, rotary_base=10000.0).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    _, weights = layer(x, x, x, is_causal=True, need_weights=True)
    q = layer.query_proj(x).view(2, 5, 2, 8).transpose(1, 2)
    k = layer.key_proj(x).view(2, 5, 2, 8).transpose(1, 2)
    scores = apply_rotary(q) @ apply_rotary(k).transpose(-2, -1) / math.sqrt(8)
    scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -math.inf)
    torch.testing.assert_close(weights, scores.softmax(dim=-1))


def test_rotary_positions_continue_from_the_cache():
    from attn import KVCache

    torch.manual_seed(1)
    block = TransformerBlock(16, 2, rotary_base=10000.0).double().eval()
    x = torch.randn(1, 7, 16, dtype=torch.float64)
    cache = KVCache()
    steps = torch.cat([block(x[:, :4], is_causal=True, cache=cache), block(x[:, 4:], is_causal=True, cache=cache)], dim=1)
    torch.testing.assert_close(steps, block(x, is_causal=True))


@pytest.mark.parametrize(("base", "error", "message"), [
    ("10000", TypeError, "rotary_base must be None or a number"),
    (True, TypeError, "rotary_base must be None or a number"),
    (1.0, ValueError, "finite number > 1"),
    (math.inf, ValueError, "finite number > 1"),
])
def test_a_wrong_rotary_base_gets_a_sentence(base, error, message):
    with pytest.raises(error, match=message):
        MultiHeadAttention(16, 2, rotary_base=base)


def test_an_odd_head_size_cannot_rotate():
    with pytest.raises(ValueError, match="head size must be even, got 3"):
        MultiHeadAttention(6, 2, rotary_base=10000.0)


def tiny_model():
    torch.manual_seed(0)
    return lm.AustenLM(vocab_size=50, context_length=16, embed_dim=16, num_heads=2, num_layers=2).double().eval()


def test_the_model_returns_every_layers_weights_and_decodes_with_a_cache():
    model = tiny_model()
    tokens = torch.randint(0, 50, (2, 9))
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (2, 9, 50) and weights.shape == (2, 2, 2, 9, 9)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 2, 2, 9, dtype=torch.float64))
    torch.testing.assert_close(stepwise_logits(model, tokens), model(tokens))
    assert torch.equal(generate(model, tokens[:1, :3], 5), generate(model, tokens[:1, :3], 5, use_cache=False))
    assert model.readout.weight is model.token_embedding.weight


def test_the_model_refuses_bad_tokens_with_a_sentence():
    model = tiny_model()
    with pytest.raises(ValueError, match="token ids from 0 to 49"):
        model(torch.tensor([[1, 50]]))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="need_weights must be True or False"):
        model(torch.zeros(1, 3, dtype=torch.long), need_weights="yes")
    with pytest.raises(TypeError, match="must be a positive int"):
        lm.AustenLM(vocab_size=50.5, context_length=16, embed_dim=16, num_heads=2, num_layers=2)


@pytest.fixture(scope="module")
def short_corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("austen")
    corpus.write_corpus(dict(zip(corpus.TITLES, short_texts(), strict=True)), folder)
    return folder


def without_provenance(log):
    return {key: value for key, value in log.items() if key != "provenance"}


def test_the_tiny_training_repeats_itself(short_corpus, tmp_path):
    config = dict(lm.SIZES["tiny"], context_length=8, eval_windows=2)
    first = lm_training.train(config, tmp_path / "first", short_corpus, stream=io.StringIO())
    second = lm_training.train(config, tmp_path / "second", short_corpus, stream=io.StringIO())
    assert without_provenance(first) == without_provenance(second)
    assert len(first["curve"]["step"]) == config["steps"] // config["eval_every"]
    assert first["curve"]["train_loss"][-1] < first["curve"]["train_loss"][0]
    names = {"unigram", "bigram", "kneser_ney_trigram"}
    assert set(first["baselines"]) == {f"{name}_{what}" for name in names for what in ("loss", "perplexity")} | {
        "bigram_prior", "bigram_prior_trials", "on_the_curves_targets"}
    assert set(first["baselines"]["on_the_curves_targets"]) == {f"{name}_loss" for name in names}
    trials = first["baselines"]["bigram_prior_trials"]
    assert str(first["baselines"]["bigram_prior"]) == min(trials, key=trials.get)  # chosen on training text
    assert first["provenance"]["seed"] == 0 and first["held_out_novel"] == "Persuasion"
    assert not (tmp_path / "first" / lm.CHECKPOINT_NAME).exists()
    assert (tmp_path / "first" / lm.TOKENIZER_NAME).read_bytes() == (tmp_path / "second" / lm.TOKENIZER_NAME).read_bytes()
    model, trained = lm.load(tmp_path / "first")
    assert model.context_length == 8 and trained.vocab_size == config["vocab_size"]


class Interrupt(io.StringIO):
    """A progress stream that stops the training (as Ctrl-C would) when it is told about step 10."""

    def write(self, text):
        if "step 10/" in text:
            raise KeyboardInterrupt
        return super().write(text)


def test_an_interrupted_training_resumes_where_it_stopped(short_corpus, tmp_path):
    config = dict(lm.SIZES["tiny"], context_length=8, eval_windows=2)
    whole = lm_training.train(config, tmp_path / "whole", short_corpus, stream=io.StringIO())
    with pytest.raises(KeyboardInterrupt):
        lm_training.train(config, tmp_path / "parts", short_corpus, stream=Interrupt())
    assert (tmp_path / "parts" / lm.CHECKPOINT_NAME).exists()
    resumed_stream = io.StringIO()
    resumed = lm_training.train(config, tmp_path / "parts", short_corpus, stream=resumed_stream)
    assert "Resuming from step 10" in resumed_stream.getvalue()
    assert without_provenance(resumed) == without_provenance(whole)


def test_a_kill_while_a_checkpoint_is_written_keeps_the_last_one(short_corpus, tmp_path, monkeypatch):
    """The checkpoint is written beside the old one and renamed into place: a kill mid-write cannot empty it."""
    config = dict(lm.SIZES["tiny"], context_length=8, eval_windows=2, steps=10)
    state = lm_training.new_state(config)
    path = tmp_path / lm.CHECKPOINT_NAME
    lm_training.save_checkpoint(path, state, config)
    before = path.read_bytes()
    real_save = torch.save

    def killed_mid_write(saved, file):
        real_save(saved, file)
        Path(file).write_bytes(Path(file).read_bytes()[:100])  # half the bytes on disk, then the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_mid_write)
    state["step"] = 5
    with pytest.raises(KeyboardInterrupt):
        lm_training.save_checkpoint(path, state, config)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [lm.CHECKPOINT_NAME]
    assert lm_training.resume_state(path, config)["step"] == 0


def test_a_checkpoint_of_other_settings_is_refused(short_corpus, tmp_path):
    config = dict(lm.SIZES["tiny"], context_length=8, eval_windows=2)
    with pytest.raises(KeyboardInterrupt):
        lm_training.train(config, tmp_path, short_corpus, stream=Interrupt())
    with pytest.raises(ValueError, match="training with other settings"):
        lm_training.train(dict(config, seed=1), tmp_path, short_corpus, stream=io.StringIO())


def test_the_training_command_checks_its_arguments_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lm_training, "train", lambda *arguments, **options: pytest.fail("training started"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    (tmp_path / "blocked" / lm.WEIGHTS_NAME).mkdir(parents=True)
    for argv, message in (
        ([], "the following arguments are required: command"),
        (["train"], "the following arguments are required: --out"),
        (["train", "--out", str(a_file)], "is a file; give a folder"),
        (["train", "--out", str(tmp_path / "blocked")], "is a folder, so the file of that name cannot be written"),
        (["train", "--out", str(tmp_path), "--steps", "0"], "--steps must be a whole number from 1 to 10,000,000"),
        (["train", "--out", str(tmp_path), "--steps", "many"], "--steps must be a whole number, got 'many'"),
        (["train", "--out", str(tmp_path), "--size", "huge"], "invalid choice: 'huge'"),
        (["train", "--out", str(tmp_path), "--corpus", str(tmp_path / "none")], "python -m attn.corpus"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            lm_training.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err, argv


def test_load_refuses_what_is_not_a_trained_model(tmp_path):
    with pytest.raises(TypeError, match="directory must be None or a path"):
        lm.load(3)
    with pytest.raises(FileNotFoundError, match="python -m attn.lm train --out"):
        lm.load(tmp_path)
    (tmp_path / lm.WEIGHTS_NAME).write_bytes(b"not torch")
    (tmp_path / lm.TOKENIZER_NAME).write_text("{}")
    with pytest.raises(ValueError, match="is not a weights file"):
        lm.load(tmp_path)


# --- the shipped files -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped():
    model, trained = lm.load()
    return model, trained, json.loads((WEIGHTS / lm.LOG_NAME).read_text())


def test_the_shipped_model_loads_as_course_md_names_it(shipped):
    model, trained, log = shipped
    tokens = torch.tensor([trained.encode("It was a fine morning.")])
    logits, weights = model(tokens, need_weights=True)
    layers, heads = log["config"]["num_layers"], log["config"]["num_heads"]
    assert logits.shape == (1, tokens.shape[1], trained.vocab_size)
    assert weights.shape == (layers, 1, heads, tokens.shape[1], tokens.shape[1])
    assert model.context_length == log["config"]["context_length"] and not model.training
    assert layers >= 4 and (WEIGHTS / lm.WEIGHTS_NAME).stat().st_size <= 10 * 2**20
    assert log["held_out_loss"] < log["baselines"]["bigram_loss"] < log["baselines"]["unigram_loss"]


def test_the_shipped_measurements_repeat_on_the_held_out_novel(shipped):
    novels = corpus_or_skip()
    model, trained, log = shipped
    heads = json.loads((RECORDS / austen_heads.HEADS_NAME).read_text())
    held_out = torch.tensor(trained.encode(novels[lm.HELD_OUT]), dtype=torch.long)
    inputs, targets = lm_training.held_out_windows(held_out, model.context_length, austen_heads.PROBE_WINDOWS)
    loss = austen_heads.window_losses(model, inputs, targets)
    assert loss == pytest.approx(heads["loss"], abs=2e-3)
    assert loss == pytest.approx(log["curve"]["held_out_loss"][-1], abs=0.02)  # the curve's probe, before 16 bits
    assert len(held_out) == log["held_out_tokens"]


def test_the_shipped_baselines_repeat(tmp_path):
    """The log's baselines, recounted from the novels by 'python -m attn.lm baselines' on a copy of the files."""
    corpus_or_skip()
    for name in (lm.LOG_NAME, lm.TOKENIZER_NAME):
        (tmp_path / name).write_bytes((WEIGHTS / name).read_bytes())
    shipped = json.loads((WEIGHTS / lm.LOG_NAME).read_text())
    lm_training.main(["baselines", "--out", str(tmp_path)])
    assert json.loads((tmp_path / lm.LOG_NAME).read_text()) == shipped


def test_the_baselines_command_needs_a_log(tmp_path):
    corpus_or_skip()
    with pytest.raises(SystemExit, match="does not exist"):
        lm_training.main(["baselines", "--out", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="does not exist: train a model there first"):  # a function raises
        lm_training.refresh_baselines(tmp_path)


# --- what the heads do -------------------------------------------------------------------------

def test_the_head_measures_equal_loops_over_the_weights():
    weights = torch.rand(2, 3, 2, 8, 8).softmax(dim=-1)  # (L, B, H, T, T), a passage of 4 seen twice
    previous = [[sum(weights[layer, b, head, i, i - 1] for b in range(3) for i in range(1, 8)) / 21
                 for head in range(2)] for layer in range(2)]
    torch.testing.assert_close(austen_heads.previous_token_score(weights), torch.tensor(previous))
    induction, duplicate = austen_heads.copy_scores(weights, 4)
    by_loop = [[sum(weights[layer, b, head, i, i - 3] for b in range(3) for i in range(4, 7)) / 9
                for head in range(2)] for layer in range(2)]
    torch.testing.assert_close(induction, torch.tensor(by_loop))
    by_loop = [[sum(weights[layer, b, head, i, i - 4] for b in range(3) for i in range(4, 8)) / 12
                for head in range(2)] for layer in range(2)]
    torch.testing.assert_close(duplicate, torch.tensor(by_loop))
    by_loop = [[sum(weights[layer, b, head, i, 0] for b in range(3) for i in range(1, 8)) / 21
                for head in range(2)] for layer in range(2)]
    torch.testing.assert_close(austen_heads.first_token_weight(weights), torch.tensor(by_loop))


def test_ablating_a_head_removes_only_it_and_restores_it():
    model = tiny_model()
    tokens = torch.randint(0, 50, (1, 6))
    before = model(tokens)
    with austen_heads.ablate_head(model, 1, 0):
        assert not torch.allclose(model(tokens), before)
        assert model.blocks[1].attention.out_proj.weight[:, :8].abs().sum() == 0
    torch.testing.assert_close(model(tokens), before)
    for layer, head, error in ((2, 0, ValueError), (0, -1, ValueError), (0, 1.0, TypeError), (True, 0, TypeError)):
        with pytest.raises(error), austen_heads.ablate_head(model, layer, head):
            pass
    with pytest.raises(TypeError, match="must be an attn.lm.AustenLM"), austen_heads.ablate_head(torch.nn.Linear(2, 2), 0, 0):
        pass


def test_taking_the_first_token_away_masks_only_it():
    keep = austen_heads.without_first_token(4)
    assert keep.tolist() == [[True] * 4, [False, True, True, True], [False, True, True, True], [False, True, True, True]]
    model = tiny_model()
    tokens = torch.randint(0, 50, (1, 6))
    weights = model(tokens, need_weights=True, mask=keep.new_ones(6, 6) & austen_heads.without_first_token(6))[1]
    assert weights[..., 1:, 0].abs().max() == 0


def test_the_heads_command_checks_its_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        austen_heads.main(["--out", str(tmp_path), "--model", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "lacks austen_lm.pt, austen_tokenizer.json" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"weights must be a tensor \(L, B, H, T, T\)"):
        austen_heads.first_token_weight(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="not a passage of 3 twice"):
        austen_heads.copy_scores(torch.zeros(1, 1, 1, 8, 8), 3)


# --- the lesson's teaching versions ------------------------------------------------------------

@pytest.fixture(scope="module")
def lesson13():
    from tests.notebooks import teaching_namespace

    return teaching_namespace(ROOT / "lessons" / "13_reading_austen.ipynb")


def test_the_lessons_bpe_loop_is_the_packages(lesson13):
    from attn.course.exercises.lesson13 import PARAGRAPH

    for text in (PARAGRAPH, " ".join(short_texts()), "aaaa aaa ab"):
        words = tokenizer.pretokenize(text)
        assert lesson13["bpe_by_hand"](words, 25) == tokenizer.bpe_merges(words, 25)


def test_the_lessons_score_loops_are_the_packages(lesson13):
    weights = torch.rand(2, 1, 3, 10, 10).softmax(dim=-1)  # (L, 1, H, 2P, 2P), P = 5
    for layer in range(2):
        for head in range(3):
            head_weights = weights[layer, 0, head]
            previous = lesson13["previous_token_score"](head_weights)
            induction, duplicate = lesson13["copy_scores_by_hand"](head_weights, 5)
            assert previous == pytest.approx(austen_heads.previous_token_score(weights)[layer, head].item())
            assert induction == pytest.approx(austen_heads.copy_scores(weights, 5)[0][layer, head].item())
            assert duplicate == pytest.approx(austen_heads.copy_scores(weights, 5)[1][layer, head].item())


def test_export_ships_the_last_checkpoint_and_says_so(short_corpus, tmp_path):
    config = dict(lm.SIZES["tiny"], context_length=8, eval_windows=2)
    with pytest.raises(FileNotFoundError, match="no interrupted training"):
        lm_training.export(tmp_path, short_corpus)
    with pytest.raises(KeyboardInterrupt):
        lm_training.train(config, tmp_path, short_corpus, stream=Interrupt())
    log = lm_training.export(tmp_path, short_corpus)
    assert log["steps_done"] == 10 and "stopped at step 10 of 20" in log["provenance"]["stopped"]
    assert log["curve"]["step"] == [5, 10] and (tmp_path / lm.CHECKPOINT_NAME).exists()
    model, _ = lm.load(tmp_path)
    assert model.context_length == 8


def test_the_measures_refuse_text_that_is_not_tokens_or_too_short():
    model = tiny_model()
    with pytest.raises(TypeError, match="1-D tensor of token ids"):
        austen_heads.measure(model, [1, 2, 3])
    with pytest.raises(TypeError, match="1-D tensor of token ids"):
        austen_heads.measure(model, torch.zeros(100))
    with pytest.raises(ValueError, match="these measures need at least"):
        austen_heads.measure(model, torch.zeros(10, dtype=torch.long), windows=2, passages=2, passage_length=4)
    record = austen_heads.measure(model, torch.randint(0, 50, (64,)), windows=2, passages=2, passage_length=4)
    assert len(record["ablated_loss"]) == 2 and len(record["induction_score"][0]) == 2


def test_the_recipe_search_holds_what_lesson_13_says():
    """The runs beside the shipped one: the long run turned upwards, dropout trailed, the shipped run ended lowest."""
    search = json.loads((WEIGHTS / "austen_recipe_search.json").read_text())
    shipped = json.loads((WEIGHTS / lm.LOG_NAME).read_text())
    short, long, dropout = (run["curve"] for run in search["runs"])
    lowest = min(range(len(long["step"])), key=long["held_out_loss"].__getitem__)
    assert long["step"][lowest] < long["step"][-1] and long["held_out_loss"][-1] > long["held_out_loss"][lowest] + 0.03
    plain = dict(zip(long["step"], long["held_out_loss"], strict=True))
    assert all(loss > plain[step] for step, loss in zip(dropout["step"], dropout["held_out_loss"], strict=True))
    ends = [curve["held_out_loss"][-1] for curve in (short, long, dropout)]
    assert shipped["curve"]["held_out_loss"][-1] < min(ends) and shipped["config"]["steps"] == 1500
