"""Byte-level BPE for the Austen model (lesson 13): the loop a learner traces, and the library's version.

Byte pair encoding (Sennrich et al. 2016) starts from the 256 byte values and repeatedly merges the
most frequent adjacent pair of tokens into a new token. ``bpe_merges`` is that loop, written out for
a short text (lesson 13 runs it on one paragraph). ``train_tokenizer`` trains the same kind of
tokenizer on the novels with Hugging Face's ``tokenizers`` library (its byte-level variant, as in
GPT-2: text is split into words first, a word's leading space kept with it, and no merge crosses a
word boundary), and ``Tokenizer`` wraps the result with the two methods the course uses:
``encode(str) -> list[int]`` and ``decode(list[int]) -> str``, which round-trip any text exactly.
"""

import json
import numbers
from collections import Counter
from pathlib import Path

from attn.common.validate import require_text

VOCAB_SIZE = 4096


def _type_name(value):
    return type(value).__name__


def pair_counts(tokens):
    """Counter of adjacent pairs in one sequence of tokens: {(a, b): how often b follows a}."""
    return Counter(zip(tokens[:-1], tokens[1:], strict=True))


def merge_pair(tokens, pair, new_token):
    """``tokens`` with every occurrence of ``pair`` (left to right, not overlapping) replaced by ``new_token``."""
    merged, index = [], 0
    while index < len(tokens):
        if index + 1 < len(tokens) and (tokens[index], tokens[index + 1]) == pair:
            merged.append(new_token)
            index += 2
        else:
            merged.append(tokens[index])
            index += 1
    return merged


def bpe_merges(words, num_merges, ties="bytes"):
    """The first ``num_merges`` merges of byte-level BPE on ``words`` (a list of str), by the loop.

    Each word starts as its UTF-8 bytes, as a tuple of one-byte ``bytes``; at every step the pair
    counted most often over all words (each word weighted by how often it occurs) becomes one token.
    ties="bytes": a tie goes to the pair whose merged bytes sort first (then whose parts do);
    ties="library": to the pair of lower token ids, as the ``tokenizers`` library breaks them (its
    256 byte tokens are numbered in the order of the printable characters that stand for them,
    where a space is 'Ġ', after every letter; each merged token takes the next id).
    Returns a list of ((left, right), count), left and right ``bytes``; stops early when no pair is left.
    """
    if not isinstance(words, list | tuple) or not all(isinstance(word, str) for word in words):
        raise TypeError(f"words must be a list of str, got {_type_name(words)}")
    for word in words:
        require_text("each word", word)  # a lone surrogate has no UTF-8 bytes to merge
    if isinstance(num_merges, bool) or not isinstance(num_merges, numbers.Integral) or num_merges < 0:
        raise ValueError(f"num_merges must be a whole number >= 0, got {num_merges!r}")
    if ties not in ("bytes", "library"):
        raise ValueError(f"ties must be 'bytes' or 'library', got {ties!r}")
    stand_ins = _byte_alphabet()
    ids = {bytes([byte]): rank for rank, byte in enumerate(sorted(range(256), key=stand_ins.get))}
    frequencies = Counter(tuple(bytes([b]) for b in word.encode("utf-8")) for word in words)
    merges = []
    for _ in range(num_merges):
        counts = Counter()
        for word, frequency in frequencies.items():
            for pair, count in pair_counts(word).items():
                counts[pair] += count * frequency
        if not counts:
            break
        if ties == "bytes":
            best = min(counts, key=lambda pair: (-counts[pair], pair[0] + pair[1], pair))
        else:
            best = min(counts, key=lambda pair: (-counts[pair], ids[pair[0]], ids[pair[1]]))
        merges.append((best, counts[best]))
        ids.setdefault(best[0] + best[1], len(ids))
        merged = Counter()
        for word, frequency in frequencies.items():
            merged[tuple(merge_pair(list(word), best, best[0] + best[1]))] += frequency
        frequencies = merged
    return merges


def pretokenize(text):
    """The words the library's byte-level BPE merges within (GPT-2's rule): a list of str."""
    from tokenizers import pre_tokenizers

    require_text("text", text)
    splitter = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    # the library shows each byte as a printable character; map them back to the text's own characters
    decode = {character: byte for byte, character in _byte_alphabet().items()}
    return [bytes(decode[c] for c in piece).decode("utf-8") for piece, _ in splitter.pre_tokenize_str(text)]


