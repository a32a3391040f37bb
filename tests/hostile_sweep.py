"""The sweep that needs no list: it finds the course's public doors itself and tries each with hostile values.

Found, not listed:

- every public callable of every module under ``attn/`` (``__all__`` where a module has one, else the names
  without a leading underscore), each tried once where it is defined (re-exports are skipped), classes
  through their constructors and, where a plain construction works, their public methods (``forward``
  included, through the instance's ``__call__``);
- every ``python -m`` entry point: each module with an ``if __name__ == "__main__"`` block, through the
  function that block calls (its argparse parser is read by intercepting ``parse_args``);
- every ``check(id, ...)`` in the exercise register.

Each parameter gets hostile values chosen by its kind (read from its name and its default): tensors of
wrong rank, dtype and device, NaN, inf, sparse and empty; numbers negative, zero, fractional, bool, 2**63,
2**70, NaN; paths that are folders, pipes, dangling links, link loops, 300-character names and places nobody
can write; text with a lone surrogate or NUL; configs of the wrong kinds. The other parameters get a plain good
value, so that each hostile value meets the function's checks alone. Every parameter of a kind also gets that
kind's ``ALWAYS`` values, what a name cannot tell (issue 52): finite values at the edge of a dtype (1e30 in
float32, 6e4 in float16), files and folders whose files claim sizes that are huge or do not fit what they hold,
configs that claim 10**8 of everything, and destinations that are symbolic links leading out of their folder.

An outcome passes if it is a ValueError, TypeError or FileNotFoundError raised by a ``raise`` statement in
the course's own code (the traceback's last frame is under ``attn/``) with a sentence, or a result with no
NaN (and no inf where the plain call gives none). Everything else fails, with the callable, the argument,
the value and what escaped: an exception from inside a library, a silent NaN or inf, a call that runs past
its time (``signal.setitimer``), a command line that accepts a hostile argument and goes on to work, and:

- a refused call on a stateful object (a method of an instance) that changed the object's state: every
  method case compares the instance's state (its attributes, tensors by value) before and after a refusal;
- a write through a symbolic link to a file outside the destination's folder (the file's bytes are compared);
- a process the case started, at any depth, still running when it ends (this process is made the subreaper of
  its orphans, so a grandchild whose parent has gone is still found);
- for the self-checks, a reply to a wrong answer that lets a learner compute the right one: a factor or a
  percentage, or any reply that changes when only the right answer moves a little (the wrong answer staying on
  its side of it): such a reply measures the miss.

A function that cannot take a generic value is named once, in ``EXEMPT``, with the reason.
"""

import argparse
import ast
import collections
import contextlib
import ctypes
import functools
import importlib
import inspect
import io
import json
import linecache
import math
import os
import pkgutil
import re
import resource
import signal
import struct
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ATTN = Path(importlib.import_module("attn").__file__).resolve().parent
CALL_SECONDS = 3.0  # one call's time; a call past it is a hang (or work that a check should have prevented)
ALLOWED = (ValueError, TypeError, FileNotFoundError)

# name (module.qualname, a method as module.Class.method; or a whole module) -> why it is not swept
EXEMPT = {
    "attn.data.corpus.download_deb": "runs apt-get download (network); its refusals are tested in test_austen.py",
    "attn.data.fashion.download_deb": "runs apt-get download (network), as attn.data.corpus.download_deb does",
    "attn.data.debian.apt_download": "runs apt-get download (network) for the two download_deb doors above; its "
                                     "refusals are tested in tests/data/test_fashion.py and test_reader_fuzz.py",
    "attn.course.execute.execute": "runs notebooks in Jupyter kernels (seconds each); its command line is swept",
    "attn.measure.gpu.suite.run_suite": "runs the GPU suite's subprocesses for minutes; its command line is swept",
    "attn.measure.gpu.suite.main": "called by python -m attn.measure.bench after its own argument checks (swept)",
    "attn.measure.gpu.cuda_tests": "runs pytest in a subprocess on a CUDA machine",
    "attn.triton_kernels": "Triton kernels and their launchers take device pointers and strides, not learners' values",
    "attn.course.explorer": "ipywidgets' interactive explorer: callbacks of widgets, not functions a learner calls",
    "attn.common.plotting": "draws on a matplotlib Axes given by the lesson's own code",
    "attn.measure.gpu": "the GPU suite's machinery (cases, timings, report): reached through python -m attn.measure.bench, swept",
    "attn.triton_flash.flash_forward_kernel": "a Triton kernel: takes device pointers and strides, launched by flash_forward",
    "attn.common.layer_checks": "the layers' own validators, called with the layer itself and its weights after the layer's "
    "type checks; the layers that call them are swept with every hostile input",
    "attn.common.convert": "copies weights between torch's modules and the course's for from_torch (swept)",
    "attn.course.exercises": "the self-checks' judges and answer helpers: reached through check(id, answer), swept below",
    "attn.course.solutions": "folds the solutions of the course's own notebooks: its command line is swept",
    "attn.course.reading_time": "counts the course's own notebooks for the instructors' guide: its command line is swept",
    # Long work by design (minutes of training or timing): each is what a command line runs after checking its
    # arguments, and the command line is swept; a plain call here would train for minutes.
    "attn.experiments.window_runs.run_all": "trains lesson 14's recall runs (python -m "
                                          "attn.experiments.window_runs, swept)",
    "attn.experiments.window_induction.run_all": "trains lesson 14's induction runs (python -m "
                                                "attn.experiments.window_induction, swept)",
    "attn.experiments.compressed_recall.run_all": "trains lesson 15's comparisons (python -m "
                                                  "attn.experiments.compressed_recall, swept)",
    "attn.experiments.window_austen.run": "measures the Austen model's windows (python -m "
                                           "attn.experiments.window_austen, swept)",
    "attn.measure.bench.run_benchmark": "times every case for minutes (python -m attn.measure.bench, swept)",
    "attn.experiments.induction_runs.run_all": "trains lesson 11's seeds (python -m attn.experiments.induction_runs, swept)",
    "attn.experiments.induction_runs.run_with_checkpoints": "trains one of lesson 11's seeds (python -m "
                                                            "attn.experiments.induction_runs)",
    "attn.models.induction.files.train_and_save": "trains lesson 11's models (python -m attn.models.induction, swept)",
    "attn.models.lm_training.train": "trains the Austen model for hours (python -m attn.lm train, swept)",
    "attn.experiments.smollm2_reading.run": "reads SmolLM2 and the Austen model for minutes (python -m "
    "attn.experiments.smollm2_reading, swept); it checks size, out and progress before loading anything",
    "attn.experiments.long_context.run": "reads and fine-tunes the Austen model for minutes (python -m "
    "attn.experiments.long_context, swept); it checks size, out and progress before loading anything",
    "attn.experiments.long_context_recall.run": "reads the Austen model for minutes (python -m "
    "attn.experiments.long_context_recall, swept); it checks size, out and progress before loading anything",
    "attn.experiments.smollm2_ablation.run": "ablates SmolLM2's heads for minutes (python -m "
    "attn.experiments.smollm2_ablation, swept); it checks size, out and progress before loading anything",
    "attn.experiments.smollm2_length.run": "reads SmolLM2 past 8,192 positions for minutes (python -m "
    "attn.experiments.smollm2_length, swept); it checks size, out and progress before loading anything",
    "attn.experiments.smollm2_sparse.run": "reads SmolLM2 through top-k attention and trains indexers for minutes (python -m "
    "attn.experiments.smollm2_sparse, swept); it checks size, out and progress before loading anything",
    "attn.experiments.sink_recall.run": "trains 75 recall models for minutes (python -m attn.experiments.sink_recall; "
                                        "its command line is swept, and run checks out and size first)",
    "attn.experiments.sink_austen.run": "trains small Austen models for minutes (python -m attn.experiments.sink_austen; "
                                        "its command line is swept, and run checks out and size first)",
    "attn.experiments.smollm2_sinks.run": "reads SmolLM2 on twelve passages for minutes (python -m "
                                          "attn.experiments.smollm2_sinks; its command line is swept, and run checks out "
                                          "first)",
    "attn.experiments.compressed_caches.run": "reads SmolLM2 through 28 compressed caches for minutes (python -m "
    "attn.experiments.compressed_caches, swept); it checks size, out and progress before loading anything",
    "attn.experiments.decode_speed.run": "times SmolLM2 and transformers decoding for minutes (python -m "
    "attn.experiments.decode_speed, swept); it checks size, out and progress before loading anything",
    "attn.experiments.vit_runs.run": "trains lesson 23's ViTs and baselines for minutes (python -m "
    "attn.experiments.vit_runs, swept); it checks size, out and progress before loading anything",
    "attn.experiments.serving_smollm2.run": "times SmolLM2 serving static and continuous batches for minutes (python -m "
    "attn.experiments.serving_smollm2, swept); it checks out, size and progress before loading anything",
    "attn.positions.RotaryAngles": "a record (NamedTuple) of checked rotary angles, built by rotary_angles (swept); "
    "rotate checks that it is one",
    "attn.experiments.position_runs.run_all": "trains lesson 17's NoPE and rotary runs (python -m "
                                              "attn.experiments.position_runs, swept)",
    "attn.experiments.sparse_runs.run_all": "trains lesson 18's side-by-side runs (python -m "
                                            "attn.experiments.sparse_runs, swept)",
    "attn.experiments.sparse_runs.recall_run": "trains one of lesson 18's recall runs (python -m "
                                               "attn.experiments.sparse_runs, swept)",
    "attn.experiments.sparse_runs.induction_run": "trains one of lesson 18's induction runs (python -m "
                                                  "attn.experiments.sparse_runs, swept)",
    # Records: named tuples the GGUF reader fills with values it has checked. read_header and tensor_bytes take
    # the learner's input (swept, and fuzzed in test_gguf.py); tensor_bytes refuses a record not the file's own.
    "attn.gguf.Header": "a record (NamedTuple) of a checked GGUF file's header, built by read_header (swept, fuzzed)",
    "attn.gguf.TensorInfo": "a record (NamedTuple) of one tensor's row in a checked GGUF table, built by read_header",
}
SAMPLES = 3  # hostile values tried per parameter, taken in turn from its kind's table so that every value is used
WARM_UP_SECONDS = 30.0  # the first call of a door may import libraries or build its data once


