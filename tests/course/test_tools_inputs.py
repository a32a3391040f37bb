"""Lesson 12, sampling, the measurement tools and Part 1's explorer answer each wrong input of issue 32 with one sentence.

Each case either gets the right result or a TypeError/ValueError raised by the package itself (never a traceback from
inside PyTorch, NumPy, Triton or the standard library, a silent NaN or a hang). The sweeps at the end iterate the
public functions of lesson 12, sampling and the measurement tools with the same hostile inputs, as
test_part2_inputs.py and test_layer_inputs.py do for Parts 1 and 2. (Command lines: test_command_lines.py and
test_bench_cli.py.)
"""

import json
import math
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import attn
from attn import flash, sampling, triton_kernels
from attn.attention import causal_mask, padding_mask
from attn.common import plotting
from attn.common.sizes import check_allocation, readable_bytes
from attn.common.validate import positive_int, whole_number
from attn.course import explorer, reading_time
from attn.experiments import induction_runs
from attn.flops import attention_flops
from attn.kvcache import PreallocatedKVCache
from attn.measure import bench, memory, peaks, timing
from attn.measure.gpu import plots, report
from attn.models import decoder
from attn.models.induction import ablation, data, files, model, scores, training
from attn.multihead import explicit_attention, fused_attention
from attn.positions import sinusoidal_positions
from attn.softmax import softmax

PACKAGE = str(Path(attn.__file__).parent)


def sentence_of(call, *arguments, **options):
    """The message of the TypeError/ValueError that ``call`` raises from the package's own code (a raise statement)."""
    with pytest.raises((TypeError, ValueError)) as error:
        call(*arguments, **options)
    frame = traceback.extract_tb(error.value.__traceback__)[-1]
    assert frame.filename.startswith(PACKAGE), f"raised inside {frame.filename}: {error.value}"
    assert frame.line.strip().startswith("raise"), f"Python's own error at {frame.filename}:{frame.lineno}: {error.value}"
    return str(error.value)


def qkv(length=8, head_dim=4, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, length, head_dim, generator=generator, dtype=dtype) for _ in range(3))


# Silent wrong answers -----------------------------------------------------------------------


def test_flash_attention_refuses_second_derivatives_instead_of_giving_wrong_ones():
    query, key, value = (tensor.double().requires_grad_() for tensor in qkv(4, 2))
    output = flash.flash_attention(query, key, value, block_q=2, block_k=2)
    message = sentence_of(torch.autograd.grad, (output**2).sum(), query, create_graph=True)
    assert "create_graph=True" in message and "explicit_attention" in message
    (gradient,) = torch.autograd.grad((output**2).sum(), query)  # first derivatives still work
    assert torch.isfinite(gradient).all()


@pytest.mark.parametrize("function", [flash.tiled_attention, flash.flash_attention, triton_kernels.flash_forward])
def test_scores_that_would_overflow_are_refused_not_nan(function):
    query, key, value = (tensor.expand(1, 2, 16, 16).contiguous() for tensor in qkv(1, 1))
    message = sentence_of(function, query * 1e20, key * 1e20, value)
    assert "could overflow torch.float32" in message and "scale the query and key down" in message
    assert torch.isfinite(flash.tiled_attention(query * 1e15, key * 1e15, value)[0]).all()  # large, but it fits


@pytest.mark.parametrize("function", [softmax, lambda scores: flash.online_softmax(scores, 1024)])
def test_float16_rows_longer_than_float16_can_sum_still_sum_to_one(function):
    weights = function(np.zeros((1, 70_000), dtype=np.float16))
    assert weights.dtype == np.float16
    assert weights.astype(np.float64).sum() == pytest.approx(1.0, abs=0.01)


