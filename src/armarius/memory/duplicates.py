"""Is a new entry the same knowledge as an existing one?

Candidates come from one full-text query, an OR of small AND-groups of distinctive words (the
title's longest words; the body's longest words in threes; only words of six letters or more; an
entry too short for a group of two such words: its three longest words of two letters or more), so
the engine reads only short posting lists and ranks only the few entries that share several
distinctive words: long words are rarely common ones, and a common word's posting list would
cost as much as the whole search. Entries whose
slug differs only in separators or a plural are candidates too. Each candidate is then scored in
Python: word overlap of the titles and word-pair overlap of the bodies.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from armarius.memory import queries
from armarius.memory.model import Entry, slug_key, words
from armarius.store import Tx

_CANDIDATES = 8
_TITLE_GROUP, _DISTINCTIVE_LENGTH = 3, 6
#: A short entry with fewer than two distinctive words is searched by its longest words of this length or more.
_SHORT_ENTRY_LENGTH = 2
_BODY_GROUPS, _GROUP_SIZE = 3, 3
_TITLE_WEIGHT, _BODY_WEIGHT = 0.4, 0.6
_SLUG_MATCH_SCORE = 0.95


@dataclass(frozen=True)
class _Shape:
    """The word sets one side of a comparison is scored on."""

    title_words: frozenset[str]
    body_pairs: frozenset[tuple[str, ...]]

    @classmethod
    def of(cls, title: str, body: str) -> _Shape:
        return cls.of_words(_lower_words(title), _lower_words(body))

    @classmethod
    def of_words(cls, title_words: list[str], body_words: list[str]) -> _Shape:
        return cls(frozenset(title_words), frozenset(_pairs(body_words)))


def find_duplicates(tx: Tx, slug: str, title: str, body: str, threshold: float) -> Callable[[], list[dict[str, Any]]]:
    """The entries that may be the same knowledge as the new one (at most five, best first), to be called for:
    the candidates are read with the transaction's next statement sent or its commit (PostgreSQL)."""
    by_slug = queries.entries_by_slug_key(tx, slug_key(slug))
    title_words, body_words = _lower_words(title), _lower_words(body)
    groups = _search_groups(title_words, body_words, threshold)
    similar = None if not groups else queries.similar_candidates(
        tx, queries.match_expression(tx.dialect, groups), _CANDIDATES)

    def found() -> list[dict[str, Any]]:
        scored: dict[str, tuple[float, Entry]] = {}
        for entry in map(queries.entry_from_row, by_slug.all()):
            scored[entry.slug] = (_SLUG_MATCH_SCORE, entry)
        if similar is not None:
            new = _Shape.of_words(title_words, body_words)
            for entry in map(queries.entry_from_row, similar.all()):
                score = _similarity(new, _Shape.of(entry.title, entry.body))
                if score > scored.get(entry.slug, (0.0, entry))[0]:
                    scored[entry.slug] = (score, entry)
        hits = sorted(((score, entry) for score, entry in scored.values() if score >= threshold),
                      key=lambda hit: (-hit[0], hit[1].slug))
        return [{"slug": entry.slug, "title": entry.title, "score": round(score, 3), "revision": entry.revision,
                 "curated": entry.curated} for score, entry in hits[:5]]

    return found


def _search_groups(title_words: list[str], body_words: list[str], threshold: float) -> list[list[str]]:
    """AND-groups of at least two distinctive words each; a lone or short word would match too much.

    The title's group is needed only when the body is too short for groups of its own, or when a
    shared title alone could reach the threshold (the title weighs 0.4, the body 0.6).
    """
    body_group = _distinctive(body_words)[: _BODY_GROUPS * _GROUP_SIZE]
    count = min(_BODY_GROUPS, len(body_group) // 2)
    groups = [body_group[i::count] for i in range(count)]
    title_group = _distinctive(title_words)[:_TITLE_GROUP]
    if (count < _BODY_GROUPS or threshold <= _TITLE_WEIGHT) and len(title_group) >= 2:
        groups.append(title_group)
    if not groups:  # a short entry, whose copy would otherwise never be a candidate: its longest words
        shortest = _distinctive(body_words + title_words, _SHORT_ENTRY_LENGTH)[:_GROUP_SIZE]
        if len(shortest) >= 2:
            groups.append(shortest)
    return groups


def _distinctive(text_words: list[str], length: int = _DISTINCTIVE_LENGTH) -> list[str]:
    unique = dict.fromkeys(word for word in text_words if len(word) >= length)
    return sorted(unique, key=len, reverse=True)


def _similarity(a: _Shape, b: _Shape) -> float:
    """0 (nothing shared) to 1 (same words in the title, same word pairs in the body)."""
    return _TITLE_WEIGHT * _jaccard(a.title_words, b.title_words) + _BODY_WEIGHT * _jaccard(a.body_pairs, b.body_pairs)


def _lower_words(text: str) -> list[str]:
    return words(text.lower())


def _pairs(tokens: list[str]) -> set[tuple[str, ...]]:
    if len(tokens) < 2:
        return {tuple(tokens)} if tokens else set()
    return set(itertools.pairwise(tokens))


def _jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
