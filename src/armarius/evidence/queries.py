"""Evidence units' SQL: the unit row, its revisions, and the search table of active revisions.

Every statement filters by the transaction's workspace: on SQLite that is the only scoping, on
PostgreSQL row-level security checks it a second time. Where SQLite (FTS5, bm25) and PostgreSQL
(tsvector, ts_rank) differ, both stand here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from armarius.canonical import canonical_json
from armarius.evidence.model import search_text
from armarius.store import TSQUERY, Later, Row, Tx

_UNIT_COLUMNS = (
    "id, name, title, status, revision, reviewed_revision, reviewed_by, reviewed_at, active_revision, "
    "active_fingerprint, activated_by, activated_at, created_by, created_at, updated_by, updated_at"
)
_REVISION_COLUMNS = "revision, title, body, fingerprint, provenance, lineage, author, reason, created_at"
#: bm25 weights for the FTS5 columns name, title, body (as entries weigh slug, title, body).
_BM25_WEIGHTS = "bm25(2.0, 4.0, 1.0)"


def _lock(tx: Tx) -> str:
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


def unit(tx: Tx, name: str, *, lock: bool = False) -> Row | None:
    """The unit row (``lock``: held against other writers until the transaction ends)."""
    return tx.one(f"SELECT {_UNIT_COLUMNS} FROM evidence_units WHERE workspace_id = ? AND name = ?"
                  f"{_lock(tx) if lock else ''}", (tx.require_workspace(), name))


def units(tx: Tx, *, status: str | None, after: str | None, limit: int) -> list[Row]:
    sql = f"SELECT {_UNIT_COLUMNS} FROM evidence_units WHERE workspace_id = ?"
    params: list[Any] = [tx.require_workspace()]
    if status is not None:
        sql, params = f"{sql} AND status = ?", [*params, status]
    if after is not None:
        sql, params = f"{sql} AND name > ?", [*params, after]
    return tx.all(f"{sql} ORDER BY name LIMIT ?", (*params, limit))


def insert_unit(tx: Tx, *, name: str, title: str, by: str, at: str) -> int:
    row = tx.one(
        "INSERT INTO evidence_units (workspace_id, name, title, status, revision, created_by, created_at, updated_by, "
        "updated_at) VALUES (?, ?, ?, 'edited', 1, ?, ?, ?, ?) RETURNING id",
        (tx.require_workspace(), name, title, by, at, by, at),
    )
    assert row is not None
    return int(row["id"])


def update_unit(tx: Tx, unit_id: int, **changes: Any) -> None:
    assignments = ", ".join(f"{column} = ?" for column in changes)
    tx.execute(f"UPDATE evidence_units SET {assignments} WHERE workspace_id = ? AND id = ?",
               (*changes.values(), tx.require_workspace(), unit_id))


# Revisions -----------------------------------------------------------------------------------------


def insert_revision(tx: Tx, unit_id: int, revision: int, *, title: str, body: str, fingerprint: str,
                    provenance: Sequence[str], lineage: Sequence[dict[str, Any]], author: str, reason: str | None,
                    at: str) -> None:
    tx.execute(
        "INSERT INTO evidence_revisions (workspace_id, unit_id, revision, title, body, fingerprint, provenance, "
        "lineage, author, reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (tx.require_workspace(), unit_id, revision, title, body, fingerprint, canonical_json(list(provenance)),
         canonical_json(list(lineage)), author, reason, at),
    )


def revision(tx: Tx, unit_id: int, number: int) -> Row | None:
    """One revision in full, its provenance and lineage decoded."""
    row = tx.one(f"SELECT {_REVISION_COLUMNS} FROM evidence_revisions WHERE workspace_id = ? AND unit_id = ? "
                 "AND revision = ?", (tx.require_workspace(), unit_id, number))
    return None if row is None else _decoded(row)


def revisions(tx: Tx, unit_id: int) -> list[Row]:
    """Every revision's metadata, oldest first (no bodies)."""
    rows = tx.all("SELECT revision, title, fingerprint, lineage, author, reason, created_at FROM evidence_revisions "
                  "WHERE workspace_id = ? AND unit_id = ? ORDER BY revision", (tx.require_workspace(), unit_id))
    return [_decoded(row) for row in rows]