def test_forward_tiles_needs_a_tiling_made_for_its_tensors():
    query, key, value = qkv(8)
    assert "the tiling is for T_q=4, T_k=8" in sentence_of(flash.forward_tiles, query, key, value, flash.Tiling(4, 8, 4, 4))
    assert "the tiling is for T_q=8, T_k=16" in sentence_of(flash.forward_tiles, query, key, value, flash.Tiling(8, 16, 4, 4))
    assert "tiling must be an attn.flash.Tiling, got None" in sentence_of(flash.forward_tiles, query, key, value, None)
    assert "query must hold floating-point numbers, got torch.int64" in sentence_of(
        flash.forward_tiles, query.long(), key.long(), value.long(), flash.Tiling(8, 8, 4, 4))
    assert "padding must be a bool keep-mask" in sentence_of(flash.Tiling, 8, 8, 4, 4, padding=torch.ones(1, 1, 1, 8))
    saved = (query, key, value, *flash.forward_tiles(query, key, value, flash.Tiling(8, 8, 4, 4)))
    assert "saved must be the five tensors" in sentence_of(flash.backward_tiles, None, query, flash.Tiling(8, 8, 4, 4))
    assert "grad_output must be floating point of shape" in sentence_of(
        flash.backward_tiles, saved, query[:, :, :4], flash.Tiling(8, 8, 4, 4))


def test_tiles_read_counts_any_size_at_once_and_as_the_loops_do():
    assert flash.tiles_read(10**6, 10**6, 1, 1, False) == 10**12
    assert flash.tiles_read(10**6, 10**6, 1, 1, True) == 10**6 * (10**6 + 1) // 2
    generator = np.random.default_rng(0)
    for _ in range(300):
        sizes = [int(value) for value in generator.integers(1, 30, size=4)]
        for causal in (False, True):
            tiling = flash.Tiling(*sizes, causal)
            looped = sum(len(tiling.key_tiles(rows)) for rows in tiling.query_tiles())
            assert flash.tiles_read(*sizes, causal) == looped, (sizes, causal)


def test_tile_counts_that_would_take_minutes_are_refused_with_their_number():
    query = torch.randn(1, 1, 1024, 4)
    message = sentence_of(flash.tiled_attention, query, query, query, block_q=1, block_k=1)
    assert "is 1,048,576 tiles" in message and "use larger blocks" in message


@pytest.mark.parametrize(
    "options, words",
    [({"top_k": 0}, "top_k must be at least 1"), ({"top_k": -1}, "top_k must be at least 1"),
     ({"top_p": 0}, r"top_p must be a probability in \(0, 1\]"), ({"top_k": 2.5}, "top_k must be None or a whole number")],
)
def test_kept_probabilities_checks_top_k_and_top_p(options, words):
    with pytest.raises((TypeError, ValueError), match=words):
        sampling.kept_probabilities(torch.randn(5), **options)


@pytest.mark.parametrize(
    "logits, words",
    [(torch.tensor([math.nan, 1.0]), "contain NaN"), (torch.full((3,), -math.inf), "is -inf everywhere"),
     ([1.0, 2.0], "must be a torch.Tensor, got list"), (torch.tensor([1, 2]), "must hold floating-point scores")],
)
def test_kept_probabilities_checks_its_logits(logits, words):
    assert words in sentence_of(sampling.kept_probabilities, logits)


def test_top_k_beyond_the_vocabulary_keeps_every_token_and_numpy_integers_are_whole_numbers():
    logits = torch.randn(5)
    torch.testing.assert_close(sampling.kept_probabilities(logits, top_k=2**63), torch.softmax(logits, -1))
    assert 0 <= int(sampling.sample_next(logits, top_k=2**63)) < 5
    assert (sampling.kept_probabilities(logits, top_k=np.int64(2)) > 0).sum() == 2


@pytest.mark.parametrize("function", [explicit_attention, fused_attention])
def test_explicit_and_fused_attention_check_d_nan_and_is_causal(function):
    empty = torch.zeros(1, 1, 3, 0)
    assert "at least one feature" in sentence_of(function, empty, empty, empty)
    query, key, value = qkv()
    assert "query contains NaN or inf" in sentence_of(function, query * math.nan, key, value)
    assert "is_causal must be True or False, got str 'yes'" in sentence_of(function, query, key, value, is_causal="yes")
    assert "dropout_p must be in [0, 1)" in sentence_of(function, query, key, value, dropout_p=1.5)


