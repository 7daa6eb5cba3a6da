"""Memory's SQL. Where SQLite (FTS5, bm25) and PostgreSQL (tsvector, GIN) differ, both stand here.

Every statement filters by the transaction's workspace: on SQLite that is the only scoping, on
PostgreSQL row-level security checks it a second time. Writes whose counts nobody reads (a revision, the
tags and links, the word map, an update of the entry or its curation) are queued with
``Tx.execute_later``: on PostgreSQL they go with the next statement or the commit.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from armarius.errors import InvalidInput
from armarius.evidence.model import SEARCH_COST_MAX, search_text
from armarius.memory.model import INDEXED_REPETITIONS, WORD_PATTERN, Entry
from armarius.memory.snippets import word_map
from armarius.store import TSQUERY, Later, Row, Tx

_ENTRY_COLUMNS = (
    "id, slug, title, body, tags, revision, curated_revision, curated_by, curated_at, review_base_revision, "
    "needs_review, created_at, updated_at, updated_by"
)
#: bm25 weights for the FTS5 columns slug, title, body: as a rank MATCH names the function, and as a call.
_WEIGHTS = "2.0, 4.0, 1.0"
_BM25_WEIGHTS = f"bm25({_WEIGHTS})"
_BM25 = f"bm25(entries_fts, {_WEIGHTS})"
#: Recall ranks at most this many of the entries that match, the first ones in the index's order (see
#: search_later): ranking costs per match, and a common word matches a third of a workspace.
RANK_CANDIDATES = 1000
#: ASCII letters and digits lowercased, everything else a space: split() then gives the words of ASCII text.
_ASCII_WORDS = str.maketrans({chr(code): chr(code).lower() if chr(code).isalnum() else " " for code in range(128)})
_WORD_PIECES = re.compile(f"({WORD_PATTERN.pattern})")


def entry_from_row(row: Row) -> Entry:
    return Entry(
        id=row["id"], slug=row["slug"], title=row["title"], body=row["body"], tags=tuple(json.loads(row["tags"])),
        revision=row["revision"], curated_revision=row["curated_revision"], curated_by=row["curated_by"],
        curated_at=row["curated_at"], review_base_revision=row["review_base_revision"],
        needs_review=bool(row["needs_review"]), created_at=row["created_at"], updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )


def entry_by_slug(tx: Tx, slug: str, *, lock: bool = False) -> Entry | None:
    """The entry, locked against concurrent writers when ``lock`` (SQLite's write lock is already held)."""
    suffix = " FOR UPDATE" if lock and tx.dialect == "postgresql" else ""
    row = tx.one(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE workspace_id = ? AND slug = ?{suffix}",
                 (tx.require_workspace(), slug))
    return None if row is None else entry_from_row(row)


def entry_later(tx: Tx, slug: str, *, lock: bool = False) -> Later:
    """The entry's row (for :func:`entry_from_row`), read with the next statement sent or the commit; locked as
    :func:`entry_by_slug` locks it."""
    suffix = " FOR UPDATE" if lock and tx.dialect == "postgresql" else ""
    return tx.read_later(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE workspace_id = ? AND slug = ?{suffix}",
                         (tx.require_workspace(), slug))


def entries_by_slug_key(tx: Tx, key: str) -> Later:
    """The rows of the entries whose slug has ``key`` (for :func:`entry_from_row`), read with the next
    statement sent or the commit."""
    return tx.read_later(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE workspace_id = ? AND slug_key = ?",
                         (tx.require_workspace(), key))


_INSERT_ENTRY = ("INSERT INTO entries (workspace_id, slug, slug_key, title, body, search_body, tags, revision, "
                 "created_at, updated_at, updated_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def insert_entry(tx: Tx, *, slug: str, slug_key: str, title: str, body: str, tags: str, by: str, at: str,
                 revision: int = 1) -> int:
    row = tx.one(f"{_INSERT_ENTRY} RETURNING id",
                 (tx.require_workspace(), slug, slug_key, title, body, search_body(body), tags, revision, at, at, by))
    assert row is not None
    entry_id = int(row["id"])
    insert_word_map(tx, entry_id, body)
    return entry_id


def insert_entry_later(tx: Tx, *, slug: str, slug_key: str, title: str, body: str, tags: str, by: str,
                       at: str) -> Later:
    """A new entry at revision 1, unless its slug is taken (then no row): its id, read with the next statement
    sent or the commit; its word map follows once the id is known (:func:`insert_word_map`)."""
    return tx.read_later(f"{_INSERT_ENTRY} ON CONFLICT (workspace_id, slug) DO NOTHING RETURNING id",
                         (tx.require_workspace(), slug, slug_key, title, body, search_body(body), tags, 1, at, at, by))


def insert_word_map(tx: Tx, entry_id: int, body: str) -> None:
    words = word_map(body)
    if words is not None:
        tx.execute_later("INSERT INTO entry_word_maps (entry_id, workspace_id, word_map) VALUES (?, ?, ?)",
                         (entry_id, tx.require_workspace(), words))


def update_entry(tx: Tx, entry_id: int, *, title: str, body: str, tags: str, revision: int, by: str, at: str,
                 needs_review: bool) -> None:
    tx.execute_later(
        "UPDATE entries SET title = ?, body = ?, search_body = ?, tags = ?, revision = ?, updated_at = ?, "
        "updated_by = ?, needs_review = ? WHERE workspace_id = ? AND id = ?",
        (title, body, search_body(body), tags, revision, at, by, needs_review, tx.require_workspace(), entry_id),
    )
    words = word_map(body)
    if words is None:
        tx.execute_later("DELETE FROM entry_word_maps WHERE workspace_id = ? AND entry_id = ?",
                         (tx.require_workspace(), entry_id))
    else:
        tx.execute_later("INSERT INTO entry_word_maps (entry_id, workspace_id, word_map) VALUES (?, ?, ?) "
                         "ON CONFLICT (entry_id) DO UPDATE SET word_map = excluded.word_map",
                         (entry_id, tx.require_workspace(), words))


def search_body(body: str) -> str | None:
    """The text the full-text index is given for ``body`` when it differs from the body: each word's
    repetitions past the INDEXED_REPETITIONS-th left out (case aside), so that ranking reads a bounded
    number of positions per entry (FTS5's bm25() reads every one). None: the body itself.

    Every word of the body stays findable; only the ranking of an entry that repeats a word hundreds
    of times changes, and barely (bm25 counts a word's repetitions with diminishing weight). A word
    left out takes the text after it along when the text before it ends in an ASCII character, which
    parts words on both engines: they number words, not characters, so the index is the same as if
    only the word went, and the column stays short (``zz zz …`` at the body limit: 800 characters,
    not 22,000 of them spaces). A combining accent before the word (decomposed text), which FTS5
    takes into a word, keeps the text after it.
    """
    if len(body) <= 2 * INDEXED_REPETITIONS:  # too short to hold a word that often
        return None
    # ASCII text (most bodies) is split into lowercase words in C; other text by the word pattern.
    words = body.translate(_ASCII_WORDS).split() if body.isascii() else map(str.lower, WORD_PATTERN.findall(body))
    frequent = {word for word, count in Counter(words).items() if count > INDEXED_REPETITIONS}
    if not frequent:
        return None
    pieces, seen = _WORD_PIECES.split(body), Counter[str]()  # [text, word, text, …, word, text]
    for index in range(1, len(pieces), 2):
        word = pieces[index].lower()
        if word in frequent:
            seen[word] += 1
            if seen[word] > INDEXED_REPETITIONS:
                pieces[index] = ""
                if pieces[index - 1][-1:].isascii():  # the text before it parts words on both engines
                    pieces[index + 1] = ""
    return "".join(pieces)


def check_indexable(body: str) -> None:
    """PostgreSQL: refuse a body whose words cannot be indexed. A search vector (tsvector) holds at most 1 MiB
    of words and positions, which about 630 KB of distinct words fill, while ``memory.body_max_bytes`` may be
    up to 16 MiB. The words are counted as evidence units count theirs (evidence.model.search_text, against
    SEARCH_COST_MAX, which leaves room for the title, the slug and the words PostgreSQL's parser adds), on the
    text indexed for the entry (:func:`search_body`: each word at most INDEXED_REPETITIONS times). A word
    costs at most four times its bytes in the body, so a body of at most a quarter of SEARCH_COST_MAX (the
    default limit of 64 KiB, and more) is not counted. What the count misses, PostgreSQL refuses as
    ``invalid_input`` too (store.engine), with nothing written."""
    size = len(body.encode("utf-8"))
    if 4 * size + 3 <= SEARCH_COST_MAX or search_text(search_body(body) or body) is None:
        return
    raise InvalidInput(
        f"The body has too many distinct words for PostgreSQL's search index, which holds about "
        f"{SEARCH_COST_MAX // 1024} KiB of them per entry: split it into several entries and link them with "
        "[[slug]].", field="body", size=size)


def insert_revision(tx: Tx, entry_id: int, revision: int, *, title: str, body: str, tags: str, reason: str | None,
                    operation_id: str, author: str, at: str, overrode_curated: bool) -> None:
    tx.execute_later(
        "INSERT INTO entry_revisions (workspace_id, entry_id, revision, title, body, tags, reason, operation_id, "
        "author, created_at, overrode_curated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (tx.require_workspace(), entry_id, revision, title, body, tags, reason, operation_id, author, at,
         overrode_curated),
    )