# ---------------------------------------------------------------------------------------------- finding the doors


def public_modules(package="attn"):
    """Every importable module under ``package`` whose dotted name has no part starting with an underscore."""
    root = importlib.import_module(package)
    names = [package] + [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")]
    return [importlib.import_module(name) for name in names if not any(part.startswith("_") for part in name.split("."))]


def public_callables(modules=None):
    """(qualified name, object) for each function and class a module defines and makes public; each once."""
    found = {}
    for module in modules or public_modules():
        names = getattr(module, "__all__", None) or [name for name in vars(module) if not name.startswith("_")]
        for name in names:
            value = getattr(module, name, None)
            if not (inspect.isfunction(value) or inspect.isclass(value)) or value.__module__ != module.__name__:
                continue  # imported from elsewhere (tried where it is defined), or not a callable
            if inspect.isclass(value) and issubclass(value, BaseException):
                continue
            found.setdefault(f"{module.__name__}.{value.__qualname__}", value)
    return found


def entry_points(package="attn"):
    """(module name, main function) for each module with a ``__main__`` block (``__main__.py`` files included)."""
    found, seen = [], set()
    root = importlib.import_module(package)
    names = [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in [package, *names]:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        source = Path(spec.origin).read_text(encoding="utf-8")
        if name.endswith(".__main__"):
            called, module_name = _called_in(ast.parse(source).body), name.rsplit(".", 1)[0]
        elif '__name__ == "__main__"' in source:
            tests = (node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.If))
            block = next(node for node in tests if "__main__" in ast.unparse(node.test))
            called, module_name = _called_in(block.body), name
        else:
            continue
        if called is None:
            continue
        module = importlib.import_module(name if not name.endswith(".__main__") else module_name)
        function = getattr(module, called, None)
        if function is None and name.endswith(".__main__"):  # python -m package: the package's __main__ imports it
            imported = next(node for node in ast.parse(source).body if isinstance(node, ast.ImportFrom))
            function = getattr(importlib.import_module(imported.module), called)
        if function is not None and function not in seen:
            seen.add(function)
            found.append((module_name, function))
    return found


def _called_in(statements):
    for node in statements:
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id not in ("SystemExit",):
                return call.func.id
    return None


def exempt_reason(name):
    for prefix, reason in EXEMPT.items():
        if name == prefix or name.startswith(prefix + "."):
            return reason
    return None


# ------------------------------------------------------------------------------------------- values by kind

TENSOR_NAMES = {
    "query", "key", "value", "q", "k", "v", "x", "tensor", "scores", "logits", "weights", "mask", "keep_mask", "inputs",
    "tokens", "positions", "targets", "keys", "values", "matrix", "state", "initial_state", "beta", "alpha", "grad_output",
    "query_positions", "key_positions", "logsumexp", "row_max", "row_sum", "sink_logits", "scaled_logits", "key_padding_mask",
    "prompt", "sequences", "data", "angles", "cos_sin", "output", "outputs", "learned_sinks", "a", "b", "weight",
    "index_scores", "query_latent", "gates", "block_keep", "compressed_weights", "queries", "codes", "packed",
    "log_forget", "max_logits", "images",
}
INT_NAMES = {
    "length", "window", "embed_dim", "num_heads", "seed", "steps", "repeats", "sink_tokens", "head_dim", "vocab_size",
    "count", "block_q", "block_k", "t_q", "t_k", "batch", "warmup", "num_layers", "heads", "num_kv_heads", "chunk_size",
    "context", "windows", "top_k", "batch_size", "max_length", "block", "n_keys", "n_values", "seeds", "per_distance",
    "block_size", "dim", "row", "capacity", "latent_dim", "nope_dim", "rope_dim", "value_dim", "query_latent_dim",
    "cache_length", "kv_heads", "layer_index", "block_length", "num_sequences", "context_length", "step", "total",
    "start_step", "position", "n_examples", "n_pairs", "new_token", "num_merges", "bin_size", "held_out_tokens",
    "passage_length", "passages", "train_tokens", "size", "d_k", "new_tokens", "head", "block_start", "every", "q_position",
    "k_position", "digits", "minimum", "maximum", "limit", "element_size", "bytes_per_element", "target_layer", "nbytes",
    "block_count", "top_blocks", "bits", "group_size", "residual", "budget", "kernel_size", "seen", "grid_height",
    "grid_width",
}
FLOAT_NAMES = {
    "temperature", "dropout", "dropout_p", "base", "rotary_base", "rope_base", "scaling", "learning_rate", "top_p", "eps",
    "mlp_ratio", "atol", "query_std", "key_std", "budget_s", "case_budget_s", "timeout_s", "test_timeout_s", "timeout",
    "qk_norm_eps", "scale", "ceiling_tflops", "factor", "mscale", "sink_logit", "lam", "lambda_init", "threshold",
}
PATH_NAMES = {"path", "out", "folder", "directory", "notebook", "root", "tests_folder", "log"}
TEXT_NAMES = {"text", "name", "what", "exercise_id", "kind", "label", "title", "words", "noun", "source", "command"}
CONFIG_NAMES = {"config", "settings", "metadata", "payload"}


def kind_of(name, default):
    if isinstance(default, bool):
        return "flag"
    if name in PATH_NAMES or name.endswith(("_path", "_folder", "_file")):
        return "path"
    if name in CONFIG_NAMES:
        return "config"
    if name in TENSOR_NAMES:
        return "tensor"
    if name in INT_NAMES or (isinstance(default, int) and default is not None) or _sized(name):
        return "int"
    if name in FLOAT_NAMES or isinstance(default, float):
        return "float"
    if name in TEXT_NAMES or isinstance(default, str):
        return "text"
    return "any"


def _sized(name):
    """A count or a size by its name's form: num_pages, page_size, mlp_hidden_dim, max_new_tokens."""
    return name.startswith(("num_", "max_")) or name.endswith(("_size", "_dim", "_count", "_tokens", "_heads", "_layers"))


def _sparse():
    return torch.randn(2, 4, 8).to_sparse()


def _extreme(value, dtype=torch.float32):
    """A finite tensor of ±``value`` in ``dtype``, in the plain shape (so that it meets the checks after the shape's)."""
    def factory(paths):
        shape = paths.get("shape", (2, 4, 8)) if paths else (2, 4, 8)
        signs = torch.where(torch.rand(shape) < 0.5, -1.0, 1.0)
        return (signs * value).to(dtype)

    return factory


def _nan_tensor():
    x = torch.randn(2, 4, 8)
    x[0, 1, 2] = math.nan
    return x


def _inf_tensor():
    x = torch.randn(2, 4, 8)
    x[1, 2, 3] = math.inf
    return x


HOSTILE = {
    "tensor": {
        "a tensor of rank 1": lambda paths: torch.randn(3),
        "an int64 tensor": lambda paths: torch.ones(2, 4, 8, dtype=torch.int64),
        "a meta tensor": lambda paths: torch.empty(2, 4, 8, device="meta"),
        "a tensor holding NaN": lambda paths: _nan_tensor(),
        "a tensor holding inf": lambda paths: _inf_tensor(),
        "a finite tensor of ±1e30": _extreme(1e30),
        "a float16 tensor of ±6e4": _extreme(6e4, torch.float16),
        "a sparse tensor": lambda paths: _sparse(),
        "an empty tensor (2, 0, 8)": lambda paths: torch.empty(2, 0, 8),
        "a NumPy array": lambda paths: np.ones((2, 4, 8)),
        "a nested list": lambda paths: [[1.0, 2.0], [3.0]],
        "text": lambda paths: "\ud800",
        "None": lambda paths: None,
    },
    "int": {
        "-1": lambda paths: -1,
        "0": lambda paths: 0,
        "2.5": lambda paths: 2.5,
        "True": lambda paths: True,
        "2**63": lambda paths: 2**63,
        "2**70": lambda paths: 2**70,
        "NaN": lambda paths: math.nan,
        "the text '2'": lambda paths: "2",
        "numpy.int64(-3)": lambda paths: np.int64(-3),
    },
    "float": {
        "-1.0": lambda paths: -1.0,
        "0.0": lambda paths: 0.0,
        "NaN": lambda paths: math.nan,
        "inf": lambda paths: math.inf,
        "1e300": lambda paths: 1e300,
        "True": lambda paths: True,
        "the text '0.5'": lambda paths: "0.5",
        "a tensor of NaN": lambda paths: torch.tensor(math.nan),
    },
    "path": {
        "a folder": lambda paths: paths["new"]("folder"),
        "a named pipe": lambda paths: paths["new"]("fifo"),
        "a dangling link": lambda paths: paths["new"]("dangling"),
        "a link loop": lambda paths: paths["new"]("loop"),
        "a 300-character name": lambda paths: paths["long"],
        "a place nobody can write": lambda paths: "/proc/attn-sweep/out",
        "a name with NUL": lambda paths: "data\x00out",
        "a name with a lone surrogate": lambda paths: "out\ud800",
        "a number": lambda paths: 3,
        "a link leading out of its folder": lambda paths: paths["new"]("outward-link"),
        "a folder whose files are links leading out of it": lambda paths: paths["new"]("linked-folder"),
        "a folder of files claiming huge sizes": lambda paths: paths["new"]("claims-folder"),
        "a file claiming huge sizes": lambda paths: paths["new"]("claims-file"),
    },
    "text": {
        "a lone surrogate": lambda paths: "\ud800",
        "NUL": lambda paths: "a\x00b",
        "empty text": lambda paths: "",
        "a number": lambda paths: 3,
        "bytes": lambda paths: b"\xff",
    },
    "flag": {"the text 'yes'": lambda paths: "yes", "2": lambda paths: 2, "None": lambda paths: None},
    "config": {
        "a config claiming 10**8 of every size": lambda paths: dict(HUGE_CONFIG),
        "a config of text": lambda paths: {key: "8" for key in HUGE_CONFIG},
        "a list": lambda paths: [1, 2],
        "an object()": lambda paths: object(),
    },
    "any": {
        "None": lambda paths: None,
        "a lone surrogate": lambda paths: "\ud800",
        "NaN": lambda paths: math.nan,
        "-1": lambda paths: -1,
        "an object()": lambda paths: object(),
        "a meta tensor": lambda paths: torch.empty(2, 4, 8, device="meta"),
    },
}

# a plain value per kind (and per name where the kind's is wrong), so that each hostile value meets the checks alone
GOOD_BY_NAME = {
    "embed_dim": 8, "num_heads": 2, "heads": 2, "head_dim": 4, "d_k": 8, "vocab_size": 16, "length": 4, "window": 2,
    "dim": 8,  # RMSNorm's features: a plain (2, 4, 8) input fits it
    "tokens": lambda paths: torch.randint(0, 16, (2, 4)), "positions": lambda paths: torch.arange(4),
    "mask": lambda paths: torch.ones(4, 4, dtype=torch.bool), "keep_mask": lambda paths: torch.ones(4, 4, dtype=torch.bool),
    "steps": 1, "repeats": 1, "seed": 0, "block_q": 2, "block_k": 2, "chunk_size": 2, "capacity": 4, "num_layers": 1,
    "sink_tokens": 1, "batch": 2, "batch_size": 2, "t_q": 4, "t_k": 4, "beta": lambda paths: torch.rand(2, 4),
    "attention": lambda paths: importlib.import_module("attn").MultiHeadAttention(8, 2),  # a layer to wrap (E = 8)
    "query_latent_dim": 8,  # LightningIndexer: its query latent, read from a plain (2, 4, 8) tensor
    "scaling": None,  # LatentAttention's score scale, or a rotary scaling dict (lesson 17): None is plain for both
    # attn.block_sparse (lesson 18), with (1, 2, 4, 8) heads, blocks of 2 and no window: two gates, two blocks
    "gates": lambda paths: torch.rand(1, 2, 4, 2), "compressed_weights": lambda paths: torch.rand(1, 2, 4, 2),
    "block_keep": lambda paths: torch.ones(1, 2, 4, 2, dtype=torch.bool),
    # attn.gates (lesson 22), with (1, 2, 4, 8) heads: a forget gate per token and head, a largest logit per head
    "log_forget": lambda paths: -torch.rand(1, 2, 4), "max_logits": lambda paths: torch.tensor([1.0, 3.0]),
    # attn.vision and attn.models.vit (lesson 23): two grayscale pictures of 4 x 4 pixels, read in patches of 2
    "images": lambda paths: torch.rand(2, 1, 4, 4), "patch_size": 2,
    "rows": lambda paths: torch.arange(4), "cols": lambda paths: torch.arange(4),  # a token's row and column
    "row_frequencies": lambda paths: torch.ones(4), "col_frequencies": lambda paths: torch.ones(4),
    "frequencies": lambda paths: torch.ones(2),  # 2D rotary's, for heads of 8 features (rope_checks takes NumPy's)
}
# What a parameter's name cannot tell: tried on every parameter of the kind, beside the SAMPLES taken in turn.
ALWAYS = {
    "tensor": ("a finite tensor of ±1e30", "a float16 tensor of ±6e4"),
    "path": ("a link leading out of its folder", "a folder whose files are links leading out of it",
             "a folder of files claiming huge sizes", "a file claiming huge sizes"),
    "config": ("a config claiming 10**8 of every size",),
}
HUGE = 10**8
MODEL_CONFIG = {  # a model's sizes as a converted file stores them, each claimed huge (1.5 kB can claim 10**8 layers)
    **dict.fromkeys(("vocab_size", "context_length", "embed_dim", "num_heads", "num_kv_heads", "num_layers",
                     "mlp_hidden_dim"), HUGE),
    "rotary_base": 10000.0, "norm_eps": 1e-5,
}
HUGE_CONFIG = {  # every size a course config names, claimed huge
    **MODEL_CONFIG, **dict.fromkeys(("steps", "batch_size", "max_length", "heads", "head_dim", "length", "seeds",
                                     "streams", "stream_length", "chunk", "passages", "passage_length", "windows"), HUGE),
    "dropout": 0.0, "mlp_ratio": 4,
}

GOOD_BY_KIND = {
    "tensor": lambda paths: torch.randn(*paths.get("shape", (2, 4, 8))),
    "int": 2, "float": 0.5, "text": "a", "flag": False, "any": None, "config": None,
    "path": lambda paths: str(paths["fresh"] / f"out{next(paths['counter'])}"),
}


def good_value(name, kind, paths):
    value = GOOD_BY_NAME.get(name, GOOD_BY_KIND[kind])
    return value(paths) if callable(value) else value


# ------------------------------------------------------------------------------------------------ judging one call


@dataclass
class Failure:
    door: str  # the callable, or the command line
    argument: str
    value: str
    escaped: str  # what went wrong

    def key(self):
        return f"{self.door} | {self.argument} | {self.value}"

    def __str__(self):
        return f"{self.door}: {self.argument} = {self.value} -> {self.escaped}"


class _TimeUp(BaseException):  # a BaseException, so that no `except Exception` in the code swept swallows it
    pass


def _alarm(signum, frame):
    raise _TimeUp


@contextlib.contextmanager
def time_limit(seconds):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def memory_limit(extra_bytes=6 * 2**30):
    """Address space capped at what is used now plus ``extra_bytes``: a giant allocation fails at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    statm = Path("/proc/self/statm")
    used = int(statm.read_text().split()[0]) * resource.getpagesize() if statm.exists() else 0
    cap = used + extra_bytes
    if used == 0 or (hard != resource.RLIM_INFINITY and hard < cap):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def raised_by_the_course(error):
    """True if ``error`` was raised by a ``raise`` statement in a file under attn/ (its traceback's last frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    if not Path(last.filename).resolve().is_relative_to(ATTN):
        return False
    line = linecache.getline(last.filename, last.lineno).strip()
    return line.startswith("raise ") or line.startswith("raise(")


class _StateChanged(BaseException):  # raised by the sweep itself: a failure whatever the call raised
    pass


def state_of(value, depth=0, seen=None):
    """A comparable picture of ``value``'s state: attributes walked to a few levels, tensors and arrays by value
    (a CRC of their bytes), containers in order, functions and classes by name."""
    seen = set() if seen is None else seen
    if isinstance(value, bool | int | float | complex | str | bytes | type(None)):
        return value if not (isinstance(value, float) and math.isnan(value)) else "NaN"
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta" or value.layout != torch.strided:
            return ("tensor", str(value.dtype), tuple(value.shape), str(value.device), str(value.layout))
        data = value.detach().cpu().contiguous()
        raw = data.view(torch.uint8) if data.numel() and data.dtype != torch.bool else data.to(torch.uint8)
        return ("tensor", str(value.dtype), tuple(value.shape), zlib.crc32(raw.numpy().tobytes()))
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, zlib.crc32(np.ascontiguousarray(value).tobytes()))
    if isinstance(value, torch.Generator):
        return ("generator", zlib.crc32(value.get_state().numpy().tobytes()))
    if depth > 6 or id(value) in seen or callable(value) and not hasattr(value, "__dict__"):
        return type(value).__name__
    if inspect.isfunction(value) or inspect.ismethod(value) or inspect.isclass(value) or inspect.ismodule(value):
        return getattr(value, "__qualname__", type(value).__name__)
    seen = seen | {id(value)}
    if isinstance(value, dict):
        return ("dict", tuple((repr(key)[:80], state_of(item, depth + 1, seen)) for key, item in list(value.items())[:2000]))
    if isinstance(value, list | tuple | collections.deque):
        return (type(value).__name__, tuple(state_of(item, depth + 1, seen) for item in list(value)[:2000]))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted(repr(item)[:80] for item in value)))
    if hasattr(value, "__dict__"):
        return (type(value).__qualname__, state_of(vars(value), depth + 1, seen))
    return type(value).__name__