@pytest.mark.parametrize("function", [explicit_attention, fused_attention])
@pytest.mark.parametrize(
    "keep_mask, words",
    [(torch.ones(8, 8), "keep_mask must be boolean (True = may attend), got torch.float32"),
     (torch.ones(3, 3, dtype=torch.bool), "keep_mask of shape (3, 3) does not broadcast to (B, H, T_q, T_k) = (1, 2, 8, 8)"),
     ([[True]], "keep_mask must be a boolean torch.Tensor")],
)
def test_explicit_and_fused_attention_check_their_keep_mask(function, keep_mask, words):
    assert words in sentence_of(function, *qkv(), keep_mask=keep_mask)


def test_causal_masks_check_their_lengths_and_size():
    from attn.masks import causal_keep_mask

    assert "t_q must be 0 or more, got -1" in sentence_of(causal_keep_mask, -1, 2)
    assert "100.0 TB" in sentence_of(causal_keep_mask, 10**7, 10**7)
    assert "length must be a whole number of 0 or more, got float 2.5" in sentence_of(model.causal_keep_mask, 2.5)
    assert causal_keep_mask(np.int64(2), 3).shape == (1, 1, 2, 3)


def test_seconds_per_token_and_share_of_peak_name_what_is_not_theirs():
    assert "model must be an attn.models.decoder.Decoder, got None" in sentence_of(timing.seconds_per_token, None, 4, True)
    assert "share_of_peak needs, as result, a benchmark result" in sentence_of(bench.share_of_peak, None, {})


def test_peak_bytes_counts_what_a_function_holds_not_what_meta_tensors_pretend():
    assert memory.peak_bytes(lambda: torch.empty(2**40, device="meta")) == 0
    assert memory.peak_bytes(lambda x: x @ x.mT, torch.empty(3, 4, device="meta")) == 0

    def grows():
        tensor = torch.zeros(10)
        tensor.resize_(10**6)
        return tensor

    assert memory.peak_bytes(grows) == 4 * 10**6
    assert "layout torch.sparse_coo" in sentence_of(memory.peak_bytes, lambda x: x * 2, torch.eye(3).to_sparse())


@pytest.mark.parametrize(
    "arguments, words",
    [(("ab", 1, 1, 1), "batch must be a positive int, got str 'ab'"), ((-1, 1, 1, 1), "batch must be positive, got -1")],
)
def test_attention_flops_needs_positive_sizes(arguments, words):
    assert words in sentence_of(attention_flops, *arguments)


def test_attention_flops_takes_numpy_integers():
    assert attention_flops(np.int64(1), 1, np.int32(2), 1) == 16


def test_reading_minutes_refuse_negative_exercises_and_take_numpy_integers():
    counts = reading_time.Counts(words=150, code_characters=0, figures=0, formulas=0, exercises=("1.1",))
    for function in (reading_time.reading_minutes, reading_time.unrounded_minutes):
        assert "in_class must be a whole number from 0 to 1" in sentence_of(function, counts, -1)
        assert "counts must be what count(path) returns" in sentence_of(function, None, 0)
    assert reading_time.unrounded_minutes(counts, np.int64(1)) == 3.0
    assert reading_time.reading_minutes(counts, np.int64(0)) == 0


def test_a_hand_made_repeat_data_must_hold_real_repeats():
    tokens = torch.arange(16).repeat(2, 1)
    message = sentence_of(data.RepeatData, tokens, torch.tensor([0, 0]), torch.tensor([1, 1]))
    assert "every block needs length L >= 2" in message
    made = data.RepeatData(tokens, torch.tensor([0, 3]), torch.tensor([4, 5]))
    metrics = training.copy_metrics(model.AttentionOnlyTransformer(vocab_size=20, max_length=16), made)
    assert all(math.isfinite(value) for value in metrics.values())