def replace_tags_and_links(tx: Tx, entry_id: int, tags: Sequence[str], links: Sequence[str], *,
                           new_entry: bool = False) -> None:
    workspace = tx.require_workspace()
    if not new_entry:
        tx.execute_later("DELETE FROM entry_tags WHERE workspace_id = ? AND entry_id = ?", (workspace, entry_id))
        tx.execute_later("DELETE FROM entry_links WHERE workspace_id = ? AND source_id = ?", (workspace, entry_id))
    for tag in tags:
        tx.execute_later("INSERT INTO entry_tags (workspace_id, entry_id, tag) VALUES (?, ?, ?)",
                         (workspace, entry_id, tag))
    for target in links:
        tx.execute_later("INSERT INTO entry_links (workspace_id, source_id, target_slug) VALUES (?, ?, ?)",
                         (workspace, entry_id, target))


def set_curation(tx: Tx, entry_id: int, *, curated_revision: int | None, by: str | None, at: str | None,
                 review_base_revision: int | None, needs_review: bool) -> None:
    tx.execute_later(
        "UPDATE entries SET curated_revision = ?, curated_by = ?, curated_at = ?, review_base_revision = ?, "
        "needs_review = ? WHERE workspace_id = ? AND id = ?",
        (curated_revision, by, at, review_base_revision, needs_review, tx.require_workspace(), entry_id),
    )


