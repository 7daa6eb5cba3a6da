"""Memory use cases: remember, recall, read, history, list; curate, uncurate, revert, needs review.

The curated check and the write happen in one transaction that holds the entry (SQLite's write
lock; ``SELECT … FOR UPDATE`` on PostgreSQL), and curation takes the same lock: a human's
curation is never overwritten unseen.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from armarius import textdiff
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import Conflict, InvalidInput, NotFound, ReasonRequired, echo
from armarius.evidence.service import EvidenceService
from armarius.memory import queries, vectors
from armarius.memory.duplicates import find_duplicates
from armarius.memory.embeddings import entry_text, quantize
from armarius.memory.model import (
    REASON_MAX,
    Entry,
    MemoryLimits,
    PastRevision,
    check_body,
    check_reason,
    check_slug,
    check_tags,
    check_title,
    parse_links,
    query_words,
    slug_key,
)
from armarius.memory.snippets import snippet
from armarius.memory.vectors import VectorIndex
from armarius.store import Database, Later, Row, Tx, UniqueViolation, utc_now
from armarius.validation import check_filter, check_storable

RECALL_MAX = 50
RECALL_MODES = ("hybrid", "lexical", "semantic")
#: How many candidates each ranking gives a hybrid recall (at least), and the fusion's constant: a hit's
#: score is the sum over the rankings that found it of 1 / (FUSION_K + its place there).
FUSION_CANDIDATES = 30
FUSION_K = 20
#: The weight in the fusion of a ranking by words when no entry holds all of them (only some).
ANY_WORD_WEIGHT = 0.3
#: The least cosine similarity at which an entry counts as close in meaning to a query.
SEMANTIC_FLOOR = 0.1
_CREATE_TOPIC = 2001
#: The unique constraint whose violation means the slug was taken meanwhile (see UniqueViolation): any other,
#: such as an audit event's number taken (a damaged chain: audit.HeadBehind), is no conflict, and goes up.
_ENTRY_SLUG = "entries_workspace_id_slug_key"
LIST_MAX = 200

CURATED_INSTRUCTION = (
    "Nothing was written: this entry is curated - a human reviewed it. Reviewed knowledge takes "
    "precedence over your own assumptions. Change it only if it is demonstrably wrong (for example, "
    "you just observed the opposite). Then repeat the same call with override_curated: true and a short "
    "reason; the curated mark will drop and a human will review the change. Otherwise change nothing, or "
    "record your addition in an entry of your own and link it with [[{slug}]]."
)
DUPLICATE_INSTRUCTION = (
    "Nothing was written: existing entries look like the same knowledge. Read the candidates. If one "
    "covers it, update that entry instead (remember with its slug and expected_revision). If yours is "
    "really distinct, repeat the same call with confirm_distinct: true and a reason saying how it differs."
)


@dataclass(frozen=True)
class RememberRequest:
    slug: str
    title: str
    body: str
    tags: list[str] | None = None
    expected_revision: int | None = None
    override_curated: bool = False
    reason: str | None = None
    confirm_distinct: bool = False


@dataclass
class MemoryService:
    database: Database
    limits: MemoryLimits
    #: Whose active evidence units recall finds next to the entries (None: entries only).
    evidence: EvidenceService | None = None
    #: Recall by meaning (None: by words only). Every revision written gets its vector in its transaction.
    vectors: VectorIndex | None = None

    # Agent and human reads ---------------------------------------------------------------------

    def recall(self, actor: Actor, query: str, *, limit: int = 10, tags: list[str] | None = None,
               curated_only: bool = False, mode: str = "hybrid") -> dict[str, Any]:
        """Ranked search by words (full text), by meaning (vectors), or both fused (``hybrid``, the default).
        User text is only ever words: no query syntax reaches the engine."""
        actor.require(Permission.MEMORY_READ)
        if not isinstance(query, str) or not isinstance(limit, int) or not 1 <= limit <= RECALL_MAX:
            raise InvalidInput(f"recall takes a query string and a limit from 1 to {RECALL_MAX}.", field="limit")
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode is one of {', '.join(RECALL_MODES)}.", field="mode")
        if mode == "semantic" and self.vectors is None:
            raise InvalidInput('Recall by meaning is off on this server (memory.embeddings = "off"): use mode '
                               '"lexical" or "hybrid".', field="mode")
        wanted_tags = check_tags(tags)
        terms = list(dict.fromkeys(query_words(query)))[:32]
        by_words, by_meaning = mode != "semantic", mode != "lexical" and self.vectors is not None
        if not terms:
            return {"query": query, "mode": mode, "match": "none", "results": [], "evidence": []}
        fused = by_words and by_meaning
        # Active evidence units (a human reviewed and activated each), matched by their words; they carry no
        # tags, so a search by tags finds none.
        search = _Search(actor, terms, pool=max(limit, FUSION_CANDIDATES) if fused else limit, limit=limit,
                         curated_only=curated_only, tags=wanted_tags, ids_only=fused,
                         evidence=None if self.evidence is None or wanted_tags else self.evidence)
        if by_meaning:
            match, ranked, units = self._recall_by_meaning(search, query, by_words=by_words)
        else:
            match, ranked, units = self._recall_by_words(search)
        results = [{
            "slug": row["slug"], "title": row["title"], "snippet": snippet(row["body"], terms, row["word_map"]),
            "revision": row["revision"], "curated": row["curated_revision"] == row["revision"], "ranked_by": found,
        } for row, found in ranked]
        units_shown = [{"unit": unit["name"], "title": unit["title"], "snippet": snippet(unit["body"], terms),
                        "revision": unit["revision"], "kind": "evidence", "ranked_by": found} for unit, found in units]
        if match == "none" and results:
            match = "meaning"
        return {"query": query, "mode": mode, "match": match, "results": results, "evidence": units_shown}

    def _recall_by_words(self, search: _Search
                         ) -> tuple[str, list[tuple[Row, list[str]]], list[tuple[Row, list[str]]]]:
        """Ranked by words alone, the searches go with the commit (PostgreSQL: one round trip), the evidence
        units' search by any of the words too, for when all of them find none (a small search); the entries'
        search by any of the words, when all of them found none, in a transaction of its own."""
        with self.database.transaction(workspace_id=search.actor.workspace_id) as tx:
            by_all_words, units = search.entries(tx, [search.terms]), search.units_by_words(tx)
        match, rows = "all", by_all_words.all()
        if not rows and search.any_word is not None:
            with self.database.transaction(workspace_id=search.actor.workspace_id) as tx:
                by_any_word = search.entries(tx, search.any_word)
            match, rows = "any", by_any_word.all()
        return (match if rows else "none"), _fuse([_lexical(match, rows)], search.limit), _fuse([units()],
                                                                                               search.limit)

    def _recall_by_meaning(self, search: _Search, query: str, *, by_words: bool
                           ) -> tuple[str, list[tuple[Row, list[str]]], list[tuple[Row, list[str]]]]:
        """Ranked by meaning (alone or fused with words): the candidates are ranked by their ids alone, and only
        the entries and evidence units shown are read, with the commit."""
        assert self.vectors is not None
        match, rows = "none", list[Row]()
        with self.database.transaction(workspace_id=search.actor.workspace_id) as tx:
            # The searches and the vectors this process has not read yet go together (PostgreSQL: one round trip).
            by_all_words = search.entries(tx, [search.terms]) if by_words else None
            units = search.units_by_words(tx) if by_words else None
            # Filters apply after ranking by meaning, so rank more when they may drop some.
            filtered = search.curated_only or bool(search.tags)
            limits = {vectors.ENTRIES: search.pool * 4 if filtered else search.pool}
            if search.evidence is not None:
                limits[vectors.UNITS] = search.limit
            nearest = self.vectors.nearest_later(tx, query, limits)
            if by_all_words is not None:
                match, rows = "all", by_all_words.all()
                if not rows and search.any_word is not None:
                    match, rows = "any", search.entries(tx, search.any_word).all()
            found = nearest()
            near = self._nearest(tx, found[vectors.ENTRIES], search.pool, curated_only=search.curated_only,
                                 tags=search.tags)
            ranked = _fuse([_lexical(match, rows), ("semantic", near, 1.0)], search.limit)
            shown = queries.recall_rows_later(tx, [row["id"] for row, _ in ranked], curated_only=False, tags=())
            ranked_units = _fuse([units() if units is not None else _lexical("none", []),
                                  ("semantic", _close(found.get(vectors.UNITS, [])), 1.0)], search.limit)
            unread = [row["id"] for row, _ in ranked_units if "body" not in row]
            units_read = (None if not unread or search.evidence is None
                          else search.evidence.active_later(search.actor, unread, within=tx))
        entries = queries.by_id(shown)
        unit_rows = {} if units_read is None else {row["id"]: row for row in units_read.all()}
        return ((match if rows else "none"), [(entries[row["id"]], found) for row, found in ranked],
                [(unit_rows.get(row["id"], row), found) for row, found in ranked_units
                 if "body" in row or row["id"] in unit_rows])

    def _nearest(self, tx: Tx, scored: list[tuple[int, float]], limit: int, *, curated_only: bool,
                 tags: tuple[str, ...]) -> list[Row]:
        """Of the entries ``scored`` by meaning (best first), the ids of those that pass recall's filters; none
        below SEMANTIC_FLOOR (a query about nothing the workspace holds finds nothing). The vectors are the
        workspace's own, and entries are never deleted: without filters, nothing to read."""
        near = _close(scored)
        if not (curated_only or tags):
            return near[:limit]
        rows = queries.recall_rows(tx, [row["id"] for row in near], curated_only=curated_only, tags=tags,
                                   ids_only=True)
        return [rows[row["id"]] for row in near if row["id"] in rows][:limit]

    def read(self, actor: Actor, slug: str, revision: int | None = None) -> dict[str, Any]:
        actor.require(Permission.MEMORY_READ)
        check_slug(slug)
        old_view = None
        # The entry and its links are read together with the commit (PostgreSQL: one round trip).
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            found, links, backlinks = (queries.entry_later(tx, slug), queries.links_of(tx, slug),
                                       queries.backlinks_of(tx, slug))
            if revision is not None and (row := found.one()) is not None:
                old = queries.revision(tx, row["id"], revision)
                if old is not None:
                    old_view = _revision_view(tx, queries.entry_from_row(row), queries.decode_revision(old))
        row = found.one()
        entry = self._found(None if row is None else queries.entry_from_row(row), slug)
        if revision is not None and old_view is None:
            raise NotFound(f"{echo(slug)} has revisions 1 to {entry.revision}.", slug=slug, revision=revision)
        result = {
            "slug": entry.slug, "title": entry.title, "body": entry.body, "tags": list(entry.tags),
            "revision": entry.revision, "curated": entry.curated, "curated_revision": entry.curated_revision,
            "curated_by": entry.curated_by, "needs_review": entry.needs_review, "updated_at": entry.updated_at,
            "updated_by": entry.updated_by,
            "links": [row["target_slug"] for row in links.all() if row["title"] is not None],
            "broken_links": [row["target_slug"] for row in links.all() if row["title"] is None],
            "backlinks": [row["slug"] for row in backlinks.all()],
        }
        if old_view is not None:
            result.update(old_view)
        return result

    def history(self, actor: Actor, slug: str) -> dict[str, Any]:
        """Every revision's metadata, oldest first (read a revision's full text with read(slug, revision))."""
        actor.require(Permission.MEMORY_READ)
        check_slug(slug)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            entry = self._existing(tx, slug)
            rows = queries.revisions(tx, entry.id)
        listing = [{
            "revision": row["revision"], "title": row["title"], "author": row["author"], "at": row["created_at"],
            "reason": row["reason"], "operation": row["operation_id"],
            "overrode_curated": bool(row["overrode_curated"]), "size": len(row["body"].encode("utf-8")),
        } for row in rows]
        return {"slug": slug, "revision": entry.revision, "curated_revision": entry.curated_revision,
                "revisions": listing}

    def revisions(self, actor: Actor, slug: str) -> list[dict[str, Any]]:
        """Every revision in full (for people and exports; agents use history and read)."""
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            entry = self._existing(tx, check_slug(slug))
            return [queries.decode_revision(row) for row in queries.revisions(tx, entry.id)]

    def list_entries(self, actor: Actor, *, prefix: str | None = None, tag: str | None = None,
                     curated: bool | None = None, needs_review: bool | None = None, after: str | None = None,
                     limit: int = 50) -> dict[str, Any]:
        actor.require(Permission.MEMORY_READ)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_MAX:
            raise InvalidInput(f"limit is from 1 to {LIST_MAX}.", field="limit")
        if prefix is not None and (not isinstance(prefix, str) or len(prefix) > 128):
            raise InvalidInput("prefix is the start of a slug.", field="prefix")
        for field, given in (("prefix", prefix), ("tag", tag), ("after", after)):
            if given is not None and not isinstance(given, str):
                raise InvalidInput(f"{field} is text.", field=field)
            if given is not None:  # a NUL or a lone surrogate names nothing: refused for the field, on both engines
                check_storable(given, field)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            entries = queries.list_entries(tx, prefix=prefix, tag=tag, curated=curated, needs_review=needs_review,
                                           after=after, limit=limit + 1)
        page = entries[:limit]
        result: dict[str, Any] = {"entries": [entry.summary() for entry in page]}
        if len(entries) > limit:
            result["next_after"] = page[-1].slug
        return result

    # Agent writes ------------------------------------------------------------------------------

    def remember(self, actor: Actor, request: RememberRequest, *, within: Tx | None = None) -> dict[str, Any]:
        """Create or update an entry. ``within``: the caller's write transaction of the actor's workspace
        (a feature whose own write must commit with this one, e.g. promoting a draft); nothing commits here then."""
        actor.require(Permission.MEMORY_WRITE)
        slug, title = check_slug(request.slug), check_title(request.title)
        body = self._check_body(request.body)
        tags = None if request.tags is None else check_tags(request.tags)
        reason = check_reason(request.reason)
        expected = request.expected_revision
        if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool) or expected < 0):
            raise InvalidInput("expected_revision is the revision you last read (0: no entry yet).",
                               field="expected_revision")
        if request.override_curated and reason is None:
            raise ReasonRequired("override_curated needs a reason: why is the curated content no longer right?")
        if request.confirm_distinct and reason is None:
            raise ReasonRequired("confirm_distinct needs a reason: how does this entry differ from the candidates?")
        operation = "op_" + uuid.uuid4().hex
        try:
            if within is not None and within.workspace_id != actor.workspace_id:
                raise RuntimeError("remember(within=...) needs a transaction of the actor's workspace")
            with nullcontext(within) if within is not None else self.database.transaction(
                    workspace_id=actor.workspace_id, write=True) as tx:
                entry = queries.entry_by_slug(tx, slug, lock=True)
                duplicates, created, embedded, now = None, None, None, utc_now()
                if entry is None:
                    # The new entry's vector: on PostgreSQL made while the duplicate check travels (a new
                    # revision's, while its statements travel: see _embed); on SQLite when it is stored.
                    embedded = None if self.vectors is None else vectors.embedding_meanwhile(
                        tx, self.vectors.embedder, title, body)
                    # Creations queue up per workspace, so the duplicate check sees a concurrent creation (its
                    # reads go with the second look, which PostgreSQL needs once the creation's turn comes).
                    looks_again = tx.serialize(_CREATE_TOPIC)
                    if not request.confirm_distinct:
                        duplicates = find_duplicates(tx, slug, title, body, self.limits.duplicate_threshold)
                    if looks_again:
                        # The entry's insert goes too, after the second look, in case it finds none: a duplicate
                        # found, or a conflict, rolls it back (not in a caller's transaction, which must go on).
                        again = queries.entry_later(tx, slug, lock=True)
                        if within is None:
                            created = self._insert_later(tx, actor, slug, title, body, tags or (), now)
                        row = again.one()
                        entry = None if row is None else queries.entry_from_row(row)
                current = entry.revision if entry else 0
                if expected is not None and expected != current:
                    raise Conflict(
                        f"{echo(slug)} is at revision {current}, not {expected}. Read it again, then decide.",
                        slug=slug, current_revision=current, expected_revision=expected,
                    )
                if entry is None:
                    return self._create(tx, actor, request, slug, title, body, tags or (), reason, operation,
                                        duplicates, embedded, now, created)
                # Tags left out keep the entry's tags; an empty list clears them.
                return self._update(tx, actor, request, entry, title, body, entry.tags if tags is None else tags,
                                    reason, operation, embedded)
        except UniqueViolation as violation:
            violation.raise_unless(_ENTRY_SLUG)
            raise Conflict(f"{echo(slug)} was created by someone else just now. Read it, then decide.",
                           slug=slug) from None
        except _Unwritten as unwritten:
            return unwritten.answer

    def _before_insert(self, tx: Tx) -> None:
        """A new entry's turns, taken with its insert: the audit chain's head, and before it the vectors'
        numbering, which every writer takes before the head (a writer taking them the other way round could
        deadlock with this one)."""
        if self.vectors is not None:
            vectors.take_turn(tx)
        audit.prepare(tx)

    def _insert_later(self, tx: Tx, actor: Actor, slug: str, title: str, body: str, tags: tuple[str, ...],
                      now: str) -> Later:
        """A new entry's insert with its turns: its id, none if the slug is taken."""
        self._before_insert(tx)
        return queries.insert_entry_later(tx, slug=slug, slug_key=slug_key(slug), title=title, body=body,
                                          tags=queries.encode_tags(tags), by=actor.audit_name, at=now)

    def _create(self, tx: Tx, actor: Actor, request: RememberRequest, slug: str, title: str, body: str,
                tags: tuple[str, ...], reason: str | None, operation: str,
                duplicates: Callable[[], list[dict[str, Any]]] | None, embedded: Callable[[], bytes] | None,
                now: str, created: Later | None) -> dict[str, Any]:
        """The new entry; ``created``: inserted already with the duplicate check's reads (its id), rolled back here
        if the check finds any."""
        if duplicates is not None and (candidates := duplicates()):
            answer = {
                "status": "judgment_required", "code": "possible_duplicate", "written": False,
                "candidates": candidates, "instruction": DUPLICATE_INSTRUCTION,
            }
            if created is not None:
                raise _Unwritten(answer)
            return answer
        encoded = queries.encode_tags(tags)
        if created is None:
            self._before_insert(tx)
            entry_id = queries.insert_entry(tx, slug=slug, slug_key=slug_key(slug), title=title, body=body,
                                            tags=encoded, by=actor.audit_name, at=now)
        else:
            if (row := created.one()) is None:  # taken after all (the second look saw none): as a unique violation
                raise UniqueViolation(_ENTRY_SLUG, "entries")
            entry_id = int(row["id"])
            queries.insert_word_map(tx, entry_id, body)
        self._embed(tx, entry_id, 1, title, body, embedded)
        queries.insert_revision(tx, entry_id, 1, title=title, body=body, tags=encoded, reason=reason,
                                operation_id=operation, author=actor.audit_name, at=now, overrode_curated=False)
        queries.replace_tags_and_links(tx, entry_id, tags, parse_links(body), new_entry=True)
        details: dict[str, Any] = {"revision": 1, "operation": operation}
        if request.confirm_distinct:
            details["confirmed_distinct"] = reason
        audit.append(tx, actor=actor.audit_name, action="memory.created", subject=slug, details=details)
        return {"status": "written", "slug": slug, "revision": 1, "created": True, "operation": operation}

    def _update(self, tx: Tx, actor: Actor, request: RememberRequest, entry: Entry, title: str, body: str,
                tags: tuple[str, ...], reason: str | None, operation: str, embedded: Callable[[], bytes] | None
                ) -> dict[str, Any]:
        overriding = entry.curated
        if overriding and not request.override_curated:
            return {
                "status": "judgment_required", "code": "curated_entry", "written": False, "slug": entry.slug,
                "revision": entry.revision, "curated_by": entry.curated_by,
                "instruction": CURATED_INSTRUCTION.format(slug=entry.slug),
            }
        if (title, body, tags) == (entry.title, entry.body, entry.tags):
            return {"status": "unchanged", "slug": entry.slug, "revision": entry.revision}
        revision, now, needs_review = entry.revision + 1, utc_now(), entry.needs_review or overriding
        self._write_revision(tx, actor, entry, revision, now, title=title, body=body, tags=tags, reason=reason,
                             operation=operation, overriding=overriding, needs_review=needs_review, embedded=embedded)
        details: dict[str, Any] = {"revision": revision, "operation": operation}
        if overriding:
            details.update(reason=reason, curated_revision=entry.curated_revision, curated_by=entry.curated_by)
        audit.append(tx, actor=actor.audit_name, action="memory.curated_override" if overriding else "memory.updated",
                     subject=entry.slug, details=details)
        result: dict[str, Any] = {"status": "written", "slug": entry.slug, "revision": revision, "created": False,
                                  "operation": operation}
        if needs_review:
            result["needs_review"] = True
        return result

    def reindex(self, workspace_id: int, *, batch: int = 200, progress: Callable[[int], None] | None = None
                ) -> dict[str, int]:
        """Embed every entry of the workspace whose current revision, and every evidence unit whose active
        revision, has no vector of this model (written before recall by meaning existed, or by another model),
        a batch per transaction: resumable after an interruption, and a second run finds nothing to do. An
        operator's task: the vectors are derived data."""
        if self.vectors is None:
            raise InvalidInput("Recall by meaning is off on this server (memory.embeddings = \"off\"): there is "
                               "nothing to embed.", field="memory.embeddings")
        embedder, done = self.vectors.embedder, 0
        for kind in (vectors.ENTRIES, vectors.UNITS):
            while True:
                with self.database.transaction(workspace_id=workspace_id, write=True) as tx:
                    # The turn first: a revision committed meanwhile, with its vector, is then read here, and
                    # one committing later writes its vector after this batch (not the other way round).
                    vectors.take_turn(tx)
                    rows = vectors.missing(tx, embedder.model_id, batch, kind)
                    if not rows:
                        break
                    found = embedder.embed([entry_text(row["title"], row["body"]) for row in rows])
                    vectors.put(tx, [(row["id"], row["revision"], quantize(vector))
                                     for row, vector in zip(rows, found, strict=True)], embedder.model_id, kind)
                done += len(rows)
                if progress is not None:
                    progress(len(rows))
        counts = self.vector_counts(workspace_id)
        assert counts is not None
        return {"embedded": done, **counts}

    def vector_counts(self, workspace_id: int) -> dict[str, int] | None:
        """How many entries and active evidence units have a vector of this model, of how many (None: recall by
        meaning is off)."""
        if self.vectors is None:
            return None
        return vector_counts(self.database, workspace_id, self.vectors.embedder.model_id)

    def write_imported(self, tx: Tx, actor: Actor, *, slug: str, title: str, body: str, tags: tuple[str, ...],
                       history: tuple[PastRevision, ...], origin: str, operation: str) -> str:
        """One imported note, within the importer's write transaction (its content checked already):
        ``created`` (with ``history`` when it has one), ``unchanged``, ``updated`` (a new revision), or
        ``curated_kept`` (a curated entry with other content, left as it is). Never curates."""
        if self.database.dialect == "postgresql":
            queries.check_indexable(body)
        entry = queries.entry_by_slug(tx, slug, lock=True)
        reason = f"imported from {origin}"[:REASON_MAX]
        if entry is not None:
            if (entry.title, entry.body, entry.tags) == (title, body, tags):
                return "unchanged"
            if entry.curated:
                return "curated_kept"
            self.remember(actor, RememberRequest(slug=slug, title=title, body=body, tags=list(tags), reason=reason),
                          within=tx)
            return "updated"
        now = utc_now()
        revisions = history or (PastRevision(title, body, tags, reason, actor.audit_name, now),)
        entry_id = queries.insert_entry(tx, slug=slug, slug_key=slug_key(slug), title=title, body=body,
                                        tags=queries.encode_tags(tags), by=actor.audit_name, at=now,
                                        revision=len(revisions))
        self._embed(tx, entry_id, len(revisions), title, body)
        for number, past in enumerate(revisions, 1):
            queries.insert_revision(tx, entry_id, number, title=past.title, body=past.body,
                                    tags=queries.encode_tags(past.tags), reason=past.reason, operation_id=operation,
                                    author=past.author, at=past.created_at, overrode_curated=past.overrode_curated)
        queries.replace_tags_and_links(tx, entry_id, tags, parse_links(body), new_entry=True)
        audit.append(tx, actor=actor.audit_name, action="memory.created", subject=slug,
                     details={"revision": len(revisions), "operation": operation, "imported_from": origin})
        return "created"

    # Human operations --------------------------------------------------------------------------

    def curate(self, actor: Actor, slug: str, revision: int) -> dict[str, Any]:
        """Mark exactly the revision the human read as reviewed; a newer revision refuses."""
        actor.require_human(Permission.MEMORY_CURATE)
        check_slug(slug)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            entry = self._existing(tx, slug, lock=True)
            if revision != entry.revision:
                raise Conflict(
                    f"{echo(slug)} is at revision {entry.revision}; you reviewed revision {revision}. What you saw is "
                    "what you curate: read the current revision, then curate that.",
                    slug=slug, current_revision=entry.revision, reviewed_revision=revision,
                )
            if entry.curated:
                return {"slug": slug, "revision": revision, "curated": True, "changed": False}
            queries.set_curation(tx, entry.id, curated_revision=revision, by=actor.audit_name, at=utc_now(),
                                 review_base_revision=revision, needs_review=False)
            audit.append(tx, actor=actor.audit_name, action="memory.curated", subject=slug,
                         details={"revision": revision})
        return {"slug": slug, "revision": revision, "curated": True, "changed": True}

    def uncurate(self, actor: Actor, slug: str) -> dict[str, Any]:
        actor.require_human(Permission.MEMORY_CURATE)
        check_slug(slug)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            entry = self._existing(tx, slug, lock=True)
            if entry.curated_revision is None:
                return {"slug": slug, "curated": False, "changed": False}
            queries.set_curation(tx, entry.id, curated_revision=None, by=None, at=None,
                                 review_base_revision=entry.review_base_revision, needs_review=entry.needs_review)
            audit.append(tx, actor=actor.audit_name, action="memory.uncurated", subject=slug,
                         details={"revision": entry.curated_revision})
        return {"slug": slug, "curated": False, "changed": True}

    def revert_to_curated(self, actor: Actor, slug: str, reason: str | None) -> dict[str, Any]:
        """Undo the changes since the last curation: a new revision with exactly the curated title,
        body and tags. It is curated at once (the human chose exactly this content) and leaves the
        needs-review list; the reverted revisions stay in the history."""
        actor.require_human(Permission.MEMORY_CURATE)
        check_slug(slug)
        why = check_reason(reason)
        if why is None:
            raise ReasonRequired("A revert needs a reason: why should the changes since the curation go?")
        operation = "op_" + uuid.uuid4().hex
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            entry = self._existing(tx, slug, lock=True)
            base_revision = entry.review_base_revision
            if base_revision is None:
                raise NotFound(f"{echo(slug)} was never curated, so there is no curated revision to revert to.",
                               slug=slug, curated_revision=None)
            if entry.curated:
                return {"slug": slug, "revision": entry.revision, "curated": True, "changed": False}
            base_row = queries.revision(tx, entry.id, base_revision)
            assert base_row is not None  # revisions are never deleted
            base = queries.decode_revision(base_row)
            revision, now = entry.revision + 1, utc_now()
            self._write_revision(tx, actor, entry, revision, now, title=base["title"], body=base["body"],
                            tags=tuple(base["tags"]), reason=why, operation=operation, overriding=False,
                            needs_review=False)
            queries.set_curation(tx, entry.id, curated_revision=revision, by=actor.audit_name, at=now,
                                 review_base_revision=revision, needs_review=False)
            audit.append(tx, actor=actor.audit_name, action="memory.reverted", subject=slug, details={
                "revision": revision, "reverted_to": base_revision, "reverted_from": entry.revision,
                "reason": why, "operation": operation,
            })
        return {"slug": slug, "revision": revision, "reverted_to": base_revision, "curated": True, "changed": True,
                "operation": operation}

    def write_chosen(self, actor: Actor, slug: str, base_revision: int, title: str, body: str,
                     tags: list[str] | tuple[str, ...] | None, reason: str | None, *,
                     within: Tx | None = None) -> dict[str, Any]:
        """A human's choice of exact content (an archive repair's application): the entry's next revision with
        exactly this title, body and tags, curated at once by that human. Refused (conflict, nothing written)
        unless the entry is still at ``base_revision``, the revision the choice was prepared against.
        ``within``: the caller's write transaction of the actor's workspace; nothing commits here then."""
        actor.require_human(Permission.MEMORY_MANAGE, "apply a repair to an entry")
        check_slug(slug)
        title, body = check_title(title), self._check_body(body)
        chosen_tags, why = check_tags(None if tags is None else list(tags)), check_reason(reason)
        operation = "op_" + uuid.uuid4().hex
        if within is not None and within.workspace_id != actor.workspace_id:
            raise RuntimeError("write_chosen(within=...) needs a transaction of the actor's workspace")
        with nullcontext(within) if within is not None else self.database.transaction(
                workspace_id=actor.workspace_id, write=True) as tx:
            entry = self._existing(tx, slug, lock=True)
            if entry.revision != base_revision:
                raise Conflict(
                    f"{echo(slug)} is at revision {entry.revision}; the choice was prepared against revision "
                    f"{base_revision}. Nothing was written.",
                    slug=slug, current_revision=entry.revision, expected_revision=base_revision,
                )
            revision, now = entry.revision + 1, utc_now()
            self._write_revision(tx, actor, entry, revision, now, title=title, body=body, tags=chosen_tags, reason=why,
                            operation=operation, overriding=False, needs_review=False)
            queries.set_curation(tx, entry.id, curated_revision=revision, by=actor.audit_name, at=now,
                                 review_base_revision=revision, needs_review=False)
            audit.append(tx, actor=actor.audit_name, action="memory.repaired", subject=slug, details={
                "revision": revision, "base_revision": base_revision, "curated": True, "reason": why,
                "operation": operation,
            })
        return {"slug": slug, "revision": revision, "curated": True, "operation": operation}

    def needs_review(self, actor: Actor) -> list[dict[str, Any]]:
        """Entries whose curation an agent overrode: reasons, and a diff against the last curated revision.
        Every one of them, each with its diff (the CLI's listing); a page lists them with needs_review_page."""
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            listing = []
            for entry in queries.needs_review_entries(tx):
                base = _review_base(tx, entry.id, entry.review_base_revision)
                listing.append({
                    "slug": entry.slug, "title": entry.title, "revision": entry.revision,
                    "curated_revision": base["revision"],
                    "overrides": _overrides(tx, entry.id, base["revision"]),
                    "diff": _diff(entry.slug, base, _content(entry), old_note=" (curated)"),
                })
        return listing

    def needs_review_page(self, actor: Actor, *, after: str | None = None, limit: int = 50, diff: bool = False,
                          q: str | None = None) -> dict[str, Any]:
        """One page of the entries that need review, by slug, with what a list shows: the curated revision the
        review is against, the overrides since (revision, author, reason, at) and ``since`` (the first of them).
        ``diff``: each listed entry's diff against its curated revision too (computed for this page only).
        ``q``: only entries whose slug or title contains it (case-insensitive). ``next``: the ``after`` that
        gives the next page (None: this is the last)."""
        actor.require(Permission.MEMORY_READ)
        _check_limit(limit)
        if after is not None and not isinstance(after, str):
            raise InvalidInput("after is the last slug of the previous page (its next).", field="after")
        needle = check_filter(q)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.needs_review_page(tx, after=after, limit=limit + 1, contains=needle)
            items = []
            for row in rows[:limit]:
                base_revision = row["review_base_revision"] or 1
                item = {
                    "slug": row["slug"], "title": row["title"], "revision": row["revision"],
                    "curated_revision": base_revision, "since": row["since"], "updated_at": row["updated_at"],
                    "updated_by": row["updated_by"], "overrides": _overrides(tx, row["id"], base_revision),
                }
                if diff:
                    entry = queries.entry_by_slug(tx, row["slug"])
                    assert entry is not None  # read in the same transaction
                    base = _review_base(tx, entry.id, entry.review_base_revision)
                    item["diff"] = _diff(entry.slug, base, _content(entry), old_note=" (curated)")
                items.append(item)
        return {"items": items, "next": rows[limit - 1]["slug"] if len(rows) > limit else None}

    def needs_review_summary(self, actor: Actor) -> dict[str, Any]:
        """How many entries need review and when the one waiting longest went into review (None: none waits),
        counted in SQL."""
        actor.require(Permission.MEMORY_READ)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            row = queries.needs_review_summary(tx)
        return {"count": int(row["count"]), "oldest_at": row["oldest_at"]}

    def diff(self, actor: Actor, slug: str, from_revision: int, to_revision: int) -> dict[str, Any]:
        """A unified diff of two revisions of an entry (title, tags and body); NotFound for a revision that
        does not exist."""
        actor.require(Permission.MEMORY_READ)
        check_slug(slug)
        for field, number in (("from_revision", from_revision), ("to_revision", to_revision)):
            if not isinstance(number, int) or isinstance(number, bool):
                raise InvalidInput(f"{field} is a revision number.", field=field)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            entry = self._existing(tx, slug)
            found = [queries.revision(tx, entry.id, number) if 1 <= number <= entry.revision else None
                     for number in (from_revision, to_revision)]
        old, new = (None if row is None else queries.decode_revision(row) for row in found)
        if old is None or new is None:
            missing = from_revision if old is None else to_revision
            raise NotFound(f"{echo(slug)} has revisions 1 to {entry.revision}; there is no revision {missing}.",
                           slug=slug, revision=missing, current_revision=entry.revision)

        def note(number: int) -> str:
            return " (curated)" if number == entry.curated_revision else ""

        return {"slug": slug, "from_revision": from_revision, "to_revision": to_revision,
                "current_revision": entry.revision, "curated_revision": entry.curated_revision,
                "diff": _diff(slug, old, new, old_note=note(from_revision), new_note=note(to_revision))}

    def _write_revision(self, tx: Tx, actor: Actor, entry: Entry, revision: int, now: str, *, title: str, body: str,
                        tags: tuple[str, ...], reason: str | None, operation: str, overriding: bool,
                        needs_review: bool, embedded: Callable[[], bytes] | None = None) -> None:
        """The entry's new current content, its revision in the history, its tags and links, and its vector
        (``embedded``: made already)."""
        encoded = queries.encode_tags(tags)
        queries.update_entry(tx, entry.id, title=title, body=body, tags=encoded, revision=revision,
                             by=actor.audit_name, at=now, needs_review=needs_review)
        queries.insert_revision(tx, entry.id, revision, title=title, body=body, tags=encoded, reason=reason,
                                operation_id=operation, author=actor.audit_name, at=now, overrode_curated=overriding)
        queries.replace_tags_and_links(tx, entry.id, tags, parse_links(body))
        self._embed(tx, entry.id, revision, title, body, embedded)

    def _embed(self, tx: Tx, entry_id: int, revision: int, title: str, body: str,
               embedded: Callable[[], bytes] | None = None) -> None:
        """Store the vector of an entry's new revision, in the transaction that writes the revision: ``embedded``,
        made already, or made while the transaction's next statements travel (PostgreSQL: the revision's, the
        audit chain's head; at once on SQLite) and sent after them. The vectors' turn is taken now, before the
        head, as every writer takes the two."""
        index = self.vectors
        if index is None:
            return
        if embedded is not None:
            vectors.put(tx, [(entry_id, revision, embedded())], index.embedder.model_id)
            return
        vectors.take_turn(tx)
        tx.meanwhile(lambda: index.write(tx, entry_id, revision, title, body))

    def _check_body(self, body: object) -> str:
        """A body this store can hold: within memory.body_max_bytes, and on PostgreSQL one whose words fit its
        search index (queries.check_indexable)."""
        checked = check_body(body, self.limits)
        if self.database.dialect == "postgresql":
            queries.check_indexable(checked)
        return checked

    def _existing(self, tx: Tx, slug: str, *, lock: bool = False) -> Entry:
        return self._found(queries.entry_by_slug(tx, slug, lock=lock), slug)

    @staticmethod
    def _found(entry: Entry | None, slug: str) -> Entry:
        """The entry read by ``slug``, or the refusal that there is none."""
        if entry is None:
            raise NotFound(f"There is no entry {echo(slug)} in this workspace.", slug=slug,
                           agent_hint="Use recall or list to find one.")
        return entry