def describe(value):
    text = repr(value) if not isinstance(value, torch.Tensor) else f"tensor{tuple(value.shape)} {value.dtype} {value.device}"
    return text if len(text) <= 60 else text[:57] + "..."


def non_finite(result, depth=0):
    """'NaN' or 'inf' if ``result`` (a tensor, array, number, or a tuple/list/dict of them) holds one, else None."""
    if depth > 3:
        return None
    found = None
    numbers = isinstance(result, torch.Tensor) and result.device.type != "meta" and result.layout == torch.strided
    if numbers and result.is_floating_point():
        found = "NaN" if bool(torch.isnan(result).any()) else "inf" if bool(torch.isinf(result).any()) else None
    elif isinstance(result, np.ndarray) and np.issubdtype(result.dtype, np.floating):
        found = "NaN" if bool(np.isnan(result).any()) else "inf" if bool(np.isinf(result).any()) else None
    elif isinstance(result, float):
        found = "NaN" if math.isnan(result) else "inf" if math.isinf(result) else None
    elif isinstance(result, (tuple, list)):
        for item in result[:50]:
            found = found or non_finite(item, depth + 1)
    elif isinstance(result, dict):
        for item in list(result.values())[:50]:
            found = found or non_finite(item, depth + 1)
    return found


@contextlib.contextmanager
def strict_and_quiet():
    """Warnings raised as errors (as the course's pytest configuration has them), printing kept from the log."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("error")
        yield


def outcome(call, plain_result_has_inf=False, seconds=CALL_SECONDS):
    """None if ``call()`` ends well (a course sentence, or a result without NaN/unexpected inf); else what escaped."""
    try:
        with strict_and_quiet(), time_limit(seconds):
            result = call()
    except _TimeUp:
        return f"still running after {seconds:.0f} s (a hang, or work that should have been refused first)"
    except ALLOWED as error:
        if not raised_by_the_course(error):
            last = traceback.extract_tb(error.__traceback__)[-1]
            return f"{type(error).__name__} from {_short(last.filename)}:{last.lineno}: {str(error)[:120]!r}"
        if len(str(error).split()) < 3:
            return f"{type(error).__name__} without a sentence: {str(error)!r}"
        return None
    except SystemExit as error:
        return f"SystemExit({error.code!r}) from a function (only a command line may exit)"
    except BaseException as error:  # noqa: BLE001 - everything else is what the sweep exists to find
        frames = traceback.extract_tb(error.__traceback__)
        where = f" from {_short(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        return f"{type(error).__name__}{where}: {str(error)[:120]!r}"
    bad = non_finite(result)
    if bad == "NaN" or (bad == "inf" and not plain_result_has_inf):
        return f"returned {bad} without a word (a silent wrong result)"
    return None


def _short(filename):
    path = Path(filename).resolve()
    for root in (ATTN.parent, Path(torch.__file__).parent.parent):
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return path.name


# ------------------------------------------------------------------------------------------------ the cases


@dataclass
class Case:
    door: str
    argument: str
    value: str
    call: object  # () -> the result
    plain_has_inf: bool = False

    def key(self):
        return f"{self.door} | {self.argument} | {self.value}"

    def failure(self, seconds=CALL_SECONDS):
        escaped = outcome(self.call, self.plain_has_inf, seconds)
        return None if escaped is None else Failure(self.door, self.argument, self.value, escaped)


def _parameters(function):
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    skipped = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in signature.parameters.values() if p.kind not in skipped and p.name != "self"]


def _call_with(function, parameters, values):
    positional = [values[p.name] for p in parameters if p.kind == p.POSITIONAL_ONLY and p.name in values]
    only_positional = {p.name for p in parameters if p.kind == p.POSITIONAL_ONLY}
    named = {name: value for name, value in values.items() if name not in only_positional}
    return function(*positional, **named)


PLAIN_SHAPES = ((2, 4, 8), (1, 2, 4, 8), (2, 4, 4))  # (B, T, E) for layers, (B, H, T, d) on heads, (H_kv, T, d)


def _plain_shape(target, parameters, paths):
    """The first plain tensor shape that ``target()`` accepts (so that hostile values meet its later checks too)."""
    for shape in PLAIN_SHAPES:
        try:
            with time_limit(CALL_SECONDS), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                _call_with(target(), parameters, _plain_values(parameters, {**paths, "shape": shape}))
            return shape
        except BaseException:  # noqa: BLE001,S112 - this shape is not the function's; try the next
            continue
    return PLAIN_SHAPES[0]


def _plain_values(parameters, paths):
    """A plain value for each required parameter, and a fresh temporary path for every path parameter."""
    return {
        p.name: good_value(p.name, kind_of(p.name, p.default), paths)
        for p in parameters
        if p.default is p.empty or kind_of(p.name, p.default) == "path"
    }


def _plain_has_inf(function, parameters, paths):
    try:
        with time_limit(CALL_SECONDS), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return non_finite(_call_with(function, parameters, _plain_values(parameters, paths))) == "inf"
    except BaseException:  # noqa: BLE001 - the plain call is judged as a case of its own
        return False


class _LazyPlainInf:
    """Whether the plain call returns inf, found only when a hostile call does (an inf that the plain call has too
    is the function's meaning, such as a mask's -inf, not a silent wrong result)."""

    def __init__(self, find):
        self.find, self.value = find, None

    def __bool__(self):
        if self.value is None:
            self.value = bool(self.find())
        return self.value


def function_cases(door, function, paths, make=None):
    """The cases of one function (or of a method: ``make() -> (instance, bound method)``, a fresh instance each time,
    whose state a refused call must leave as it was)."""
    parameters = _parameters(function)
    if parameters is None:
        return []
    target = (lambda: make()[1]) if make else (lambda: function)
    tensor_names = [p.name for p in parameters if kind_of(p.name, p.default) == "tensor" and p.name not in GOOD_BY_NAME]
    if tensor_names and any(p.default is p.empty for p in parameters if p.name in tensor_names):
        paths = {**paths, "shape": _plain_shape(target, parameters, paths)}
    has_inf = _LazyPlainInf(lambda: _plain_has_inf(target(), parameters, paths))

    def invoke(values):
        if make is None:
            return _call_with(function, parameters, values)
        instance, method = make()
        before = state_of(instance)
        try:
            return _call_with(method, parameters, values)
        except ALLOWED:
            if state_of(instance) != before:
                raise _StateChanged("a refused call changed the object's state (a refusal must leave it as it was: "
                                    "check everything before changing anything)") from None
            raise

    plain = Case(door, "(all)", "plain values", lambda: invoke(_plain_values(parameters, paths)), has_inf)
    cases = [plain]
    for number, parameter in enumerate(parameters):
        kind = kind_of(parameter.name, parameter.default)
        always = ALWAYS.get(kind, ())
        table = [(label, factory) for label, factory in HOSTILE[kind].items()
                 if label not in always and not _is_default(factory, parameter.default)]
        start = (number * SAMPLES) % max(len(table), 1)
        chosen = (table[start:] + table[:start])[:SAMPLES] + [(label, HOSTILE[kind][label]) for label in always]
        for label, factory in chosen:
            def call(parameter=parameter, factory=factory):
                values = _plain_values(parameters, paths)
                values[parameter.name] = factory(paths)
                return invoke(values)

            cases.append(Case(door, parameter.name, label, call, has_inf))
    return cases


def _is_default(factory, default):
    """True if the hostile value is the parameter's own default (None where None means 'not given'): not hostile."""
    if default is inspect.Parameter.empty or isinstance(default, torch.Tensor):
        return False
    try:
        value = factory(None)
    except TypeError:
        return False
    comparable = type(value) is type(default) and not isinstance(value, torch.Tensor | np.ndarray)
    return value is default or (comparable and value == default)


