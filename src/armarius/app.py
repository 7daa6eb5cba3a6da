"""The composition root: reads settings, opens storage, wires the services.

Nothing else in Armarius reads configuration or the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from armarius.audit.setup import AUTHENTICATED_SINCE, initialize_audit, open_keyed
from armarius.auth.directory import Directory
from armarius.config import SESSION_BUDGET_CEILING, Settings
from armarius.drafts.service import DraftService
from armarius.evidence.service import EvidenceService
from armarius.memory.embeddings import WordLlamaEmbedder
from armarius.memory.model import MemoryLimits
from armarius.memory.service import MemoryService
from armarius.memory.vectors import UNITS, VectorIndex
from armarius.repairs.service import RepairService
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService
from armarius.sessions.model import SessionLimits
from armarius.sessions.service import SessionService
from armarius.store import Database, open_database
from armarius.store.schema import (
    check_postgres_role,
    check_schema,
    migrate_postgres,
    migrate_sqlite,
    postgres_role,
    repair_postgres,
)


@dataclass
class Armarius:
    """The wired application: what every surface (MCP, HTTP, CLI) calls into."""

    settings: Settings
    database: Database
    directory: Directory
    memory: MemoryService
    drafts: DraftService
    sessions: SessionService
    evidence: EvidenceService
    repairs: RepairService
    research: ResearchService | None = None

    def health(self) -> None:
        """Raises StorageUnavailable when the database does not answer."""
        with self.database.transaction() as tx:
            tx.scalar("SELECT 1 AS ok")

    def close(self) -> None:
        self.sessions.shutdown()
        if self.research is not None:
            self.research.close()
        self.database.close()


def initialize(settings: Settings, *, repaired: Callable[[str], object] | None = None) -> list[int]:
    """Create or migrate the database and prepare the audit key; returns the migration versions applied.

    On PostgreSQL the owner then makes again what the migrations made and is gone, and grants the server's role
    what it lacks (:func:`repair_postgres`: a new role in database.url too), each step told to ``repaired``,
    before the database is opened as the server's role."""
    if settings.database_url is None:
        applied = migrate_sqlite(settings.sqlite_path)
    else:
        migrate_url = settings.database_migrate_url or settings.database_url
        app_role = postgres_role(settings.database_url)
        applied = migrate_postgres(migrate_url, app_role=app_role)
        for done in repair_postgres(migrate_url, app_role):
            if repaired is not None:
                repaired(done)
    database = open_database(settings.database_url, settings.sqlite_path)
    try:
        initialize_audit(database, env_keys=settings.audit_key, key_file=settings.audit_key_path,
                         seal_legacy=AUTHENTICATED_SINCE in applied)
    finally:
        database.close()
    return applied


def open_app(settings: Settings) -> Armarius:
    """Open the configured database and refuse to go on with an out-of-date schema."""
    database = open_database(settings.database_url, settings.sqlite_path,
                             sqlite_synchronous=settings.sqlite_synchronous)
    research: ResearchService | None = None
    try:
        if database.dialect == "postgresql":
            check_postgres_role(database)
        check_schema(database)
        database = open_keyed(database, env_keys=settings.audit_key, key_file=settings.audit_key_path)
        if settings.research_config is not None:
            research = ResearchService(load_research_config(settings.data_dir / settings.research_config,
                                                            settings.environ))
            if research.config.enrichment is not None:
                research.check_enrichment()
        session_limits = SessionLimits(
            default_budget=settings.session_default_budget, max_budget=settings.session_max_budget,
            ceiling=SESSION_BUDGET_CEILING, retry_after=timedelta(seconds=settings.session_retry_after_seconds),
            invalid_request_limit=settings.research_invalid_request_limit)
    except BaseException:
        if research is not None:
            research.close()
        database.close()
        raise
    limits = MemoryLimits(body_max_bytes=settings.memory_body_max_bytes,
                          duplicate_threshold=settings.memory_duplicate_threshold)
    sessions = SessionService(database, research, evidence_dir=settings.data_dir / "evidence", limits=session_limits)
    index = VectorIndex(WordLlamaEmbedder()) if settings.memory_embeddings != "off" else None
    evidence = EvidenceService(database, evidence_dir=settings.data_dir / "evidence", sessions=sessions,
                               write_vector=None if index is None else partial(index.write, kind=UNITS))
    memory = MemoryService(database, limits, evidence=evidence, vectors=index)
    drafts = DraftService(database, memory, text_max_bytes=settings.memory_body_max_bytes,
                          approval_ttl=timedelta(seconds=settings.approval_ttl_seconds))
    repairs = RepairService(database, memory, sessions, evidence_dir=settings.data_dir / "evidence", evidence=evidence)
    return Armarius(settings=settings, database=database, directory=Directory(database), memory=memory,
                    drafts=drafts, sessions=sessions, evidence=evidence, repairs=repairs, research=research)
