"""Research use cases: one structured query against a configured source, captured with provenance."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Permission
from armarius.errors import InvalidInput, NotFound
from armarius.research import source as source_queries
from armarius.research.captures import SCHEMA, Capture, build_capture, write_capture
from armarius.research.config import GitSource, ResearchConfig, shown
from armarius.research.database import DatabaseResearch
from armarius.store import Database, utc_now
from armarius.validation import StrictValidator, check, inline_refs

_KINDS = {"source.files": "files", "source.search": "search", "source.symbol": "symbol",
          "source.registration": "registration", "source.schema": "schema", "source.read": "read",
          "database.tables": "db_tables", "database.schema": "db_schema", "database.rows": "db_rows",
          "database.count": "db_count"}


@cache
def query_schema() -> dict[str, Any]:
    """The published JSON schema ``project-query-v1``."""
    text = resources.files("armarius.research.schemas").joinpath(f"{SCHEMA}.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator(kind: str) -> Any:
    definitions = query_schema()["$defs"]
    return StrictValidator(inline_refs(definitions[_KINDS[kind]], definitions))


def validate_query(arguments: Any) -> dict[str, Any]:
    """Check a query against project-query-v1; the message names the field, never echoes a value."""
    if not isinstance(arguments, dict) or not isinstance(arguments.get("kind"), str) or arguments["kind"] not in _KINDS:
        raise InvalidInput(f"A project query is an object whose kind is one of {', '.join(_KINDS)}.", field="kind")
    return check(_validator(arguments["kind"]), arguments, what="the project query")


@dataclass
class ResearchService:
    config: ResearchConfig
    evidence_dir: Path
    database: Database | None = None
    _names: tuple[str, ...] = field(init=False)
    _databases: DatabaseResearch = field(init=False)

    def __post_init__(self) -> None:
        self._names = tuple(self.config.sources)
        self._databases = DatabaseResearch(self.config.databases)

    def close(self) -> None:
        self._databases.close()

    def query(self, arguments: Any, actor: Actor | None = None) -> dict[str, Any]:
        """Run one query; the answer and its capture id. With an actor, recorded in its workspace."""
        if actor is not None:
            actor.require(Permission.RESEARCH_QUERY)
        request = validate_query(arguments)
        if request["kind"].startswith("database."):
            answer = self._databases.run(request)
        else:
            answer = source_queries.run(self._source(request.get("source")), request)
        origin = answer.pop("origin")
        capture = build_capture(request, origin, answer)
        folder = self.evidence_dir if actor is None else self.evidence_dir / actor.workspace
        write_capture(folder, capture)
        if actor is not None and self.database is not None:
            self._record(actor, capture, request["kind"], origin)
        return {"capture": capture.id, "origin": origin, "result": answer}

    def _source(self, name: str | None) -> GitSource:
        if not self._names:
            raise NotFound("No git sources are configured for research.", field="source")
        if name is None:
            if len(self._names) == 1:
                return self.config.sources[self._names[0]]
            raise InvalidInput(f"Name the source: one of {', '.join(self._names)}.", field="source")
        if name not in self.config.sources:
            raise NotFound(f"There is no source {shown(name)}; configured: {', '.join(self._names)}.",
                           field="source")
        return self.config.sources[name]

    def _record(self, actor: Actor, capture: Capture, kind: str, origin: dict[str, Any]) -> None:
        assert self.database is not None
        with self.database.transaction(workspace_id=actor.workspace_id, write=True) as tx:
            fresh = tx.execute(
                "INSERT INTO captures (workspace_id, capture_id, content, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (actor.workspace_id, capture.id, capture.content.decode("utf-8"), utc_now()),
            )
            pin: dict[str, Any] = {key: origin[key] for key in ("commit", "snapshot") if key in origin}
            subject = origin.get("source") or origin.get("database") or "databases"
            audit.append(tx, actor=actor.audit_name, action="research.query", subject=subject, details={
                "kind": kind, "capture": capture.id, **pin, "new": bool(fresh),
            })
