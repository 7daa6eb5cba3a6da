"""Is a new entry the same knowledge as an existing one?

Candidates come from one full-text query, an OR of small AND-groups (the title's words; the body's
longest, most distinctive words in threes), so the engine ranks only the few entries that share
several distinctive words. Entries whose slug differs only in separators or a plural are candidates
too. Each candidate is then scored in Python: word overlap of the titles and word-pair overlap of
the bodies.
"""

from __future__ import annotations

import itertools
from typing import Any

from armarius.memory import queries
from armarius.memory.model import Entry, slug_key, words
from armarius.store import Tx

_CANDIDATES = 8
_TITLE_WORDS = 6
_BODY_GROUPS, _GROUP_SIZE = 3, 3
_TITLE_WEIGHT, _BODY_WEIGHT = 0.4, 0.6
_SLUG_MATCH_SCORE = 0.95


def find_duplicates(tx: Tx, slug: str, title: str, body: str, threshold: float) -> list[dict[str, Any]]:
    scored: dict[str, tuple[float, Entry]] = {}
    for entry in queries.entries_by_slug_key(tx, slug_key(slug)):
        scored[entry.slug] = (_SLUG_MATCH_SCORE, entry)
    groups = _search_groups(title, body)
    if groups:
        for entry in queries.similar_candidates(tx, queries.match_expression(tx.dialect, groups), _CANDIDATES):
            score = similarity(title, body, entry.title, entry.body)
            if score > scored.get(entry.slug, (0.0, entry))[0]:
                scored[entry.slug] = (score, entry)
    hits = sorted(((score, entry) for score, entry in scored.values() if score >= threshold),
                  key=lambda hit: (-hit[0], hit[1].slug))
    return [{"slug": entry.slug, "title": entry.title, "score": round(score, 3), "revision": entry.revision,
             "curated": entry.curated} for score, entry in hits[:5]]


def _search_groups(title: str, body: str) -> list[list[str]]:
    groups = []
    title_words = list(dict.fromkeys(_lower_words(title)))[:_TITLE_WORDS]
    if title_words:
        groups.append(title_words)
    distinctive = sorted(dict.fromkeys(_lower_words(body)), key=len, reverse=True)[: _BODY_GROUPS * _GROUP_SIZE]
    groups += [distinctive[i::_BODY_GROUPS] for i in range(_BODY_GROUPS) if distinctive[i::_BODY_GROUPS]]
    return groups


def similarity(title_a: str, body_a: str, title_b: str, body_b: str) -> float:
    """0 (nothing shared) to 1 (same words in the title, same word pairs in the body)."""
    return _TITLE_WEIGHT * _jaccard(set(_lower_words(title_a)), set(_lower_words(title_b))) + _BODY_WEIGHT * _jaccard(
        _pairs(body_a), _pairs(body_b)
    )


def _lower_words(text: str) -> list[str]:
    return [word.lower() for word in words(text)]


def _pairs(text: str) -> set[tuple[str, ...]]:
    tokens = _lower_words(text)
    if len(tokens) < 2:
        return {tuple(tokens)} if tokens else set()
    return set(itertools.pairwise(tokens))


def _jaccard(a: set[Any], b: set[Any]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
