"""A Llama-architecture decoder built from the course's layers (lesson 16): SmolLM2-135M runs on it.

``LlamaBlock``: pre-norm, as lesson 9's block, with RMSNorm for LayerNorm and SwiGLU for the GELU MLP:

    x = x + attention(attention_norm(x))      lesson 6's MultiHeadAttention: grouped-query, rotary, no biases
    x = x + mlp(mlp_norm(x))                  down(silu(gate(x)) * up(x))

``LlamaLM``: token embeddings, a stack of LlamaBlocks, a final RMSNorm and a readout tied to the
embedding; the interface of lesson 13's ``AustenLM``, so that lesson 10's ``generate`` and KV caches,
and lessons 13 and 14's helpers that reach into ``model.blocks[i].attention``, work with it unchanged.

Rotary layouts (lesson 8): the course's ``attn.apply_rotary`` turns neighbouring features (2i, 2i + 1)
together; transformers' Llama turns feature i with feature i + d/2 (its ``rotate_half``). Both are the
same rotation once each head's query and key features are reordered, which is what copying W_q and W_k
row by row must do (``rotate_half_to_pairs``; ``pairs_to_rotate_half`` undoes it). llama.cpp's converter
makes that very reordering when it writes a GGUF file, so a GGUF's W_q and W_k are already in the
course's layout, and transformers undoes it when it reads one.
"""

import torch
from torch import nn

from attn.common.layer_checks import check_parameters, check_rotary_base, check_sequence, largest_magnitude
from attn.common.sizes import check_allocation, readable_bytes
from attn.common.validate import has_only_finite, positive_int, positive_number, require_finite, require_tensor, type_name
from attn.kvcache import KVCache
from attn.models.decoder import check_decoder_call
from attn.models.lm import MAX_LENGTH
from attn.multihead import MultiHeadAttention
from attn.norms import RMSNorm
from attn.positions import rotary_angles
from attn.swiglu import SwiGLU
from attn.window import rotary_pairing

# SmolLM2-135M (the model of lesson 16), as LlamaLM's arguments.
SMOLLM2_135M = {
    "vocab_size": 49152, "context_length": 8192, "embed_dim": 576, "num_heads": 9, "num_kv_heads": 3,
    "num_layers": 30, "mlp_hidden_dim": 1536, "rotary_base": 100000.0, "norm_eps": 1e-5,
}

# need_weights=True returns every layer's weights at once, (L, B, H, T, T_k): refused above this many bytes.
WEIGHTS_LIMIT_BYTES = 4 * 10**9


