"""What is trained or loaded: the models the course builds from its own layers, and the real one it loads.

Lesson 7's recall model (recall), lesson 10's decoder (decoder), lesson 11's attention-only transformers
(induction), lesson 13's Austen language model with its training and checks (lm, lm_training, lm_checks) and its
count-based baselines (ngram), lesson 16's Llama decoder (llama) and SmolLM2-135M converted into it and loaded
(pretrained; ``python -m attn.pretrained``), the token mixers of lesson 18's side-by-side runs (sparse_mixers), and
lesson 22's reading of the residual stream's norms (activations: ``attn.models.massive_activations``).
The commands that train the shipped weights (``python -m attn.lm train``, ``python -m attn.models.induction``)
write them, with the logs of their training, into ``lessons/weights/``.

Imports: the layers (the top of ``attn``), ``attn.common`` and ``attn.data``; never the experiments, serving,
measurements or the course.
"""

import importlib

_LAZY = {"massive_activations": "attn.models.activations"}  # imported on first use


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attn.models' has no attribute {name!r}")
