"""The shipped model's vectors: the word-at-a-time token ids are exactly the tokenizer's, and the vectors
are WordLlama's own (so a stored vector does not depend on which of the two paths made it); the
in-process search, exact and in two steps."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import wordllama
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from wordllama import WordLlama

from armarius.memory import embeddings, vectors
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


def ids_of(tokens: _Tokens, text: str) -> list[int]:
    return array(tokens.typecode, tokens.ids(text)).tolist()


@hypothesis_settings(max_examples=400, deadline=None)
@given(text=TEXTS)
@example(text="")
@example(text="   leading and trailing   ")
@example(text="a\u2581\u2581b  c<s>d")
@example(text="month\nStuff\r\n\tx \n\n y")
@example(text=" a  b   c ")  # runs of spaces, leading and trailing ones
@example(text="  ")
@example(text="x \n  y\n")
def test_token_ids_word_by_word_are_the_tokenizers(reference: Any, tokens: _Tokens, text: str) -> None:
    assert ids_of(tokens, text) == reference.tokenizer.encode(text, add_special_tokens=False).ids


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


def space_of(matrix: np.ndarray[Any, np.dtype[np.float32]]) -> vectors._Space:
    """The vectors as a server reads them: a batch at a time (the matrices grow on the way)."""
    space = vectors._Space()
    rows = [{"id": 1000 + at, "seq": at + 1, "vector": quantize(row)} for at, row in enumerate(matrix)]
    for start in range(0, len(rows), 700):
        space.add(rows[start:start + 700])
    return space


@pytest.mark.parametrize("exact_up_to", [10**9, 0], ids=["exact", "two steps"])
def test_a_search_names_each_hit_by_its_own_entry_and_score(monkeypatch: pytest.MonkeyPatch,
                                                            exact_up_to: int) -> None:
    monkeypatch.setattr(vectors, "EXACT_UP_TO", exact_up_to)
    monkeypatch.setattr(vectors, "CANDIDATES", 50)
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((3000, 256)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    space = space_of(matrix)
    stored = vectors.dequantize([quantize(row) for row in matrix])
    for probe in (5, 1234, 2999):
        query = matrix[probe]
        hits = space.nearest(query, 10)
        assert hits[0][0] == 1000 + probe, "a stored vector is its own nearest"
        assert [score for _, score in hits] == sorted((score for _, score in hits), reverse=True)
        for entry_id, score in hits:
            assert score == pytest.approx(float(stored[entry_id - 1000] @ query), abs=1e-5)
    assert space.nearest(matrix[0], 5000)[-1][1] <= space.nearest(matrix[0], 1)[0][1]


def test_a_space_taking_in_new_and_replaced_vectors_holds_what_a_first_read_holds() -> None:
    """Reads that bring new entries only (written in place at the end), and reads that also bring new
    revisions of entries the space holds (written where those are), leave the space as one read of the
    current vectors leaves it: the same vector for each entry, the same answers."""
    rng = np.random.default_rng(5)

    def rows(ids: list[int], first_seq: int) -> list[dict[str, Any]]:
        return [{"id": entry, "seq": first_seq + at, "vector": quantize(vector / np.linalg.norm(vector))}
                for at, (entry, vector) in enumerate(zip(ids, rng.standard_normal((len(ids), 256)), strict=True))]

    reads = [rows(list(range(1, 1500)), 1), rows([10, 1500, 20, 1501, 1499], 1500), rows([1502, 1503], 1505),
             rows([1502], 1507)]
    taken_in = vectors._Space()
    for read in reads:
        taken_in.add(read)
    current = {row["id"]: row for read in reads for row in read}  # the latest vector of each entry
    first_read = vectors._Space()
    first_read.add(sorted(current.values(), key=lambda row: row["seq"]))
    assert taken_in.seen == first_read.seen == 1507
    assert sorted(taken_in.ids) == sorted(first_read.ids) == list(range(1, 1504))
    assert taken_in.matrix is not None
    assert first_read.matrix is not None
    assert taken_in.coarse is not None
    assert first_read.coarse is not None
    for entry in (1, 10, 20, 1499, 1500, 1501, 1502, 1503):
        mine, theirs = taken_in.rows[entry], first_read.rows[entry]
        assert np.array_equal(taken_in.matrix[mine], first_read.matrix[theirs])
        assert np.array_equal(taken_in.matrix[mine], vectors.dequantize([current[entry]["vector"]])[0])
        assert np.array_equal(taken_in.coarse[mine], first_read.coarse[theirs])
    for probe in (10, 1502, 700):
        query = vectors.dequantize([current[probe]["vector"]])[0]
        mine, theirs = taken_in.nearest(query, 5), first_read.nearest(query, 5)
        assert [entry for entry, _ in mine] == [entry for entry, _ in theirs]
        assert mine[0][0] == probe
        assert [score for _, score in mine] == pytest.approx([score for _, score in theirs], abs=1e-6)


def test_a_vector_that_cannot_be_read_leaves_the_space_as_it_was() -> None:
    """A read with a vector of the wrong size (a damaged row) is refused whole: the space keeps what it held and
    takes the vectors in when they are read again."""
    rng = np.random.default_rng(6)
    blobs = [quantize(vector / np.linalg.norm(vector)) for vector in rng.standard_normal((3, 256))]
    space = vectors._Space()
    space.add([{"id": 1, "seq": 1, "vector": blobs[0]}])
    held = space.matrix.copy() if space.matrix is not None else None
    for damaged in ([{"id": 2, "seq": 2, "vector": blobs[1][:100]}],  # entries new to the space only
                    [{"id": 1, "seq": 2, "vector": b"x"}, {"id": 3, "seq": 3, "vector": blobs[2]}]):  # and a held one
        with pytest.raises(ValueError, match="reshape"):
            space.add(damaged)
        assert (space.ids, space.rows, space.seen) == ([1], {1: 0}, 1)
        assert held is not None
        assert space.matrix is not None
        assert np.array_equal(space.matrix[:1], held[:1])
    space.add([{"id": 2, "seq": 2, "vector": blobs[1]}, {"id": 3, "seq": 3, "vector": blobs[2]}])
    assert (space.ids, space.seen) == ([1, 2, 3], 3)
    assert space.nearest(vectors.dequantize([blobs[2]])[0], 1)[0][0] == 3


def test_two_steps_find_the_exact_top_hits_of_near_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vectors close to the query (as paraphrases are) are found by their prefix too."""
    rng = np.random.default_rng(4)
    centre = rng.standard_normal(256).astype(np.float32)
    near = centre + rng.standard_normal((10, 256)).astype(np.float32) * 0.5
    far = rng.standard_normal((5000, 256)).astype(np.float32)
    matrix = np.vstack([far[:2500], near, far[2500:]])
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    space = space_of(matrix)
    query = centre / np.linalg.norm(centre)
    monkeypatch.setattr(vectors, "EXACT_UP_TO", 10**9)
    exact = space.nearest(query, 10)
    monkeypatch.setattr(vectors, "EXACT_UP_TO", 0)
    assert space.nearest(query, 10) == exact
    assert {entry_id for entry_id, _ in exact} == set(range(1000 + 2500, 1000 + 2510))


def test_the_word_cache_stays_bounded_whatever_the_texts(reference: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "_WORD_CACHE", 100)
    tokens = _Tokens(reference.tokenizer)
    texts = [" ".join(f"w{n}x{k}" for k in range(30)) for n in range(20)] + ["y" * 5000, "z" * 49 + " q"]
    for text in texts:
        assert ids_of(tokens, text) == reference.tokenizer.encode(text, add_special_tokens=False).ids
        assert len(tokens._words) <= 100
        assert len(tokens._older) <= 100
    assert all(len(word) <= embeddings._WORD_CACHED_UP_TO for word in [*tokens._words, *tokens._older])


def test_the_words_in_use_stay_in_the_word_cache(reference: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A word met again and again stays cached while ever new words pass through (two generations)."""
    monkeypatch.setattr(embeddings, "_WORD_CACHE", 50)
    tokens = _Tokens(reference.tokenizer)
    for n in range(40):
        text = f"deploy host \n{' '.join(f'w{n}x{k}' for k in range(20))}"
        assert ids_of(tokens, text) == reference.tokenizer.encode(text, add_special_tokens=False).ids
        assert {"deploy", "host"} <= tokens._words.keys() | tokens._older.keys()