def vector_counts(database: Database, workspace_id: int, model: str) -> dict[str, int]:
    """:meth:`MemoryService.vector_counts` for the model named, which need not be loaded (`armarius doctor` asks
    it of a store it only looks at): one read transaction, a count of each kind."""
    with database.transaction(workspace_id=workspace_id) as tx:
        (entries, with_vector), (units, units_with_vector) = (vectors.counts(tx, model, vectors.ENTRIES),
                                                              vectors.counts(tx, model, vectors.UNITS))
    return {"entries": entries, "with_vector": with_vector, "units": units, "units_with_vector": units_with_vector}


def _revision_view(tx: Tx, entry: Entry, revision: dict[str, Any]) -> dict[str, Any]:
    """An older revision as read shows it: its own content, time, author and links."""
    targets = sorted(parse_links(revision["body"]))
    existing = queries.existing_slugs(tx, targets)
    return {
        "title": revision["title"], "body": revision["body"], "tags": revision["tags"],
        "revision": revision["revision"], "current_revision": entry.revision,
        "curated": entry.curated_revision == revision["revision"],
        "updated_at": revision["created_at"], "updated_by": revision["author"],
        "links": [target for target in targets if target in existing],
        "broken_links": [target for target in targets if target not in existing],
    }



def _content(entry: Entry) -> dict[str, Any]:
    """The entry's current revision as a revision's content."""
    return {"revision": entry.revision, "title": entry.title, "body": entry.body, "tags": list(entry.tags)}