def _methods(cls):
    """Public methods the course defines on ``cls`` (forward included), by name."""
    names = []
    for name in dir(cls):
        if name.startswith("_") and name != "__call__":
            continue
        attribute = inspect.getattr_static(cls, name, None)
        function = attribute.__func__ if isinstance(attribute, classmethod | staticmethod) else attribute
        if inspect.isfunction(function) and Path(inspect.getsourcefile(function) or "").resolve().is_relative_to(ATTN):
            names.append(name)
    return names


def callable_cases(paths, found=None):
    """Every case of every public callable, and the names skipped with their reasons."""
    cases, skipped = [], {}
    for name, value in (found or public_callables()).items():
        reason = exempt_reason(name) or exempt_reason(value.__module__)
        if reason or name.endswith(".main"):
            skipped[name] = reason or "a command line: swept through its arguments"
            continue
        cases += function_cases(name, value, paths)
        if inspect.isclass(value):
            parameters = _parameters(value)

            def make(cls=value, parameters=parameters):
                return _call_with(cls, parameters, _plain_values(parameters, paths))

            try:
                with time_limit(CALL_SECONDS), contextlib.redirect_stdout(io.StringIO()):
                    make()
            except BaseException:  # noqa: BLE001 - no plain instance: its methods are reached through other doors
                continue
            for method in _methods(value):
                if exempt_reason(f"{name}.{method}"):
                    skipped[f"{name}.{method}"] = exempt_reason(f"{name}.{method}")
                    continue
                callee = "forward" if method == "forward" else method
                unbound = getattr(value, callee)
                def bound(instance_maker=make, method=method):
                    instance = instance_maker()
                    return instance, instance if method == "forward" else getattr(instance, method)

                cases += function_cases(f"{name}.{method}", unbound, paths, make=bound)
    return cases, skipped


