"""The course's language model, trained on Jane Austen (lesson 13): the model and ``load()``.

``AustenLM``: token embeddings, a stack of lesson 9's pre-norm ``attn.TransformerBlock``s whose
attention rotates queries and keys by lesson 8's rotary positions (so the model has no position
table and no hard length limit, though it was trained on ``context_length`` tokens), a final
LayerNorm and a readout that shares the embedding matrix (weight tying, as in GPT-2). Lesson 10's
``attn.models.decoder.generate`` and KV caches work with it unchanged.

Training: a byte-level BPE tokenizer (``attn.data.tokenizer``) and the model are trained on five
novels; ``HELD_OUT`` (Persuasion, the last novel Austen finished) is never seen, so the loss on it
measures generalisation, not memory. Beside it, the unigram and bigram baselines on the same text.

    python -m attn.lm train --out DIR      # seeded; resumes after an interruption
    python -m attn.lm train --out DIR --size tiny   # seconds: what the tests re-run

writes ``DIR/austen_lm.pt`` (weights in 16-bit floats, with the configuration),
``DIR/austen_tokenizer.json`` and ``DIR/austen_training.json`` (the curve, the held-out loss and
perplexity, the baselines and the provenance). ``load()`` reads the files shipped in lessons/weights.

The training, its data and the command line live in ``attn.models.lm_training``.
"""

import math
import numbers
from pathlib import Path

import torch
from torch import nn

from attn.block import TransformerBlock
from attn.common.layer_checks import check_parameters
from attn.common.sizes import readable_bytes
from attn.common.validate import positive_int, type_name
from attn.data.corpus import REPOSITORY_ROOT
from attn.data.tokenizer import Tokenizer
from attn.kvcache import KVCache
from attn.models.decoder import check_decoder_call

HELD_OUT = "persuasion"


WEIGHTS_FOLDER = REPOSITORY_ROOT / "lessons" / "weights"


WEIGHTS_NAME, TOKENIZER_NAME, LOG_NAME = "austen_lm.pt", "austen_tokenizer.json", "austen_training.json"


CHECKPOINT_NAME = "austen_checkpoint.pt"


TRAIN_COMMAND = "python -m attn.lm train"


ROTARY_BASE = 10000.0


MAX_LENGTH = 1 << 16  # rotary positions have no table: a limit only against absurd requests


# Two sizes: "full" is the shipped model; "tiny" trains in seconds (tests, and a first try).
SIZES = {
    "full": {
        "vocab_size": 4096, "embed_dim": 192, "num_heads": 6, "num_layers": 4, "context_length": 256,
        "batch_size": 16, "steps": 1500, "learning_rate": 2.5e-3, "warmup_steps": 30, "weight_decay": 0.1,
        "dropout": 0.0, "eval_every": 50, "eval_windows": 32, "seed": 0,
    },
    "tiny": {
        "vocab_size": 320, "embed_dim": 32, "num_heads": 2, "num_layers": 2, "context_length": 32,
        "batch_size": 4, "steps": 20, "learning_rate": 3e-3, "warmup_steps": 5, "weight_decay": 0.1,
        "dropout": 0.0, "eval_every": 5, "eval_windows": 4, "seed": 0,
    },
}
WEIGHTS_LIMIT_BYTES = 4 * 10**9  # need_weights' (L, B, H, T, T_k) tensor at most: lesson 16's LlamaLM's limit too


class AustenLM(nn.Module):
    """AustenLM(vocab_size V, context_length, embed_dim E, num_heads H, num_layers L, mlp_ratio=4, dropout=0.0).

    forward(tokens (B, T) int64, caches=None, need_weights=False, mask=None) -> logits (B, T, V), or
    with need_weights=True (logits, weights (L, B, H, T, T_k)); logits[:, t] scores the token after
    position t. caches: one attn.KVCache per block (``new_caches()``); the tokens then continue the
    cached sequence and T_k counts the cached positions too. mask: a boolean keep-mask (True = may
    attend) broadcastable to (B, H, T, T_k), applied in every layer on top of the causal mask (lesson
    13 uses it to take the first token away). ``context_length``: the length it was trained on.
    ``set_rotary_scaling(scaling)`` (lesson 17) reads it past that length with a rotary scaling.
    """

    def __init__(self, vocab_size, context_length, embed_dim, num_heads, num_layers, mlp_ratio=4, dropout=0.0):
        super().__init__()
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.context_length = positive_int("context_length", context_length)
        self.max_length = MAX_LENGTH
        embed_dim, num_layers = positive_int("embed_dim", embed_dim), positive_int("num_layers", num_layers)
        ratio = mlp_ratio if isinstance(mlp_ratio, numbers.Real) and not isinstance(mlp_ratio, bool) else 4
        ratio = ratio if math.isfinite(ratio) else 4  # the block says what is wrong with it
        per_block = 4 * embed_dim * embed_dim + 2 * abs(ratio) * embed_dim * embed_dim  # attention, MLP (weights)
        check_parameters(f"AustenLM(vocab_size={self.vocab_size}, embed_dim={embed_dim}, num_layers={num_layers})",
                         self.vocab_size * embed_dim + num_layers * int(min(per_block, 2**62)))
        self.token_embedding = nn.Embedding(self.vocab_size, embed_dim)
        self.blocks = nn.ModuleList(
            TransformerBlock(embed_dim, num_heads, mlp_ratio, dropout=dropout, rotary_base=ROTARY_BASE)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, self.vocab_size, bias=False)
        self.readout.weight = self.token_embedding.weight  # tied: one (V, E) matrix reads tokens in and out
        self.apply(_initialise)
        self.register_forward_pre_hook(_weights_fit, with_kwargs=True)  # need_weights: refused first if too large

    @property
    def num_heads(self):
        return self.blocks[0].attention.num_heads

    def forward(self, tokens, caches=None, need_weights=False, mask=None):
        check_decoder_call(self, tokens, caches)
        if not isinstance(need_weights, bool):
            raise TypeError(f"need_weights must be True or False, got {type_name(need_weights)} {need_weights!r}")
        x = self.token_embedding(tokens)  # (B, T, E)
        caches = caches or [None] * len(self.blocks)
        weights = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, mask, is_causal=True, cache=cache, need_weights=need_weights)
            if need_weights:
                x, layer_weights = x  # layer_weights (B, H, T, T_k)
                weights.append(layer_weights)
        logits = self.readout(self.norm(x))  # (B, T, V)
        return (logits, torch.stack(weights)) if need_weights else logits

    def new_caches(self):
        """One empty KVCache per block, for one batch of sequences."""
        return [KVCache() for _ in self.blocks]

    def set_rotary_scaling(self, scaling):
        """Every layer's rotary scaling (lesson 17: reading past ``context_length`` with no retraining); returns self.

        scaling: None, or a dict in transformers' rope_parameters form (attn.positions.rotary_frequencies), whose
        original_max_position_embeddings is normally ``context_length``. No weight changes: None restores the model."""
        for block in self.blocks:
            block.attention.set_rotary_scaling(scaling)
        return self