def _review_base(tx: Tx, entry_id: int, review_base_revision: int | None) -> dict[str, Any]:
    """The revision a review is against: the last curated one (the first revision if there is none)."""
    row = queries.revision(tx, entry_id, review_base_revision or 1) or queries.revision(tx, entry_id, 1)
    assert row is not None  # revisions are never deleted
    return queries.decode_revision(row)


def _overrides(tx: Tx, entry_id: int, base_revision: int) -> list[dict[str, Any]]:
    """The revisions since the curated one that overrode a curation: who, when and why."""
    return [{"revision": row["revision"], "author": row["author"], "reason": row["reason"], "at": row["created_at"]}
            for row in queries.overrides_since(tx, entry_id, base_revision)]


def _check_limit(limit: Any) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= LIST_MAX:
        raise InvalidInput(f"limit is from 1 to {LIST_MAX}.", field="limit")



def _diff(slug: str, old: dict[str, Any], new: dict[str, Any], *, old_note: str = "", new_note: str = "") -> str:
    """A unified diff of two revisions' content (``revision``, ``title``, ``tags``, ``body``): the title, the
    tags (when either has any; a tag never holds a parenthesis) and the body, labelled ``slug@revision`` and a
    note; lines split at line feeds only, at a bounded cost (:mod:`armarius.textdiff`: past it, the two labels
    and why the diff is not shown, and the reader compares the revisions themselves)."""
    tagged = bool(old["tags"]) or bool(new["tags"])

    def text(content: dict[str, Any]) -> str:
        tags = f"tags: {', '.join(content['tags']) or '(none)'}\n" if tagged else ""
        return f"# {content['title']}\n{tags}\n{content['body']}"

    compared = textdiff.text_diff(text(old), text(new), fromfile=f"{slug}@{old['revision']}{old_note}",
                                  tofile=f"{slug}@{new['revision']}{new_note}")
    if compared.note is not None:
        return f"--- {slug}@{old['revision']}{old_note}\n+++ {slug}@{new['revision']}{new_note}\n{compared.note}\n"
    return "".join(f"{line}\n" for line in compared.lines)