# ------------------------------------------------------------------------------------------------ command lines


class _Parsed(BaseException):
    def __init__(self, parser):
        self.parser = parser


def parser_of(main):
    """The argparse parser ``main`` builds, caught at its ``parse_args``; None if it builds none."""
    original = argparse.ArgumentParser.parse_args

    def catch(self, args=None, namespace=None):
        raise _Parsed(self)

    argparse.ArgumentParser.parse_args = catch
    try:
        with time_limit(CALL_SECONDS), contextlib.redirect_stdout(io.StringIO()):
            main([])
    except _Parsed as parsed:
        return parsed.parser
    except BaseException:  # noqa: BLE001 - a main without argparse
        return None
    finally:
        argparse.ArgumentParser.parse_args = original
    return None


CLI_PATH_DESTS = {"out", "model", "deb", "times", "corpus", "lessons", "notebooks"}
CLI_INT_DESTS = {"steps", "seed", "seeds", "threads", "per_distance", "batch", "heads", "head_dims", "lengths", "repeats"}
CLI_BOUNDED = {"seeds", "threads", "per_distance", "batch", "heads", "head_dims", "lengths", "repeats"}


def cli_kind(action):
    if action.choices is not None:
        return "choice"
    if action.dest in CLI_PATH_DESTS:
        return "path"
    if action.dest in CLI_INT_DESTS or isinstance(action.default, int):
        return "int"
    return "text"


