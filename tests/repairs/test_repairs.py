"""Repairs of entries on both engines: every transition and every refusal, and that a refusal changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from armarius.auth.permissions import Kind, Role
from armarius.canonical import canonical_json
from armarius.errors import Conflict, InvalidInput, NotAllowed, NotFound, SessionClosed, StorageUnavailable
from armarius.memory.service import RememberRequest
from armarius.repairs import views
from tests.helpers import OPERATOR, OwnerSQL, make_team
from tests.repairs.conftest import (
    CORRECT_BODY,
    ENTRY,
    ENTRY_BODY,
    ENTRY_TITLE,
    Desk,
    audit_of,
    changes_nothing,
    state,
    statuses,
)


def stored_receipt(desk: Desk, repair: int) -> dict[str, Any]:
    """The receipt as the store gives it (what the mirrored file must hold)."""
    view = desk.app.repairs.show(desk.admin, repair)
    with OwnerSQL(desk.app.settings) as sql:
        subject = sql.rows("SELECT subject FROM repairs WHERE id = ?", (repair,))[0][0]
    return {"repair": view["repair"], "status": view["status"], "history": view["history"], "subject": subject}


def receipt_file(desk: Desk, session: int, repair: int) -> dict[str, Any]:
    content: dict[str, Any] = json.loads(desk.receipt_path(session, repair).read_bytes())
    return content


# Preparing ---------------------------------------------------------------------------------------


def test_a_proposal_stores_complete_alternatives_and_changes_no_content(desk: Desk) -> None:
    session = desk.open_session()
    before = desk.app.memory.read(desk.agent, ENTRY)
    other = desk.alternative("Staging runs on **stage-07**.", tags=["ops"])
    view = desk.prepare(session, desk.alternative(), other)
    repair = view["repair"]
    assert (view["status"], view["session"], view["proposer"]) == ("proposed", session, "agent:alpha-agent")
    assert view["published"] is False
    assert [item["option"] for item in view["alternatives"]] == ["opt-1", "opt-2"]
    first, second = view["alternatives"]
    current = {"title": ENTRY_TITLE, "body": ENTRY_BODY, "tags": ["ops", "staging"]}
    assert first["current"] == second["current"] == current
    assert first["result"] == {"title": ENTRY_TITLE, "body": CORRECT_BODY, "tags": ["ops", "staging"]}  # kept
    assert second["result"]["tags"] == ["ops"]
    assert first["target"] == {"kind": "entry", "name": ENTRY, "revision": 1}
    assert desk.app.memory.read(desk.agent, ENTRY) == before  # no content changed
    assert statuses(desk, repair) == [("proposed", "proposed")]
    ((actor, action, details),) = audit_of(desk)
    assert (actor, action, details["repair"], details["session"]) == ("agent:alpha-agent", "repair.proposed", repair,
                                                                      session)
    # The receipt is mirrored at once, and is the store's.
    assert receipt_file(desk, session, repair)["decision"]["status"] == "proposed"
    assert view["pending_operations"] == []


@pytest.mark.parametrize("count", [0, 6])
def test_zero_or_six_alternatives_are_refused(desk: Desk, count: int) -> None:
    session = desk.open_session()
    with changes_nothing(desk, InvalidInput) as caught:
        desk.app.repairs.prepare(desk.agent, session, "conflict", [desk.alternative(f"body {i}") for i in range(count)])
    assert caught[0].details["field"] == "alternatives"


def test_five_alternatives_are_the_most(desk: Desk) -> None:
    session = desk.open_session()
    view = desk.prepare(session, *[desk.alternative(f"Staging runs on stage-0{i}.") for i in range(5)])
    assert [item["option"] for item in view["alternatives"]] == [f"opt-{i}" for i in range(1, 6)]


def test_an_entry_body_over_the_entry_limit_is_refused(desk: Desk) -> None:
    session = desk.open_session()
    limit = desk.app.memory.limits.body_max_bytes
    with changes_nothing(desk, InvalidInput) as caught:
        desk.prepare(session, desk.alternative("x" * (limit + 1)))
    assert caught[0].details == {"field": "alternatives[0].body", "size": limit + 1, "limit": limit}
    assert desk.prepare(session, desk.alternative("é" * (limit // 2)))["status"] == "proposed"  # at the limit


@pytest.mark.parametrize(("change", "field"), [
    ({"target": {"kind": "entry", "name": ENTRY}}, "alternatives[0].target"),
    ({"target": {"kind": "draft", "name": ENTRY, "revision": 1}}, "alternatives[0].target"),
    ({"target": {"kind": "entry", "name": "Not A Slug", "revision": 1}}, "alternatives[0].target.name"),
    ({"target": {"kind": "entry", "name": ENTRY, "revision": 0}}, "alternatives[0].target"),
    ({"target": {"kind": "entry", "name": ENTRY, "revision": True}}, "alternatives[0].target"),
    ({"title": ""}, "alternatives[0].title"),
    ({"body": 7}, "alternatives[0].body"),
    ({"body": "a\x00b"}, "alternatives[0].body"),
    ({"body": "lone \ud800"}, "alternatives[0].body"),
    ({"tags": ["Not a tag"]}, "alternatives[0].tags"),
    ({"rationale": ""}, "alternatives[0].rationale"),
    ({"rationale": "x" * 2001}, "alternatives[0].rationale"),
    ({"extra": 1}, "alternatives[0]"),
])
def test_an_alternative_of_the_wrong_form_is_refused(desk: Desk, change: dict[str, Any], field: str) -> None:
    session = desk.open_session()
    with changes_nothing(desk, InvalidInput) as caught:
        desk.prepare(session, {**desk.alternative(), **change})
    assert caught[0].details["field"] == field


@pytest.mark.parametrize("conflict", ["", "   ", "x" * 2001, None, "a\x00b"])
def test_a_conflict_of_the_wrong_form_is_refused(desk: Desk, conflict: Any) -> None:
    session = desk.open_session()
    with changes_nothing(desk, InvalidInput) as caught:
        desk.app.repairs.prepare(desk.agent, session, conflict, [desk.alternative()])
    assert caught[0].details["field"] == "conflict"


def test_a_target_that_does_not_exist_is_not_found(desk: Desk) -> None:
    session = desk.open_session()
    with changes_nothing(desk, NotFound):
        desk.prepare(session, desk.alternative(name="deploy/nowhere", revision=1))
    with changes_nothing(desk, NotFound):
        desk.app.repairs.target(desk.agent, session, "entry", "deploy/nowhere")


def test_a_target_revision_that_is_not_current_is_a_conflict(desk: Desk) -> None:
    session = desk.open_session()
    desk.app.memory.remember(desk.agent, RememberRequest(ENTRY, ENTRY_TITLE, ENTRY_BODY + " Edited."))
    with changes_nothing(desk, Conflict) as caught:
        desk.prepare(session, desk.alternative(revision=1))
    assert caught[0].details == {"name": ENTRY, "current_revision": 2, "prepared_revision": 1}


def test_an_alternative_that_changes_nothing_is_refused(desk: Desk) -> None:
    session = desk.open_session()
    with changes_nothing(desk, InvalidInput) as caught:
        desk.prepare(session, desk.alternative(ENTRY_BODY))
    assert caught[0].details["field"] == "alternatives[0]"


def test_repair_target_gives_the_complete_current_content(desk: Desk) -> None:
    session = desk.open_session()
    before = state(desk)
    assert desk.app.repairs.target(desk.agent, session, "entry", ENTRY) == {
        "session": session, "kind": "entry", "name": ENTRY, "revision": 1, "title": ENTRY_TITLE, "body": ENTRY_BODY,
        "tags": ["ops", "staging"], "curated": False}
    assert state(desk) == before
    with changes_nothing(desk, InvalidInput):
        desk.app.repairs.target(desk.agent, session, "draft", ENTRY)


def test_a_closed_session_refuses_preparing(desk: Desk) -> None:
    session = desk.open_session()
    desk.app.sessions.close(desk.agent, session)
    with changes_nothing(desk, SessionClosed):
        desk.prepare(session)
    with changes_nothing(desk, SessionClosed):
        desk.app.repairs.target(desk.agent, session, "entry", ENTRY)


def test_a_session_of_another_workspace_or_principal_is_not_found(desk: Desk) -> None:
    beta = make_team(desk.app, "beta")
    theirs = desk.app.sessions.open(beta.agent, "beta's question")["session"]
    with changes_nothing(desk, NotFound):
        desk.prepare(theirs)
    desk.app.directory.add_principal("alpha-agent-2", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    other = desk.app.directory.authenticate_token(
        desk.app.directory.issue_token("alpha-agent-2", workspace="alpha", by=OPERATOR).token)
    theirs = desk.open_session(owner=other)
    with changes_nothing(desk, NotFound):
        desk.prepare(theirs)


def test_a_reader_may_not_propose(desk: Desk) -> None:
    reader = make_team(desk.app, "gamma", agent_role=Role.READER).agent
    session = desk.app.sessions.open(reader, "q")["session"]
    with changes_nothing(desk, NotAllowed) as caught:
        desk.app.repairs.prepare(reader, session, "conflict", [desk.alternative()])
    assert caught[0].details == {"permission": "repairs.propose"}


# Deciding ----------------------------------------------------------------------------------------


def test_applying_an_entry_writes_a_curated_revision_and_the_receipt_together(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session, desk.alternative(), desk.alternative("Other."))["repair"]
    desk.app.sessions.close(desk.agent, session)  # a closed session needs no takeover
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1")
    assert (applied["status"], applied["written"], applied["published"]) == ("active", True, True)
    assert (applied["chosen_option"], applied["applied_revision"], applied["decided_by"]) == (
        "opt-1", 2, "human:alpha-admin")
    entry = desk.app.memory.read(desk.agent, ENTRY)
    assert (entry["revision"], entry["title"], entry["body"], entry["tags"]) == (2, ENTRY_TITLE, CORRECT_BODY,
                                                                                ["ops", "staging"])
    assert (entry["curated"], entry["curated_by"], entry["needs_review"]) == (True, "human:alpha-admin", False)
    assert desk.app.memory.history(desk.agent, ENTRY)["revisions"][-1]["reason"].startswith(
        f"Archive repair {repair} (opt-1): ")
    assert statuses(desk, repair) == [("proposed", "proposed"), ("applied", "active")]
    assert [action for _actor, action, _details in audit_of(desk)] == ["repair.proposed", "repair.applied"]
    assert [(actor, details["revision"], details["curated"]) for actor, _action, details in audit_of(desk, "memory.re")
            ] == [("human:alpha-admin", 2, True)]
    # The receipt: decision context, target and revision, complete result (curated), principal, outcome, history.
    receipt = receipt_file(desk, applied["session"], repair)
    assert receipt["session"] == {"id": applied["session"], "subject": "Why does the staging deploy fail?"}
    assert receipt["target"] == {"kind": "entry", "name": ENTRY, "revision": 1, "base_fingerprint": None}
    assert receipt["result"] == {"title": ENTRY_TITLE, "body": CORRECT_BODY, "tags": ["ops", "staging"],
                                 "curated": True}
    assert receipt["decision"]["acting_principal"] == "human:alpha-admin"
    assert receipt["publication"]["published"] is True
    assert [event["status"] for event in receipt["history"]] == ["proposed", "active"]
    with OwnerSQL(desk.app.settings) as sql:
        assert sql.rows("SELECT count(*) FROM pending_operations WHERE done_at IS NULL") == [(0,)]
    # Applying again, or anything else, is refused: the decision is made.
    with changes_nothing(desk, Conflict):
        desk.app.repairs.apply(desk.admin, repair, "opt-2")
    with changes_nothing(desk, Conflict):
        desk.app.repairs.reject(desk.human, repair)


def test_a_curated_entry_gets_a_curated_revision(desk: Desk) -> None:
    desk.app.memory.curate(desk.human, ENTRY, 1)
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    assert desk.app.repairs.show(desk.agent, repair)["alternatives"][0]["target"]["revision"] == 1
    desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    entry = desk.app.memory.read(desk.agent, ENTRY)
    assert (entry["revision"], entry["curated_revision"], entry["curated_by"]) == (2, 2, "human:alpha-admin")
    assert desk.app.memory.needs_review(desk.human) == []


def test_a_forged_option_is_refused(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session())["repair"]
    for forged in ("opt-2", "opt-0", "OPT-1", "", None, 1):
        with changes_nothing(desk, InvalidInput) as caught:
            desk.app.repairs.apply(desk.admin, repair, forged, take_over=True)
        assert caught[0].details["options"] == ["opt-1"]


def test_only_an_administrator_applies_and_never_an_agent(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session())["repair"]
    with changes_nothing(desk, NotAllowed) as caught:
        desk.app.repairs.apply(desk.human, repair, "opt-1", take_over=True)  # an editor, not an administrator
    assert caught[0].details == {"permission": "memory.manage"}
    repairs, agent = desk.app.repairs, desk.agent
    calls: list[Callable[[], Any]] = [
        lambda: repairs.apply(agent, repair, "opt-1", take_over=True),
        lambda: repairs.reject(agent, repair, "no", reformulate=True),
        lambda: repairs.retry(agent, repair),
        lambda: repairs.continue_pending(agent, repair),
        lambda: desk.app.memory.write_chosen(agent, ENTRY, 1, "t", "b", None, None),
    ]
    for call in calls:
        with changes_nothing(desk, NotAllowed) as caught:
            call()
        assert caught[0].message.startswith("Only a human may")
    assert desk.app.repairs.show(desk.agent, repair)["status"] == "proposed"


def test_an_administrator_takes_another_principals_open_session_over_first(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    with changes_nothing(desk, NotAllowed) as caught:
        desk.app.repairs.apply(desk.admin, repair, "opt-1")
    assert caught[0].details == {"session": session, "owner": "agent:alpha-agent"}
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert applied["status"] == "active"
    history = desk.app.sessions.history(desk.admin, session)
    assert (history["owner"], history["checkpoints"][-1]["event"]) == ("human:alpha-admin", "taken_over")


@pytest.mark.parametrize("kind", ["entry", "evidence"])
def test_an_apply_that_fails_after_its_takeover_takes_nothing_over(desk: Desk, monkeypatch: pytest.MonkeyPatch,
                                                                  kind: str) -> None:
    """The takeover is made in the transaction that records the decision: a step that fails after it there (the
    database busy) rolls it back with everything else. The session stays the agent's, the audit log as it was."""
    session = desk.open_session()
    repair = desk.prepare(session, desk.alternative() if kind == "entry" else desk.unit_alternative())["repair"]
    busy = StorageUnavailable("The database is busy; try again in a moment.")
    with monkeypatch.context() as patch:
        if kind == "entry":
            def write_chosen(*_args: Any, **_kwargs: Any) -> None:
                raise busy

            patch.setattr(desk.app.memory, "write_chosen", write_chosen)
        else:
            real = desk.app.evidence.current

            def current(actor: Any, name: str, *, within: Any = None, lock: bool = False) -> Any:
                if within is not None:  # the decision's transaction, after the takeover
                    raise busy
                return real(actor, name, lock=lock)

            patch.setattr(desk.app.evidence, "current", current)
        with changes_nothing(desk, StorageUnavailable):
            desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert desk.app.sessions.show(desk.admin, session)["owner"] == "agent:alpha-agent"
    assert desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)["status"] == "active"
    assert desk.app.sessions.show(desk.admin, session)["owner"] == "human:alpha-admin"


