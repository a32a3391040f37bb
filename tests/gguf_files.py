"""GGUF files written for the tests with the pinned ``gguf`` package's own writer: small, made in milliseconds."""

from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize

TYPES = gguf.GGMLQuantizationType

# A Llama small enough to load into transformers in a moment: grouped-query (4 heads sharing 2), two blocks.
TINY = {"vocab_size": 260, "context_length": 128, "embed_dim": 64, "num_heads": 4, "num_kv_heads": 2, "num_layers": 2,
        "mlp_hidden_dim": 96, "rotary_base": 10000.0, "norm_eps": 1e-5}
BYTES = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(ord("¡"), ord("¬") + 1)] + \
        [chr(c) for c in range(ord("®"), ord("ÿ") + 1)]
BYTES += [chr(256 + n) for n in range(256 - len(BYTES))]  # GPT-2's printable stand-ins of the 256 bytes
MERGES = ["Ġ t", "h e", "Ġt he"]
TOKENS = ["<|endoftext|>", *BYTES, "Ġt", "he", "Ġthe"]


def write_gguf(path, tensors=None, metadata=None, alignment=None, arch="llama"):
    """A GGUF file: tensors name -> (float32 array, type name 'F32', 'F16', 'Q8_0' or 'Q4_1'); metadata key ->
    (value, GGUFValueType)."""
    writer = gguf.GGUFWriter(path, arch=arch)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, value in (metadata or {}).items():
        writer.add_key_value(key, *value)
    for name, (array, kind) in (tensors or {}).items():
        if kind in ("F32", "F16"):
            writer.add_tensor(name, array.astype(np.float32 if kind == "F32" else np.float16))
        else:
            writer.add_tensor(name, quantize(array, TYPES[kind]), raw_dtype=TYPES[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def llama_cpp_rows(weight, num_heads):
    """What llama.cpp's converter does to the rows of W_q and W_k (rotate_half's order to neighbouring pairs)."""
    return weight.reshape(num_heads, 2, -1, weight.shape[-1]).swapaxes(1, 2).reshape(weight.shape)


def tiny_llama_tensors(seed=0, config=TINY):
    """GGUF name -> (float32 array, type): random weights in Hugging Face's layout, W_q and W_k permuted as llama.cpp does."""
    generator = np.random.default_rng(seed)
    embed, hidden = config["embed_dim"], config["mlp_hidden_dim"]
    kv_rows = config["num_kv_heads"] * embed // config["num_heads"]

    def normal(*shape, scale=0.08):
        return (generator.normal(size=shape) * scale).astype(np.float32)

    tensors = {"token_embd.weight": (normal(config["vocab_size"], embed, scale=0.5), "Q8_0"),
               "output_norm.weight": (1 + normal(embed, scale=0.1), "F32")}
    for index in range(config["num_layers"]):
        block = {"attn_norm": (1 + normal(embed, scale=0.1), "F32"),
                 "attn_q": (llama_cpp_rows(normal(embed, embed), config["num_heads"]), "Q4_1"),
                 "attn_k": (llama_cpp_rows(normal(kv_rows, embed), config["num_kv_heads"]), "Q4_1"),
                 "attn_v": (normal(kv_rows, embed), "Q4_1"), "attn_output": (normal(embed, embed), "Q4_1"),
                 "ffn_norm": (1 + normal(embed, scale=0.1), "F32"), "ffn_gate": (normal(hidden, embed), "Q4_1"),
                 "ffn_up": (normal(hidden, embed), "Q4_1"), "ffn_down": (normal(embed, hidden), "Q4_1")}
        tensors |= {f"blk.{index}.{name}.weight": value for name, value in block.items()}
    return tensors


def tiny_llama_metadata(config=TINY, pre="smollm"):
    value = gguf.GGUFValueType
    return {
        "llama.context_length": (config["context_length"], value.UINT32),
        "llama.embedding_length": (config["embed_dim"], value.UINT32),
        "llama.feed_forward_length": (config["mlp_hidden_dim"], value.UINT32),
        "llama.block_count": (config["num_layers"], value.UINT32),
        "llama.attention.head_count": (config["num_heads"], value.UINT32),
        "llama.attention.head_count_kv": (config["num_kv_heads"], value.UINT32),
        "llama.rope.freq_base": (config["rotary_base"], value.FLOAT32),
        "llama.attention.layer_norm_rms_epsilon": (config["norm_eps"], value.FLOAT32),
        "llama.rope.dimension_count": (config["embed_dim"] // config["num_heads"], value.UINT32),
        "llama.vocab_size": (config["vocab_size"], value.UINT32),
        "tokenizer.ggml.model": ("gpt2", value.STRING), "tokenizer.ggml.pre": (pre, value.STRING),
        "tokenizer.ggml.tokens": (TOKENS, value.ARRAY), "tokenizer.ggml.merges": (MERGES, value.ARRAY),
        "tokenizer.ggml.token_type": ([3] + [1] * (len(TOKENS) - 1), value.ARRAY),
        "tokenizer.ggml.bos_token_id": (0, value.UINT32), "tokenizer.ggml.eos_token_id": (0, value.UINT32),
        "tokenizer.ggml.add_bos_token": (False, value.BOOL),
    }


def write_tiny_llama(path, seed=0):
    """A tiny Llama GGUF file laid out as llama.cpp writes SmolLM2's (Q8_0 embedding, Q4_1 matrices, F32 norms)."""
    return write_gguf(path, tiny_llama_tensors(seed), tiny_llama_metadata())