def cli_hostile(action, paths):
    kind = cli_kind(action)
    if kind == "path":
        values = {"a named pipe": paths["new"]("fifo"), "a dangling link": paths["new"]("dangling"),
                  "a link loop": paths["new"]("loop"),
                  "a 300-character name": paths["long"], "a place nobody can write": "/proc/attn-sweep/out"}
        if action.dest not in ("out",):
            values["a folder"] = paths["new"]("folder")
        if action.dest == "out":  # each file the command writes there a link leading out of the folder
            values["a folder whose files are links leading out of it"] = paths["new"]("linked-folder")
        if action.dest in ("model", "corpus"):  # files that claim sizes they do not hold
            values["a folder of files claiming huge sizes"] = paths["new"]("claims-folder")
            values["a file claiming huge sizes"] = paths["new"]("claims-file")
        return values
    if kind == "int":
        values = {"2.5": "2.5", "2**64": str(2**64), "2**70": str(2**70), "nan": "nan", "x": "x"}
        if "seed" not in action.dest:
            values |= {"-1": "-1", "0": "0"}
        if action.dest in CLI_BOUNDED and action.nargs not in ("+", "*"):  # a list of seeds may hold a large seed
            values["1000000000"] = "1000000000"
        return values
    if kind == "choice":
        return {"a lone surrogate": "\udcff", "bogus": "bogus"}
    return {"a lone surrogate": "\udcff", "empty": ""}


def cli_good(action, paths):
    kind = cli_kind(action)
    if kind == "choice":
        return str(next(iter(action.choices)))
    if kind == "path":
        if action.dest == "deb":
            return str(paths["garbage"])
        return str(paths["fresh"] / f"cli{next(paths['counter'])}")
    return "1" if kind == "int" else "a"


def _cli_parsers(parser, prefix=()):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _cli_parsers(sub, (*prefix, name))


def _arguments(parser):
    plain = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction, argparse._StoreTrueAction,
             argparse._StoreFalseAction, argparse._StoreConstAction)
    return [action for action in parser._actions if not isinstance(action, plain)]


def _no_parser():
    raise _AcceptedError("no argparse parser found: a command line must read its arguments with argparse")


def cli_cases(paths, found=None):
    """Every case of every command line: one hostile argument at a time, the others plain."""
    cases = []
    for module_name, main in found or entry_points():
        door_name = f"python -m {module_name}"
        if exempt_reason(f"{main.__module__}.{main.__qualname__}"):
            continue
        parser = parser_of(main)
        if parser is None:
            cases.append(Case(door_name, "(parser)", "--", _no_parser))
            continue
        for prefix, sub in _cli_parsers(parser):
            actions = _arguments(sub)
            if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                continue  # the subcommands' own parsers are swept
            for action in actions:
                for label, text in cli_hostile(action, paths).items():
                    def argv(action=action, text=text, actions=actions, prefix=prefix):
                        words = list(prefix)
                        for other in actions:
                            plain = cli_good(other, paths) if other.required or not other.option_strings else None
                            value = text if other is action else plain
                            if value is None:
                                continue
                            words += [value] if not other.option_strings else [other.option_strings[-1], value]
                        return words

                    name = action.option_strings[-1] if action.option_strings else action.dest
                    cases.append(Case(f"{door_name} {' '.join(prefix)}".strip(), name, f"{label} ({text[:40]!r})",
                                      lambda main=main, argv=argv: run_command_line(main, argv())))
    return cases