def test_a_target_changed_since_preparation_makes_the_repair_superseded_and_writes_nothing(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    desk.app.memory.remember(desk.agent, RememberRequest(ENTRY, ENTRY_TITLE, "Someone else's correction."))
    before = desk.app.memory.read(desk.agent, ENTRY)
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert (applied["status"], applied["written"], applied["applied_revision"]) == ("superseded", False, None)
    assert applied["outcome"] == "Superseded: the target changed after preparation; nothing was written."
    assert desk.app.memory.read(desk.agent, ENTRY) == before
    assert audit_of(desk, "memory.repaired") == []
    superseded = applied["history"][-1]
    assert (superseded["event"], superseded["actor"]) == ("superseded", "human:alpha-admin")
    assert (superseded["details"]["current_revision"], superseded["details"]["found_by"]) == (2, "apply")
    assert audit_of(desk)[-1][:2] == ("human:alpha-admin", "repair.superseded")
    with changes_nothing(desk, Conflict):
        desk.app.repairs.apply(desk.admin, repair, "opt-1")


def test_a_later_edit_makes_repair_show_report_superseded(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert desk.app.repairs.show(desk.agent, repair)["status"] == "active"  # nothing changed: nothing recorded
    assert len(statuses(desk, repair)) == 2
    desk.app.memory.remember(desk.agent, RememberRequest(ENTRY, ENTRY_TITLE, "A later edit.", override_curated=True,
                                                         reason="Observed yet another host."))
    shown = desk.app.repairs.show(desk.agent, repair)  # the proposer's look refreshes the status
    assert (shown["status"], shown["applied_revision"], shown["published"]) == ("superseded", 2, False)
    assert shown["history"][-1]["details"] == {"target": {"kind": "entry", "name": ENTRY, "revision": 1},
                                               "applied_revision": 2, "current_revision": 3,
                                               "found_by": "repair_show"}
    assert shown["history"][-1]["actor"] == "agent:alpha-agent"
    assert desk.app.repairs.list_repairs(desk.admin, status="superseded")[0]["repair"] == repair
    assert receipt_file(desk, session, repair)["decision"]["status"] == "superseded"


def test_rejecting_and_asking_for_a_reformulation(desk: Desk) -> None:
    session = desk.open_session()
    first, second = desk.prepare(session)["repair"], desk.prepare(session)["repair"]
    with changes_nothing(desk, InvalidInput) as caught:
        desk.app.repairs.reject(desk.human, first, reformulate=True)  # a reformulation needs a comment
    assert caught[0].details["field"] == "comment"
    rejected = desk.app.repairs.reject(desk.human, first)
    assert (rejected["status"], rejected["reformulation_requested"], rejected["comment"]) == ("rejected", False, None)
    asked = desk.app.repairs.reject(desk.human, second, "Name the cloud account too.", reformulate=True)
    assert (asked["status"], asked["reformulation_requested"], asked["comment"]) == (
        "rejected", True, "Name the cloud account too.")
    seen = desk.app.repairs.show(desk.agent, second)  # the agent sees it
    assert (seen["reformulation_requested"], seen["comment"]) == (True, "Name the cloud account too.")
    assert "repair_prepare" in seen["next_step"]
    assert [(item["repair"], item["status"], item["reformulation_requested"], item["comment"])
            for item in desk.app.repairs.of_session(desk.agent, session)["repairs"]] == [
        (second, "rejected", True, "Name the cloud account too."), (first, "rejected", False, None)]
    assert [(actor, action) for actor, action, _ in audit_of(desk)][-2:] == [
        ("human:alpha-human", "repair.rejected"), ("human:alpha-human", "repair.reformulation_requested")]
    assert desk.app.memory.read(desk.agent, ENTRY)["revision"] == 1
    with changes_nothing(desk, Conflict):
        desk.app.repairs.apply(desk.admin, first, "opt-1", take_over=True)
    with changes_nothing(desk, Conflict):
        desk.app.repairs.reject(desk.human, first)


def test_remembering_the_corrected_content_afterwards_is_a_possible_duplicate(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session())["repair"]
    desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    before = state(desk)
    answer = desk.app.memory.remember(desk.agent, RememberRequest("ops/staging-summary", ENTRY_TITLE, CORRECT_BODY))
    assert (answer["status"], answer["code"], answer["written"]) == ("judgment_required", "possible_duplicate", False)
    assert answer["candidates"][0]["slug"] == ENTRY
    assert answer["candidates"][0]["revision"] == 2
    assert state(desk) == before


def test_a_failed_receipt_write_stays_pending_until_a_retry_completes_it(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    folder = desk.receipt_path(session, repair).parent
    desk.receipt_path(session, repair).unlink()
    folder.rmdir()
    folder.write_text("a file where the receipts' folder must be")  # the write fails (also for root)
    applied = desk.app.repairs.apply(desk.admin, repair, "opt-1", take_over=True)
    assert (applied["status"], applied["written"]) == ("active", True)  # the revision and receipt committed
    assert desk.app.memory.read(desk.agent, ENTRY)["revision"] == 2
    (pending,) = applied["pending_operations"]
    assert (pending["kind"], pending["attempts"]) == ("mirror_receipt", 1)
    assert pending["last_error"] == "the receipt file could not be written (FileExistsError)"
    still = desk.app.repairs.retry(desk.admin, repair)  # the file is still in the way
    assert still["status"] == "active"
    assert [operation["attempts"] for operation in still["pending_operations"]] == [2, 1]
    folder.unlink()
    retried = desk.app.repairs.retry(desk.admin, repair)
    assert (retried["status"], retried["pending_operations"]) == ("active", [])
    assert [event["event"] for event in retried["history"]] == ["proposed", "applied", "retried", "retried"]
    receipt = receipt_file(desk, session, repair)
    assert receipt == json.loads(canonical_json(receipt))
    assert [event["event"] for event in receipt["history"]] == ["proposed", "applied", "retried", "retried"]
    with OwnerSQL(desk.app.settings) as sql:
        assert sql.rows("SELECT count(*) FROM pending_operations WHERE done_at IS NULL") == [(0,)]
        attempts = sql.rows("SELECT max(attempts) FROM pending_operations")[0][0]
    assert attempts >= 3


def test_retrying_a_proposal_is_refused(desk: Desk) -> None:
    repair = desk.prepare(desk.open_session())["repair"]
    with changes_nothing(desk, Conflict):
        desk.app.repairs.retry(desk.admin, repair)
    with changes_nothing(desk, Conflict):
        desk.app.repairs.continue_pending(desk.admin, repair)


def test_repairs_are_visible_to_their_proposer_and_session_managers_only(desk: Desk) -> None:
    session = desk.open_session()
    repair = desk.prepare(session)["repair"]
    desk.app.directory.add_principal("alpha-agent-2", Kind.AGENT, workspace="alpha", role=Role.EDITOR, by=OPERATOR)
    other = desk.app.directory.authenticate_token(
        desk.app.directory.issue_token("alpha-agent-2", workspace="alpha", by=OPERATOR).token)
    with changes_nothing(desk, NotFound):
        desk.app.repairs.show(other, repair)
    assert desk.app.repairs.list_repairs(other) == []
    assert [item["repair"] for item in desk.app.repairs.list_repairs(desk.agent)] == [repair]
    assert [item["repair"] for item in desk.app.repairs.list_repairs(desk.human, session=session)] == [repair]
    assert desk.app.repairs.list_repairs(desk.admin, session=session + 1) == []
    assert desk.app.repairs.list_repairs(desk.admin, status="active") == []
    with changes_nothing(desk, InvalidInput):
        desk.app.repairs.list_repairs(desk.admin, status="done")
    with changes_nothing(desk, NotFound):
        desk.app.repairs.show(desk.admin, repair + 100)


def test_the_summary_never_calls_an_unpublished_repair_a_success() -> None:
    row = {"status": "pending_activation", "applied_revision": 3, "activation_deferred": True,
           "reformulation_requested": False}
    assert views.outcome(row).startswith("NOT a success")
    assert "on purpose" in views.outcome(row)
    assert views.outcome({**row, "status": "applying"}).startswith("NOT applied")
