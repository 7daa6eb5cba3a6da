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

import threading
from collections.abc import Sequence
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

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One unit-length float32 row per text."""


def _model_id() -> str:
    """The model's identity, from the installed package's metadata (without importing the model)."""
    return f"wordllama-{version('wordllama')}/{_CONFIG}-{DIMENSIONS}"


_loaded: dict[str, Any] = {}
_loading = threading.Lock()


class WordLlamaEmbedder:
    """The shipped WordLlama model, loaded from the installed package on first use (once per process,
    shared by every application in it), never downloaded."""

    def __init__(self) -> None:
        self.model_id = _model_id()

    @staticmethod
    def _model() -> Any:
        with _loading:
            if "model" not in _loaded:
                import wordllama
                from wordllama import WordLlama

                _loaded["model"] = WordLlama.load(config=_CONFIG, dim=DIMENSIONS,
                                                  cache_dir=Path(wordllama.__file__).parent, disable_download=True)
            return _loaded["model"]

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        import numpy as np

        vectors = np.asarray(self._model().embed(list(texts), norm=True), dtype=np.float32)
        return vectors.reshape(len(texts), DIMENSIONS)


def entry_text(title: str, body: str) -> str:
    return f"{title}\n{body[:TEXT_MAX_CHARACTERS]}"


def quantize(vector: np.ndarray[Any, np.dtype[np.float32]]) -> bytes:
    import numpy as np

    return bytes(np.clip(np.rint(vector * _SCALE), -127, 127).astype(np.int8).tobytes())


def dequantize(blobs: Sequence[bytes]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Stored vectors as rows of float32 (their lengths are 1 give or take the rounding)."""
    import numpy as np

    if not blobs:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    raw = np.frombuffer(b"".join(bytes(blob) for blob in blobs), dtype=np.int8)
    return raw.reshape(len(blobs), DIMENSIONS).astype(np.float32) / _SCALE