def revisions(tx: Tx, entry_id: int) -> list[Row]:
    return tx.all(
        "SELECT revision, title, body, tags, reason, operation_id, author, created_at, overrode_curated "
        "FROM entry_revisions WHERE workspace_id = ? AND entry_id = ? ORDER BY revision",
        (tx.require_workspace(), entry_id),
    )


def revision(tx: Tx, entry_id: int, number: int) -> Row | None:
    return tx.one(
        "SELECT revision, title, body, tags, reason, operation_id, author, created_at, overrode_curated "
        "FROM entry_revisions WHERE workspace_id = ? AND entry_id = ? AND revision = ?",
        (tx.require_workspace(), entry_id, number),
    )


def links_of(tx: Tx, slug: str) -> Later:
    """The entry's outgoing links with whether their target exists (``title`` None: it does not), read
    with the next statement sent or the commit."""
    return tx.read_later(
        "SELECT l.target_slug, t.title FROM entries s JOIN entry_links l "
        "ON l.workspace_id = s.workspace_id AND l.source_id = s.id LEFT JOIN entries t "
        "ON t.workspace_id = l.workspace_id AND t.slug = l.target_slug "
        "WHERE s.workspace_id = ? AND s.slug = ? ORDER BY l.target_slug",
        (tx.require_workspace(), slug),
    )


def backlinks_of(tx: Tx, slug: str) -> Later:
    """The entries linking to ``slug``, read with the next statement sent or the commit."""
    return tx.read_later(
        "SELECT s.slug, s.title FROM entry_links l JOIN entries s ON s.id = l.source_id "
        "WHERE l.workspace_id = ? AND l.target_slug = ? ORDER BY s.slug",
        (tx.require_workspace(), slug),
    )


