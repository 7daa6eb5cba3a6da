"""Archive repairs of entries as a state machine, on both engines: an agent prepares repairs, edits the
entries and closes its sessions through its MCP tools; a human rejects or asks for a reformulation; an
administrator applies and retries (the service). After every step the store must equal a small model
of the entries and the repairs.

What the model pins down (SPEC §5 and §8): a repair's status is always one of the six; a repair is
applied at most once, and only when its target is still at the revision it was prepared against
(the applied content becomes a curated revision); a target that moved makes the repair superseded
and nothing is written, so a correction made in between is never overwritten; an edit after an
application makes the repair superseded (repair-show refreshes it); rejected and superseded repairs
stay so, whatever is retried.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition

from armarius.app import Armarius
from armarius.auth.permissions import Kind, Role
from armarius.errors import Conflict
from armarius.memory.service import RememberRequest
from armarius.repairs.model import Status
from tests.helpers import OPERATOR, Team
from tests.reliability.machines import (
    CountedMachine,
    Lab,
    SyncAgent,
    fresh_team,
    machine_settings,
    research_lab,
    run_machine,
    step,
)

pytestmark = pytest.mark.reliability

SLUGS = ("deploy/staging-host", "deploy/staging-port")
TITLE = "Where staging runs"


@pytest.fixture
def lab(app: Armarius, tmp_path: Path) -> Iterator[Lab]:
    with research_lab(app, tmp_path) as opened:
        yield opened


@dataclass
class Entry:
    bodies: list[str]  # revision n is bodies[n - 1]
    #: The repair that wrote each revision (None: the agent).
    written_by: list[int | None]
    curated: bool = False

    @property
    def revision(self) -> int:
        return len(self.bodies)

    def write(self, body: str, *, repair: int | None) -> None:
        self.bodies.append(body)
        self.written_by.append(repair)
        self.curated = repair is not None  # a repair's revision is curated; an agent's edit is not


@dataclass
class Repair:
    id: int
    session: int
    slug: str
    prepared_against: int
    options: list[str]  # the resulting bodies of opt-1, opt-2, …
    status: str = Status.PROPOSED.value  # as stored (and listed)
    applied_revision: int | None = None
    reformulation_requested: bool = False
    #: The target changed after the saved correction: the next repair-show stores and answers superseded.
    moved: bool = False


@dataclass
class Agent:
    """The agent's open session (None: it has none, or an administrator took it over)."""

    session: int | None = None
    sessions: set[int] = field(default_factory=set)


