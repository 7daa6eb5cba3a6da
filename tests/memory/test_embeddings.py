"""The shipped model's vectors: the word-at-a-time token ids are exactly the tokenizer's, and the vectors
are WordLlama's own (so a stored vector does not depend on which of the two paths made it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import wordllama
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from wordllama import WordLlama

from armarius.memory.embeddings import WordLlamaEmbedder, _Tokens, quantize

#: Words, the tokenizer's own word mark, runs of spaces, special tokens, control and wide characters.
PIECES = st.sampled_from(["deploy", "host", "Zürich", "中文", "😀", "\u2581", "\u2581\u2581x", " ", "  ", "   ",
                          "\t", "\n", "\r\n", "\u00a0", "<s>", "</s>", "<unk>", "<s", "x\u2581", "-", "'s", "0"])
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=40).map("".join)


@pytest.fixture(scope="module")
def reference() -> Any:
    return WordLlama.load(config="l2_supercat", dim=256, cache_dir=Path(wordllama.__file__).parent,
                          disable_download=True)


@pytest.fixture(scope="module")
def tokens(reference: Any) -> _Tokens:
    return _Tokens(reference.tokenizer)


@hypothesis_settings(max_examples=400, deadline=None)
@given(text=TEXTS)
@example(text="")
@example(text="   leading and trailing   ")
@example(text="a\u2581\u2581b  c<s>d")
def test_token_ids_word_by_word_are_the_tokenizers(reference: Any, tokens: _Tokens, text: str) -> None:
    assert tokens.ids(text) == reference.tokenizer.encode(text, add_special_tokens=False).ids


@hypothesis_settings(max_examples=100, deadline=None)
@given(text=TEXTS.filter(lambda text: text != ""))
def test_vectors_are_wordllamas_own(reference: Any, text: str) -> None:
    mine = WordLlamaEmbedder().embed([text])[0]
    theirs = reference.embed([text], norm=True)[0]
    np.testing.assert_allclose(mine, theirs, atol=1e-6)
    assert quantize(mine) == quantize(theirs)


def test_a_text_without_tokens_is_the_zero_vector() -> None:
    vectors = WordLlamaEmbedder().embed(["", "the staging box"])
    assert not vectors[0].any()
    assert abs(float(np.linalg.norm(vectors[1])) - 1) < 1e-6
