"""The benchmark corpus of BENCHMARKS.md ("Text and queries"): documents and query classes.

Words come from the 30,000 most frequent purely alphabetic English words of ``wordfreq``, drawn
with a seeded random weighted by their real frequency. Document ``i`` depends only on the seed and
``i``, so a corpus of 10,000 documents is the first tenth of one of 100,000.

Every document carries a name fragment ``entity-NNNN`` shared by exactly ten documents
(``i // 10``), so a fragment query matches about ten items at any corpus size.

Install the generator's one dependency with ``.venv/bin/pip install -e '.[bench]'``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

VOCABULARY_SIZE = 30_000
BODY_WORDS = 200
TITLE_WORDS = (3, 7)
SENTENCE_WORDS = (8, 20)
FRAGMENT_SHARE = 10
TAGS = tuple(f"topic-{number:02d}" for number in range(20))

#: Query classes by the frequency rank of their words (0-based index into the vocabulary).
RARE_RANKS = (10_000, 30_000)
COMMON_RANKS = (20, 300)
TWO_WORD_RANKS = (300, 5_000)
QUERY_CLASSES = ("rare", "common", "two-word", "fragment")


@dataclass(frozen=True)
class Document:
    index: int
    slug: str
    title: str
    body: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]
    cumulative: tuple[float, ...]

    @classmethod
    def load(cls, size: int = VOCABULARY_SIZE) -> Vocabulary:
        try:
            from wordfreq import top_n_list, word_frequency
        except ImportError:
            raise SystemExit("the corpus needs wordfreq: .venv/bin/pip install -e '.[bench]'") from None
        words = tuple(word for word in top_n_list("en", size + size // 3) if word.isalpha())[:size]
        if len(words) < size:
            raise SystemExit(f"wordfreq lists only {len(words)} alphabetic English words, not {size}")
        weights = [word_frequency(word, "en") for word in words]
        return cls(words, tuple(itertools.accumulate(weights)))

    def draw(self, rng: random.Random, count: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cumulative, k=count)


def fragment(index: int) -> str:
    """The name fragment of document ``index``: ten consecutive documents share one."""
    return f"entity-{index // FRAGMENT_SHARE:04d}"


def slug(index: int) -> str:
    return f"doc/entity-{index:05d}"


class Corpus:
    def __init__(self, seed: int = 1, vocabulary: Vocabulary | None = None) -> None:
        self.seed = seed
        self._vocabulary = vocabulary

    @cached_property
    def vocabulary(self) -> Vocabulary:
        return self._vocabulary or Vocabulary.load()

    def document(self, index: int, slug_of: Callable[[int], str] = slug) -> Document:
        """Title of 3-7 words, body of 200 words in sentences with the name fragment somewhere in it."""
        rng = random.Random(f"{self.seed}:doc:{index}")
        vocabulary = self.vocabulary
        title = " ".join(vocabulary.draw(rng, rng.randint(*TITLE_WORDS))).capitalize()
        tokens = vocabulary.draw(rng, BODY_WORDS - 1)
        tokens.insert(rng.randrange(len(tokens) + 1), fragment(index))
        sentences, start = [], 0
        while start < len(tokens):
            end = min(len(tokens), start + rng.randint(*SENTENCE_WORDS))
            sentences.append(" ".join(tokens[start:end]).capitalize() + ".")
            start = end
        body = " ".join(sentences)
        if rng.random() < 0.2:  # some entries link another, as agents are asked to
            body += f"\n\nSee [[{slug(rng.randrange(max(index, 1)))}]]."
        return Document(index, slug_of(index), title, body, (TAGS[index % len(TAGS)],))

    def documents(self, start: int, stop: int, slug_of: Callable[[int], str] = slug) -> list[Document]:
        return [self.document(index, slug_of) for index in range(start, stop)]

    def queries(self, query_class: str, count: int, documents: int) -> list[str]:
        """``count`` queries of one class for a corpus of ``documents`` items, deterministic per seed."""
        rng = random.Random(f"{self.seed}:queries:{query_class}:{documents}")
        words = self.vocabulary.words
        if query_class in ("rare", "common"):
            pool = words[slice(*(RARE_RANKS if query_class == "rare" else COMMON_RANKS))]
            return [rng.choice(pool) for _ in range(count)]
        if query_class == "two-word":
            pool = words[slice(*TWO_WORD_RANKS)]
            return [" ".join(rng.sample(pool, 2)) for _ in range(count)]
        if query_class == "fragment":
            return [fragment(rng.randrange(documents)) for _ in range(count)]
        raise ValueError(f"unknown query class {query_class!r}")
