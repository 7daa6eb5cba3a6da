"""A process killed inside create_draft's transaction leaves no draft and no used token.

A child process runs ``create_draft`` with an agent's approval; right after the real statement
named by ``hook`` has run inside the transaction (``consume_approval``: the draft is inserted and
the token marked used; ``insert_operation``: the operation is recorded as well) it reports what
its own transaction sees and kills itself with SIGKILL, before the commit. Afterwards there is no
draft, no operation and no audit event of the attempt, the approval is still ``issued``, and the
same token still works exactly once, even with the dead process's operation id.

On SQLite the child is the only connection and keeps a tiny page cache, so uncommitted pages of
its transaction are already in the WAL when it dies: the next connection has to recover the WAL
(and the dead process's locks) and ignore them. On PostgreSQL the server rolls the transaction
back when the connection drops; a writer that comes first waits for the dead backend's locks.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.config import Settings
from armarius.errors import ApprovalUsed, NotFound
from tests.helpers import OwnerSQL, make_team

REPO = Path(__file__).resolve().parents[2]
OPERATION = "op-crash-1"

CHILD = r"""
import json, os, signal, sys
from pathlib import Path

from armarius.app import open_app
from armarius.auth.secrets import token_digest
from armarius.config import Settings
from armarius.drafts import queries
from armarius.store.engine import SqliteDatabase

job = json.loads(sys.stdin.read())
settings = Settings(data_dir=Path(job["data_dir"]), database_url=job["database_url"])
wal = Path(str(settings.sqlite_path) + "-wal")

plain_connect = SqliteDatabase.connect


def small_cache_connect(self):
    # A tiny page cache spills the open transaction's pages into the WAL before the commit.
    connection = plain_connect(self)
    connection.execute("PRAGMA cache_size = 2")
    return connection


SqliteDatabase.connect = small_cache_connect
app = open_app(settings)
agent = app.directory.authenticate_token(job["agent_token"])
real = getattr(queries, job["hook"])
wal_before = wal.stat().st_size if wal.exists() else 0