# Hangs and absurd sizes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: decoder.Decoder(10, 8, num_layers=10**9), "parameters, would need"),
        (lambda: attn.MultiHeadAttention(2**40, 1), "MultiHeadAttention(embed_dim=1099511627776)"),
        (lambda: attn.TransformerBlock(2**40, 1), "would need"),
        (lambda: decoder.Decoder(2**40, 8), "Decoder(vocab_size=1099511627776"),
        (lambda: model.AttentionOnlyTransformer(vocab_size=2**40), "AttentionOnlyTransformer(vocab_size=1099511627776"),
        (lambda: decoder.counting_sequences(10**12), "counting_sequences(1000000000000"),
        (lambda: data.make_repeat_data(10**12), "make_repeat_data(num_sequences=1000000000000"),
        (lambda: PreallocatedKVCache(10**12).append(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4)), "capacity"),
        (lambda: scores.previous_occurrence(torch.zeros(1, 10**6, dtype=torch.long)), "compares every pair"),
        (lambda: sinusoidal_positions(10**12, 2), "sinusoidal_positions(length=1000000000000, dim=2)"),
        (lambda: causal_mask(10**7), "causal_mask(length=10000000)"),
        (lambda: padding_mask([1], 10**13), "padding_mask for 1 sequences"),
        (lambda: bench.run_benchmark("cpu", torch.float32, 1, 1, (4,), (10**12,), 1, False), "benchmark's inputs"),
    ],
)
def test_sizes_nobody_can_allocate_say_how_many_bytes_before_trying(call, words):
    message = sentence_of(call)
    assert words in message and "would need" in message and "of this machine's memory" in message


@pytest.mark.parametrize("call, advice", [
    (lambda: sinusoidal_positions(10**12, 2), "use a smaller length"),
    (lambda: sinusoidal_positions(2, 10**12), "use a smaller dim"),
    (lambda: causal_mask(10**7), "use a smaller length"),
    (lambda: data.make_repeat_data(10**12), "use a smaller num_sequences"),
])
def test_a_size_nobody_can_allocate_names_the_argument_to_make_smaller(call, advice):
    assert sentence_of(call).endswith(advice)


def test_readable_bytes_and_the_allocation_check():
    assert readable_bytes(999) == "999 bytes"
    assert readable_bytes(4.4e12) == "4.4 TB"
    check_allocation("nothing much", 1)
    check_allocation("anything on the meta device", 10**30, "meta")
    with pytest.raises(ValueError, match=r"^ten petabytes would need 10,000.0 PB, more than the .* of this machine's"):
        check_allocation("ten petabytes", 10**19)


# Tracebacks from inside a library ------------------------------------------------------------


SPARSE = qkv()[0].to_sparse()
META = qkv()[0].to("meta")


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: flash.flash_attention(SPARSE, SPARSE, SPARSE), "layout torch.sparse_coo"),
        (lambda: flash.tiled_attention(SPARSE, SPARSE, SPARSE), "layout torch.sparse_coo"),
        (lambda: flash.tiled_attention(META, META, META), "meta device"),
        (lambda: triton_kernels.flash_forward(SPARSE, SPARSE, SPARSE), "layout torch.sparse_coo"),
        (lambda: sampling.sample_next(torch.randn(5).to_sparse()), "layout torch.sparse_coo"),
        (lambda: sampling.sample_next(torch.randn(5, device="meta")), "meta device"),
        (lambda: model.AttentionOnlyTransformer()(torch.zeros(1, 4, dtype=torch.long).to_sparse()), "layout"),
        (lambda: model.AttentionOnlyTransformer()(torch.zeros(1, 4, dtype=torch.long, device="meta")), "meta device"),
        (lambda: explicit_attention(SPARSE, SPARSE, SPARSE), "layout torch.sparse_coo"),
    ],
)
def test_sparse_and_meta_tensors_are_named_by_one_shared_check(call, words):
    assert words in sentence_of(call)


def test_the_triton_kernel_refuses_blocks_larger_than_a_tile_can_be():
    query, key, value = qkv(16, 16)
    assert "Triton holds at most 1,048,576" in sentence_of(triton_kernels.flash_forward, query, key, value, block_q=2**40)