class _AcceptedError(Exception):
    pass


def run_command_line(main, argv):
    """Run ``main(argv)``: returns the argparse refusal; raises _AcceptedError if the argument got past the checks."""
    threads = torch.get_num_threads()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            main(argv)
    except SystemExit as error:
        message = stderr.getvalue().strip().splitlines()
        if error.code == 2 and message and ": error: " in message[-1]:
            return message[-1]
        raise _AcceptedError(f"ended with SystemExit({str(error.code)[:150]!r}) after the argument checks passed") from None
    finally:
        torch.set_num_threads(threads)
    raise _AcceptedError("accepted the argument and ran to the end")


# ------------------------------------------------------------------------------------------------ the exercises

@functools.cache
def _ten_million_zeros():
    """Built once (80 MB, a tenth of a second each time it was built anew for every exercise)."""
    return [0.0] * 10**7


CHECK_ANSWERS = {
    "a lone surrogate": lambda: "\ud800",
    "NUL": lambda: "1\x002",
    "NaN": lambda: math.nan,
    "2**70": lambda: 2**70,
    "-1": lambda: -1,
    "a meta tensor": lambda: torch.empty(3, device="meta"),
    "a sparse tensor": lambda: torch.eye(3).to_sparse(),
    "ten million zeros": lambda: _ten_million_zeros(),
    "an object()": lambda: object(),
}


def _correct(exercise_id):
    """The exercise's own solution must be answered Correct (and builds what the check needs, once)."""
    from attn.course.exercises import EXERCISES
    from attn.course.exercises.registry import verdict

    line = verdict(exercise_id, EXERCISES[exercise_id].solution())
    if not line.startswith("Correct: "):
        raise _AcceptedError(f"its own solution is answered {line[:80]!r}")


def check_cases(exercise_ids=None):
    """Hostile answers to every self-check (each answered "Not yet"), its own solution answered Correct, and no reply
    to a wrong answer that lets the right one be computed (``leak_cases``)."""
    from attn.course.exercises import exercise_ids as registered
    from attn.course.exercises.registry import verdict

    cases = []
    for exercise_id in exercise_ids or registered():
        cases.append(Case(f"check({exercise_id!r}, ...)", "answer", "its own solution", lambda e=exercise_id: _correct(e)))
        for label, answer in CHECK_ANSWERS.items():
            def call(exercise_id=exercise_id, answer=answer):
                line = verdict(exercise_id, answer())
                if not line.startswith("Not yet: "):
                    raise _AcceptedError(f"answered {line[:80]!r}")
                return None

            cases.append(Case(f"check({exercise_id!r}, ...)", "answer", label, call))
    return cases + leak_cases(exercise_ids)


# A reply that says how far off an answer is gives the answer away: "too small, by about a factor of 160" to an
# answer of 1 is 160. Words that measure a miss; and (below) a reply that changes when only the right answer moves.
MEASURED_MISS = re.compile(r"factor of|\d\s*%|\bby about\b|\btimes (?:too|as|more|less)\b|\boff by\b|\bdiffers? by\b")
NEIGHBOURS = (0.98, 1.02)  # the right answer moved this little: every wrong answer tried stays on its side


def _wrong_answers(expected, whole):
    """Wrong answers on one side of ``expected`` (a clean array) or the other, and 1 and 2 (what a learner types first)."""
    answers = [expected * factor for factor in (0.37, 0.61, 1.9, 3.3)]
    if expected.ndim == 0:
        answers += [np.float64(1.0), np.float64(2.0)] if float(expected) != 0 else [np.float64(-1.0)]
    return [np.round(answer).astype(np.int64) if whole else answer for answer in answers]


def _neighbours(expected, whole):
    """Right answers near ``expected``: it times 0.98 and 1.02 (whole numbers: one less and one more, away from 0)."""
    if whole:  # entries of 0 stay 0, as they do in the float neighbours
        step = np.sign(expected)
        return [expected - step * (np.abs(expected) > 1), expected + step]
    return [expected * factor for factor in NEIGHBOURS]


def _same_sides(answer, expected, moved):
    """True if every nonzero entry of ``answer`` lies strictly on the same side of ``expected`` as of ``moved`` (and
    of 0), and its entries where ``expected`` is 0 are 0 too: the verdict on each entry's direction cannot change."""
    nonzero = expected != 0
    with np.errstate(all="ignore"):
        before, after = np.sign(answer - expected)[nonzero], np.sign(answer - moved)[nonzero]
        signs = np.sign(answer)[nonzero] == np.sign(expected)[nonzero]
    return bool(np.all(answer[~nonzero] == 0) and np.all(before == after) and np.all(before != 0) and np.all(signs))


def leak_cases(exercise_ids=None):
    """For every exercise answered by numbers, each wrong answer's reply must say no factor or percentage, and must
    stay the same when the right answer moves a little while the wrong answer stays on its side of it: a reply that
    changes then measures the miss, and a learner could compute the right answer from it (issue 52)."""
    from attn.course.exercises import EXERCISES
    from attn.course.exercises import exercise_ids as registered
    from attn.course.exercises.answers import AnswerError, Array, Number, normalise

    cases = []
    for exercise_id in exercise_ids or registered():
        found = EXERCISES[exercise_id]
        if not isinstance(found.expects, Number | Array) or getattr(found.expects, "kind", "float") == "mask":
            continue

        def call(exercise_id=exercise_id, found=found):
            try:
                expected = np.asarray(normalise(found.solution(), found.expects))
            except AnswerError:
                return None  # the course's own answer cannot be computed here (lesson 11's trained models)
            if expected.dtype == bool or expected.size == 0 or expected.size > 10_000:
                return None
            whole = getattr(found.expects, "kind", "float") == "whole"
            for answer in _wrong_answers(expected, whole):
                try:
                    clean = normalise(answer.item() if answer.ndim == 0 else answer, found.expects)
                    reply = found.judge(clean, expected)
                except AnswerError:
                    continue
                if reply is None and not np.allclose(answer, expected):
                    raise _AcceptedError(f"answered Correct to the wrong answer {describe(answer)}")
                if reply is not None and MEASURED_MISS.search(reply):
                    raise _AcceptedError(f"tells how far a wrong answer is, which gives the right one away: {reply!r:.160}")
                for moved in _neighbours(expected, whole):
                    if _same_sides(np.asarray(clean), expected, moved) and found.judge(clean, moved) != reply:
                        raise _AcceptedError(f"the reply to {describe(answer)} changes when only the right answer moves "
                                             f"(it measures the miss): {reply!r:.100} / {found.judge(clean, moved)!r:.100}")
            return None

        cases.append(Case(f"check({exercise_id!r}, ...)", "answer", "wrong answers (no measure of the miss)", call))
    return cases


# ------------------------------------------------------------------------------------------------ the places


