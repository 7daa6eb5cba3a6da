"""A workspace written out: JSONL with everything, or a folder of Markdown files; and read back.

The JSONL file is one JSON object a line: a header, then one line per stored row of the workspace
(``{"table": …, "row": {…}}``, tables in a fixed order, rows in key order), then an end line with
the count per table and the SHA-256 of every line before it, so that a cut or edited file is
known. Secrets never leave: sign-in sessions, token digests and sealed approval tokens are not
workspace content (:data:`LEFT_OUT` says why for each table not written). Everything is read in
one snapshot of the database.

The folder holds ``armarius-export.json`` (the header and counts), ``entries/<slug>.md`` (front
matter: slug, title, tags, revision, curated revision, needs review, last change), ``drafts/`` (each
proposal and written draft with its status) and ``evidence/<unit>.md`` (each unit's latest
revision, in its canonical form).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from armarius.audit.chain import GENESIS_HASH, link_problem
from armarius.auth.directory import NAME_PATTERN
from armarius.auth.model import Workspace
from armarius.errors import Conflict, InvalidInput, echo
from armarius.evidence.model import UnitFile, render
from armarius.files import open_folder, write_atomically
from armarius.memory.model import PastRevision, check_slug, parse_links
from armarius.store import Database, Tx, utc_now
from armarius.transfer.markdown import MANIFEST, render_note
from armarius.transfer.model import Note, Plan, Problems, digest_of, shown_name
from armarius.validation import INT64_MAX

FORMAT = "armarius-export"
FORMAT_VERSION = 1

#: The workspace's tables an export holds, in this order: each with the order of its rows and the
#: columns left out (what the store derives from the others).
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "entries": ("id", ("search_body",)),
    "entry_revisions": ("entry_id, revision", ()),
    "draft_proposals": ("id", ()),
    "approvals": ("id", ("token_digest", "sealed_token")),
    "drafts": ("id", ()),
    "operations": ("operation_id", ()),
    "captures": ("capture_id", ()),
    "sessions": ("id", ()),
    "session_checkpoints": ("session_id, seq", ()),
    "session_inputs": ("session_id, revision", ()),
    "evidence_records": ("session_id, seq", ()),
    "session_facts": ("session_id, revision, seq", ()),
    "evidence_units": ("id", ()),
    "evidence_revisions": ("unit_id, revision", ()),
    "repairs": ("id", ()),
    "repair_events": ("repair_id, seq", ()),
    "pending_operations": ("id", ()),
    "audit_events": ("seq", ()),
    "audit_heads": ("workspace_id", ()),
}

#: Every other table of the store, and why an export of a workspace leaves it out.
LEFT_OUT = {
    "workspaces": "the export's header names the workspace",
    "principals": "identities of the whole installation; revisions and events name their actors",
    "memberships": "who may act here is the installation's, not the content's",
    "agent_tokens": "secrets (token digests)",
    "web_sessions": "secrets (sign-in cookies)",
    "login_attempts": "sign-in throttling of the installation",
    "entry_tags": "derived from the entries' tags",
    "entry_links": "derived from the entries' bodies",
    "entry_word_maps": "a search index, derived from the entries",
    "entry_search": "a search index, derived from the entries",
    "entry_vectors": "recall by meaning, derived from the entries (an import embeds them again)",
    "vector_models": "the models the store's vectors were made by",
    "evidence_search": "a search index, derived from the units",
    "unit_vectors": "recall by meaning, derived from the units (armarius memory reindex makes them from the units)",
    "session_reservations": "actions of running server processes",
    "schema_migrations": "the store's, not the workspace's",
    "audit_chains": "the store's record of which chains are signed",
    "audit_legacy_events": "the store's record of events from before the log was signed",
}


def _plain(value: Any) -> Any:
    """A stored value as JSON: timestamps as ISO text, bytes as base64."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Decimal):
        return int(value) if value == int(value) else float(value)
    raise TypeError(f"cannot export a {type(value).__name__}")


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, default=_plain).encode("utf-8") + b"\n"


def _rows(tx: Tx, table: str) -> Iterator[dict[str, Any]]:
    order, left_out = TABLES[table]
    for row in tx.all(f"SELECT * FROM {table} WHERE workspace_id = ? ORDER BY {order}", (tx.require_workspace(),)):
        yield {key: value for key, value in row.items() if key not in left_out}