def _weights_fit(model, args, kwargs):
    """AustenLM's forward pre-hook: need_weights=True keeps (L, B, H, T, T_k) weights, refused before any work past
    WEIGHTS_LIMIT_BYTES, as lesson 16's LlamaLM refuses them (each layer's own (B, H, T, T_k) would otherwise reach
    the allocator first). Everything else is checked by forward."""
    given = dict(zip(("tokens", "caches", "need_weights", "mask"), args, strict=False)) | kwargs
    tokens, caches = given.get("tokens"), given.get("caches")
    if given.get("need_weights") is not True or not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        return
    try:  # anything that is not a list of caches is refused later, by forward
        cached = len(caches[0]) if caches else 0
    except TypeError:
        cached = 0
    batch, length = tokens.shape
    count = len(model.blocks) * batch * model.num_heads * length * (cached + length)
    nbytes = count * model.token_embedding.weight.dtype.itemsize
    if nbytes > WEIGHTS_LIMIT_BYTES:
        raise ValueError(f"need_weights=True for {batch} x {length} tokens (after {cached} cached) would keep "
                         f"L * B * H * T * T_k = {count:,} weights, {readable_bytes(nbytes)}, more than the "
                         f"{readable_bytes(WEIGHTS_LIMIT_BYTES)} allowed; read the weights of fewer or shorter texts, or "
                         "leave need_weights False")


def _initialise(module):
    """GPT-2's start: normal(0, 0.02) weights, zero biases (PyTorch's defaults suit small layers less well)."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def model_arguments(config):
    """The AustenLM arguments of a training configuration."""
    names = ("vocab_size", "context_length", "embed_dim", "num_heads", "num_layers", "dropout")
    if not isinstance(config, dict) or not set(names) <= set(config):
        raise TypeError(f"config must be a training configuration (a dict such as attn.lm.SIZES['full']), "
                        f"got {type_name(config)}")
    return {name: config[name] for name in names}


def load(directory=None):
    """(model, tokenizer) from ``directory`` (default lessons/weights): the model in eval mode, float32.

    model(tokens (B, T)) -> logits (B, T, V); model(tokens, need_weights=True) -> (logits, weights
    (L, B, H, T, T)); tokenizer.encode(str) -> list[int], tokenizer.decode(list) -> str.
    """
    if directory is not None and not isinstance(directory, str | Path):
        raise TypeError(f"directory must be None or a path (str or pathlib.Path), got {type_name(directory)}")
    folder = WEIGHTS_FOLDER if directory is None else Path(directory)
    for name in (WEIGHTS_NAME, TOKENIZER_NAME):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} is missing; train a model there with '{TRAIN_COMMAND} --out {folder}'")
    try:
        saved = torch.load(folder / WEIGHTS_NAME, weights_only=True)
        model = AustenLM(**model_arguments(saved["config"]))
        weights = {name: tensor.float() for name, tensor in saved["weights"].items()}
        weights["readout.weight"] = weights["token_embedding.weight"]
        model.load_state_dict(weights)
    except Exception as error:  # noqa: BLE001 - torch.load and load_state_dict raise many kinds; each becomes one sentence
        raise ValueError(f"{folder / WEIGHTS_NAME} is not a weights file of '{TRAIN_COMMAND}': {error}") from None
    tokenizer = Tokenizer.load(folder / TOKENIZER_NAME)
    if tokenizer.vocab_size > model.vocab_size:  # fewer is possible: a small text may not fill the vocabulary
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens and the model {model.vocab_size}: not a pair")
    return model.eval(), tokenizer
