"""How sessions are shown (to a model and to a person) and how their evidence files are checked."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from armarius import files
from armarius.canonical import canonical_json
from armarius.sessions.model import Status
from armarius.store import Row


def summary(row: Row) -> dict[str, Any]:
    reserved, held = int(row["reserved"]), int(row["held"])
    view: dict[str, Any] = {
        "session": row["id"], "subject": row["subject"], "owner": row["owner"], "status": row["status"],
        "budget": {"total": row["budget"], "used": row["used"], "running": reserved, "held": held,
                   "left": row["budget"] - row["used"] - reserved - held},
        "created_at": row["created_at"], "updated_at": row["updated_at"],
    }
    if row["status"] == Status.BLOCKED:
        view.update(reason=row["reason"], retry_not_before=row["retry_not_before"],
                    resume_state=json.loads(row["resume_state"]))
    return view


def next_step(row: Row) -> str:
    if row["status"] == Status.OPEN:
        return "Investigate with project_query(session, arguments); each query costs one action of budget."
    if row["status"] == Status.BLOCKED:
        return ("Blocked: a human must resume it (armarius sessions resume "
                f"{row['id']}){' from ' + row['retry_not_before'] if row['retry_not_before'] else ''}.")
    return "Closed: its evidence stays readable; open a new session for new questions."


def record_view(record: Row) -> dict[str, Any]:
    view = {"seq": record["seq"], "kind": record["request_kind"], "capture": record["capture_id"],
            "repeat_of": record["repeat_of"], "actor": record["actor"], "at": record["created_at"]}
    if record["enrichment_revision"] is not None:  # a lookup of enrichment: it cost no budget
        view["enrichment"] = record["enrichment_revision"]
    return view


def record_problems(record: Row, content: str | None) -> list[dict[str, Any]]:
    where = {"evidence": record["seq"], "capture": record["capture_id"]}
    if content is None:
        return [{"problem": "record_without_capture", **where}]
    if hashlib.sha256(content.encode("utf-8")).hexdigest() != record["capture_id"]:
        return [{"problem": "capture_altered", **where}]
    captured = json.loads(content)["request"]
    if canonical_json(captured) != record["request"] or captured["kind"] != record["request_kind"]:
        return [{"problem": "request_mismatch", **where}]
    return []


def file_problems(root: Path, folder: Path, stored: dict[str, str | None]) -> list[dict[str, Any]]:
    """What is wrong with the capture files in ``folder``, reached from ``root`` (the evidence folder) without
    following links, against the ``stored`` captures (id: content). A link or anything but a regular file named
    like a capture file is ``not_a_file`` (read by no one, replaced by no one); a link or anything but a folder
    on the way to the folder leaves it missing. A file is read up to one byte past the stored capture's length."""
    problems: list[dict[str, Any]] = []
    with files.open_folder(root, folder) as descriptor:
        entries: list[os.DirEntry[str]] = []
        if descriptor is not None:
            with os.scandir(descriptor) as listing:
                entries = list(listing)
        present = {entry.name.removesuffix(".json"): entry for entry in entries
                   if entry.name.endswith(".json") and not entry.name.startswith(".")}
        for capture_id, entry in sorted(present.items()):
            if not entry.is_file(follow_symlinks=False):
                problems.append({"problem": "not_a_file", "file": entry.name})
            elif capture_id not in stored:
                problems.append({"problem": "extra_file", "file": entry.name})
            else:
                assert descriptor is not None  # entries were listed
                expected = (stored[capture_id] or "").encode("utf-8")
                found = files.read_regular(descriptor, entry.name, limit=len(expected) + 1)
                if found is None:  # replaced or removed since it was listed
                    problems.append({"problem": "not_a_file" if _taken(descriptor, entry.name) else "missing_file",
                                     "file": entry.name})
                elif hashlib.sha256(found.content).hexdigest() != capture_id or found.content != expected:
                    problems.append({"problem": "modified_file", "file": entry.name})
    problems += [{"problem": "missing_file", "file": f"{capture_id}.json"}
                 for capture_id in sorted(set(stored) - set(present))]
    # A writer killed before it renamed its temporary file leaves it behind.
    problems += [{"problem": "stale_temporary_file", "file": entry.name}
                 for entry in sorted(entries, key=lambda entry: entry.name)
                 if entry.name.startswith(".") and entry.name.endswith(".tmp")]
    return problems


def _taken(folder: int, name: str) -> bool:
    """Whether anything (a link, a FIFO, a folder) has the name ``name`` in ``folder``."""
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
