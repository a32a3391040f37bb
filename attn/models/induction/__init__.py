"""Induction heads: a lookup that a small causal attention-only model finds by itself (lesson 11).

The task: random tokens in which a block of L tokens is immediately repeated. On the first copy
nothing beyond chance can be predicted; on the second, every next token can be looked up: find
where the current token occurred before and copy the token that followed it. A two-layer
attention-only model learns that lookup from next-token prediction alone (Elhage et al. 2021;
Olsson et al. 2022) with a *previous-token head* in layer 0 and an *induction head* in layer 1
(layers and heads are counted from 0 everywhere, in the code and in the lesson).

Where the learned position embeddings enter decides which circuit the model can find. Added to
the residual stream (``positions="residual"``), layer 0 can copy the *position* of an earlier
copy of the current token and layer 1 can attend one position further on: the "pointer
arithmetic" route Elhage et al. describe in GPT-2, which small models here find first. Added only
to the inputs of the queries and keys (``positions="query_key"``, the default, like the models
Elhage et al. study), positions never reach the values, so that route is closed and the model
has to build the previous-token head and the induction head.

Convention for every mask below: position t of a sequence predicts token t + 1, so masks over
predictions have T - 1 columns, aligned with ``tokens[:, 1:]`` and ``logits[:, :-1]``.

The package, one concern a module: ``data`` (the task and the lesson's settings), ``model`` (the
attention-only transformer), ``training``, ``scores`` (which head does what), ``ablation`` and
``files`` (saving, loading and ``python -m attn.models.induction --out DIR``); ``checks`` turns wrong
arguments into sentences. Every public name is importable from here.
"""

from attn.models.induction.ablation import PATH_INPUTS, ablate_head, ablation_accuracies, forward_without_path
from attn.models.induction.data import (
    BATCH_SIZE,
    EMBED_DIM,
    LEARNING_RATE,
    LONGER_BLOCK_LENGTHS,
    MAX_LENGTH,
    NUM_HEADS,
    SEED,
    STEPS,
    TRAIN_BLOCK_LENGTHS,
    VOCAB_SIZE,
    RepeatData,
    make_repeat_data,
    training_batches,
)
from attn.models.induction.files import LOG_NAME, SETTINGS, TEST_SEED, load_trained, main, train_and_save, weights_path
from attn.models.induction.model import AttentionOnlyTransformer, causal_keep_mask
from attn.models.induction.scores import (
    duplicate_token_scores,
    head_scores,
    induction_scores,
    previous_occurrence,
    previous_token_scores,
    weights_by_distance,
)
from attn.models.induction.training import (
    TrainingLog,
    copy_metrics,
    loss_per_position,
    next_token_losses,
    phase_change_step,
    train,
)

__all__ = [
    "AttentionOnlyTransformer",
    "BATCH_SIZE",
    "EMBED_DIM",
    "LEARNING_RATE",
    "LOG_NAME",
    "LONGER_BLOCK_LENGTHS",
    "MAX_LENGTH",
    "NUM_HEADS",
    "PATH_INPUTS",
    "RepeatData",
    "SEED",
    "SETTINGS",
    "STEPS",
    "TEST_SEED",
    "TRAIN_BLOCK_LENGTHS",
    "TrainingLog",
    "VOCAB_SIZE",
    "ablate_head",
    "ablation_accuracies",
    "causal_keep_mask",
    "copy_metrics",
    "duplicate_token_scores",
    "forward_without_path",
    "head_scores",
    "induction_scores",
    "load_trained",
    "loss_per_position",
    "main",
    "make_repeat_data",
    "next_token_losses",
    "phase_change_step",
    "previous_occurrence",
    "previous_token_scores",
    "train",
    "train_and_save",
    "training_batches",
    "weights_by_distance",
    "weights_path",
]