def _byte_alphabet():
    """GPT-2's map from byte values to the printable characters the byte-level model stores."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def train_tokenizer(texts, vocab_size=VOCAB_SIZE):
    """A byte-level BPE ``Tokenizer`` trained on ``texts`` (a list of str) with the ``tokenizers`` library.

    vocab_size: 256 byte tokens plus the merges, at most; deterministic (same texts, same file).
    """
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if not isinstance(texts, list | tuple) or not texts or not all(isinstance(text, str) for text in texts):
        raise TypeError(f"texts must be a non-empty list of str, got {_type_name(texts)}")
    for text in texts:
        require_text("each text", text)  # a lone surrogate has no UTF-8 bytes to learn from
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral):
        raise TypeError(f"vocab_size must be a whole number, got {_type_name(vocab_size)} {vocab_size!r}")
    if not 256 <= vocab_size <= 65536:
        raise ValueError(f"vocab_size must be between 256 (the bytes alone) and 65536, got {vocab_size}")
    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size), show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    paragraphs = [line for text in texts for line in text.splitlines(keepends=True)]
    backend.train_from_iterator(paragraphs, trainer=trainer, length=len(paragraphs))
    return Tokenizer(backend)


class Tokenizer:
    """A byte-level BPE tokenizer: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``.

    ``vocab_size``: the number of token ids; ``token_text(id)``: the text one token stands for;
    ``save(path)`` writes the library's JSON file, which ``Tokenizer.load(path)`` reads.
    """

    def __init__(self, backend):
        if not all(callable(getattr(backend, name, None)) for name in ("get_vocab_size", "encode", "decode", "to_str")):
            raise TypeError(f"backend must be a tokenizers.Tokenizer (use Tokenizer.load(path) or train_tokenizer), "
                            f"got {_type_name(backend)}")
        self.backend = backend
        self.vocab_size = backend.get_vocab_size()
        self._byte_of = {character: byte for byte, character in _byte_alphabet().items()}
        # bytes the vocabulary has no token for (a pretrained one may lack some, such as 0xC0 which UTF-8 never uses):
        # the library would drop them without a word, so encode refuses a text that needs them
        self._missing_bytes = bytes(byte for byte, character in _byte_alphabet().items()
                                    if backend.token_to_id(character) is None)

    @classmethod
    def load(cls, path):
        """The tokenizer saved at ``path`` (a JSON file written by ``save``)."""
        from tokenizers import Tokenizer as Backend

        if not isinstance(path, str | Path):
            raise TypeError(f"path must be a str or pathlib.Path, got {_type_name(path)}")
        if not Path(path).is_file():
            raise FileNotFoundError(f"no tokenizer file at {path}")
        try:
            tokenizer = cls(Backend.from_file(str(path)))
        except Exception as error:  # noqa: BLE001 - the library raises its own exception kinds
            raise ValueError(f"{path} is not a tokenizers JSON file: {error}") from None
        if tokenizer.vocab_size < 256:
            raise ValueError(f"{path} holds a tokenizer of {tokenizer.vocab_size} tokens; a byte-level tokenizer has at least "
                             "the 256 bytes: the file is not one that train_tokenizer wrote")
        return tokenizer

    def save(self, path):
        """Write the tokenizer as the library's JSON file (sorted keys, so that retraining gives the same bytes)."""
        data = json.loads(self.backend.to_str())
        Path(path).write_text(json.dumps(data, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")

    def encode(self, text):
        """The token ids of ``text`` (str): a list of int."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {_type_name(text)}; decode bytes first (text = data.decode())")
        data = require_text("text", text).encode("utf-8")  # a lone surrogate gets its sentence there
        if any(byte in data for byte in self._missing_bytes):
            self._refuse_missing_bytes(text)
        return self.backend.encode(text).ids

    def _refuse_missing_bytes(self, text):
        position, character = next((i, c) for i, c in enumerate(text) if set(c.encode()) & set(self._missing_bytes))
        byte = next(b for b in character.encode() if b in self._missing_bytes)
        raise ValueError(f"text holds {character!r} at position {position}, whose UTF-8 bytes include 0x{byte:02X}, for "
                         "which this tokenizer's vocabulary has no token (it would be dropped without a word); "
                         "remove or replace it")

    def decode(self, ids):
        """The text of token ids (a list of int, or a 1-D tensor): ``decode(encode(text)) == text``."""
        ids = self._checked_ids(ids)
        return self.token_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, ids):
        """The bytes that token ids stand for (a token may hold part of a character's UTF-8 bytes)."""
        ids = self._checked_ids(ids)
        return bytes(self._byte_of[c] for token in ids for c in self.backend.id_to_token(token))

    def token_text(self, token):
        """The text one token id stands for, as a str (a broken character shown as '?')."""
        return self.token_bytes([token]).decode("utf-8", errors="replace").replace("\ufffd", "?")

    def _checked_ids(self, ids):
        if hasattr(ids, "tolist") and not isinstance(ids, list | tuple):
            ids = ids.tolist()
        if not isinstance(ids, list | tuple):
            raise TypeError(f"ids must be a list of int, got {_type_name(ids)}")
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, numbers.Integral)]
        if bad:
            raise TypeError(f"ids must be whole numbers, got {_type_name(bad[0])} {bad[0]!r}")
        outside = [i for i in ids if not 0 <= i < self.vocab_size]
        if outside:
            raise ValueError(f"token id {outside[0]} is outside this tokenizer's 0..{self.vocab_size - 1}")
        return [int(i) for i in ids]

    def __repr__(self):
        return f"Tokenizer(byte-level BPE, vocab_size={self.vocab_size})"
