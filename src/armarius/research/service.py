"""Research use cases: one structured query against a configured source, captured with provenance."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from armarius.errors import InvalidInput, NotFound
from armarius.research import source as source_queries
from armarius.research.captures import SCHEMA, Capture, build_capture
from armarius.research.config import GitSource, ResearchConfig, shown
from armarius.research.database import DatabaseResearch
from armarius.research.enrichment_config import check_against_schema
from armarius.validation import Schema, check, inline_refs

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
def _schema(kind: str) -> Schema:
    definitions = query_schema()["$defs"]
    return Schema(inline_refs(definitions[_KINDS[kind]], definitions))


def validate_query(arguments: Any) -> dict[str, Any]:
    """Check a query against project-query-v1; the message names the field, never echoes a value."""
    if not isinstance(arguments, dict) or not isinstance(arguments.get("kind"), str) or arguments["kind"] not in _KINDS:
        raise InvalidInput(f"A project query is an object whose kind is one of {', '.join(_KINDS)}.", field="kind")
    return check(_schema(arguments["kind"]), arguments, what="the project query")


@dataclass(frozen=True)
class Answer:
    """One answer, frozen: the checked request, where it came from, what was read, and its capture."""

    request: dict[str, Any]
    origin: dict[str, Any]
    result: dict[str, Any]
    capture: Capture

    @property
    def kind(self) -> str:
        return str(self.request["kind"])

    def view(self) -> dict[str, Any]:
        """What a caller is shown: read back from the capture's bytes, so it is exactly what was kept."""
        document = json.loads(self.capture.content)
        return {"capture": self.capture.id, "origin": document["origin"], "result": document["result"]}


@dataclass
class ResearchService:
    """Runs queries against what the operator configured. It writes nothing: recording an answer as
    evidence is the session controller's job (:mod:`armarius.sessions`)."""

    config: ResearchConfig
    _names: tuple[str, ...] = field(init=False)
    _databases: DatabaseResearch = field(init=False)

    def __post_init__(self) -> None:
        self._names = tuple(self.config.sources)
        self._databases = DatabaseResearch(self.config.databases)

    def close(self) -> None:
        self._databases.close()

    @property
    def longest_timeout(self) -> float:
        """The longest a single query may take, in seconds: a deep source search runs git up to four
        times (the first search of a commit and folder checks the objects of its files first);
        ``database.tables`` without a database asks every configured database in turn."""
        sources = [4 * source.limits.timeout_seconds for source in self.config.sources.values()]
        databases = sum(database.limits.timeout_seconds for database in self.config.databases.values())
        return max([*sources, databases])

    def check_enrichment(self) -> None:
        """Refuse (``ConfigError``) an enrichment configuration naming a table or column that the real
        schema lacks, as ``database.schema`` sees it; a database that cannot be reached is skipped with
        a logged warning. Nothing to do without ``[enrichment]``."""
        if self.config.enrichment is not None:
            check_against_schema(self.config.enrichment, self.config.path, lambda database, table: self._databases.run(
                {"kind": "database.schema", "database": database, "table": table}))

    def answer(self, arguments: Any) -> Answer:
        """Check and run one query; the answer with its capture (content-addressed), written nowhere."""
        return self.run(validate_query(arguments))

    def run(self, request: dict[str, Any]) -> Answer:
        """Run a query that :func:`validate_query` accepted."""
        if request["kind"].startswith("database."):
            result = self._databases.run(request)
        else:
            result = source_queries.run(self._source(request.get("source")), request)
        origin = result.pop("origin")
        return Answer(request, origin, result, build_capture(request, origin, result))

    def query(self, arguments: Any) -> dict[str, Any]:
        """Run one query outside any session (offline use, tests): the answer and its capture id."""
        return self.answer(arguments).view()

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