def list_entries(tx: Tx, *, prefix: str | None, tag: str | None, curated: bool | None, needs_review: bool | None,
                 after: str | None, limit: int) -> list[Entry]:
    conditions: list[str] = ["e.workspace_id = ?"]
    params: list[Any] = [tx.require_workspace()]
    if prefix:
        conditions.append("e.slug >= ? AND e.slug < ?")
        params += [prefix, prefix + "\U0010ffff"]
    if tag:
        conditions.append("e.id IN (SELECT entry_id FROM entry_tags WHERE workspace_id = ? AND tag = ?)")
        params += [tx.require_workspace(), tag]
    if curated is not None:
        conditions.append("(e.curated_revision = e.revision)" if curated else
                          "(e.curated_revision IS NULL OR e.curated_revision <> e.revision)")
    if needs_review is not None:
        conditions.append("e.needs_review = ?")
        params.append(needs_review)
    if after:
        conditions.append("e.slug > ?")
        params.append(after)
    rows = tx.all(
        f"SELECT {', '.join('e.' + c.strip() for c in _ENTRY_COLUMNS.split(','))} FROM entries e "
        f"WHERE {' AND '.join(conditions)} ORDER BY e.slug LIMIT ?",
        (*params, limit),
    )
    return [entry_from_row(row) for row in rows]


# Full-text search ------------------------------------------------------------------------------


def match_expression(dialect: str, groups: Sequence[Sequence[str]]) -> str:
    """An OR of AND-groups of plain words, in each engine's syntax; words are quoted, never parsed."""
    if dialect == "sqlite":
        return " OR ".join("(" + " AND ".join(f'"{word}"' for word in group) + ")" for group in groups)
    return " | ".join("(" + " & ".join(f"'{word}'" for word in group) + ")" for group in groups)


def search_later(tx: Tx, expression: str, *, limit: int, curated_only: bool, tags: Sequence[str],
                 ids_only: bool = False) -> Later:
    """Ranked hits with their bodies and word maps (``ids_only``: their ids alone), best first, read with
    the next statement sent or the commit (memory.snippets cuts the snippet from a body, reading only the
    parts of it that its word map, written with it, says may hold a query word; entry_word_maps is a table
    of its own, as a column after SQLite's long ones is read by paging through them).

    Both engines find the workspace's matches and rank the first RANK_CANDIDATES of them that pass the
    filters, in the index's order (entry ids, oldest first), then join the top rows. So a word found in
    tens of thousands of entries costs what one found in RANK_CANDIDATES entries costs. Every candidate
    holds all the words, so a query that some entry matches is answered by its words ("all", never a
    fallback to "any"), and a query with at most RANK_CANDIDATES matches is ranked in full; a more
    common one is answered by the best of the first RANK_CANDIDATES (a further word narrows it).
    SQLite: FTS5 hands out its matches in rowid order and bm25 scores each (reading its column sizes);
    a match's workspace is looked up in the index entries_workspace_id (migration 0023), not in the row,
    which holds the body; CROSS JOIN keeps the index as the outer loop (the planner would otherwise walk
    the workspace's entries and test each against the index). A common word among 10,000 entries took
    2.8 ms ranking every match (all 4,000), 1.0 ms now.
    PostgreSQL: armarius_search_entries() does the same with the GIN index (migrations 0004 and 0017):
    ranking reads each candidate's vector.
    Neither engine's snippet function is used: FTS5's snippet() takes time in the square of a
    row's hits and ts_headline() parses the whole body (see memory.snippets).
    """
    workspace = tx.require_workspace()
    columns, word_maps = (_HIT_IDS, "") if ids_only else (_HIT_COLUMNS, _WORD_MAPS)
    if tx.dialect == "sqlite":
        filters, params = _recall_filters(workspace, curated_only=curated_only, tags=tags)
        candidates = (f"SELECT e.id, {_BM25} AS score FROM entries_fts CROSS JOIN entries e INDEXED BY "
                      f"entries_workspace_id ON e.workspace_id = ? AND e.id = entries_fts.rowid "
                      f"WHERE entries_fts MATCH ?{filters} LIMIT ?")
        # Ranked, then cut to the page, then joined: the planner would join every candidate's row (with its body)
        # before the sort (with the rows read, a common word among 10,000 entries took 3.0 ms instead of 1.1).
        ranked = f"SELECT id, score FROM ({candidates}) ORDER BY score, id LIMIT ?"
        return tx.read_later(
            ranked if ids_only else (f"SELECT {columns} FROM ({ranked}) hit JOIN entries e ON e.id = hit.id "
                                     f"{word_maps}ORDER BY hit.score, hit.id"),
            (workspace, expression, *params, max(limit, RANK_CANDIDATES), limit),
        )
    return tx.read_later(
        f"SELECT {columns} FROM armarius_search_entries({TSQUERY}, ?, ?, ?, ?) hit "
        f"JOIN entries e ON e.id = hit.entry_id AND e.workspace_id = ? {word_maps}"
        "ORDER BY hit.rank DESC, hit.entry_id",
        (expression, limit, curated_only, list(tags), max(limit, RANK_CANDIDATES), workspace),
    )