class LlamaBlock(nn.Module):
    """LlamaBlock(embed_dim E, num_heads H, num_kv_heads H_kv, mlp_hidden_dim F, rotary_base=10000.0, norm_eps=1e-5).

    x = x + attention(attention_norm(x)), then x = x + mlp(mlp_norm(x)); attention_norm and mlp_norm are
    RMSNorm(E, norm_eps), attention is attn.MultiHeadAttention(E, H, bias=False, num_kv_heads=H_kv,
    rotary_base=rotary_base), mlp is attn.swiglu.SwiGLU(E, F).
    forward(x (B, T, E), mask=None, is_causal=True, cache=None, need_weights=False) -> (B, T, E), or with
    need_weights=True ((B, T, E), weights (B, H, T, T_k)); mask and cache mean what they mean for
    MultiHeadAttention (a boolean keep-mask; one attn.KVCache per block).
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, mlp_hidden_dim, rotary_base=10000.0, norm_eps=1e-5):
        super().__init__()
        self.attention_norm = RMSNorm(embed_dim, norm_eps)
        self.attention = MultiHeadAttention(embed_dim, num_heads, bias=False, num_kv_heads=num_kv_heads,
                                            rotary_base=rotary_base)
        self.mlp_norm = RMSNorm(embed_dim, norm_eps)
        self.mlp = SwiGLU(embed_dim, mlp_hidden_dim)

    def forward(self, x, mask=None, is_causal=True, cache=None, need_weights=False):
        _check_llama_block_input(self, x, need_weights)
        normed = self.attention_norm(x)  # (B, T, E)
        attended = self.attention(normed, normed, normed, mask, is_causal=is_causal, cache=cache,
                                  need_weights=need_weights)  # (B, T, E), or it and the weights
        attended, weights = attended if need_weights else (attended, None)
        x = x + attended
        x = x + self.mlp(self.mlp_norm(x))
        return (x, weights) if need_weights else x

    def _step(self, x, angles, cache):
        """forward(x, cache=cache) for LlamaLM, which checked its input at its door and made this call's rotary
        ``angles`` once for all its blocks (lesson 19): the same arithmetic, without a check. x (B, T, E) -> (B, T, E)."""
        x = x + self.attention._self_attend(self.attention_norm._normalize(x, guard=False)[0], angles, cache)  # (B, T, E)
        return x + self.mlp._mlp(self.mlp_norm._normalize(x, guard=False)[0])


class LlamaLM(nn.Module):
    """LlamaLM(vocab_size V, context_length, embed_dim E, num_heads H, num_kv_heads H_kv, num_layers L,
    mlp_hidden_dim F, rotary_base=10000.0, norm_eps=1e-5): the Llama architecture from the course's layers.

    forward(tokens (B, T) int64, caches=None, need_weights=False, mask=None, last_only=False) -> logits (B, T, V), or with
    need_weights=True (logits, weights (L, B, H, T, T_k)): exactly lesson 13's AustenLM interface (caches from
    ``new_caches()``, mask a boolean keep-mask broadcastable to (B, H, T, T_k) applied in every layer on top
    of the causal mask). need_weights=True runs the explicit attention path and keeps L * B * H * T * T_k
    weights; a call whose weights would pass ``WEIGHTS_LIMIT_BYTES`` (4 GB, about 1,900 tokens of one text
    for SmolLM2-135M in float32) or the machine's memory is refused with a sentence before anything is
    computed. Without it the attention runs in scaled_dot_product_attention. last_only=True returns the
    logits of the last position only, (B, 1, V): all that generation reads.
    ``context_length``: the length it was trained on; ``max_length``: the longest sequence it accepts
    (rotary positions have no table, so only a limit against absurd requests). ``SMOLLM2_135M`` holds
    SmolLM2-135M's arguments; ``from_transformers`` copies a transformers LlamaForCausalLM.

    Lesson 19: checks at the door, once per call. forward checks the tokens and that every cache fits, builds the
    rotary angles of this call's positions once for all the blocks, runs the blocks without their own checks, and
    checks the output once: an output that is NaN or inf, or a final norm that would overflow, is refused with the
    sentence that says why (weights or caches holding NaN, or the first block whose input lesson 16's checks refuse),
    the caches put back as they were. A mask, need_weights, a window, learned sinks or a hook on a block or its
    attention take lesson 16's path instead, where every block checks its own input; so does every call while
    ``check_every_block`` is True (False by default), which gives the same logits more slowly.
    """

    def __init__(self, vocab_size, context_length, embed_dim, num_heads, num_kv_heads, num_layers, mlp_hidden_dim,
                 rotary_base=10000.0, norm_eps=1e-5):
        super().__init__()
        sizes = check_llama_arguments(vocab_size, context_length, embed_dim, num_heads, num_kv_heads, num_layers,
                                      mlp_hidden_dim, rotary_base)
        self.vocab_size, self.context_length = sizes["vocab_size"], sizes["context_length"]
        self.max_length = max(MAX_LENGTH, self.context_length)
        self.token_embedding = nn.Embedding(self.vocab_size, sizes["embed_dim"])
        self.blocks = nn.ModuleList(
            LlamaBlock(sizes["embed_dim"], sizes["num_heads"], sizes["num_kv_heads"], sizes["mlp_hidden_dim"],
                       rotary_base, norm_eps)
            for _ in range(sizes["num_layers"])
        )
        self.norm = RMSNorm(sizes["embed_dim"], norm_eps)
        self.readout = nn.Linear(sizes["embed_dim"], self.vocab_size, bias=False)
        self.readout.weight = self.token_embedding.weight  # tied: one (V, E) matrix reads tokens in and out
        self.check_every_block = False  # True: lesson 16's path, every block checking its own input at every call
        self.apply(_initialise)

    computes_last_only = True  # forward takes last_only, so lesson 10's generate asks for the last position only

    @property
    def num_heads(self):
        return self.blocks[0].attention.num_heads

    def forward(self, tokens, caches=None, need_weights=False, mask=None, last_only=False):
        start = check_decoder_call(self, tokens, caches)  # positions already cached
        weights = self._weights_tensor(tokens, caches, need_weights)  # (L, B, H, T, T_k), or None
        if not isinstance(last_only, bool):
            raise TypeError(f"last_only must be True or False, got {type_name(last_only)} {last_only!r:.60}")
        self._check_caches_fit(tokens, caches)
        if self.check_every_block or need_weights or mask is not None or not self._runs_plain():
            return self._forward_checked(tokens, caches, weights, mask, last_only)
        return self._forward_fast(tokens, caches, start, last_only)

    def _forward_checked(self, tokens, caches, weights, mask, last_only):
        """Lesson 16's forward: every block a module call that checks its own input (masks, weights, windows, hooks)."""
        need_weights = weights is not None
        x = self.token_embedding(tokens)  # (B, T, E)
        caches = caches or [None] * len(self.blocks)
        for layer, (block, cache) in enumerate(zip(self.blocks, caches, strict=True)):
            x = block(x, mask, is_causal=True, cache=cache, need_weights=need_weights)
            if need_weights:
                x, weights[layer] = x  # this layer's weights (B, H, T, T_k) copied in
        logits = self.readout(self.norm(x[:, -1:] if last_only else x))  # (B, T, V), or (B, 1, V)
        return (logits, weights) if need_weights else logits

    def _forward_fast(self, tokens, caches, start, last_only):
        """Lesson 19's forward: the input was checked at the door, the rotary angles are made once for all the blocks,
        no block checks again; the output is checked once at the end, and a refusal restores the caches."""
        before = [(cache.keys, cache.values) for cache in caches or []]
        x = self.token_embedding(tokens)  # (B, T, E)
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (T,)
        angles = self._rotary_angles(positions, x.dtype)  # cos and sin (T, d / 2), or None
        for block, cache in zip(self.blocks, caches or [None] * len(self.blocks), strict=True):
            x = block._step(x, angles, cache)  # (B, T, E)
        x = x[:, -1:] if last_only else x
        logits = self.readout(self.norm._normalize(x, guard=False)[0])  # (B, T, V), or (B, 1, V)
        problem = _output_problem(x, logits)
        if problem:
            self._refuse(tokens, caches, before, problem)
        return logits

    def _runs_plain(self):
        """True when every block can run without its checks (``_forward_fast``): plain attention (no window, sinks,
        dropout or hooks), the same rotary settings in every layer, and no hooks on the blocks."""
        first = self.blocks[0].attention
        return all(
            block.attention._runs_plain() and not (block._forward_hooks or block._forward_pre_hooks)
            and _rotary_settings(block.attention) == _rotary_settings(first)
            for block in self.blocks
        )

    def _rotary_angles(self, positions, dtype):
        """The angles every block turns its queries and keys by at ``positions`` (T,), or None without rotary."""
        attention = self.blocks[0].attention
        if attention.rotary_base is None:
            return None
        compute = torch.float64 if dtype == torch.float64 else torch.float32  # as attn.apply_rotary computes them
        return rotary_angles(positions, attention.head_dim, *_rotary_settings(attention), dtype=compute)

    def _check_caches_fit(self, tokens, caches):
        """Every cache must fit this call's keys, checked before any block appends: a refusal leaves them as they were."""
        attention, parameter = self.blocks[0].attention, self.token_embedding.weight
        for cache in caches or []:
            cache.check_fits(tokens.shape[0], attention.num_kv_heads, attention.head_dim, parameter.dtype, parameter.device)

    def _refuse(self, tokens, caches, before, problem):
        """Say why the fast path's output cannot be trusted, after putting the caches back as they were: weights or
        cached keys that hold NaN or inf, else the sentence of the first block whose input lesson 16's checks refuse
        (the checked path run again), else ``problem``."""
        _restore(caches, before)
        broken = [name for name, parameter in self.named_parameters() if not has_only_finite(parameter)]
        if broken:
            more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
            raise ValueError(f"the model's weights hold NaN or inf (in {broken[0]}{more}): every logit they reach "
                             "would be NaN; load the weights again")
        for index, cache in enumerate(caches or []):
            if len(cache) and not (has_only_finite(cache.keys) and has_only_finite(cache.values)):
                raise ValueError(f"caches[{index}] holds NaN or inf keys or values, which attention would spread to "
                                 "every later token; start again from model.new_caches()")
        try:
            self._forward_checked(tokens, caches, None, None, last_only=True)  # raises the sentence of a block
        finally:
            _restore(caches, before)
        raise ValueError(problem)

    def new_caches(self):
        """One empty KVCache per block, for one batch of sequences."""
        return [KVCache() for _ in self.blocks]

    def set_rotary_scaling(self, scaling):
        """Every layer's rotary scaling (lesson 17: reading past ``context_length`` as AustenLM does); returns self."""
        for block in self.blocks:
            block.attention.set_rotary_scaling(scaling)
        return self

    def _weights_tensor(self, tokens, caches, need_weights):
        """The (L, B, H, T, T_k) tensor that need_weights fills layer by layer, after its size is checked; None without.
        T_k = T plus the keys each cache holds (``stored``: fewer than the positions seen in an evicting cache)."""
        if not isinstance(need_weights, bool):
            raise TypeError(f"need_weights must be True or False, got {type_name(need_weights)} {need_weights!r}")
        if not need_weights:
            return None
        held = {cache.stored for cache in caches} if caches else {0}
        if len(held) != 1:
            raise ValueError(f"need_weights=True stacks every layer's weights, but the caches hold different numbers of "
                             f"keys ({sorted(held)}); read the weights layer by layer, or give every layer the same budget")
        cached = held.pop()
        batch, length = tokens.shape
        shape = (len(self.blocks), batch, self.num_heads, length, cached + length)
        parameter = self.token_embedding.weight
        _check_weights_size(shape, parameter.dtype, parameter.device)
        return torch.empty(shape, dtype=parameter.dtype, device=parameter.device)

    @classmethod
    def from_transformers(cls, model):
        """The course's copy of a transformers ``LlamaForCausalLM`` (SmolLM2's class), in its dtype, in eval mode.

        Weights copied by name; each head's W_q and W_k rows reordered from transformers' rotary layout to
        the course's (``rotate_half_to_pairs``). A model the course's layers cannot express (biases, another
        activation, rope scaling, a head size other than E / H, untied embeddings) is refused with a sentence.
        """
        arguments = llama_arguments(model)
        parameter = model.lm_head.weight
        ours = cls(**arguments).to(dtype=parameter.dtype, device=parameter.device)
        heads, kv_heads = arguments["num_heads"], arguments["num_kv_heads"]
        with torch.no_grad():
            ours.token_embedding.weight.copy_(model.model.embed_tokens.weight)
            for block, theirs in zip(ours.blocks, model.model.layers, strict=True):
                attention = theirs.self_attn
                block.attention_norm.weight.copy_(theirs.input_layernorm.weight)
                block.attention.query_proj.weight.copy_(rotate_half_to_pairs(attention.q_proj.weight, heads))
                block.attention.key_proj.weight.copy_(rotate_half_to_pairs(attention.k_proj.weight, kv_heads))
                block.attention.value_proj.weight.copy_(attention.v_proj.weight)
                block.attention.out_proj.weight.copy_(attention.o_proj.weight)
                block.mlp_norm.weight.copy_(theirs.post_attention_layernorm.weight)
                for name in ("gate_proj", "up_proj", "down_proj"):
                    getattr(block.mlp, name).weight.copy_(getattr(theirs.mlp, name).weight)
            ours.norm.weight.copy_(model.model.norm.weight)
        return ours.eval()


# Rotary layouts ---------------------------------------------------------------------------------------


def rotate_half_to_pairs(weight, num_heads):
    """Rows of a query or key projection (num_heads * d, ...) from the rotate_half layout to the course's.

    In the rotate_half layout (transformers' Llama) each head's feature i turns with feature i + d/2; in the
    course's (attn.apply_rotary) feature 2i turns with 2i + 1. Row h d + 2i of the result is row h d + i of
    ``weight``, and row h d + 2i + 1 is row h d + d/2 + i (``attn.window.rotary_pairing`` per head). A bias
    (num_heads * d,) is reordered the same way. llama.cpp writes W_q and W_k into GGUF files in this order.
    """
    return weight[_head_rows(weight, num_heads, inverse=False)]


def pairs_to_rotate_half(weight, num_heads):
    """The inverse of ``rotate_half_to_pairs``: rows (num_heads * d, ...) from the course's layout to rotate_half's
    (what transformers does to a GGUF file's W_q and W_k when it loads one)."""
    return weight[_head_rows(weight, num_heads, inverse=True)]


def _head_rows(weight, num_heads, inverse):
    """The row order (num_heads * d,) that reorders every head's d features by rotary_pairing (or its inverse)."""
    require_tensor("weight", weight)
    num_heads = positive_int("num_heads", num_heads)
    rows = weight.shape[0] if weight.dim() else 0
    if rows == 0 or rows % num_heads or (rows // num_heads) % 2:
        raise ValueError(f"weight must have num_heads * d rows with an even head size d (rotary turns pairs), got "
                         f"shape {tuple(weight.shape)} for num_heads={num_heads}")
    head_dim = rows // num_heads
    pairing = rotary_pairing(head_dim)  # (d,): course feature k reads rotate_half feature pairing[k]
    order = torch.argsort(pairing) if inverse else pairing
    return (torch.arange(num_heads)[:, None] * head_dim + order).flatten().to(weight.device)  # (num_heads * d,)


# Checks: every wrong input becomes one sentence -------------------------------------------------------


def check_llama_arguments(vocab_size, context_length, embed_dim, num_heads, num_kv_heads, num_layers, mlp_hidden_dim,
                          rotary_base):
    """LlamaLM's sizes as ints, checked (the layers check the rest), and refused before anything is built when the
    parameters cannot fit in memory."""
    names = ("vocab_size", "context_length", "embed_dim", "num_heads", "num_kv_heads", "num_layers", "mlp_hidden_dim")
    values = (vocab_size, context_length, embed_dim, num_heads, num_kv_heads, num_layers, mlp_hidden_dim)
    sizes = {name: positive_int(name, value) for name, value in zip(names, values, strict=True)}
    if rotary_base is None:
        raise ValueError("rotary_base must be a number > 1 (Llama's positions are rotary; 10000.0 is usual), got None")
    embed, heads, kv_heads = sizes["embed_dim"], sizes["num_heads"], sizes["num_kv_heads"]
    if embed % heads:
        raise ValueError(f"embed_dim={embed} must be a multiple of num_heads={heads}: each head reads E / H features")
    if heads % kv_heads:
        raise ValueError(f"num_kv_heads={kv_heads} must divide num_heads={heads}: "
                         "each key/value head serves a whole group of query heads")
    check_rotary_base(rotary_base, embed // heads)
    kv_width = kv_heads * (embed // heads)
    per_block = 2 * embed * embed + 2 * embed * kv_width + 3 * embed * sizes["mlp_hidden_dim"] + 2 * embed
    count = sizes["vocab_size"] * embed + sizes["num_layers"] * per_block + embed
    check_parameters(f"LlamaLM(vocab_size={sizes['vocab_size']}, embed_dim={embed}, num_layers={sizes['num_layers']}, "
                     f"mlp_hidden_dim={sizes['mlp_hidden_dim']})", count)
    return sizes


def _check_llama_block_input(block, x, need_weights):
    """LlamaBlock's input: (B, T, E) in the block's dtype and device, finite, and small enough that RMSNorm's
    squares do not overflow (an overflow would make the norm 0 silently); need_weights a bool."""
    check_sequence("x", x, block.attention.embed_dim, block.attention_norm.weight)
    if not isinstance(need_weights, bool):
        raise TypeError(f"need_weights must be True or False, got {type_name(need_weights)} {need_weights!r}")
    require_finite("x", x, "every later layer would spread it")
    if x.numel() == 0:
        return
    compute = torch.promote_types(x.dtype, torch.float32)  # what RMSNorm squares in
    largest = largest_magnitude(x)
    if largest**2 > torch.finfo(compute).max:
        raise ValueError(f"the block's input x is finite, but RMSNorm would overflow squaring it: the largest |x| is "
                         f"{largest:.3g}, whose square passes {compute}'s largest number; scale x down, or use float64")


def _check_weights_size(shape, dtype, device):
    """ValueError, before anything is allocated, if need_weights' tensor (L, B, H, T, T_k) would pass
    WEIGHTS_LIMIT_BYTES or the device's memory."""
    layers, batch, heads, length, keys = shape
    nbytes = layers * batch * heads * length * keys * dtype.itemsize
    what = (f"need_weights=True for {batch} x {length} tokens (after {keys - length} cached) would keep "
            f"L * B * H * T * T_k = {layers} * {batch} * {heads} * {length} * {keys} weights")
    if nbytes > WEIGHTS_LIMIT_BYTES:
        raise ValueError(f"{what}, {readable_bytes(nbytes)}, more than the {readable_bytes(WEIGHTS_LIMIT_BYTES)} "
                         "allowed (WEIGHTS_LIMIT_BYTES); read the weights of fewer or shorter texts, or leave "
                         "need_weights False")
    check_allocation(what, nbytes, device)


def _output_problem(x, logits):
    """What is wrong with the fast path's output, or None: the final norm's input x (B, T, E) large enough that
    RMSNorm's squares overflow (it would give zeros), or logits (B, T, V) that hold NaN or inf."""
    if not has_only_finite(logits):
        return (f"the logits hold NaN or inf although the weights, the caches and every block's input are finite: "
                f"the last block or the readout overflowed {logits.dtype}; use float64")
    compute = torch.promote_types(x.dtype, torch.float32)  # what RMSNorm squares in
    if x.numel() and largest_magnitude(x) ** 2 > torch.finfo(compute).max:
        return (f"the final norm's input is finite, but RMSNorm would overflow squaring it: the largest |x| is "
                f"{largest_magnitude(x):.3g}, whose square passes {compute}'s largest number; use float64")
    return None


def _restore(caches, before):
    """Put every cache back to the keys and values (B, H_kv, T, d) it held, as ``before`` lists them (None: empty)."""
    for cache, (keys, values) in zip(caches or [], before, strict=True):
        if len(cache) != (0 if keys is None else keys.shape[2]):
            cache.reset()
            if keys is not None:
                cache.append(keys, values)


def _rotary_settings(attention):
    """A layer's rotary base, scaling and fraction: what its angles depend on besides the positions."""
    return attention.rotary_base, attention.rotary_scaling, attention.rotary_fraction


def llama_arguments(model):
    """LlamaLM's arguments for a transformers LlamaForCausalLM, or a sentence saying why its layers cannot hold it."""
    from transformers import LlamaForCausalLM  # here: transformers is needed only to copy one of its models

    if not isinstance(model, LlamaForCausalLM):
        raise TypeError(f"model must be a transformers LlamaForCausalLM (SmolLM2's class), got {type_name(model)}")
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope = getattr(config, "rope_parameters", None) or {"rope_type": "default", "rope_theta": config.rope_theta}
    refusals = [
        (config.hidden_act != "silu", f"its MLP uses {config.hidden_act!r}, the course's SwiGLU SiLU"),
        (config.attention_bias, "its attention projections have biases (attention_bias=True)"),
        (config.mlp_bias, "its MLP has biases (mlp_bias=True)"),
        (rope.get("rope_type", "default") != "default",
         f"it scales its rotary frequencies ({rope.get('rope_type')!r}), which attn.apply_rotary does not"),
        (head_dim * config.num_attention_heads != config.hidden_size,
         f"its head size {head_dim} is not hidden_size / num_attention_heads = "
         f"{config.hidden_size} / {config.num_attention_heads}"),
        (getattr(config, "pretraining_tp", 1) != 1, "it splits its projections (pretraining_tp > 1)"),
        (model.lm_head.weight is not model.model.embed_tokens.weight
         and not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight),
         "its readout (lm_head) is not tied to its embedding"),
    ]
    for refused, reason in refusals:
        if refused:
            raise ValueError(f"the course's LlamaLM cannot hold this model: {reason}")
    return {
        "vocab_size": config.vocab_size, "context_length": config.max_position_embeddings,
        "embed_dim": config.hidden_size, "num_heads": config.num_attention_heads,
        "num_kv_heads": config.num_key_value_heads, "num_layers": config.num_hidden_layers,
        "mlp_hidden_dim": config.intermediate_size, "rotary_base": float(rope["rope_theta"]),
        "norm_eps": positive_number("rms_norm_eps", config.rms_norm_eps),
    }


def _initialise(module):
    """Llama's and GPT-2's start: normal(0, 0.02) weights (the norms start at ones)."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
