"""Imports: a plan read from a source, checked, then written in one transaction (or only counted).

Each note becomes an entry of the acting human's workspace:
- a slug that is free: a new entry (an Armarius export's entry with every revision it had);
- an entry with the same title, body and tags: unchanged (so a re-run changes nothing);
- an entry that is not curated: a new revision with the imported content (the old stays in history);
- a curated entry with other content: never overwritten. The import is refused, naming each such
  entry, unless the human asks to keep them as they are (``skip_curated``).

An import never curates and skips the duplicate judgment (a human chose to bring these notes in);
every entry written has its audit event, and the whole import one more (``memory.imported``) with
its counts and the source's SHA-256.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import ArmariusError, Conflict
from armarius.memory.model import (
    MemoryLimits,
    PastRevision,
    check_body,
    check_reason,
    check_slug,
    check_tags,
    check_title,
)
from armarius.memory.service import MemoryService
from armarius.store import Database
from armarius.transfer.model import Note, Plan, Problems, check_author

#: How many names of each outcome an answer lists (the counts are always complete).
LISTED = 200


class _DryRun(Exception):
    """Rolls a dry run's transaction back after everything was counted."""


@dataclass
class ImportService:
    database: Database
    memory: MemoryService
    limits: MemoryLimits

    def run(self, actor: Actor, plan: Plan, *, dry_run: bool = False, skip_curated: bool = False,
            progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        actor.require_human(Permission.MEMORY_WRITE)
        notes = self._check(plan)
        outcomes: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": [], "curated_kept": []}
        operation = "op_" + uuid.uuid4().hex
        try:
            with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
                for note in notes:
                    outcome = self.memory.write_imported(tx, actor, slug=note.slug, title=note.title, body=note.body,
                                                         tags=note.tags, history=note.history, origin=note.origin,
                                                         operation=operation)
                    outcomes[outcome].append(note.slug)
                    if progress is not None:
                        progress(1)
                kept = outcomes["curated_kept"]
                if kept and not skip_curated:
                    raise Conflict(
                        f"{len(kept)} curated {'entry has' if len(kept) == 1 else 'entries have'} other content than "
                        f"the import: {', '.join(kept[:20])}. A human reviewed them, so an import never "
                        "overwrites them; nothing was imported. Import with skip_curated (--skip-curated) to keep "
                        "them as they are and import the rest, or move them aside first.",
                        curated=kept)
                counts = {key: len(names) for key, names in outcomes.items()}
                if counts["created"] or counts["updated"]:
                    audit.append(tx, actor=actor.audit_name, action="memory.imported", subject=plan.source, details={
                        "kind": plan.kind, "sha256": plan.digest, "operation": operation, **counts})
                if dry_run:
                    raise _DryRun
        except _DryRun:
            pass
        return {
            "kind": plan.kind, "source": plan.source, "sha256": plan.digest, "dry_run": dry_run,
            "written": not dry_run and bool(counts["created"] or counts["updated"]), "counts": counts,
            **{key: names[:LISTED] for key, names in outcomes.items() if key != "unchanged"},
            "renamed": plan.renamed[:LISTED], "renamed_count": len(plan.renamed),
            "notices": plan.notices[:LISTED], "notices_count": len(plan.notices),
            "curated_in_source": [note.slug for note in plan.notes if note.curated_in_source][:LISTED],
        }

    def _check(self, plan: Plan) -> list[Note]:
        """Every note's content checked as remember would check it, before anything is written; the notes as
        remember would store them (titles and reasons trimmed, a blank reason none, tags sorted once each)."""
        problems, checked = Problems(), []
        for note in plan.notes:
            try:
                check_slug(note.slug)
                history = tuple(self._stored(past) for past in note.history)
                current = replace(note, title=check_title(note.title), body=check_body(note.body, self.limits),
                                  tags=check_tags(list(note.tags)), history=history)
            except ArmariusError as error:
                problems.add(note.origin, error.message)
                continue
            if history and _content(history[-1]) != _content(current):
                problems.add(note.origin, "its title, body and tags differ from its last revision's: the history "
                                          "does not lead to the entry")
                continue
            checked.append(current)
        problems.raise_if_any(plan.source)
        return checked

    def _stored(self, past: PastRevision) -> PastRevision:
        """A revision of the imported history as remember would have stored it."""
        return replace(past, title=check_title(past.title), body=check_body(past.body, self.limits),
                       tags=check_tags(list(past.tags)), reason=check_reason(past.reason),
                       author=check_author(past.author))


def _content(note: Note | PastRevision) -> tuple[str, str, tuple[str, ...]]:
    return note.title, note.body, note.tags