@pytest.mark.parametrize(
    "options, words",
    [({"device": None}, "device must be the torch.device"), ({"device": "gpu"}, "is not a device name"),
     ({"repeats": 0}, "repeats must be positive, got 0"), ({"repeats": 2.5}, "repeats must be a positive int"),
     ({"function": None}, "function must be a function to call"), ({"warmup": -1}, "warmup must be 0 or more")],
)
def test_median_seconds_checks_its_arguments(options, words):
    arguments = {"function": lambda: None, "device": torch.device("cpu"), "warmup": 0, "repeats": 1} | options
    assert words in sentence_of(timing.median_seconds, **arguments)


def test_median_seconds_takes_a_device_name():
    assert timing.median_seconds(lambda: None, "cpu", warmup=0, repeats=np.int64(3)) >= 0


def test_relative_spread_of_runs_too_short_for_the_clock_is_zero():
    assert timing.relative_spread([0, 0, 0]) == 0.0
    assert timing.relative_spread([0, 0, 1e-9]) == math.inf  # a spread, around a median of 0


@pytest.mark.parametrize("function", [bench.label, bench.plot, bench.timing_caveats])
@pytest.mark.parametrize("result", [{}, None, {"rows": [{}]}, {"device": "cpu", "rows": [{"case": "fused"}]}])
def test_what_is_not_a_benchmark_result_is_named(function, result):
    assert "benchmark result" in sentence_of(function, result)


@pytest.mark.parametrize(
    "options, words",
    [({"device": "cuda"}, "is not available on this machine; it has: cpu"), ({"dtype": torch.int64}, "dtype must be one of"),
     ({"batch": -1}, "batch must be positive, got -1"), ({"repeats": 0}, "repeats must be positive, got 0"),
     ({"lengths": ()}, "lengths must be a non-empty list"), ({"head_dims": [4, 0]}, "every entry of head_dims must be positive"),
     ({"layers": "yes"}, "layers must be True or False")],
)
def test_run_benchmark_checks_its_arguments_before_measuring(options, words):
    arguments = {"device": "cpu", "dtype": torch.float32, "batch": 1, "heads": 1, "head_dims": (4,), "lengths": (8,),
                 "repeats": 1, "layers": False} | options
    assert words in sentence_of(bench.run_benchmark, **arguments)


def suite_shaped(**changes):
    return {"schema": report.SCHEMA, "dry_run": False, "provenance": {"device_type": "cuda"}} | changes


def test_recorded_runs_skips_a_bad_file_with_a_warning_and_keeps_the_good_ones(tmp_path):
    (tmp_path / "a-good.json").write_text(json.dumps(suite_shaped()))
    (tmp_path / "b-truncated.json").write_text('{"schema": ')
    (tmp_path / "c-no-provenance.json").write_text(json.dumps({"schema": report.SCHEMA, "dry_run": False}))
    with pytest.warns(UserWarning) as warned:
        runs = report.recorded_runs(tmp_path)
    assert runs == [suite_shaped()]
    messages = [str(warning.message) for warning in warned]
    assert any("skipped b-truncated.json: it is not readable JSON" in message for message in messages)
    assert any("skipped c-no-provenance.json: a GPU suite result without its provenance" in message for message in messages)
    assert "folder must be a folder of JSON results" in sentence_of(report.recorded_runs, tmp_path / "a-good.json")


def test_the_suite_report_and_figures_name_what_is_not_a_suite_result():
    assert "validate needs a GPU suite result" in sentence_of(report.validate, None)
    bench_result = {"device": "cpu", "dtype": "float32", "torch": "2", "date": "2026-01-01", "rows": []}
    assert "looks like a benchmark result" in sentence_of(report.summary_lines, bench_result)
    for figure in (plots.plot_decode_bandwidth, plots.plot_layer_ratios, plots.plot_throughput):
        assert "needs a GPU suite result" in sentence_of(figure, None)
    assert "device_name must be a GPU's name as text" in sentence_of(peaks.data_sheet_peaks, None)


def notebook_with(tmp_path, cell):
    path = tmp_path / "odd.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.mark.parametrize(
    "cell, words",
    [({"cell_type": "markdown", "source": [1, 2]}, "source is not text"),
     ({"cell_type": "code", "source": "x", "outputs": [3]}, "outputs are not a list of outputs"),
     ({"cell_type": "code", "source": "x", "outputs": None}, "outputs are not a list of outputs"),
     ({"cell_type": "code", "source": "x", "outputs": [{"data": 5}]}, "whose data is not a dictionary")],
)
def test_reading_time_names_what_is_odd_in_a_notebook(tmp_path, cell, words):
    message = sentence_of(reading_time.count, notebook_with(tmp_path, cell))
    assert "is not a notebook saved by Jupyter" in message and words in message