class RepairsMachine(CountedMachine):
    lab: Lab

    def __init__(self) -> None:
        super().__init__()
        self.app = self.lab.app
        self.team: Team = fresh_team(self.app, "rep")
        self.agent = SyncAgent(self.app, self.team.agent, self.resources)
        admin, password = f"{self.team.workspace}-admin", "admin correct horse battery"
        self.app.directory.add_principal(admin, Kind.HUMAN, workspace=self.team.workspace, role=Role.ADMIN,
                                         by=OPERATOR, password=password)
        self.admin = self.app.directory.authenticate_password(admin, password, workspace=self.team.workspace)
        self.numbers = itertools.count(1)
        self.entries: dict[str, Entry] = {}
        for slug in SLUGS:
            body = self.new_body()
            self.app.memory.remember(self.team.agent, RememberRequest(slug, TITLE, body, confirm_distinct=True,
                                                                      reason="a separate host setting"))
            self.entries[slug] = Entry([body], [None])
        self.repairs: list[Repair] = []
        self.owned = Agent()

    def new_body(self) -> str:
        return f"Staging runs on host stage-{next(self.numbers)}."

    def write(self, slug: str, body: str, *, repair: int | None) -> None:
        """A new revision of the entry: a correction saved before has moved (repair-show will say superseded)."""
        for earlier in self.repairs:
            if earlier.slug == slug and earlier.status == Status.ACTIVE:
                earlier.moved = True
        self.entries[slug].write(body, repair=repair)

    def pick(self, number: int, prefer: str | None) -> Repair:
        """A repair in the status ``prefer`` if there is one (None: any), chosen by ``number``."""
        candidates = [repair for repair in self.repairs if repair.status == prefer] or self.repairs
        return candidates[number % len(candidates)]

    # Agent steps (MCP tools) -------------------------------------------------------------------

    @step(slug=st.sampled_from(SLUGS), alternatives=st.integers(min_value=1, max_value=2),
          stale=st.sampled_from([False, False, False, True]))
    def prepare(self, slug: str, alternatives: int, stale: bool) -> None:
        if self.owned.session is None:
            self.owned.session = self.agent("session_open", subject="Which host runs staging?")["session"]
            self.owned.sessions.add(self.owned.session)
        entry = self.entries[slug]
        against = entry.revision - 1 if stale and entry.revision > 1 else entry.revision
        bodies = [self.new_body() for _ in range(alternatives)]
        answer = self.agent("repair_prepare", session=self.owned.session, conflict="The config names another host.",
                            alternatives=[{"target": {"kind": "entry", "name": slug, "revision": against},
                                           "title": TITLE, "body": body, "rationale": "The session showed it."}
                                          for body in bodies])
        if against != entry.revision:
            assert answer["error"] == "conflict", answer
            return
        assert (answer["status"], [item["option"] for item in answer["alternatives"]]) == (
            "proposed", [f"opt-{number}" for number in range(1, alternatives + 1)]), answer
        self.repairs.append(Repair(answer["repair"], self.owned.session, slug, against, bodies))

    @step(slug=st.sampled_from(SLUGS))
    def edit(self, slug: str) -> None:
        """The agent corrects the entry itself (overriding a repair's curated revision, with a reason)."""
        entry, body = self.entries[slug], self.new_body()
        answer = self.agent("remember", slug=slug, title=TITLE, body=body, override_curated=True,
                            reason="I just observed the opposite")
        assert (answer["status"], answer["revision"]) == ("written", entry.revision + 1), answer
        self.write(slug, body, repair=None)

    @precondition(lambda self: self.owned.session is not None)
    @step()
    def close_session(self) -> None:
        assert self.agent("session_close", session=self.owned.session)["status"] == "closed"
        self.owned.session = None

    @precondition(lambda self: self.repairs)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["active", None]))
    def follow(self, number: int, prefer: str | None) -> None:
        """repair_show: the target is checked again, and a saved correction changed since is superseded."""
        repair = self.pick(number, prefer)
        if repair.moved:
            repair.status, repair.moved = Status.SUPERSEDED.value, False
        shown = self.agent("repair_show", repair=repair.id)
        assert (shown["status"], shown["applied_revision"]) == (repair.status, repair.applied_revision), shown
        applied = [item for item in shown["history"] if item["event"] == "applied"]
        assert len(applied) == (repair.applied_revision is not None), shown["history"]

    # Human steps (the service) -----------------------------------------------------------------

    @precondition(lambda self: self.repairs)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["proposed", None]), reformulate=st.booleans())
    def reject(self, number: int, prefer: str | None, reformulate: bool) -> None:
        repair = self.pick(number, prefer)
        comment = "Name the port too." if reformulate else None
        if repair.status != Status.PROPOSED:
            with pytest.raises(Conflict):
                self.app.repairs.reject(self.team.human, repair.id, comment, reformulate=reformulate)
            return
        answer = self.app.repairs.reject(self.team.human, repair.id, comment, reformulate=reformulate)
        assert (answer["status"], answer["reformulation_requested"]) == ("rejected", reformulate), answer
        repair.status, repair.reformulation_requested = Status.REJECTED.value, reformulate

    @precondition(lambda self: self.repairs)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["proposed", "proposed", None]),
          option=st.integers(min_value=0))
    def apply(self, number: int, prefer: str | None, option: int) -> None:
        repair = self.pick(number, prefer)
        chosen = option % len(repair.options)
        entry = self.entries[repair.slug]
        if repair.status != Status.PROPOSED:
            with pytest.raises(Conflict):
                self.app.repairs.apply(self.admin, repair.id, f"opt-{chosen + 1}", take_over=True)
            return
        answer = self.app.repairs.apply(self.admin, repair.id, f"opt-{chosen + 1}", take_over=True)
        if repair.session == self.owned.session:  # the administrator took the agent's open session over
            self.owned.session = None
        if entry.revision != repair.prepared_against:  # moved since: nothing written, the correction stays
            assert (answer["status"], answer["written"]) == ("superseded", False), answer
            repair.status = Status.SUPERSEDED.value
            return
        assert (answer["status"], answer["written"], answer["applied_revision"]) == (
            "active", True, entry.revision + 1), answer
        self.write(repair.slug, repair.options[chosen], repair=repair.id)
        repair.status, repair.applied_revision = Status.ACTIVE.value, entry.revision

    @precondition(lambda self: self.repairs)
    @step(number=st.integers(min_value=0), prefer=st.sampled_from(["active", "superseded", None]))
    def retry(self, number: int, prefer: str | None) -> None:
        repair = self.pick(number, prefer)
        if repair.status == Status.PROPOSED:
            with pytest.raises(Conflict):
                self.app.repairs.retry(self.admin, repair.id)
            return
        # Retrying runs what is pending (the receipt file); it does not check the target again.
        assert self.app.repairs.retry(self.admin, repair.id)["status"] == repair.status

    # After every step ----------------------------------------------------------------------------

    @invariant()
    def every_repair_is_as_the_model_says(self) -> None:
        listed = {item["repair"]: item for item in self.app.repairs.list_repairs(self.admin)}
        assert sorted(listed) == sorted(repair.id for repair in self.repairs)
        for repair in self.repairs:
            item = listed[repair.id]
            assert item["status"] in set(Status)
            assert (item["status"], item["applied_revision"], bool(item["reformulation_requested"])) == (
                repair.status, repair.applied_revision, repair.reformulation_requested), item

    @invariant()
    def every_entry_is_as_the_model_says(self) -> None:
        """Its content, its curation, and which repair wrote which revision: each at most one, once."""
        for slug, entry in self.entries.items():
            stored = self.app.memory.read(self.admin, slug)
            assert (stored["revision"], stored["body"], stored["curated"]) == (
                entry.revision, entry.bodies[-1], entry.curated), slug
            reasons = [item["reason"] or "" for item in self.app.memory.history(self.admin, slug)["revisions"]]
            assert [reason.startswith("Archive repair ") for reason in reasons] == [
                repair is not None for repair in entry.written_by], reasons
            assert all(reason.startswith(f"Archive repair {repair} (") for reason, repair in
                       zip(reasons, entry.written_by, strict=True) if repair is not None), reasons


def test_repairs_state_machine(lab: Lab) -> None:
    run_machine(RepairsMachine, machine_settings(examples=(10, 200), steps=(40, 80)), lab=lab)
