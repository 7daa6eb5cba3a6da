"""How sessions are shown (to a model and to a person) and how their evidence files are checked."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from armarius.canonical import canonical_json
from armarius.research.captures import verify_capture
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


def file_problems(folder: Path, stored: dict[str, str | None]) -> list[dict[str, Any]]:
    problems: list[dict[str, Any]] = []
    present = {path.name.removesuffix(".json"): path for path in folder.glob("*.json")} if folder.is_dir() else {}
    for capture_id, path in sorted(present.items()):
        if capture_id not in stored:
            problems.append({"problem": "extra_file", "file": path.name})
        elif not verify_capture(path) or (stored[capture_id] or "").encode("utf-8") != path.read_bytes():
            problems.append({"problem": "modified_file", "file": path.name})
    problems += [{"problem": "missing_file", "file": f"{capture_id}.json"}
                 for capture_id in sorted(set(stored) - set(present))]
    # A writer killed before it renamed its temporary file leaves it behind.
    problems += [{"problem": "stale_temporary_file", "file": path.name}
                 for path in (sorted(folder.glob(".*.tmp")) if folder.is_dir() else [])]
    return problems