def test_stepwise_logits_takes_numpy_chunk_sizes():
    model_ = decoder.Decoder(10, 8)
    tokens = torch.zeros(1, 4, dtype=torch.long)
    logits = decoder.stepwise_logits(model_, tokens, [np.int64(2), np.int32(2)])
    torch.testing.assert_close(logits, decoder.stepwise_logits(model_, tokens, [2, 2]))


def test_whole_numbers_are_python_or_numpy_integers_and_nothing_else():
    assert positive_int("n", np.int64(3)) == 3 and type(positive_int("n", np.uint8(3))) is int
    assert whole_number("n", np.int16(0), minimum=0) == 0
    for wrong in (True, np.bool_(True), 2.0, np.float64(2.0), "2", None):
        with pytest.raises(TypeError, match="must be"):
            positive_int("n", wrong)


def test_training_commands_check_their_folder_and_arguments_before_training(monkeypatch, tmp_path):
    def refuse(*arguments, **options):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(induction_runs, "run_with_checkpoints", refuse)
    monkeypatch.setattr(files, "train", refuse)
    assert "cannot be written here" in sentence_of(files.train_and_save, "/proc/x")
    assert "out must be a folder's path" in sentence_of(files.train_and_save, None)
    assert "out must be a folder's path" in sentence_of(induction_runs.run_all, None)
    assert "seeds must be a non-empty list" in sentence_of(induction_runs.run_all, tmp_path, seeds=5)
    assert "seeds must be a non-empty list" in sentence_of(induction_runs.run_all, tmp_path, seeds=[])
    assert "steps must be at least 1" in sentence_of(induction_runs.run_all, tmp_path, steps=0)


def test_forward_without_path_needs_an_input_to_remove_the_path_from():
    transformer = model.AttentionOnlyTransformer(vocab_size=20, max_length=8)
    tokens = torch.zeros(1, 4, dtype=torch.long)
    assert "non-empty tuple of names" in sentence_of(ablation.forward_without_path, transformer, tokens, (0, 0), 1, ())


# Part 1, lightly -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, words",
    [(([1.0, 2.0], True, 1.0), "query must be 3 finite numbers"), (([1.0, 0, 0], True, None), "temperature must be a positive"),
     (([1.0, 0, 0], True, 1e-320), "so small that the scores divided by it overflow"),
     (([1.0, 0, 0], "yes", 1.0), "scaled must be True or False"), (([1.0, 0, 0], True, -1.0), "positive finite number")],
)
def test_fruit_attention_names_its_wrong_argument(arguments, words):
    assert words in sentence_of(explorer.fruit_attention, *arguments)


def test_sweep_grid_and_weight_bars_need_something_to_draw():
    assert "temperatures must be a non-empty list" in sentence_of(explorer.sweep_grid, [1.0, 0, 0], temperatures=[])
    assert "one weight per label, and at least one" in sentence_of(plotting.weight_bars, [], [], "nothing")
    assert "finite weights" in sentence_of(plotting.weight_bars, [math.nan], ["a"], "nan")


# Sweeps over the public API -----------------------------------------------------------------

HOSTILE_TENSORS = {
    "None": None,
    "a list": [[1.0, 2.0], [3.0, 4.0]],
    "a NumPy array": np.zeros((1, 2, 4, 4), dtype=np.float32),
    "int64": torch.zeros(1, 2, 4, 4, dtype=torch.long),
    "sparse": torch.eye(4).reshape(1, 1, 4, 4).to_sparse(),
    "meta": torch.empty(1, 2, 4, 4, device="meta"),
    "NaN": torch.full((1, 2, 4, 4), math.nan),
    "3-D": torch.zeros(2, 4, 4),
}

