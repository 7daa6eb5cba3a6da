"""Evidence unit use cases: create (by hand or from a session's captures), edit, review, activate,
restore a file; the active snapshot; and the corrections repairs make.

Every new revision goes to the store and to the unit's canonical file together: inside the write
transaction that holds the unit (SQLite's write lock; ``SELECT … FOR UPDATE`` on PostgreSQL), after
every statement, the file is replaced atomically, and then the transaction commits. So files are
written in the order of the store's revisions, and what can go wrong between the two (a crash, a
failed commit) leaves the file ahead of the store, never behind: ``show`` then says the file differs
and ``restore`` writes the store's latest revision again.

Review and activation are of exactly the revision a human read *and* of the file on disk holding
it (its fingerprint): what is activated is what is in the canonical file. Activation indexes the
revision into the searched corpus from the store, its words and (unless ``memory.embeddings`` is off) its
vector, in the same transaction; it never fetches anything.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from armarius import files
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import AlreadyExists, Conflict, InvalidInput, NotFound, echo
from armarius.evidence import queries, views
from armarius.evidence.model import (
    Correction,
    Status,
    UnitFile,
    UnitView,
    check_body,
    check_capture_ids,
    check_name,
    check_via,
    fingerprint,
    parse,
    render,
    step,
)
from armarius.memory.model import check_reason, check_title
from armarius.sessions.service import SessionService
from armarius.store import Database, Later, Row, Tx, UniqueViolation, iso_utc

#: The most units one listing returns.
LIST_MAX = 500
#: The unique constraint whose violation means the unit exists (see UniqueViolation): any other goes up.
_UNIT_NAME = "evidence_units_workspace_id_name_key"


def _now() -> datetime:
    return datetime.now(UTC)


#: The most of a unit file read: far more than any revision's file (a body of at most BODY_MAX_BYTES and its
#: front matter), so a file larger than this is never one the store wrote.
UNIT_FILE_READ_MAX = 64 * 1024 * 1024


@dataclass
class EvidenceService:
    database: Database
    #: The evidence folder; a unit's canonical file is ``<workspace>/units/<name>.md`` under it.
    evidence_dir: Path
    #: Whose captures ``from_capture`` reads (the session's capture files, checked against their ids).
    sessions: SessionService | None = None
    #: Writes the vector of a unit's newly active revision (unit id, revision, title, body), for recall by
    #: meaning, in the activation's transaction: memory's, wired by the application (None: embeddings are off).
    write_vector: Callable[[Tx, int, int, str, str], None] | None = None
    clock: Callable[[], datetime] = _now

    def unit_path(self, workspace: str, name: str) -> Path:
        return self.evidence_dir / workspace / "units" / f"{name}.md"

    def _read(self, path: Path) -> bytes | None:
        """A file below the evidence folder, reached without following links (a link is no file), read no further
        than UNIT_FILE_READ_MAX and one byte: a larger file differs from every revision (a sparse file of
        gigabytes, which costs no disk, would otherwise be read whole into memory at every look)."""
        return files.read_bytes(path, root=self.evidence_dir, limit=UNIT_FILE_READ_MAX + 1)

    def _write(self, path: Path, content: bytes) -> None:
        """Replace a file below the evidence folder atomically, reached without following links (a link
        refuses: conflict)."""
        files.write_atomically(path, content, root=self.evidence_dir)

    # Reading ----------------------------------------------------------------------------------------

    def list_units(self, actor: Actor, *, status: str | None = None, after: str | None = None,
                   limit: int = LIST_MAX) -> dict[str, Any]:
        """Units in name order, a page at a time (``next_after`` names where the next page starts)."""
        actor.require(Permission.MEMORY_READ)
        if status is not None and status not in set(Status):
            raise InvalidInput(f"status is one of {', '.join(Status)}.", field="status")
        if not isinstance(limit, int) or not 1 <= limit <= LIST_MAX:
            raise InvalidInput(f"limit is from 1 to {LIST_MAX}.", field="limit")
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            rows = queries.units(tx, status=status, after=after, limit=limit + 1)
        page: dict[str, Any] = {"units": [views.summary(row) for row in rows[:limit]]}
        if len(rows) > limit:
            page["next_after"] = rows[limit - 1]["name"]
        return page

    def show(self, actor: Actor, name: str, revision: int | None = None) -> dict[str, Any]:
        """A unit's state, its latest revision (or ``revision``) in full, every revision's metadata, and
        whether the file on disk holds the latest revision."""
        actor.require(Permission.MEMORY_READ)
        name = check_name(name)
        with self.database.transaction(workspace_id=actor.workspace_id) as tx:
            unit = self._existing(tx, name)
            latest = self._revision(tx, unit, unit["revision"])
            shown = latest if revision is None else queries.revision(tx, unit["id"], revision)
            listing = queries.revisions(tx, unit["id"])
        if shown is None:
            raise NotFound(f"Evidence unit {echo(name)} has revisions 1 to {unit['revision']}.", unit=name,
                           revision=revision)
        path = self.unit_path(actor.workspace, name)
        return {
            **views.summary(unit), "revision": shown["revision"], "current_revision": unit["revision"],
            "title": shown["title"], "body": shown["body"], "fingerprint": shown["fingerprint"],
            "provenance": list(shown["provenance"]), "lineage": list(shown["lineage"]),
            "active_fingerprint": unit["active_fingerprint"], "reviewed_by": unit["reviewed_by"],
            "activated_by": unit["activated_by"], "created_by": unit["created_by"], "created_at": unit["created_at"],
            "path": str(path), "file": views.file_state(self._read(path), latest["fingerprint"]),
            "temporary_files": files.temporary_files(path, root=self.evidence_dir),
            "revisions": [views.revision_view(row) for row in listing],
        }

    def current(self, actor: Actor, name: str, *, within: Tx | None = None, lock: bool = False) -> UnitView:
        """The unit's state and latest revision in full. ``lock``: the unit's row is locked until ``within``
        ends (no new revision meanwhile), as a writer of its file needs it."""
        actor.require(Permission.MEMORY_READ)
        name = check_name(name)
        with self._transaction(actor, within) as tx:
            unit = self._existing(tx, name, lock=lock)
            latest = self._revision(tx, unit, unit["revision"])
        return UnitView(name=name, revision=unit["revision"], title=latest["title"], body=latest["body"],
                        status=unit["status"], reviewed_revision=unit["reviewed_revision"],
                        active_revision=unit["active_revision"], active_fingerprint=unit["active_fingerprint"],
                        fingerprint=latest["fingerprint"], path=self.unit_path(actor.workspace, name),
                        provenance=latest["provenance"], lineage=latest["lineage"])

    def file_fingerprint(self, actor: Actor, name: str) -> str | None:
        """The fingerprint of the unit's file as it is on disk now; None when there is none."""
        actor.require(Permission.MEMORY_READ)
        content = self._read(self.unit_path(actor.workspace, check_name(name)))
        return None if content is None else fingerprint(content)

    def snapshot(self, actor: Actor, *, within: Tx | None = None) -> dict[str, str]:
        """The active snapshot: every active unit's name and the fingerprint of its active revision's file."""
        actor.require(Permission.MEMORY_READ)
        with self._transaction(actor, within) as tx:
            return {row["name"]: row["active_fingerprint"] for row in queries.active_units(tx)}

    def snapshot_problems(self, actor: Actor, exclude: str | Collection[str] | None = None, *,
                          within: Tx | None = None) -> list[str]:
        """Every unit with an active revision whose file is missing or not that revision's, or which has a
        newer revision not yet activated, in words naming the file (``exclude``: units left out)."""
        actor.require(Permission.MEMORY_READ)
        left_out = {exclude} if isinstance(exclude, str) else set(exclude or ())
        with self._transaction(actor, within) as tx:
            active = [row for row in queries.active_units(tx) if row["name"] not in left_out]
        found: list[str] = []
        for row in active:
            path = self.unit_path(actor.workspace, row["name"])
            found += views.problems(row, path, self._read(path))
        return found

    def search(self, actor: Actor, groups: list[list[str]], *, limit: int, within: Tx | None = None) -> list[Row]:
        """Active revisions matching any group of words (all words of a group), best first: unit name,
        title, revision and body. Only ever words: no query syntax reaches the engine."""
        with self._transaction(actor, within) as tx:
            return self.search_later(actor, groups, limit=limit, within=tx).all()

    def search_later(self, actor: Actor, groups: list[list[str]], *, limit: int, within: Tx) -> Later:
        """:meth:`search` in the caller's transaction ``within``, read with its next statement sent or its commit."""
        actor.require(Permission.MEMORY_READ)
        return queries.search(within, queries.match_expression(within.dialect, groups), limit=limit)

    def active_later(self, actor: Actor, unit_ids: list[int], *, within: Tx) -> Later:
        """The active revisions of these units (found by meaning), as :meth:`search_later` gives them, in the
        caller's transaction ``within``: read with its next statement sent or its commit."""
        actor.require(Permission.MEMORY_READ)
        return queries.active_later(within, unit_ids)

    # A human's revisions ----------------------------------------------------------------------------

    def create(self, actor: Actor, name: str, title: str, body: str, reason: str | None = None) -> dict[str, Any]:
        """A new unit written by a human: revision 1, ``edited``, with no provenance."""
        actor.require_human(Permission.MEMORY_WRITE, "create an evidence unit")
        return self._create(actor, check_name(name), check_title(title), check_body(body), check_reason(reason),
                            provenance=(), via="created")

    def from_capture(self, actor: Actor, name: str, session_id: int, captures: list[str] | None = None, *,
                     title: str | None = None, reason: str | None = None) -> dict[str, Any]:
        """A new unit from a session's captures (all of them, or those named): its provenance is their ids,
        its body each capture in full, for the human to edit. The captures are read from the session's
        files, each checked against its id; nothing is fetched again."""
        actor.require_human(Permission.MEMORY_WRITE, "make an evidence unit")
        name = check_name(name)
        title = f"Evidence from research session {session_id}" if title is None else check_title(title)
        reason = check_reason(reason)
        wanted = None if captures is None else check_capture_ids(captures)
        sessions = self._sessions()
        history = sessions.history(actor, session_id)  # refuses a session the human may not read
        recorded = list(dict.fromkeys(record["capture"] for record in history["evidence"]["records_list"]))
        wanted = recorded if wanted is None else wanted
        if not wanted:
            raise InvalidInput(f"Session {session_id} has no captures yet.", field="captures", session=session_id)
        unknown = [capture for capture in wanted if capture not in recorded]
        if unknown:
            raise NotFound(f"Session {session_id} has no capture {unknown[0]}.", session=session_id,
                           captures=unknown)
        found = sessions.capture_files(actor, session_id, wanted)
        folder = sessions.session_folder(actor.workspace, session_id)
        for capture in wanted:
            if found[capture]["state"] != "ok":
                raise Conflict(f"The capture file {folder / found[capture]['file']} is missing or altered: `armarius "
                               f"sessions rebuild-files {session_id}` writes it again from the store.",
                               session=session_id, capture=capture)
        documents = [(capture, found[capture]["document"]) for capture in wanted]
        try:
            body = check_body(views.capture_body(session_id, history["subject"], documents))
        except InvalidInput as refusal:
            refusal.message += " Choose fewer captures."
            raise
        return self._create(actor, name, title, body, reason, provenance=tuple(wanted), via="capture",
                            session=session_id)

    def edit(self, actor: Actor, name: str, expected_revision: int, *, title: str | None = None,
             body: str | None = None, reason: str | None = None) -> dict[str, Any]:
        """A new revision of a unit, ``edited``. Without ``body`` the unit's file on disk is the new content
        (a human edited it in their editor): it must be a valid unit file of the current revision, of which
        only the title and the body are theirs to change. Provenance is kept; lineage gains a step."""
        actor.require_human(Permission.MEMORY_WRITE, "edit an evidence unit")
        name = check_name(name)
        if isinstance(expected_revision, bool) or not isinstance(expected_revision, int) or expected_revision < 1:
            raise InvalidInput("expected_revision is the revision you last read.", field="expected_revision")
        title = None if title is None else check_title(title)
        body = None if body is None else check_body(body)
        reason = check_reason(reason)
        path = self.unit_path(actor.workspace, name)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            unit = self._existing(tx, name, lock=True)
            if expected_revision != unit["revision"]:
                raise Conflict(f"Evidence unit {echo(name)} is at revision {unit['revision']}, not "
                               f"{expected_revision}. Read it again, then decide.", unit=name,
                               current_revision=unit["revision"], expected_revision=expected_revision)
            latest = self._revision(tx, unit, unit["revision"])
            if body is None:
                edited = self._edited_file(path, name, latest)
                title, body = title or edited.title, edited.body
            title = latest["title"] if title is None else title
            if (title, body) == (latest["title"], latest["body"]):
                return {"unit": name, "revision": unit["revision"], "status": "unchanged", "changed": False}
            return self._new_revision(tx, actor, unit, name, title, body, reason, provenance=latest["provenance"],
                                      lineage=latest["lineage"], via="edited")

    def restore(self, actor: Actor, name: str) -> dict[str, Any]:
        """Write the unit's file again from the store's latest revision (when it is missing, or holds other
        bytes: a change outside Armarius, or a write whose commit never came)."""
        actor.require_human(Permission.MEMORY_WRITE, "restore an evidence unit's file")
        name = check_name(name)
        path = self.unit_path(actor.workspace, name)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            unit = self._existing(tx, name, lock=True)
            latest = self._revision(tx, unit, unit["revision"])
            content = _render_revision(name, latest)
            was = views.file_state(self._read(path), latest["fingerprint"])
            if was["state"] == views.MATCHES:
                return {"unit": name, "revision": unit["revision"], "path": str(path), "restored": False}
            audit.append(tx, actor=actor.audit_name, action="evidence.file_restored", subject=name, details={
                "unit": name, "revision": unit["revision"], "fingerprint": latest["fingerprint"],
                "was": was["state"], "found_fingerprint": was["fingerprint"]})
            self._write(path, content)
        return {"unit": name, "revision": unit["revision"], "path": str(path), "restored": True, "was": was["state"]}

    # Review and activation (humans) ----------------------------------------------------------------

    def review(self, actor: Actor, name: str, revision: int) -> dict[str, Any]:
        """Mark exactly the revision the human read as reviewed; the file on disk must hold it."""
        actor.require_human(Permission.MEMORY_CURATE, "review an evidence unit")
        name = check_name(name)
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            unit = self._existing(tx, name, lock=True)
            self._at_revision(unit, revision, "reviewed")
            latest = self._revision(tx, unit, revision)
            self._require_file(actor, name, latest)
            if unit["reviewed_revision"] == revision:
                return {"unit": name, "revision": revision, "status": unit["status"], "changed": False}
            at = iso_utc(self.clock())
            queries.update_unit(tx, unit["id"], status=Status.REVIEWED.value, reviewed_revision=revision,
                                reviewed_by=actor.audit_name, reviewed_at=at)
            audit.append(tx, actor=actor.audit_name, action="evidence.reviewed", subject=name,
                         details={"unit": name, "revision": revision, "fingerprint": latest["fingerprint"]})
        return {"unit": name, "revision": revision, "status": Status.REVIEWED.value, "changed": True}

    def activate(self, actor: Actor, name: str, revision: int, *, within: Tx | None = None) -> dict[str, Any]:
        """Index the reviewed revision into the searched corpus, from the store (nothing is fetched), if the
        file on disk still holds it: it becomes the active revision and the unit ``active``."""
        actor.require_human(Permission.EVIDENCE_MANAGE, "activate an evidence unit")
        name = check_name(name)
        with self._transaction(actor, within, write=True) as tx:
            unit = self._existing(tx, name, lock=True)
            self._at_revision(unit, revision, "activated")
            if unit["reviewed_revision"] != revision:
                raise Conflict(f"Revision {revision} of evidence unit {echo(name)} is not reviewed: a human reviews "
                               "it first (armarius evidence review).", unit=name, revision=revision,
                               status=unit["status"])
            latest = self._revision(tx, unit, revision)
            self._require_file(actor, name, latest)
            if unit["active_revision"] == revision:
                return {"unit": name, "revision": revision, "status": unit["status"],
                        "fingerprint": latest["fingerprint"], "changed": False}
            queries.index_active(tx, unit["id"], revision=revision, name=name, title=latest["title"],
                                 body=latest["body"])
            if self.write_vector is not None:
                self.write_vector(tx, unit["id"], revision, latest["title"], latest["body"])
            queries.update_unit(tx, unit["id"], status=Status.ACTIVE.value, active_revision=revision,
                                active_fingerprint=latest["fingerprint"], activated_by=actor.audit_name,
                                activated_at=iso_utc(self.clock()))
            audit.append(tx, actor=actor.audit_name, action="evidence.activated", subject=name, details={
                "unit": name, "revision": revision, "fingerprint": latest["fingerprint"],
                "replaced": unit["active_revision"]})
        return {"unit": name, "revision": revision, "status": Status.ACTIVE.value,
                "fingerprint": latest["fingerprint"], "changed": True}

    # Corrections (the repairs feature) -------------------------------------------------------------

    def correction(self, actor: Actor, name: str, *, base_revision: int, title: str, body: str, via: str,
                   at: str | None = None, within: Tx | None = None) -> Correction:
        """The revision after ``base_revision`` with exactly this title and body: its number, its complete
        file and fingerprint, and the base revision's fingerprint. Writes nothing. ``at`` (default: now)
        is the time its lineage step records: the same arguments always give the same file."""
        actor.require(Permission.MEMORY_READ)
        name, title, body, via = check_name(name), check_title(title), check_body(body), check_via(via)
        with self._transaction(actor, within) as tx:
            unit = self._existing(tx, name)
            base = queries.revision(tx, unit["id"], base_revision)
        if base is None:
            raise NotFound(f"Evidence unit {echo(name)} has revisions 1 to {unit['revision']}.", unit=name,
                           revision=base_revision)
        at = iso_utc(self.clock()) if at is None else at
        revision = base_revision + 1
        lineage = (*base["lineage"], step(revision, actor.audit_name, at, via))
        content = render(UnitFile(name, title, revision, base["provenance"], lineage, body))
        return Correction(name=name, base_revision=base_revision,
                          base_fingerprint=base["fingerprint"], revision=revision, title=title, body=body, via=via,
                          author=actor.audit_name, at=at, provenance=base["provenance"], lineage=lineage,
                          content=content, fingerprint=fingerprint(content))

    def write_file(self, correction: Correction, *, workspace: str) -> None:
        """Replace the unit's file (in ``workspace``'s folder, as it is now) with the correction's, atomically."""
        self._write(self.unit_path(workspace, correction.name), correction.content)

    def record_correction(self, actor: Actor, correction: Correction, *, within: Tx | None) -> int:
        """Store the correction as the unit's next revision, ``reviewed`` (a human chose its exact content);
        refused when the unit has moved past the correction's base revision. Its number."""
        actor.require_human(Permission.EVIDENCE_MANAGE, "record a correction of an evidence unit")
        if render(correction.unit_file()) != correction.content or fingerprint(correction.content) != \
                correction.fingerprint:
            raise InvalidInput("The correction's file does not match its content.", field="correction")
        name = correction.name
        with self._transaction(actor, within, write=True) as tx:
            unit = self._existing(tx, name, lock=True)
            if unit["revision"] != correction.base_revision:
                raise Conflict(f"Evidence unit {echo(name)} is at revision {unit['revision']}, no longer at "
                               f"{correction.base_revision}, which the correction was prepared against.", unit=name,
                               current_revision=unit["revision"], base_revision=correction.base_revision)
            base = self._revision(tx, unit, correction.base_revision)
            if base["provenance"] != correction.provenance or base["lineage"] != correction.lineage[:-1]:
                raise InvalidInput("The correction does not continue the base revision's provenance and lineage.",
                                   field="correction")
            at = iso_utc(self.clock())
            queries.insert_revision(tx, unit["id"], correction.revision, title=correction.title, body=correction.body,
                                    fingerprint=correction.fingerprint, provenance=correction.provenance,
                                    lineage=correction.lineage, author=correction.author, reason=correction.via,
                                    at=correction.at)
            queries.update_unit(tx, unit["id"], title=correction.title, revision=correction.revision,
                                status=Status.REVIEWED.value, reviewed_revision=correction.revision,
                                reviewed_by=actor.audit_name, reviewed_at=at, updated_by=actor.audit_name,
                                updated_at=at)
            audit.append(tx, actor=actor.audit_name, action="evidence.edited", subject=name, details={
                "unit": name, "revision": correction.revision, "fingerprint": correction.fingerprint,
                "via": correction.via, "status": Status.REVIEWED.value})
        return correction.revision

    # Helpers ----------------------------------------------------------------------------------------

    def _create(self, actor: Actor, name: str, title: str, body: str, reason: str | None, *,
                provenance: tuple[str, ...], via: str, session: int | None = None) -> dict[str, Any]:
        try:
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                if queries.unit(tx, name) is not None:
                    raise _exists(name)
                return self._new_revision(tx, actor, None, name, title, body, reason, provenance=provenance,
                                          lineage=(), via=via, session=session)
        except UniqueViolation as violation:  # created by someone else meanwhile (PostgreSQL)
            violation.raise_unless(_UNIT_NAME)
            raise _exists(name) from None

    def _new_revision(self, tx: Tx, actor: Actor, unit: Row | None, name: str, title: str, body: str,
                      reason: str | None, *, provenance: tuple[str, ...], lineage: tuple[dict[str, Any], ...],
                      via: str, session: int | None = None) -> dict[str, Any]:
        """The unit's next revision in the store, then in its file (the last step before the commit)."""
        at = iso_utc(self.clock())
        revision = 1 if unit is None else unit["revision"] + 1
        lineage = (*lineage, step(revision, actor.audit_name, at, via))
        content = render(UnitFile(name, title, revision, provenance, lineage, body))
        written = fingerprint(content)
        if unit is None:
            unit_id = queries.insert_unit(tx, name=name, title=title, by=actor.audit_name, at=at)
        else:
            unit_id = unit["id"]
            queries.update_unit(tx, unit_id, title=title, revision=revision, status=Status.EDITED.value,
                                updated_by=actor.audit_name, updated_at=at)
        queries.insert_revision(tx, unit_id, revision, title=title, body=body, fingerprint=written,
                                provenance=provenance, lineage=lineage, author=actor.audit_name, reason=reason, at=at)
        details: dict[str, Any] = {"unit": name, "revision": revision, "fingerprint": written, "via": via}
        if via == "capture":
            details.update(session=session, provenance=list(provenance))
        audit.append(tx, actor=actor.audit_name, action="evidence.created" if unit is None else "evidence.edited",
                     subject=name, details=details)
        path = self.unit_path(actor.workspace, name)
        self._write(path, content)
        return {"unit": name, "revision": revision, "status": Status.EDITED.value, "fingerprint": written,
                "path": str(path), "changed": True}

    def _edited_file(self, path: Path, name: str, latest: Row) -> UnitFile:
        """The unit as a human edited its file: a valid unit file of the latest revision."""
        content = self._read(path)
        if content is None:
            raise InvalidInput(f"There is no file {path} to take the new content from: give the body.",
                               field="file", path=str(path))
        edited = parse(content, name)
        if edited.revision != latest["revision"]:
            raise Conflict(f"The file {path} is of revision {edited.revision}, the unit is at revision "
                           f"{latest['revision']}: edit a file of the current revision.", unit=name, path=str(path),
                           current_revision=latest["revision"], file_revision=edited.revision)
        if edited.provenance != latest["provenance"] or edited.lineage != latest["lineage"]:
            raise InvalidInput(f"The file {path} changes the unit's provenance or lineage; only its title and body "
                               "are yours to change.", field="file", path=str(path))
        return edited

    def _require_file(self, actor: Actor, name: str, revision: Row) -> None:
        """Refuse unless the unit's file on disk holds exactly this revision."""
        path = self.unit_path(actor.workspace, name)
        state = views.file_state(self._read(path), revision["fingerprint"])
        if state["state"] != views.MATCHES:
            what = "is missing" if state["state"] == views.MISSING else "differs from it (changed outside Armarius)"
            raise Conflict(f"The file {path} {what}, so it is not revision {revision['revision']} of {echo(name)}: "
                           "edit the unit to take the file's content as a new revision, or restore the file.",
                           unit=name, path=str(path), file=state["state"], revision=revision["revision"])

    def _existing(self, tx: Tx, name: str, *, lock: bool = False) -> Row:
        unit = queries.unit(tx, name, lock=lock)
        if unit is None:
            raise NotFound(f"There is no evidence unit {echo(name)} in this workspace.", unit=name,
                           agent_hint="recall finds the active ones.")
        return unit

    @staticmethod
    def _revision(tx: Tx, unit: Row, number: int) -> Row:
        row = queries.revision(tx, unit["id"], number)
        assert row is not None  # revisions are never removed
        return row

    @staticmethod
    def _at_revision(unit: Row, revision: int, what: str) -> None:
        if revision != unit["revision"]:
            raise Conflict(f"Evidence unit {echo(unit['name'])} is at revision {unit['revision']}; you read revision "
                           f"{revision}. What you saw is what is {what}: read the current revision, then decide.",
                           unit=unit["name"], current_revision=unit["revision"], revision=revision)

    def _sessions(self) -> SessionService:
        if self.sessions is None:
            raise NotFound("This server has no research sessions to take captures from.", field="session")
        return self.sessions

    def _transaction(self, actor: Actor, within: Tx | None, *, write: bool = False) -> AbstractContextManager[Tx]:
        """The caller's transaction (``within``: of the actor's workspace; nothing commits here then) or a new one."""
        if within is None:
            return self.database.transaction(workspace_id=actor.workspace_id, write=write)
        if within.workspace_id != actor.workspace_id:
            raise RuntimeError("within=... needs a transaction of the actor's workspace")
        return nullcontext(within)


def _render_revision(name: str, revision: Row) -> bytes:
    content = render(UnitFile(name, revision["title"], revision["revision"], revision["provenance"],
                              revision["lineage"], revision["body"]))
    assert fingerprint(content) == revision["fingerprint"]  # the stored fingerprint is of exactly this file
    return content


def _exists(name: str) -> AlreadyExists:
    return AlreadyExists(f"There is an evidence unit {echo(name)} already: edit it instead.", unit=name)