#: What recall shows of an entry (and its word map, for the snippet), or only which entry it is.
_HIT_COLUMNS = "e.id, e.slug, e.title, e.revision, e.curated_revision, e.body, m.word_map"
_HIT_IDS = "e.id"
_WORD_MAPS = "LEFT JOIN entry_word_maps m ON m.entry_id = e.id AND m.workspace_id = e.workspace_id "


def similar_candidates(tx: Tx, expression: str, limit: int) -> Later:
    """The rows of the entries matching any AND-group, best first (for :func:`entry_from_row`): the short list
    the duplicate check scores; read with the next statement sent or the commit."""
    workspace = tx.require_workspace()
    columns = ", ".join("e." + column.strip() for column in _ENTRY_COLUMNS.split(","))
    if tx.dialect == "sqlite":
        # Unranked first: usually only a handful match, and ranking costs more than the match itself.
        sql = (f"SELECT {columns} FROM entries_fts CROSS JOIN entries e ON e.id = entries_fts.rowid "
               "WHERE entries_fts MATCH ? AND e.workspace_id = ? LIMIT ?")
        rows = tx.all(sql, (expression, workspace, limit + 1))
        if len(rows) > limit:
            rows = tx.all(sql.replace("LIMIT ?", "AND entries_fts.rank MATCH ? ORDER BY entries_fts.rank LIMIT ?"),
                          (expression, workspace, _BM25_WEIGHTS, limit))
        return Later.of(tx, rows)
    # Every match is ranked (no candidate bound): a duplicate shares the new entry's rarest words with
    # it, and must not be missed because other entries share its more common ones.
    return tx.read_later(
        f"SELECT {columns} FROM armarius_search_entries({TSQUERY}, ?, false, '{{}}', NULL) hit "
        "JOIN entries e ON e.id = hit.entry_id AND e.workspace_id = ? ORDER BY hit.rank DESC, hit.entry_id",
        (expression, limit, workspace),
    )


def needs_review_entries(tx: Tx) -> list[Entry]:
    rows = tx.all(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE workspace_id = ? AND needs_review = ? ORDER BY slug",
                  (tx.require_workspace(), True))
    return [entry_from_row(row) for row in rows]


#: When an entry went into review: its first revision since the last curation that overrode the curation
#: (through the revisions' primary key; the entry's last change if none is found).
_REVIEW_SINCE = (
    "coalesce((SELECT min(r.created_at) FROM entry_revisions r WHERE r.entry_id = e.id "
    "AND r.workspace_id = e.workspace_id AND r.revision > coalesce(e.review_base_revision, 1) "
    "AND r.overrode_curated = ?), e.updated_at)"
)


def needs_review_page(tx: Tx, *, after: str | None, limit: int, contains: str | None) -> list[Row]:
    """Entries that need review, by slug (through the partial index entries_needs_review), without their bodies:
    id, slug, title, revision, curated_revision, review_base_revision, updated_at, updated_by and since."""
    conditions, params = _review_conditions(tx, contains)
    if after is not None:
        conditions.append("e.slug > ?")
        params.append(after)
    return tx.all(
        "SELECT e.id, e.slug, e.title, e.revision, e.curated_revision, e.review_base_revision, e.updated_at, "
        f"e.updated_by, {_REVIEW_SINCE} AS since FROM entries e WHERE {' AND '.join(conditions)} "
        "ORDER BY e.slug LIMIT ?",
        (True, *params, limit),
    )


def needs_review_summary(tx: Tx) -> Row:
    """How many entries need review (count) and when the one waiting longest went into review (oldest_at)."""
    conditions, params = _review_conditions(tx, None)
    row = tx.one(
        f"SELECT count(*) AS count, min(since) AS oldest_at FROM (SELECT {_REVIEW_SINCE} AS since FROM entries e "
        f"WHERE {' AND '.join(conditions)}) waiting",
        (True, *params),
    )
    assert row is not None
    return row