def active_units(tx: Tx) -> list[Row]:
    """Every unit with an active revision, with the fingerprint of its latest revision's file."""
    return tx.all(
        "SELECT u.name, u.revision, u.active_revision, u.active_fingerprint, r.fingerprint AS latest_fingerprint "
        "FROM evidence_units u JOIN evidence_revisions r "
        "ON r.workspace_id = u.workspace_id AND r.unit_id = u.id AND r.revision = u.revision "
        "WHERE u.workspace_id = ? AND u.active_revision IS NOT NULL ORDER BY u.name",
        (tx.require_workspace(),),
    )


def _decoded(row: Row) -> Row:
    for column in ("provenance", "lineage"):
        if column in row:
            row[column] = tuple(json.loads(row[column]))
    return row


# Search of the active revisions -------------------------------------------------------------------


def index_active(tx: Tx, unit_id: int, *, revision: int, name: str, title: str, body: str) -> None:
    """Make ``revision`` the unit's searched text (SQLite's FTS5 index follows by trigger, PostgreSQL's
    vector is a generated column), from ``search_text`` of its body."""
    tx.execute(
        "INSERT INTO evidence_search (unit_id, workspace_id, revision, name, title, body, search_body) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (unit_id) DO UPDATE SET revision = excluded.revision, "
        "name = excluded.name, title = excluded.title, body = excluded.body, search_body = excluded.search_body",
        (unit_id, tx.require_workspace(), revision, name, title, body, search_text(body)),
    )


def match_expression(dialect: str, groups: Sequence[Sequence[str]]) -> str:
    """An OR of AND-groups of plain words, in each engine's syntax; words are quoted, never parsed (the
    same form as memory's, for the same words)."""
    if dialect == "sqlite":
        return " OR ".join("(" + " AND ".join(f'"{word}"' for word in group) + ")" for group in groups)
    return " | ".join("(" + " & ".join(f"'{word}'" for word in group) + ")" for group in groups)


def search(tx: Tx, expression: str, *, limit: int) -> Later:
    """The active revisions matching, best first: unit id, name, title, revision and body; read with the next
    statement sent or the commit.

    SQLite: FTS5 ranks inside the index, and the search rows are joined only for the rows returned; a
    workspace without active units (most have none) is not searched: FTS5 sets up its ranking for every
    search, which costs six times a look for any active unit (about 20 against 3 microseconds; the index
    evidence_search_workspace of migration 0024 keeps the look one step).
    PostgreSQL: the workspace's active units (row-level security and the workspace index pick them) are
    matched and ranked by ts_rank; the GIN index a table under row-level security cannot use (the match
    operator is not leakproof) is left out: active units are few next to entries.
    """
    workspace = tx.require_workspace()
    if tx.dialect == "sqlite":
        if tx.one("SELECT 1 FROM evidence_search WHERE workspace_id = ? LIMIT 1", (workspace,)) is None:
            return Later.of(tx, [])
        return tx.read_later(
            "SELECT s.unit_id AS id, s.name, s.title, s.revision, s.body FROM evidence_fts "
            "CROSS JOIN evidence_search s "
            "ON s.unit_id = evidence_fts.rowid "
            "WHERE evidence_fts MATCH ? AND evidence_fts.rank MATCH ? AND s.workspace_id = ? "
            "ORDER BY evidence_fts.rank LIMIT ?",
            (expression, _BM25_WEIGHTS, workspace, limit),
        )
    return tx.read_later(
        "SELECT s.unit_id AS id, s.name, s.title, s.revision, s.body FROM evidence_search s, "
        f"{TSQUERY} query "
        "WHERE s.workspace_id = ? AND s.tsv @@ query ORDER BY ts_rank(s.tsv, query) DESC, s.unit_id LIMIT ?",
        (expression, workspace, limit),
    )


def active_later(tx: Tx, unit_ids: Sequence[int]) -> Later:
    """The active revisions of these units, as :func:`search` gives them (in no order); read with the next
    statement sent or the commit."""
    return tx.read_later(
        "SELECT unit_id AS id, name, title, revision, body FROM evidence_search WHERE workspace_id = ? "
        f"AND unit_id IN ({', '.join('?' * len(unit_ids))})", (tx.require_workspace(), *unit_ids))
