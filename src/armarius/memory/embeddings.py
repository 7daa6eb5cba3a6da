"""Recall by meaning: text as vectors, from a model whose weights ship inside a Python package.

The model is WordLlama's ``l2_supercat`` at 256 dimensions (MIT): static token embeddings pooled
into one vector per text, about 0.15 ms for a short text on one core. Its weights and tokenizer are
files of the installed ``wordllama`` package, loaded from there with downloads disabled: nothing is
ever fetched, so Armarius recalls by meaning offline, on a fresh machine. The model is loaded once
per process, on first use.

Every stored vector names the model that made it (:data:`MODEL_ID`): a vector of another model is
never compared with this one's; `armarius memory reindex` (and `armarius init`) embeds again what
another model made.

Vectors are stored quantized: one signed byte per dimension (256 bytes an entry; 100,000 entries
take 25.6 MB), each component of the unit vector times 127, rounded.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # numpy is imported where vectors are made: commands that make none start faster
    import numpy as np


DIMENSIONS = 256
_CONFIG = "l2_supercat"
_SCALE = 127.0
#: How much of an entry is embedded: its title and the start of its body (static embeddings average
#: their tokens, so the rest of a long body would only dilute the vector).
TEXT_MAX_CHARACTERS = 4000


class Embedder(Protocol):
    model_id: str

    @property
    def ready(self) -> bool:
        """Whether embedding a text now costs only the text (the model is loaded in this process)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One unit-length float32 row per text."""


def _model_id() -> str:
    """The model's identity, from the installed package's metadata (without importing the model)."""
    return f"wordllama-{version('wordllama')}/{_CONFIG}-{DIMENSIONS}"


_loaded: dict[str, Any] = {}
_loading = threading.Lock()
#: How many distinct words :class:`_Tokens` keeps the token ids of, in each of its two generations, and
#: the longest word it keeps: at most some 20 MB, whatever texts it is given.
_WORD_CACHE = 65_536
_WORD_CACHED_UP_TO = 48
_SPACE = "\u2581"  # the tokenizer's word boundary, "▁"
#: Characters that may stand alone between words (line ends, tabs) when no token holds them with others.
_ALONE = "\n\r\t"


class _Tokens:
    """The token ids the model's tokenizer gives a text, computed a word at a time and cached per word.

    The tokenizer (SentencePiece BPE) normalizes a text by prefixing "▁" and turning spaces into "▁",
    then merges the whole text as one word: no pre-tokenizer splits it. When no token of the vocabulary
    has a "▁" after another character, no merge can reach across the start of a word ("▁" after another
    character). So the text's ids are its words' ids one after another: a word being what one space
    separates from the next, its ids those of "▁" and the word (a run of spaces goes with the word after
    it, each an extra "▁"). That is exactly the tokenizer's answer, at a fraction of its cost for a text
    of many words (most words are in the cache). A word's own ids are its pieces' (split again where no
    merge can reach across either: before a "▁" after another character, and around a character no
    token holds with others, as a line end is always a token of its own). Texts with a special token in
    them (``<s>``) or a "▁" of their own, or a vocabulary without that property, go through the
    tokenizer.

    The ids are packed (an ``array`` of :attr:`typecode`, as bytes): a text's are its words' joined in one
    step, and the cache holds one small object per word, not a tuple of numbers (a remember finds most
    of them out of the processor's caches: fewer objects to reach is what makes it faster).

    The cache has two generations: words are added to the newer; when it is full it becomes the older
    (the older one is dropped), and a word found only in the older is added to the newer again. So the
    words in use stay, and neither a clean sweep nor a long text of new words empties it.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer, self._bpe = tokenizer, tokenizer.model
        self._whole = [_SPACE, *(token.content for token in tokenizer.get_added_tokens_decoder().values())]
        vocabulary = tokenizer.get_vocab()
        self._by_word = all(_SPACE not in token.lstrip(_SPACE) for token in vocabulary)
        self.typecode = "H" if max(vocabulary.values()) < 1 << 16 else "I"  # unsigned 16 or 32 bits
        alone = re.escape("".join(character for character in _ALONE
                                  if not any(character in token and token != character for token in vocabulary)))
        self._words: dict[str, bytes] = {}
        self._older: dict[str, bytes] = {}
        self._pieces = re.compile(f"{_SPACE}*[^{_SPACE}{alone}]+|{_SPACE}+" + (f"|[{alone}]" if alone else "")).findall

    def ids(self, text: str) -> bytes:
        """The text's token ids, packed as :attr:`typecode`."""
        if not self._by_word or any(whole in text for whole in self._whole):
            return self._packed(self._tokenizer.encode(text, add_special_tokens=False).ids)
        if not text:
            return b""
        words = text.split(" ")
        if "" in words:
            words = _spaces_joined(words)
        known = list(map(self._words.get, words))
        if None in known:
            for at, word in enumerate(words):
                if known[at] is None:
                    ids = self._words.get(word)  # a new word seen before in this text
                    if ids is None:
                        ids = self._older.get(word)
                    if ids is None:
                        ids = self._packed(token.id for piece in self._pieces(_SPACE + word)
                                           for token in self._bpe.tokenize(piece))
                    known[at] = ids
                    if len(word) <= _WORD_CACHED_UP_TO:
                        if len(self._words) >= _WORD_CACHE:
                            self._older, self._words = self._words, {}
                        self._words[word] = ids
        return b"".join(known)  # type: ignore[arg-type]  # no None is left

    def _packed(self, ids: Iterable[int]) -> bytes:
        return array(self.typecode, ids).tobytes()


def _spaces_joined(words: list[str]) -> list[str]:
    """Words split at single spaces, each empty one (a space after a space) joined to the next as a "▁"
    (the last ones, after the text's last word, stand alone: one "▁" fewer, the word's own is theirs)."""
    joined, run = [], ""
    for word in words:
        if word:
            joined.append(run + word)
            run = ""
        else:
            run += _SPACE
    if run:
        joined.append(run[:-1])
    return joined


class WordLlamaEmbedder:
    """The shipped WordLlama model, loaded from the installed package on first use (once per process,
    shared by every application in it), never downloaded.

    A text's vector is the mean of its tokens' embeddings, made unit length (a text without tokens: the
    zero vector), as WordLlama's own ``embed(texts, norm=True)`` makes it."""

    def __init__(self) -> None:
        self.model_id = _model_id()

    @property
    def ready(self) -> bool:
        return "model" in _loaded  # else the first text embedded loads it: 0.6 s

    @staticmethod
    def _model() -> tuple[np.ndarray[Any, np.dtype[np.float32]], _Tokens]:
        with _loading:
            if "model" not in _loaded:
                import wordllama
                from wordllama import WordLlama

                model = WordLlama.load(config=_CONFIG, dim=DIMENSIONS, cache_dir=Path(wordllama.__file__).parent,
                                       disable_download=True)
                _loaded["model"] = (model.embedding, _Tokens(model.tokenizer))
            return _loaded["model"]  # type: ignore[no-any-return]

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        import numpy as np

        weights, tokens = self._model()
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        dtype = np.dtype(tokens.typecode)
        for row, text in enumerate(texts):
            ids = np.frombuffer(tokens.ids(text), dtype=dtype)
            if len(ids):
                mean = weights[ids].sum(axis=0) / np.float32(len(ids))
                length = np.linalg.norm(mean)
                if length > 0:
                    vectors[row] = mean / length
        return vectors


def entry_text(title: str, body: str) -> str:
    return f"{title}\n{body[:TEXT_MAX_CHARACTERS]}"


def quantize(vector: np.ndarray[Any, np.dtype[np.float32]]) -> bytes:
    import numpy as np

    return bytes(np.clip(np.rint(vector * _SCALE), -127, 127).astype(np.int8).tobytes())


def dequantize(blobs: Sequence[bytes], out: np.ndarray[Any, np.dtype[np.float32]] | None = None
               ) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Stored vectors as rows of float32 (their lengths are 1 give or take the rounding); ``out``: the rows
    to write them into, one per blob (and returned), with no array in between."""
    import numpy as np

    if out is None:
        out = np.empty((len(blobs), DIMENSIONS), dtype=np.float32)
    if blobs:
        raw = np.frombuffer(b"".join(bytes(blob) for blob in blobs), dtype=np.int8)
        np.divide(raw.reshape(len(blobs), DIMENSIONS), _SCALE, out=out, dtype=np.float32)
    return out