def then_die(tx, *args, **kwargs):
    result = real(tx, *args, **kwargs)
    workspace = tx.require_workspace()
    seen = {
        "result": result,
        "drafts": tx.scalar("SELECT count(*) AS n FROM drafts WHERE workspace_id = ? AND slug = ?",
                            (workspace, job["payload"]["slug"])),
        "approval": tx.one("SELECT outcome, operation_id FROM approvals WHERE workspace_id = ? AND token_digest = ?",
                           (workspace, token_digest(job["approval"]))),
        "operations": tx.scalar("SELECT count(*) AS n FROM operations WHERE workspace_id = ? AND operation_id = ?",
                                (workspace, job["operation"])),
        "wal_grew": (wal.stat().st_size if wal.exists() else 0) > wal_before,
    }
    print(json.dumps(seen), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


setattr(queries, job["hook"], then_die)
app.drafts.create_draft(agent, job["payload"], job["approval"], operation=job["operation"])
print("create_draft returned: the process was not killed", flush=True)
"""


def _payload() -> dict[str, str]:
    # Large enough to span many pages (each line differs), within the default 64 KiB text limit.
    lines = [f"Zeile {number:04d}: Grüße aus dem Absturz, der nie committet wurde. 🙂" for number in range(600)]
    return {"slug": "crash/killed-before-commit", "title": "Killed before commit", "text": "\n".join(lines)}


def _run_child(settings: Settings, job: dict[str, Any]) -> dict[str, Any]:
    job = {**job, "data_dir": str(settings.data_dir), "database_url": settings.database_url}
    child = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(job), capture_output=True, text=True,
                           cwd=REPO, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL, f"exit {child.returncode}\n{child.stdout}\n{child.stderr}"
    seen: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return seen


def _stored(settings: Settings, workspace: int, approval_id: int) -> dict[str, Any]:
    with OwnerSQL(settings) as sql:
        state = {
            "drafts": sql.rows("SELECT slug, operation_id FROM drafts WHERE workspace_id = ?", (workspace,)),
            "approval": sql.rows("SELECT outcome, used_at, operation_id FROM approvals WHERE id = ?", (approval_id,)),
            "operations": sql.rows("SELECT operation_id FROM operations WHERE workspace_id = ?", (workspace,)),
        }
        if settings.database_url is None:
            state["integrity"] = sql.rows("PRAGMA integrity_check")
    return state


@pytest.mark.parametrize("hook", ["consume_approval", "insert_operation"])
def test_killed_before_commit_leaves_no_draft_and_the_token_usable_once(app: Armarius, settings: Settings,
                                                                        hook: str) -> None:
    team = make_team(app, "crash")
    payload = _payload()
    proposal = app.drafts.propose(team.agent, payload)
    issued = app.drafts.approve(team.human, proposal_id=proposal["proposal"])
    collected = app.drafts.proposal_status(team.agent, proposal["proposal"], proposal["collection_key"])
    token = collected["approval"]
    assert token == issued.token
    workspace = team.agent.workspace_id
    events_before = audit.tail(app.database, workspace, limit=1000)
    sqlite = settings.database_url is None
    if sqlite:
        app.database.close()  # the child is then the only connection (the next one opens afresh)
        assert not Path(f"{settings.sqlite_path}-wal").exists()

    seen = _run_child(settings, {"hook": hook, "agent_token": team.agent_token, "payload": payload,
                                 "approval": token, "operation": OPERATION})

    # Inside the dead transaction the writes had happened.
    assert seen == {
        "result": 1 if hook == "consume_approval" else None, "drafts": 1,
        "approval": {"outcome": "consumed", "operation_id": OPERATION},
        "operations": 1 if hook == "insert_operation" else 0, "wal_grew": sqlite,
    }
    if sqlite:
        assert Path(f"{settings.sqlite_path}-wal").stat().st_size > 0  # the dead transaction's frames

    # None of them committed.
    assert _stored(settings, workspace, issued.approval_id) == {
        "drafts": [], "approval": [("issued", None, None)], "operations": [],
        **({"integrity": [("ok",)]} if sqlite else {}),
    }
    status = app.drafts.proposal_status(team.agent, proposal["proposal"])
    assert (status["status"], status["approval_outcome"], status["collected"]) == ("approved", "issued", True)
    assert app.drafts.drafts(team.human) == []
    with pytest.raises(NotFound):
        app.drafts.draft(team.human, payload["slug"])
    assert audit.tail(app.database, workspace, limit=1000) == events_before

    # The same token works once, even with the dead process's operation id; then it is used.
    assert app.drafts.create_draft(team.agent, payload, token, operation=OPERATION) == {
        "slug": payload["slug"], "draft": True, "replayed": False}
    with pytest.raises(ApprovalUsed):
        app.drafts.create_draft(team.agent, payload, token, operation="op-crash-2")
    assert app.drafts.create_draft(team.agent, payload, token, operation=OPERATION)["replayed"] is True
    assert app.drafts.draft(team.human, payload["slug"])["text"] == payload["text"]
    assert app.drafts.proposal_status(team.agent, proposal["proposal"])["approval_outcome"] == "consumed"
    stored = _stored(settings, workspace, issued.approval_id)
    assert (stored["drafts"], stored["operations"]) == ([(payload["slug"], OPERATION)], [(OPERATION,)])
    assert (stored["approval"][0][0], stored["approval"][0][2]) == ("consumed", OPERATION)
    actions = [event.action for event in audit.tail(app.database, workspace, limit=1000)[len(events_before):]]
    assert actions == ["approval.consumed", "draft.created", "draft.refused", "draft.replayed"]
    checked, broken = audit.verify_chain(app.database, workspace)
    assert broken is None, broken
    assert checked == len(events_before) + len(actions)
