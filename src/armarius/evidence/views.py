"""How units are shown, how their files compare with the store, and the body a unit made from captures gets."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from armarius.evidence.model import fingerprint
from armarius.store import Row

#: A file's state next to a revision: it holds that revision, other bytes, or it is not there.
MATCHES, DIFFERS, MISSING = "matches", "differs", "missing"


def file_state(content: bytes | None, expected: str) -> dict[str, Any]:
    if content is None:
        return {"state": MISSING, "fingerprint": None}
    found = fingerprint(content)
    return {"state": MATCHES if found == expected else DIFFERS, "fingerprint": found}


def summary(row: Row) -> dict[str, Any]:
    return {"unit": row["name"], "title": row["title"], "status": row["status"], "revision": row["revision"],
            "reviewed_revision": row["reviewed_revision"], "active_revision": row["active_revision"],
            "updated_at": row["updated_at"], "updated_by": row["updated_by"]}


def revision_view(row: Row) -> dict[str, Any]:
    return {"revision": row["revision"], "title": row["title"], "author": row["author"], "at": row["created_at"],
            "via": row["lineage"][-1]["via"], "reason": row["reason"], "fingerprint": row["fingerprint"]}


def problems(active: Row, path: Path, content: bytes | None) -> list[str]:
    """What keeps an active unit's file from being its active revision's, in words naming the file."""
    name = active["name"]
    if content is None:
        return [f"{name}: the file {path} is missing (active revision {active['active_revision']})"]
    found = fingerprint(content)
    found_problems = []
    if active["revision"] > active["active_revision"]:
        found_problems.append(f"{name}: revision {active['revision']} of {path} is edited but not activated "
                              f"(the active revision is {active['active_revision']})")
        modified = found != active["latest_fingerprint"]
    else:
        modified = found != active["active_fingerprint"]
    if modified:
        found_problems.append(f"{name}: the file {path} was modified outside Armarius (its fingerprint is "
                              f"{found}, revision {active['revision']}'s is {active['latest_fingerprint']})")
    return found_problems


def capture_body(session_id: int, subject: str, captures: list[tuple[str, dict[str, Any]]]) -> str:
    """A unit's first body from a session's captures: the question, then each capture in full as JSON.
    A human edits it from there; the provenance names the captures."""
    quoted = "\n".join(f"> {line}" if line else ">" for line in subject.splitlines() or [""])
    parts = [f"From research session {session_id}, which asked:\n\n{quoted}\n"]
    for capture_id, document in captures:
        text = json.dumps(document, ensure_ascii=False, indent=2, sort_keys=True)
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
        kind = document.get("request", {}).get("kind", "answer")
        parts.append(f"## {kind}: capture {capture_id}\n\n{fence}json\n{text}\n{fence}\n")
    return "\n".join(parts)
