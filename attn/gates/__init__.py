"""Attention that may say nothing (lesson 22): the designs that remove a head's need for a sink.

Softmax makes every row's weights sum to 1, so a head with nothing to read parks its weight on some
key, in real models the first (lesson 16). The designs here give a head another way out:

- the output gate (Qiu et al. 2025; Qwen3-Next): each head's output is multiplied, feature by feature,
  by sigmoid(g), where g comes from the query's own token through a second half of the query
  projection; a gate near 0 silences the head for that token. ``GatedAttention``, which also takes
  QK-norm (RMSNorm on each head's queries and keys), a sink logit, the off-by-one softmax or softpick
  (``normalize``), so that one layer runs every arm of the lesson's comparisons with one switch changed;
- differential attention (Ye et al. 2024; DiffLlama): the difference of two softmax maps,
  A1 - lambda A2, read against values twice as wide; rows sum to 1 - lambda, so common-mode weight
  (a sink both maps share) cancels. ``differential_attention`` and ``DifferentialAttention``;
- forgetting attention (Lin et al. 2025, the Forgetting Transformer): a forget gate f_t in (0, 1]
  per token and head; the score of query i on key j gets the bias log(f_{j+1} ... f_i) =
  F_i - F_j, F the cumulative sum of log f, so old keys fade unless the gates stay open.
  ``forgetting_attention``;
- QK-clip (Kimi K2's MuonClip): after an optimiser step, a head whose largest logit passed a
  threshold tau has its query and key weights scaled by sqrt(tau / S_max) each, so its logits shrink
  by tau / S_max; other heads are untouched. ``qk_clip_`` and ``largest_logits``;
- stick-breaking attention (Tan et al. 2024), no softmax at all: each query breaks a stick of length 1,
  the nearest key first, each key taking sigmoid(q . k) of what is left; what no key takes is said to
  nothing. ``stick_breaking_attention``.

All attention here is causal self-attention, batch first: query (B, H, T, d), key and value
(B, H_kv, T, d), H_kv dividing H (query head h reads key/value head h // (H / H_kv)). Each function
comes as a loop (``*_loop``, the definition written out token by token) and vectorised, proven equal by
the tests and checked against transformers' and fla-core's implementations.

The package: ``functional`` (forgetting, differential and stick-breaking attention, the functions and their loops), ``layers``
(GatedAttention, DifferentialAttention) and ``clip`` (QK-clip).
"""

from attn.gates.clip import largest_logits, qk_clip_
from attn.gates.functional import (
    differential_attention,
    differential_attention_loop,
    forgetting_attention,
    forgetting_attention_loop,
    stick_breaking_attention,
    stick_breaking_attention_loop,
)
from attn.gates.layers import NORMALIZERS, DifferentialAttention, GatedAttention

__all__ = [
    "NORMALIZERS",
    "DifferentialAttention",
    "GatedAttention",
    "differential_attention",
    "differential_attention_loop",
    "forgetting_attention",
    "forgetting_attention_loop",
    "largest_logits",
    "qk_clip_",
    "stick_breaking_attention",
    "stick_breaking_attention_loop",
]