def write_jsonl(database: Database, workspace: Workspace, path: Path, *, schema_version: int,
                overwrite: bool = False) -> dict[str, int]:
    """Write the export file (atomically); the count of rows per table. An existing file is replaced only when
    ``overwrite`` says so, and only a regular file: a folder, a link or anything else is refused."""
    _check_output_file(path, overwrite=overwrite)
    header = {"type": FORMAT, "version": FORMAT_VERSION, "workspace": workspace.name, "exported_at": utc_now(),
              "schema_version": schema_version}
    lines, counts, sha = [_line(header)], {}, hashlib.sha256()
    with database.transaction(workspace_id=workspace.id, snapshot=True) as tx:
        for table in TABLES:
            counts[table] = 0
            for row in _rows(tx, table):
                lines.append(_line({"table": table, "row": row}))
                counts[table] += 1
    for line in lines:
        sha.update(line)
    lines.append(_line({"type": "end", "counts": counts, "sha256": sha.hexdigest()}))
    try:
        write_atomically(path, b"".join(lines), mode=0o600)
    except OSError as error:
        raise _unwritable(path, error) from error
    return counts


def _check_output_file(path: Path, *, overwrite: bool) -> None:
    """Refuse an output file that is there already (unless ``overwrite``) or is not a regular file."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    except OSError as error:
        raise _unwritable(path, error) from error
    if stat.S_ISDIR(found.st_mode):
        raise InvalidInput(f"{_named(path)} is a folder; name a new file ending in .jsonl for the JSONL export (a "
                           "folder is written by the Markdown export, whose name does not end in .jsonl).",
                           field="output")
    if not stat.S_ISREG(found.st_mode):
        raise InvalidInput(f"{_named(path)} exists and is not a regular file (a symbolic link, a FIFO or a device); "
                           "name a new file for the export.", field="output")
    if not overwrite:
        raise InvalidInput(f"{_named(path)} exists; an export does not replace a file unless told to. Name a new file, "
                           "or pass --overwrite to replace it.", field="output")


def _named(path: Path) -> str:
    """An output path as a message shows it: escaped (it is the operator's, but may hold anything), cut after
    1024 characters (not after echo's usual 80: the end of a path names the file)."""
    return echo(path, 1024)


def _unwritable(path: Path, error: OSError) -> InvalidInput:
    return InvalidInput(f"The export cannot be written to {_named(path)} ({error.strerror or error}); name a place "
                        "you can write to.", field="output")


def write_folder(database: Database, workspace: Workspace, folder: Path, *, schema_version: int
                 ) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Write the export folder (it must be new or empty); the count of files of each kind and the entries
    written (their rows)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InvalidInput(f"{_named(folder)} exists and is not an empty folder; name a new folder for the export.",
                           field="output")
    with database.transaction(workspace_id=workspace.id, snapshot=True) as tx:
        entries = list(_rows(tx, "entries"))
        proposals, drafts = list(_rows(tx, "draft_proposals")), list(_rows(tx, "drafts"))
        units = {row["id"]: row for row in _rows(tx, "evidence_units")}
        latest = {row["unit_id"]: row for row in _rows(tx, "evidence_revisions")}
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        counts = _write_files(folder, entries, proposals, drafts, units, latest)
        manifest = {"type": FORMAT, "version": FORMAT_VERSION, "workspace": workspace.name, "exported_at": utc_now(),
                    "schema_version": schema_version, "counts": counts}
        _write(folder, Path(MANIFEST), json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    except OSError as error:
        raise _unwritable(folder, error) from error
    return counts, entries


def _write_files(folder: Path, entries: list[dict[str, Any]], proposals: list[dict[str, Any]],
                 drafts: list[dict[str, Any]], units: dict[Any, dict[str, Any]], latest: dict[Any, dict[str, Any]]
                 ) -> dict[str, int]:
    """The entries', drafts' and units' files of an export folder; the count of each kind."""
    counts = {"entries": 0, "drafts": 0, "evidence": 0}
    for entry in entries:
        meta = {"slug": entry["slug"], "title": entry["title"], "tags": json.loads(entry["tags"]),
                "revision": entry["revision"], "curated_revision": entry["curated_revision"],
                "curated_by": entry["curated_by"], "needs_review": bool(entry["needs_review"]),
                "updated_at": _plain_text(entry["updated_at"]), "updated_by": entry["updated_by"]}
        _write(folder, Path("entries", f"{entry['slug']}.md"), render_note(meta, entry["body"]))
        counts["entries"] += 1
    for kind, rows in (("proposal", proposals), ("draft", drafts)):
        for row in rows:
            meta = {"kind": kind, **{key: _plain_text(value) for key, value in row.items()
                                     if key not in ("text", "workspace_id", "collection_public_key")}}
            _write(folder, Path("drafts", f"{kind}-{row['id']}-{row['slug'].replace('/', '--')}.md"),
                   render_note(meta, row["text"]))
            counts["drafts"] += 1
    for unit_id, unit in units.items():
        revision = latest[unit_id]
        content = render(UnitFile(name=unit["name"], title=revision["title"], revision=revision["revision"],
                                  provenance=tuple(json.loads(revision["provenance"])),
                                  lineage=tuple(json.loads(revision["lineage"])), body=revision["body"]))
        _write(folder, Path("evidence", f"{unit['name']}.md"), content.decode("utf-8"))
        counts["evidence"] += 1
    return counts


def _plain_text(value: Any) -> Any:
    return _plain(value) if isinstance(value, (datetime, date)) else value


def _write(root: Path, relative: Path, text: str) -> None:
    """A new file ``relative`` below the export folder ``root``, readable only by its owner from the first byte
    (an export holds the workspace's knowledge), as are the folders made for it. Each folder on the way is
    entered and the file made without following a symbolic link, and never over anything there: a link, file
    or folder put into the export folder while the export runs is refused, never written through."""
    try:
        with open_folder(root, root / relative.parent, create=True, durable=False, strict=True,
                         mode=0o700) as folder:
            assert folder is not None  # made when missing
            descriptor = os.open(relative.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o600, dir_fd=folder)
    except (Conflict, FileExistsError) as error:
        found = error.details.get("path", relative.as_posix()) if isinstance(error, Conflict) else relative.as_posix()
        raise Conflict(f"{echo(found)} was put into the export folder {_named(root)} while the export "
                       "ran (a symbolic link, a file or a folder that the export did not make): something else writes "
                       "there. Nothing is written through it, and the export stopped part way; export again into a "
                       "new folder that only you can write to.", path=found) from error
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


# Reading an export back -----------------------------------------------------------------------


def read_records(path: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The header and the rows per table of an export file, checked whole: a cut, edited or foreign file
    is refused naming its line, before anything is imported."""
    records = _read_records(path.read_bytes(), shown_name(path.name))
    return records.header, records.tables


class _Records(NamedTuple):
    """An export file read: its header, its rows per table, and the line each row is on."""

    header: dict[str, Any]
    tables: dict[str, list[dict[str, Any]]]
    lines: dict[str, list[int]]


def _read_records(data: bytes, name: str) -> _Records:
    """The records of the export file ``name`` (shown as it may be shown) holding ``data``."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    problems, sha = Problems(), hashlib.sha256()
    header: dict[str, Any] = {}
    tables: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
    numbers: dict[str, list[int]] = {table: [] for table in TABLES}
    end: dict[str, Any] | None = None
    for number, raw in enumerate(lines, 1):
        where = f"{name} line {number}"
        record = _record(raw)
        if record is None:
            problems.add(where, "JSON nested too deeply to read (a row of an export nests a few levels): the file "
                                "was edited")
            break
        if number == 1:
            if record.get("type") != FORMAT or record.get("version") != FORMAT_VERSION:
                problems.add(where, f"not an Armarius export (format {FORMAT} version {FORMAT_VERSION})")
                break
            header = record
        elif end is not None:
            problems.add(where, "a line after the end line")
            break
        elif record.get("type") == "end":
            end = record
            continue
        elif record.get("table") in TABLES and isinstance(record.get("row"), dict):
            tables[record["table"]].append(record["row"])
            numbers[record["table"]].append(number)
        else:
            problems.add(where, "neither a row of an exported table nor the end line: the file was cut or edited")
            break
        sha.update(raw + b"\n")
    if not problems.found:
        _check_end(end, sha.hexdigest(), tables, f"{name} line {len(lines)}", problems)
    problems.raise_if_any(name)
    return _Records(header, tables, numbers)


def _record(raw: bytes) -> dict[str, Any] | None:
    """The line's object; an empty one when the line is not a JSON object; None when it nests too deeply for
    Python's parser (which would otherwise end the import with an internal error)."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    except RecursionError:
        return None
    return record if isinstance(record, dict) else {}


def _check_end(end: dict[str, Any] | None, sha256: str, tables: dict[str, list[dict[str, Any]]], where: str,
               problems: Problems) -> None:
    if end is None:
        problems.add(where, "no end line after it: the file was cut short")
    elif end.get("sha256") != sha256:
        problems.add(where, "the lines do not match the end line's SHA-256: the file was edited")
    elif end.get("counts") != {table: len(rows) for table, rows in tables.items()}:
        problems.add(where, "the rows do not match the end line's counts")


def chain_problems(tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Whether the exported audit chain links up, event by event, to its head (no key needed)."""
    seq, prev_hash = 0, GENESIS_HASH
    for event in tables["audit_events"]:
        problem = link_problem(event, seq + 1, prev_hash)
        if problem is not None:
            return [f"audit event {event['seq']}: {problem}"]
        seq, prev_hash = int(event["seq"]), event["hash"]
    if any((int(head["seq"]), head["hash"]) != (seq, prev_hash) for head in tables["audit_heads"]):
        return ["the audit head does not match the last exported event"]
    return []


def read_export(path: Path, *, prefix: str = "") -> Plan:
    """An export's entries with every revision, as notes to import: every field of the rows read checked
    for its type (and timestamps for the store's form), every problem named, before anything is imported."""
    data, name = path.read_bytes(), shown_name(path.name)
    header, tables, lines = _read_records(data, name)
    problems = Problems()
    plan = Plan(kind="armarius", source=name, digest=digest_of(data))
    workspace = header.get("workspace")
    if not isinstance(workspace, str) or not NAME_PATTERN.fullmatch(workspace):
        problems.add(f"{name} line 1", "the header's workspace is not a workspace name (1-64 lowercase letters, "
                                       "digits, '.', '_' or '-')")
    else:
        plan.source = f"{name} (workspace {workspace})"
    _refuse_repeated(tables["entries"], lines["entries"], name, problems)
    history: dict[int, list[PastRevision]] = {}
    numbers: dict[int, list[int]] = {}
    broken = set()  # entries with a revision named as a problem already
    for index, row in enumerate(tables["entry_revisions"], 1):
        fields = _fields(row, _REVISION_FIELDS, f"{name} entry_revisions row {index}", problems)
        if fields is None:
            broken.add(_count(row.get("entry_id")))
            continue
        numbers.setdefault(fields["entry_id"], []).append(fields["revision"])
        history.setdefault(fields["entry_id"], []).append(PastRevision(
            title=fields["title"], body=fields["body"], tags=fields["tags"], reason=fields["reason"],
            author=fields["author"], created_at=fields["created_at"], overrode_curated=fields["overrode_curated"]))
    exported = {row["slug"] for row in tables["entries"] if isinstance(row.get("slug"), str)}
    for index, row in enumerate(tables["entries"], 1):
        fields = _fields(row, _ENTRY_FIELDS, f"{name} entries row {index}", problems)
        if fields is None or fields["id"] in broken:
            continue
        where = f"{name} entry {fields['slug']!r}"
        revisions = tuple(history.get(fields["id"], ()))
        try:
            slug = check_slug(prefix + fields["slug"])
        except InvalidInput as error:
            problems.add(where, error.message)
            continue
        found = numbers.get(fields["id"], [])  # as many as the file has rows: compared once their count matches
        if len(found) != fields["revision"] or found != list(range(1, len(found) + 1)):
            problems.add(where, f"{len(revisions)} revisions exported for revision {fields['revision']} (they are "
                                "numbered 1, 2, … up to the entry's revision)")
            continue
        linked = [target for target in parse_links(fields["body"]) if prefix and target in exported]
        if linked:
            problems.add(where, f"links to [[{linked[0]}]], an entry of the export: under the prefix {prefix!r} the "
                                "link would name another entry (history is imported as recorded, so links are not "
                                "rewritten); import it without --prefix")
            continue
        curated = fields["curated_revision"]
        plan.notes.append(Note(slug=slug, title=fields["title"], body=fields["body"], tags=fields["tags"],
                               origin=where, history=revisions,
                               curated_in_source=curated is not None and curated == fields["revision"]))
    problems.raise_if_any(name)
    return plan


def _refuse_repeated(entries: list[dict[str, Any]], lines: list[int], name: str, problems: Problems) -> None:
    """Each entry once: an export written by Armarius never holds two rows with the same id or slug (an
    importer would take the second for a new revision of the first)."""
    for key, read in (("id", _count), ("slug", _text)):
        first: dict[Any, int] = {}
        for row, line in zip(entries, lines, strict=True):
            value = read(row.get(key))
            if value is _WRONG:
                continue  # named by the row's own check
            if value in first:
                shown = echo(value) if isinstance(value, str) else value
                problems.add(f"{name} line {line}", f"the entry's {key} {shown} again, already the {key} of the "
                                                    f"entry on line {first[value]}: an export holds each entry once")
            else:
                first[value] = line


#: The highest revision number an import takes: the store keeps revision numbers as 32-bit integers (PostgreSQL's
#: integer).
REVISION_MAX = 2**31 - 1
_MOMENT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
#: What a field's reader answers for a value of the wrong type or form.
_WRONG = object()


def _count(value: Any) -> Any:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX else _WRONG


def _revision(value: Any) -> Any:
    """A revision number as the store keeps them: 1 up to REVISION_MAX."""
    return value if _count(value) is not _WRONG and 1 <= value <= REVISION_MAX else _WRONG


def _text(value: Any) -> Any:
    return value if isinstance(value, str) else _WRONG


def _optional(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


def _flag(value: Any) -> Any:
    """A boolean as either engine stores it (SQLite: 0 or 1)."""
    if isinstance(value, bool):
        return value
    return bool(value) if _count(value) is not _WRONG and value in (0, 1) else _WRONG


def _moment(value: Any) -> Any:
    """A timestamp in the store's form, ISO 8601 UTC with microseconds ('2024-05-01T09:30:00.000000Z')."""
    if not isinstance(value, str) or not _MOMENT.fullmatch(value):
        return _WRONG
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return _WRONG
    return value


def _tags(value: Any) -> Any:
    """Tags as the store keeps them: the JSON text of a list of texts."""
    if not isinstance(value, str):
        return _WRONG
    try:
        tags = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return _WRONG
    return tuple(tags) if isinstance(tags, list) and all(isinstance(tag, str) for tag in tags) else _WRONG


_REVISION = f"a whole number from 1 to {REVISION_MAX}"
#: The fields of a row that an import reads: each with what it must be, and its reader.
_ENTRY_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "id": ("a whole number", _count), "slug": ("text", _text), "title": ("text", _text), "body": ("text", _text),
    "tags": ("the JSON text of a list of texts", _tags), "revision": (_REVISION, _revision),
    "curated_revision": ("a whole number or null", _optional(_count)),
}
_REVISION_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "entry_id": ("a whole number", _count), "revision": (_REVISION, _revision), "title": ("text", _text),
    "body": ("text", _text), "tags": ("the JSON text of a list of texts", _tags),
    "reason": ("text or null", _optional(_text)), "author": ("text", _text),
    "created_at": ("a time in the store's form (ISO 8601 UTC: '2024-05-01T09:30:00.000000Z')", _moment),
    "overrode_curated": ("true or false", _flag),
}


def _fields(row: dict[str, Any], rules: dict[str, tuple[str, Callable[[Any], Any]]], where: str,
            problems: Problems) -> dict[str, Any] | None:
    """The row's fields as their readers read them; None after naming every field missing or of the wrong type."""
    fields: dict[str, Any] = {}
    wrong = []
    for name, (what, read) in rules.items():
        value = read(row[name]) if name in row else _WRONG
        if value is _WRONG:
            wrong.append(f"{name!r} is missing" if name not in row else f"{name!r} is not {what}")
        fields[name] = value
    if wrong:
        problems.add(where, "; ".join(wrong))
        return None
    return fields