def hostile_paths(folder):
    """The awkward places of the path table, made under ``folder``."""
    import itertools

    folder = Path(folder)
    (folder / "a-folder").mkdir()
    os.mkfifo(folder / "a-pipe")
    (folder / "dangling").symlink_to(folder / "nowhere" / "at-all")
    (folder / "loop-a").symlink_to(folder / "loop-b")
    (folder / "loop-b").symlink_to(folder / "loop-a")
    (folder / "fresh").mkdir()
    (folder / "garbage.deb").write_bytes(b"!<arch>\nnot a package")
    made = itertools.count()

    def new(kind):
        """A fresh awkward place of this kind (a case may replace a pipe by a file: the next gets its own)."""
        place = folder / f"{kind}-{next(made)}"
        if kind == "fifo":
            os.mkfifo(place)
        elif kind == "folder":
            place.mkdir()
        elif kind == "dangling":
            place.symlink_to(folder / "nowhere" / place.name)
        elif kind == "outward-link":  # a file in a folder of its own, a link to a file outside that folder
            place.mkdir()
            place = place / "results.json"
            place.symlink_to(_sentinel(folder / f"{place.parent.name}-outside"))
        elif kind == "linked-folder":  # every file name the course writes, each a link to a file outside the folder
            place.mkdir()
            for name in course_file_names():
                (place / name).symlink_to(_sentinel(folder / f"{place.name}-outside-{name}"))
        elif kind == "claims-folder":
            place.mkdir()
            write_claiming_files(place)
        elif kind == "claims-file":
            place.mkdir()
            place = write_claiming_files(place)
        else:
            place.symlink_to(folder / f"{place.name}-b")
            (folder / f"{place.name}-b").symlink_to(place)
        return str(place)

    return {
        "new": new,
        "folder": str(folder / "a-folder"), "fifo": str(folder / "a-pipe"), "dangling": str(folder / "dangling"),
        "loop": str(folder / "loop-a"), "long": str(folder / ("x" * 300)), "fresh": folder / "fresh",
        "garbage": folder / "garbage.deb", "counter": itertools.count(),
    }


SENTINELS = {}  # file outside a destination folder -> the bytes it must still hold after each case


def _sentinel(path):
    """A file that no call may change (a link in a destination folder points to it); its path."""
    path.write_bytes(b"nobody named this file\n")
    SENTINELS[path] = path.read_bytes()
    return path


def _changed_sentinels():
    """The files outside a destination that a case wrote through a link (their bytes differ), forgotten after."""
    changed = [path for path, data in SENTINELS.items() if not path.is_file() or path.read_bytes() != data]
    SENTINELS.clear()
    return changed


@functools.cache
def course_file_names():
    """Every file name the course's commands write or read: their modules' ``*_NAME`` constants, the novels and
    Fashion-MNIST's four IDX files."""
    from attn.data.corpus import TITLES
    from attn.data.fashion import FILES

    names = {f"{title}.txt" for title in TITLES} | set(FILES)
    for module in public_modules():
        for attribute, value in vars(module).items():
            if attribute.endswith("_NAME") and isinstance(value, str) and "." in value and "/" not in value:
                names.add(value)
    return tuple(sorted(names))


def write_claiming_files(folder):
    """In ``folder``, each file the course reads, claiming sizes that are huge or not what it holds: a PyTorch file
    whose model config claims 10**8 of every size (10**8 layers...) over two small tensors, a GGUF header announcing
    2**40 tensors and 2**40 metadata entries, JSON claiming a vocabulary of 10**8. Returns the PyTorch file's path."""
    tensors = {"token_embedding.weight": torch.zeros(2, 2), "norm.weight": torch.ones(2)}
    payload = {"format": 1, "source_sha256": "0" * 64, "config": dict(MODEL_CONFIG), "weights": tensors,
               "model": tensors, "optimizer": {}, "generator": torch.Generator().get_state(), "rng": torch.get_rng_state(),
               "step": HUGE, "curve": [], "seconds": 0.0}
    gguf = b"GGUF" + struct.pack("<IQQ", 3, 2**40, 2**40)
    claims = json.dumps({"vocab_size": HUGE, "model": {"type": "BPE", "vocab": {}, "merges": []}, "config": HUGE_CONFIG})
    for name in course_file_names():
        if name.endswith(".pt"):
            torch.save(payload, folder / name)
        elif name.endswith(".gguf"):
            (folder / name).write_bytes(gguf)
        elif name.endswith(".json"):
            (folder / name).write_text(claims)
    torch.save(payload, folder / "claims.pt")
    return folder / "claims.pt"


PR_SET_CHILD_SUBREAPER = 36  # Linux's prctl option: orphaned descendants are re-parented to this process


@contextlib.contextmanager
def subreaper():
    """This process adopts its orphaned descendants while the sweep runs (Linux; elsewhere only children are seen)."""
    libc = None
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            libc = None
    try:
        yield
    finally:
        if libc is not None:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def live_descendants(pid=None):
    """{pid: command} of every process below ``pid`` (default this one) that is still running (zombies left out)."""
    found, pending = {}, [pid or os.getpid()]
    while pending:
        parent = pending.pop()
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in map(int, children.read_text().split()):
                    if child not in found:
                        found[child] = _command_of(child)
                        pending.append(child)
    return {child: command for child, command in found.items() if command is not None}


def _command_of(pid):
    """The command line of a running process, or None if it has ended (a zombie or gone)."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except (OSError, IndexError):
        return None


def end_leftovers(before):
    """SIGKILL every process started since ``before`` (a live_descendants snapshot) and still running; their list."""
    deadline = time.monotonic() + 1.0
    leftovers = {}
    while True:  # a process being ended by the case's own clean-up gets a moment to go
        leftovers = {pid: command for pid, command in live_descendants().items() if pid not in before}
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)  # an orphan adopted by this process: nobody else will reap it
    return leftovers


def run_cases(cases, skip=()):
    """The failures of ``cases`` but those keyed in ``skip`` (each call bounded in time, the address space capped).

    The first case of each door may take WARM_UP_SECONDS (imports, data built once); the others CALL_SECONDS.
    A case also fails if it wrote through a link to a file outside its destination, or left a process running.
    """
    failures, warm = [], set()
    with memory_limit(), torch.random.fork_rng(devices=[]), subreaper():  # the doors' seeds leave other tests' alone
        for case in cases:
            if case.key() in skip:
                continue
            seconds = CALL_SECONDS if case.door in warm else WARM_UP_SECONDS
            warm.add(case.door)
            # Each case draws the same numbers, in any order. The CPU generator only: torch.manual_seed also queues
            # the seed for CUDA, XPU and MTIA with a formatted stack each time, a quarter of the sweep's time.
            torch.default_generator.manual_seed(zlib.crc32(case.key().encode()))
            before = live_descendants()
            failure = case.failure(seconds)
            changed, leftovers = _changed_sentinels(), end_leftovers(before)
            if failure is None and changed:
                failure = Failure(case.door, case.argument, case.value, f"wrote through a symbolic link to {changed[0]}, "
                                  "outside the destination's folder (a file nobody named)")
            if failure is None and leftovers:
                pid, command = next(iter(leftovers.items()))
                failure = Failure(case.door, case.argument, case.value, f"left {len(leftovers)} process(es) running "
                                  f"after it returned (pid {pid}: {command!r}); end every process started, at any depth")
            if failure is not None:
                failures.append(failure)
    return failures
