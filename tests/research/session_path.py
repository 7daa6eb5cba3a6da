"""The research suites reach the research service the way agents do: through a session.

:class:`SessionPath` wraps a :class:`ResearchService` in a :class:`SessionService` over a real SQLite
store (one per test run, created on first use), opens a session and runs every query through the
session controller: reserve, run, mirror the capture file, commit the evidence. Its ``query`` gives
the research answer (capture, origin, result) after checking the session's own bookkeeping, so the
research suites' assertions hold unchanged while the whole session path runs under them.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

from armarius.app import Armarius, initialize, open_app
from armarius.auth.model import Actor
from armarius.config import Settings
from armarius.errors import ArmariusError
from armarius.research.service import ResearchService
from armarius.sessions.model import SessionLimits
from armarius.sessions.service import SessionService
from tests.helpers import make_team

#: Room for any suite: the suites send thousands of queries, many of them deliberately invalid.
_UNLIMITED = SessionLimits(default_budget=10**6, max_budget=10**6, ceiling=10**6, retry_after=timedelta(0),
                           invalid_request_limit=10**6)


@cache
def _store() -> tuple[Armarius, Actor]:
    folder = Path(tempfile.mkdtemp(prefix="armarius-session-path-"))
    settings = Settings(data_dir=folder / "data")
    initialize(settings)
    app = open_app(settings)
    agent = make_team(app, "research").agent

    def cleanup() -> None:
        app.close()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(cleanup)
    return app, agent


class SessionPath:
    """A research service reached through a session; attributes other than ``query`` are the service's."""

    def __init__(self, research: ResearchService, folder: Path) -> None:
        app, self._agent = _store()
        self.research = research
        self.sessions = SessionService(app.database, research, evidence_dir=folder / "evidence", limits=_UNLIMITED)
        self.session = self.sessions.open(self._agent, "the research suite's question")["session"]
        self._records = 0

    @property
    def evidence_dir(self) -> Path:
        """Where this session's capture files are mirrored."""
        return self.sessions.session_folder(self._agent.workspace, self.session)

    def query(self, arguments: Any) -> dict[str, Any]:
        try:
            answer = self.sessions.query(self._agent, self.session, arguments)
        except ArmariusError as refusal:
            # An invalid request is counted by the session: checked here, then left out of what the suites compare.
            counted = refusal.details.pop("invalid_requests", None)
            if counted is not None and (refusal.details.pop("session") != self.session or counted["in_a_row"] < 1):
                raise AssertionError(f"the session counted the refusal wrongly: {counted}") from refusal
            raise
        self._records += 1
        assert (answer.pop("session"), answer.pop("evidence")) == (self.session, self._records)
        answer.pop("repeat_of"), answer.pop("budget_left")
        return answer

    def close(self) -> None:
        self.sessions.shutdown()
        self.research.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.research, name)