TENSOR_FUNCTIONS = {
    "tiled_attention": lambda t: flash.tiled_attention(t, t, t),
    "flash_attention": lambda t: flash.flash_attention(t, t, t),
    "forward_tiles": lambda t: flash.forward_tiles(t, t, t, flash.Tiling(4, 4, 2, 2)),
    "flash_forward": lambda t: triton_kernels.flash_forward(t, t, t),
    "explicit_attention": lambda t: explicit_attention(t, t, t),
    "fused_attention": lambda t: fused_attention(t, t, t),
    "sample_next": lambda t: sampling.sample_next(t),
    "kept_probabilities": lambda t: sampling.kept_probabilities(t),
    "previous_occurrence": lambda t: scores.previous_occurrence(t),
}


@pytest.mark.parametrize("name", list(HOSTILE_TENSORS))
@pytest.mark.parametrize("function", list(TENSOR_FUNCTIONS))
def test_every_tensor_function_answers_every_hostile_tensor_with_a_sentence(function, name):
    tensor = HOSTILE_TENSORS[name]
    try:
        result = TENSOR_FUNCTIONS[function](tensor)
    except (TypeError, ValueError) as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        assert frame.filename.startswith(PACKAGE) and frame.line.strip().startswith("raise"), (
            f"{function}({name}): {type(error).__name__} from {frame.filename}:{frame.lineno}: {error}")
        return
    # Accepted: then the answer must be finite numbers (int64 token ids and 3-D logits are legitimate for some).
    values = result[0] if isinstance(result, tuple) else result
    assert isinstance(values, torch.Tensor) and values.layout == torch.strided and values.device.type == "cpu"
    assert torch.isfinite(values.double()).all(), f"{function}({name}) gave NaN or inf without a word"


HOSTILE_NUMBERS = {"None": None, "a string": "4", "a float": 2.5, "a bool": True, "zero": 0, "negative": -3}

NUMBER_FUNCTIONS = {
    "tiles_read": lambda n: flash.tiles_read(n, 4, 2, 2, False),
    "online_softmax block_size": lambda n: flash.online_softmax(np.zeros((2, 3)), n),
    "tiled_attention block_q": lambda n: flash.tiled_attention(*qkv(), block_q=n),
    "sample_next top_k": lambda n: sampling.sample_next(torch.randn(5), top_k=n),
    "kept_probabilities top_k": lambda n: sampling.kept_probabilities(torch.randn(5), top_k=n),
    "median_seconds repeats": lambda n: timing.median_seconds(lambda: None, "cpu", repeats=n),
    "seconds_of_each_run repeats": lambda n: timing.seconds_of_each_run(lambda: None, "cpu", repeats=n),
    "attention_flops": lambda n: attention_flops(n, 1, 1, 1),
    "run_benchmark batch": lambda n: bench.run_benchmark("cpu", torch.float32, n, 1, (4,), (8,), 1, False),
    "PreallocatedKVCache": lambda n: PreallocatedKVCache(n),
    "counting_sequences": lambda n: decoder.counting_sequences(n),
    "make_repeat_data": lambda n: data.make_repeat_data(n),
    "sinusoidal_positions": lambda n: sinusoidal_positions(n, 2),
    "causal_mask": lambda n: causal_mask(n),
}

ZERO_IS_FINE = {"causal_mask"}  # an empty mask for an empty sequence
NONE_IS_FINE = {"sample_next top_k", "kept_probabilities top_k"}  # None: no top-k


@pytest.mark.parametrize(
    "function, name",
    [(function, name) for function in NUMBER_FUNCTIONS for name in HOSTILE_NUMBERS
     if not (function in ZERO_IS_FINE and name == "zero") and not (function in NONE_IS_FINE and name == "None")],
)
def test_every_size_argument_answers_every_hostile_number_with_a_sentence(function, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises((TypeError, ValueError)) as error:
            NUMBER_FUNCTIONS[function](HOSTILE_NUMBERS[name])
    frame = traceback.extract_tb(error.value.__traceback__)[-1]
    assert frame.filename.startswith(PACKAGE) and frame.line.strip().startswith("raise"), (function, name, error.value)
