"""Entry and evidence unit vectors: written with each revision, searched from a copy kept in memory per
workspace.

``entry_vectors`` holds one quantized vector per entry (of its current revision), ``unit_vectors`` one
per active evidence unit (of its active revision), each with the model that made it (by its number in
``vector_models``), and a sequence number per workspace that grows with every vector written (each
table numbered on its own). Writers take the workspace's vector lock before numbering (SQLite writers
hold the database's write lock anyway), so numbers are handed out in commit order: a reader that
has seen every vector up to number N has seen every committed vector up to N, and the next reader
only needs the ones after it.

:class:`VectorIndex` keeps, per workspace, the vectors of this model as float32 matrices in this
process (about 1.4 KB an entry with their prefixes: 140 MB for 100,000 entries) and brings them up
to date at each search with one indexed query for the vectors numbered after the last one it holds.
A search is a matrix product (in two steps for a large workspace: see EXACT_UP_TO), with no index
to tune or rebuild. The first search of a workspace in a process reads all its vectors: 67 ms at 20,000
entries, 0.56 s at 100,000 on SQLite (bench/first_search.py), mostly the rows read and the memory's first
use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from armarius.memory.embeddings import DIMENSIONS, Embedder, dequantize, entry_text, quantize
from armarius.store import Row, Tx

if TYPE_CHECKING:  # numpy is imported where vectors are searched: commands that search none start faster
    import numpy as np

#: The advisory lock topic of a workspace's vector numbering (PostgreSQL).
_VECTOR_TOPIC = 2002


def embedding(embedder: Embedder, title: str, body: str) -> bytes:
    """The stored (quantized) vector of an entry's text."""
    return quantize(embedder.embed([entry_text(title, body)])[0])


def embedding_meanwhile(tx: Tx, embedder: Embedder, title: str, body: str) -> Callable[[], bytes]:
    """:func:`embedding`, to be called for: on PostgreSQL made while the transaction's next statements travel
    (at once when it is called for before any has gone); on SQLite, where nothing travels, when it is called
    for. (A thread of its own, running while SQLite works without Python's lock, hid it from a lone call's
    time but not from the processor's, and handing it over and back cost more processor time than the
    embedding itself: 0.14-0.22 ms more a `remember`, which a busy server pays, measured 2026-12-07.)"""
    made: list[bytes] = []
    failed: list[Exception] = []

    def make() -> None:
        if not made and not failed:
            try:
                made.append(embedding(embedder, title, body))
            except Exception as exc:  # raised where the vector is called for
                failed.append(exc)

    if tx.dialect == "postgresql":
        tx.meanwhile(make)

    def vector() -> bytes:
        make()  # at once if no statement has gone since
        if failed:
            raise failed[0]
        return made[0]

    return vector


@dataclass(frozen=True)
class Kind:
    """What a table of vectors is of: one vector per entry (of its current revision), or per evidence unit
    (of its active revision). Each kind is numbered on its own, under the same turn."""

    table: str
    #: The column naming what each vector is of.
    owner: str
    #: The searched texts: id, revision, title and body of each.
    texts: str

    @cached_property
    def put_sql(self) -> str:
        """One vector, of the model named last, numbered after the workspace's last."""
        return (f"INSERT INTO {self.table} ({self.owner}, workspace_id, seq, revision, model, vector) "
                f"SELECT ?, ?, coalesce((SELECT max(seq) FROM {self.table} WHERE workspace_id = ?), 0) + 1, ?, m.id, ? "
                f"FROM vector_models m WHERE m.name = ? ON CONFLICT ({self.owner}) DO UPDATE SET seq = excluded.seq, "
                "revision = excluded.revision, model = excluded.model, vector = excluded.vector")


ENTRIES = Kind("entry_vectors", "entry_id", "SELECT id, revision, title, body, workspace_id FROM entries")
UNITS = Kind("unit_vectors", "unit_id",
             "SELECT unit_id AS id, revision, title, body, workspace_id FROM evidence_search")


def put(tx: Tx, vectors: Sequence[tuple[int, int, bytes]], model: str, kind: Kind = ENTRIES) -> None:
    """Store vectors (entry or unit id, revision, quantized vector) of ``model``, numbered in commit order; sent
    with the transaction's next statement or its commit (PostgreSQL)."""
    workspace = tx.require_workspace()
    take_turn(tx)
    tx.execute_later(_REGISTER, (model, model))
    for owner, revision, vector in vectors:
        tx.execute_later(kind.put_sql, (owner, workspace, workspace, revision, vector, model))