class _Unwritten(Exception):
    """An answer that writes nothing, raised to roll back what its transaction wrote ahead of it."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("code"))
        self.answer = answer


@dataclass(frozen=True)
class _Search:
    """One recall's searches by words: of the entries (ranked, the best ``pool``) and of the evidence units."""

    actor: Actor
    terms: list[str]
    pool: int
    limit: int
    curated_only: bool
    tags: tuple[str, ...]
    #: The entries' ids alone (their rows are read once ranked by meaning too).
    ids_only: bool
    evidence: EvidenceService | None

    @property
    def any_word(self) -> list[list[str]] | None:
        """The search by any of the words, when there are several (None: one word)."""
        return [[term] for term in self.terms] if len(self.terms) > 1 else None

    def entries(self, tx: Tx, groups: list[list[str]]) -> Later:
        return queries.search_later(tx, queries.match_expression(tx.dialect, groups), limit=self.pool,
                                    curated_only=self.curated_only, tags=self.tags, ids_only=self.ids_only)

    def units_by_words(self, tx: Tx) -> Callable[[], tuple[str, list[Row], float]]:
        """The evidence units' searches by all the words and by any of them (a small search, sent along in case
        the first finds none, unless the first has found some already: SQLite); their ranking, once read: the
        units holding all the words, else any."""
        if self.evidence is None:
            return lambda: _lexical("none", [])
        by_all_words = self.evidence.search_later(self.actor, [self.terms], limit=self.limit, within=tx)
        by_any_word = (None if self.any_word is None or (by_all_words.ready and by_all_words.all())
                       else self.evidence.search_later(self.actor, self.any_word, limit=self.limit, within=tx))

        def ranking() -> tuple[str, list[Row], float]:
            if (rows := by_all_words.all()) or by_any_word is None:
                return _lexical("all", rows)
            return _lexical("any", by_any_word.all())

        return ranking