def _review_conditions(tx: Tx, contains: str | None) -> tuple[list[str], list[Any]]:
    conditions = ["e.workspace_id = ?", "e.needs_review = ?"]
    params: list[Any] = [tx.require_workspace(), True]
    if contains:
        conditions.append(f"({contains_text(tx, 'e.slug')} OR {contains_text(tx, 'e.title')})")
        params += [contains.lower(), contains.lower()]
    return conditions, params


def contains_text(tx: Tx, column: str) -> str:
    """A condition: the column, lowercased, contains the (lowercased) parameter as it is (no pattern syntax)."""
    return f"instr(lower({column}), ?) > 0" if tx.dialect == "sqlite" else f"strpos(lower({column}), ?) > 0"


def overrides_since(tx: Tx, entry_id: int, base_revision: int) -> list[Row]:
    """The entry's revisions after ``base_revision`` that overrode a curation, in order (no bodies)."""
    return tx.all(
        "SELECT revision, author, reason, created_at FROM entry_revisions WHERE workspace_id = ? AND entry_id = ? "
        "AND revision > ? AND overrode_curated = ? ORDER BY revision",
        (tx.require_workspace(), entry_id, base_revision, True),
    )


def encode_tags(tags: Sequence[str]) -> str:
    return json.dumps(list(tags), ensure_ascii=False)


def decode_revision(row: Row) -> dict[str, Any]:
    return {**row, "tags": json.loads(row["tags"]), "overrode_curated": bool(row["overrode_curated"])}


def existing_slugs(tx: Tx, slugs: Sequence[str]) -> set[str]:
    """Which of ``slugs`` name an entry of the workspace."""
    if not slugs:
        return set()
    rows = tx.all(
        f"SELECT slug FROM entries WHERE workspace_id = ? AND slug IN ({', '.join('?' for _ in slugs)})",
        (tx.require_workspace(), *slugs),
    )
    return {row["slug"] for row in rows}


def recall_rows(tx: Tx, entry_ids: Sequence[int], *, curated_only: bool, tags: Sequence[str],
                ids_only: bool = False) -> dict[int, Row]:
    """The entries among ``entry_ids`` that pass recall's filters, as search returns them, by id."""
    return by_id(recall_rows_later(tx, entry_ids, curated_only=curated_only, tags=tags, ids_only=ids_only))


def by_id(rows: Later) -> dict[int, Row]:
    """Recall's rows by entry id."""
    return {int(row["id"]): row for row in rows.all()}


def recall_rows_later(tx: Tx, entry_ids: Sequence[int], *, curated_only: bool, tags: Sequence[str],
                      ids_only: bool = False) -> Later:
    """:func:`recall_rows`' rows, read with the next statement sent or the commit."""
    if not entry_ids:
        return Later.of(tx, [])
    workspace = tx.require_workspace()
    filters, params = _recall_filters(workspace, curated_only=curated_only, tags=tags)
    columns, word_maps = (_HIT_IDS, "") if ids_only else (_HIT_COLUMNS, _WORD_MAPS)
    # The ids pick the rows: SQLite would otherwise walk the workspace's index ("+" keeps it off that column),
    # reading every entry of the workspace to find a few (20 ms at 100,000 entries).
    scope = "+e.workspace_id" if tx.dialect == "sqlite" else "e.workspace_id"
    return tx.read_later(
        f"SELECT {columns} FROM entries e {word_maps}"
        f"WHERE {scope} = ? AND e.id IN ({', '.join('?' for _ in entry_ids)}){filters}",
        (workspace, *entry_ids, *params),
    )


def _recall_filters(workspace: int, *, curated_only: bool, tags: Sequence[str]) -> tuple[str, list[Any]]:
    """recall's filters on entries ``e``: only curated ones, only those with every tag."""
    filters, params = "", list[Any]()
    if curated_only:
        filters += " AND e.curated_revision = e.revision"
    if tags:
        filters += (f" AND e.id IN (SELECT entry_id FROM entry_tags WHERE workspace_id = ? AND tag IN "
                    f"({', '.join('?' for _ in tags)}) GROUP BY entry_id HAVING count(*) = ?)")
        params = [workspace, *tags, len(tags)]
    return filters, params