def take_turn(tx: Tx) -> None:
    """Hold the workspace's vector numbering until the transaction ends (PostgreSQL), with the next statement.
    Writers take it before the audit chain's head, as every writer takes the two (see put)."""
    tx.serialize(_VECTOR_TOPIC)


#: The model, registered unless it is already (the model's first vector in this store).
_REGISTER = ("INSERT INTO vector_models (name) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM vector_models WHERE name = ?) "
             "ON CONFLICT (name) DO NOTHING")
#: The stored number of the model named.
_MODEL = "(SELECT id FROM vector_models WHERE name = ?)"


def missing(tx: Tx, model: str, limit: int, kind: Kind = ENTRIES) -> list[Row]:
    """Entries (units) of the workspace whose current (active) revision has no vector of ``model``, for
    reindexing: id, revision, title and body."""
    return tx.all(
        f"SELECT t.id, t.revision, t.title, t.body FROM ({kind.texts}) t LEFT JOIN {kind.table} v "
        f"ON v.{kind.owner} = t.id AND v.model = {_MODEL} AND v.revision = t.revision "
        f"WHERE t.workspace_id = ? AND v.{kind.owner} IS NULL ORDER BY t.id LIMIT ?",
        (model, tx.require_workspace(), limit),
    )


def counts(tx: Tx, model: str, kind: Kind = ENTRIES) -> tuple[int, int]:
    """How many entries (units) of the workspace there are, and how many have a current vector of ``model``."""
    row = tx.one(
        f"SELECT count(*) AS texts, count(v.{kind.owner}) AS with_vector FROM ({kind.texts}) t "
        f"LEFT JOIN {kind.table} v ON v.{kind.owner} = t.id AND v.model = {_MODEL} AND v.revision = t.revision "
        "WHERE t.workspace_id = ?",
        (model, tx.require_workspace()),
    )
    assert row is not None
    return int(row["texts"]), int(row["with_vector"])


#: Up to this many vectors a search compares the query with each of them in full; above it, in two
#: steps: with every vector's first COARSE_DIMENSIONS components (WordLlama is trained so that a
#: prefix of its vectors is an embedding of its own), then in full with the best CANDIDATES of those.
#: At 100,000 entries that reads three eighths of the memory, and finds the same answers: on the
#: labelled set among 100,000 entries, recall@1/5/10 as the exact scan, 90% of its top 10
#: (bench/vector_search.py).
EXACT_UP_TO = 20_000
COARSE_DIMENSIONS = 96
CANDIDATES = 1000


def _unit(matrix: np.ndarray[Any, np.dtype[np.float32]]) -> np.ndarray[Any, np.dtype[np.float32]]:
    import numpy as np

    lengths = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return (matrix / np.where(lengths > 0, lengths, 1)).astype(np.float32, copy=False)


@dataclass
class _Space:
    """One workspace's vectors in this process: in full, and their unit-length prefixes (``coarse``)."""

    seen: int = 0
    ids: list[int] = field(default_factory=list)
    rows: dict[int, int] = field(default_factory=dict)
    matrix: np.ndarray[Any, np.dtype[np.float32]] | None = None
    coarse: np.ndarray[Any, np.dtype[np.float32]] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fresh: list[Row]) -> None:
        """Take in vectors read from the store (new entries' and new revisions' of known ones). When every vector
        read is of an entry (unit) new to the space, as in a first read, they are converted straight into the
        matrices' next rows. A vector that cannot be read leaves the space as it was (read again next time)."""
        blobs = [row["vector"] for row in fresh]
        new = [row["id"] for row in fresh if row["id"] not in self.rows]  # each once: it has one vector row
        first = len(self.ids)
        matrix, coarse = self._holding(first + len(new))
        in_place = len(new) == len(fresh)
        vectors = dequantize(blobs, out=matrix[first:first + len(new)] if in_place else None)
        self.rows.update(zip(new, range(first, first + len(new)), strict=True))
        self.ids += new
        at: slice | list[int] = slice(first, len(self.ids))
        if not in_place:
            at = [self.rows[row["id"]] for row in fresh]
            matrix[at] = vectors
        coarse[at] = _unit(vectors[:, :COARSE_DIMENSIONS])
        self.seen = max(self.seen, *(int(row["seq"]) for row in fresh))

    def _holding(self, count: int) -> tuple[np.ndarray[Any, np.dtype[np.float32]],
                                            np.ndarray[Any, np.dtype[np.float32]]]:
        """The matrices, grown (to twice what is needed) when they hold fewer than ``count`` rows."""
        if self.matrix is None or self.coarse is None or count > len(self.matrix):
            size = max(2 * count, 1024)
            self.matrix = _grown(self.matrix, (size, DIMENSIONS))
            self.coarse = _grown(self.coarse, (size, COARSE_DIMENSIONS))
        return self.matrix, self.coarse

    def nearest(self, vector: np.ndarray[Any, np.dtype[np.float32]], limit: int) -> list[tuple[int, float]]:
        import numpy as np

        count = len(self.ids)
        if not count or self.matrix is None or self.coarse is None:
            return []
        pool = max(CANDIDATES, 4 * limit)
        if count <= max(EXACT_UP_TO, pool):
            candidates, scores = np.arange(count), self.matrix[:count] @ vector
        else:
            rough = self.coarse[:count] @ _unit(vector[:COARSE_DIMENSIONS])
            candidates = np.argpartition(-rough, pool - 1)[:pool]
            scores = self.matrix[candidates] @ vector
        best = np.argpartition(-scores, limit - 1)[:limit] if len(scores) > limit else np.arange(len(scores))
        ranked = best[np.argsort(-scores[best], kind="stable")]
        return [(self.ids[int(candidates[at])], float(scores[at])) for at in ranked]