def _close(scored: list[tuple[int, float]]) -> list[Row]:
    """The ids of what was found by meaning (best first), none below SEMANTIC_FLOOR (a query about nothing the
    workspace holds finds nothing)."""
    return [{"id": found} for found, score in scored if score >= SEMANTIC_FLOOR]


def _lexical(match: str, rows: list[Row]) -> tuple[str, list[Row], float]:
    """The ranking by words: entries holding only some of the words are weaker evidence than those holding all."""
    return "lexical", rows, 1.0 if match == "all" else ANY_WORD_WEIGHT


def _fuse(rankings: list[tuple[str, list[Row], float]], limit: int) -> list[tuple[Row, list[str]]]:
    """Weighted reciprocal rank fusion: the best ``limit`` entries of the rankings (name, rows best first,
    weight), each with the names of the rankings that found it."""
    scores: dict[int, float] = {}
    rows: dict[int, Row] = {}
    found: dict[int, list[str]] = {}
    for name, ranking, weight in rankings:
        for place, row in enumerate(ranking, 1):
            entry = row["id"]
            scores[entry] = scores.get(entry, 0.0) + weight / (FUSION_K + place)
            rows.setdefault(entry, row)
            found.setdefault(entry, []).append(name)
    best = sorted(scores, key=lambda entry: -scores[entry])[:limit]
    return [(rows[entry], found[entry]) for entry in best]
