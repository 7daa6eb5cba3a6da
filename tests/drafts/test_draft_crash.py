"""A process killed inside create_draft's transaction leaves no draft and no used token.

A child process runs ``create_draft`` with an agent's approval; right after the real statement
named by ``hook`` has run inside the transaction (``consume_approval``: the draft is inserted and
the token marked used; ``insert_operation``: the operation is recorded as well) it reports what
its own transaction sees and kills itself with SIGKILL, before the commit. Afterwards there is no
draft, no operation and no audit event of the attempt, the approval is still ``issued``, and the
same token still works exactly once, even with the dead process's operation id.

Two more kills: a promotion killed after the entry was written and the draft marked, before the
commit (neither stays; the promotion can simply be repeated), and a hand-over killed after it
committed but before its answer reached anyone (the same collection key fetches the same approval
again).

On SQLite the child is the only connection and keeps a tiny page cache, so uncommitted pages of
its transaction are already in the WAL when it dies: the next connection has to recover the WAL
(and the dead process's locks) and ignore them. On PostgreSQL the server rolls the transaction
back when the connection drops; a writer that comes first waits for the dead backend's locks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.config import Settings
from armarius.errors import ApprovalUsed, NotFound
from tests.crash_child import PRELUDE, run_child
from tests.helpers import OwnerSQL, make_team

OPERATION = "op-crash-1"

CHILD = PRELUDE + r"""
from armarius.auth.secrets import token_digest
from armarius.drafts import queries

real = getattr(queries, job["hook"])
wal_before = wal_size()


def then_die(tx, *args, **kwargs):
    result = real(tx, *args, **kwargs)
    workspace = tx.require_workspace()
    report_and_die({
        "result": result,
        "drafts": tx.scalar("SELECT count(*) AS n FROM drafts WHERE workspace_id = ? AND slug = ?",
                            (workspace, job["payload"]["slug"])),
        "approval": tx.one("SELECT outcome, operation_id FROM approvals WHERE workspace_id = ? AND token_digest = ?",
                           (workspace, token_digest(job["approval"]))),
        "operations": tx.scalar("SELECT count(*) AS n FROM operations WHERE workspace_id = ? AND operation_id = ?",
                                (workspace, job["operation"])),
        "wal_grew": wal_size() > wal_before,
    })


setattr(queries, job["hook"], then_die)
app.drafts.create_draft(agent, job["payload"], job["approval"], operation=job["operation"])
print("create_draft returned: the process was not killed", flush=True)
"""


def _payload() -> dict[str, str]:
    # Large enough to span many pages (each line differs), within the default 64 KiB text limit.
    lines = [f"Zeile {number:04d}: Grüße aus dem Absturz, der nie committet wurde. 🙂" for number in range(600)]
    return {"slug": "crash/killed-before-commit", "title": "Killed before commit", "text": "\n".join(lines)}


CALL_CHILD = r"""
import json, os, signal, sys
from pathlib import Path

from armarius.app import open_app
from armarius.config import Settings
from armarius.drafts import queries

job = json.loads(sys.stdin.read())
app = open_app(Settings(data_dir=Path(job["data_dir"]), database_url=job["database_url"]))


def die():
    os.kill(os.getpid(), signal.SIGKILL)


if job["call"] == "promote":
    human = app.directory.authenticate_password(job["human"], job["password"], workspace=job["workspace"])
    real = queries.mark_promoted

    def then_die(tx, *args, **kwargs):
        marked = real(tx, *args, **kwargs)
        entries = tx.scalar("SELECT count(*) AS n FROM entries WHERE workspace_id = ? AND slug = ?",
                            (tx.require_workspace(), job["slug"]))
        print(json.dumps({"marked": marked, "entries": entries}), flush=True)
        die()

    queries.mark_promoted = then_die
    app.drafts.promote(human, job["slug"])
else:  # the hand-over commits; the process dies before its answer reaches anyone
    agent = app.directory.authenticate_token(job["agent_token"])
    answer = app.drafts.proposal_status(agent, job["proposal"], job["collection_key"])
    print(json.dumps({"handed_over": "approval" in answer}), flush=True)
    die()
print("returned: the process was not killed", flush=True)
"""


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

    seen = run_child(settings, {"hook": hook, "agent_token": team.agent_token, "payload": payload,
                                "approval": token, "operation": OPERATION}, CHILD)

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


def test_a_promotion_killed_before_commit_leaves_no_entry_and_can_be_repeated(app: Armarius,
                                                                              settings: Settings) -> None:
    team = make_team(app, "crash")
    payload = {"slug": "crash/promoted", "title": "Promoted after a crash", "text": "Written once.\n"}
    app.drafts.create_draft(team.agent, payload, app.drafts.approve(team.human, payload=payload).token, "op-1")
    workspace = team.agent.workspace_id
    events_before = audit.tail(app.database, workspace, limit=1000)
    if settings.database_url is None:
        app.database.close()

    seen = run_child(settings, {"call": "promote", "human": "crash-human", "password": team.human_password,
                                "workspace": "crash", "slug": payload["slug"]}, CALL_CHILD)

    assert seen == {"marked": 1, "entries": 1}  # inside the dead transaction both writes had happened
    with pytest.raises(NotFound):
        app.memory.read(team.human, payload["slug"])
    assert app.drafts.draft(team.human, payload["slug"])["promoted_revision"] is None
    events_after_crash = audit.tail(app.database, workspace, limit=1000)
    assert events_after_crash[:len(events_before)] == events_before
    # The child's own login may be recorded; nothing of the promotion is.
    assert not {event.action for event in events_after_crash[len(events_before):]} & {"memory.created",
                                                                                        "draft.promoted"}
    events_before = events_after_crash
    # Nothing is stuck: the promotion is simply repeated.
    assert app.drafts.promote(team.human, payload["slug"]) == {"slug": payload["slug"], "promoted": True,
                                                               "revision": 1}
    entry = app.memory.read(team.human, payload["slug"])
    assert (entry["revision"], entry["title"], entry["body"]) == (1, payload["title"], payload["text"])
    actions = [event.action for event in audit.tail(app.database, workspace, limit=1000)[len(events_before):]]
    assert actions == ["memory.created", "draft.promoted"]


def test_a_hand_over_whose_answer_was_lost_is_repeated(app: Armarius, settings: Settings) -> None:
    team = make_team(app, "crash")
    payload = {"slug": "crash/handed-over", "title": "Handed over", "text": "The answer never arrived.\n"}
    proposal = app.drafts.propose(team.agent, payload)
    issued = app.drafts.approve(team.human, proposal_id=proposal["proposal"])
    if settings.database_url is None:
        app.database.close()

    seen = run_child(settings, {"call": "collect", "agent_token": team.agent_token, "proposal": proposal["proposal"],
                                "collection_key": proposal["collection_key"]}, CALL_CHILD)

    assert seen == {"handed_over": True}
    status = app.drafts.proposal_status(team.agent, proposal["proposal"], proposal["collection_key"])
    assert (status["approval"], status["collected"], status["status"]) == (issued.token, True, "approved")
    assert app.drafts.create_draft(team.agent, payload, status["approval"], "op-1")["draft"] is True
    repeats = [event.details["repeat"] for event in audit.tail(app.database, team.agent.workspace_id, limit=100)
               if event.action == "approval.collected"]
    assert repeats == [False, True]