def _grown(matrix: np.ndarray[Any, np.dtype[np.float32]] | None,
           shape: tuple[int, int]) -> np.ndarray[Any, np.dtype[np.float32]]:
    import numpy as np

    grown = np.zeros(shape, dtype=np.float32)
    if matrix is not None:
        grown[:len(matrix)] = matrix
    return grown


class VectorIndex:
    """Nearest entries (and evidence units) by vector, per workspace, from the copy this process keeps."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._spaces: dict[tuple[str, int], _Space] = {}
        self._lock = threading.Lock()

    def write(self, tx: Tx, owner: int, revision: int, title: str, body: str, kind: Kind = ENTRIES) -> None:
        """Embed a text and store its vector (:func:`put`), in the caller's transaction."""
        put(tx, [(owner, revision, embedding(self.embedder, title, body))], self.embedder.model_id, kind)

    def nearest(self, tx: Tx, query: str, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` entries whose vectors are closest to the query's (entry id, cosine), best first."""
        return self.nearest_later(tx, query, {ENTRIES: limit})()[ENTRIES]

    def nearest_later(self, tx: Tx, query: str, limits: Mapping[Kind, int]
                      ) -> Callable[[], dict[Kind, list[tuple[int, float]]]]:
        """:meth:`nearest` of each kind, to be called for: the vectors written since this process last read
        the workspace's are read with the next statement sent or the commit; meanwhile (PostgreSQL: while they
        travel) the query is embedded once and compared with the vectors held, again afterwards only where
        there were new ones."""
        workspace = tx.require_workspace()
        with self._lock:
            spaces = {kind: self._spaces.setdefault((kind.table, workspace), _Space()) for kind in limits}
        fresh = {kind: tx.read_later(f"SELECT {kind.owner} AS id, seq, vector FROM {kind.table} "
                                     f"WHERE workspace_id = ? AND seq > ? AND model = {_MODEL} ORDER BY seq",
                                     (workspace, space.seen, self.embedder.model_id))
                 for kind, space in spaces.items()}
        vectors: list[np.ndarray[Any, np.dtype[np.float32]]] = []
        early: dict[Kind, tuple[int, list[tuple[int, float]]]] = {}  # what was found, and after which vector

        def take_in(kind: Kind) -> None:  # under the space's lock
            # Another search may have taken in some of them since: vectors are numbered in commit order.
            space = spaces[kind]
            if new := [row for row in fresh[kind].all() if row["seq"] > space.seen]:
                space.add(new)

        def meanwhile() -> None:
            vectors.extend(self.embedder.embed([query]))
            for kind, space in spaces.items():
                with space.lock:
                    if fresh[kind].ready:  # SQLite: read already
                        take_in(kind)
                    early[kind] = (space.seen, space.nearest(vectors[0], limits[kind]))

        tx.meanwhile(meanwhile)

        def found() -> dict[Kind, list[tuple[int, float]]]:
            nearest = {}
            for kind, space in spaces.items():
                fresh[kind].all()  # sent now if still queued; the meanwhile work ran once it went
                with space.lock:
                    take_in(kind)
                    seen, hits = early[kind]
                    nearest[kind] = hits if seen == space.seen else space.nearest(vectors[0], limits[kind])
            return nearest

        return found
