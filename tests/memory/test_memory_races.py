"""Races on memory writes, on SQLite and PostgreSQL, between threads and between processes.

Each race lines two callers up on a barrier and lets them go at once, ``ROUNDS`` times, each round
on a fresh slug of one workspace (every other round, one of them gets a head start of up to 2 ms:
both orders must show up). Every pair of outcomes must fall in a category the spec allows
(anything else, including an unexpected exception, fails the test). Then the stored state is
checked: the entry, its revisions and its audit events replayed in chain order agree, and no
curated revision was ever replaced without an override on record (overrode_curated, the reason,
the audit event memory.curated_override and the entry on the needs-review list).

Threads share one application (SQLite opens a connection per thread, PostgreSQL takes them from
a pool); processes are started with 'spawn' and each opens its own application.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.errors import ArmariusError
from armarius.memory.service import RememberRequest
from tests.helpers import OPERATOR, make_team

ROUNDS = 200
WORKSPACE = "races"
BARRIER_TIMEOUT = 60
MAX_HEAD_START = 0.002
REASON = "The server answered the opposite a minute ago."

Outcome = dict[str, Any]


# What the racers do ----------------------------------------------------------------------------
# Module-level functions, named in OPERATIONS, so that a spawned process can run them too.


def _words(slug: str) -> str:
    """Words no other round shares, so that rounds never look like duplicates of each other."""
    digest = hashlib.sha256(slug.encode()).hexdigest()
    return " ".join(digest[i:i + 16] for i in range(0, 48, 16))


def _title(slug: str) -> str:
    return f"Race {_words(slug).split()[0]}"


def _body(slug: str, what: str, actor: Actor) -> str:
    return f"{_words(slug)} {what} by {actor.principal}"


def _request(slug: str, what: str, actor: Actor, **options: Any) -> RememberRequest:
    return RememberRequest(slug=slug, title=_title(slug), body=_body(slug, what, actor), **options)


def curate_revision_1(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    return app.memory.curate(actor, slug, 1)


def update(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    return app.memory.remember(actor, _request(slug, "changed", actor))


def update_overriding(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    return app.memory.remember(actor, _request(slug, "changed", actor, override_curated=True, reason=REASON))


def update_expecting_1(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    return app.memory.remember(actor, _request(slug, "changed", actor, expected_revision=1))


def create_expecting_none(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    return app.memory.remember(actor, _request(slug, "created", actor, expected_revision=0))


def create_or_update(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    return app.memory.remember(actor, _request(slug, "created", actor))


def create_near_duplicate(app: Armarius, actor: Actor, slug: str) -> dict[str, Any]:
    """'<slug>-server' for one agent, '<slug>-servers' for the other: slugs that differ by a plural."""
    variant = "servers" if actor.principal.endswith("agent2") else "server"
    return app.memory.remember(actor, RememberRequest(slug=f"{slug}-{variant}", title=_title(slug),
                                                      body=_body(slug, "created", actor)))


OPERATIONS: dict[str, Callable[[Armarius, Actor, str], dict[str, Any]]] = {
    function.__name__: function
    for function in (curate_revision_1, update, update_overriding, update_expecting_1, create_expecting_none,
                     create_or_update, create_near_duplicate)
}


def attempt(app: Armarius, actor: Actor, operation: str, slug: str) -> Outcome:
    """The operation's answer, its error code and details, or the unexpected exception (as text)."""
    try:
        return {"ok": OPERATIONS[operation](app, actor, slug)}
    except ArmariusError as error:
        return {"error": error.code, "type": type(error).__name__, "details": error.details}
    except Exception as error:
        return {"exception": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}


def _setup_entry(app: Armarius, actor: Actor, slug: str) -> None:
    """The entry every curation and update race starts from: revision 1, not curated."""
    result = app.memory.remember(actor, _request(slug, "original", actor, confirm_distinct=True,
                                                 reason="a race needs its own entry"))
    assert (result["status"], result["revision"]) == ("written", 1), result


# Running the rounds ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Race:
    name: str
    setup: bool
    #: (who, operation) of the two racers; who is a key of the actors dict.
    racers: tuple[tuple[str, str], tuple[str, str]]
    #: Checks one round (app, actors, slug, the outcomes in racer order, the final State), names its category.
    classify: Callable[..., str]


def head_starts(race: Race) -> list[tuple[float, float]]:
    """How long each racer waits after the barrier, per round.

    Even rounds are a dead heat. In odd rounds one racer, chosen at random, waits up to 2 ms, so
    that both orders happen often whichever call is quicker to reach the database.
    """
    chance = random.Random(race.name)
    delays = []
    for number in range(ROUNDS):
        delay = 0.0 if number % 2 == 0 else chance.uniform(0, MAX_HEAD_START)
        delays.append((delay, 0.0) if chance.random() < 0.5 else (0.0, delay))
    return delays


def _after_barrier(barrier: threading.Barrier, delay: float, app: Armarius, actor: Actor, operation: str,
                   slug: str) -> Outcome:
    barrier.wait()
    if delay:
        time.sleep(delay)
    return attempt(app, actor, operation, slug)


def run_in_threads(app: Armarius, actors: dict[str, Actor], race: Race) -> list[tuple[str, list[Outcome]]]:
    barrier = threading.Barrier(2, timeout=BARRIER_TIMEOUT)
    rounds = []
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="racer") as pool:
        for number, delays in enumerate(head_starts(race)):
            slug = f"{race.name}/threads-{number}"
            if race.setup:
                _setup_entry(app, actors["agent"], slug)
            futures = [pool.submit(_after_barrier, barrier, delay, app, actors[who], operation, slug)
                       for (who, operation), delay in zip(race.racers, delays, strict=True)]
            rounds.append((slug, [future.result(timeout=2 * BARRIER_TIMEOUT) for future in futures]))
    return rounds


def _process_racer(settings: Settings, actor: Actor, operation: str, slugs: list[str], delays: list[float],
                   barrier: Any, results: Any, index: int) -> None:
    """One racing process: its own application, the barrier before each round, outcomes at the end."""
    app = open_app(settings)
    outcomes: list[Outcome] = []
    try:
        for slug, delay in zip(slugs, delays, strict=True):
            barrier.wait()
            if delay:
                time.sleep(delay)
            outcomes.append(attempt(app, actor, operation, slug))
    except BaseException:
        outcomes.append({"exception": "the racer stopped", "traceback": traceback.format_exc()})
        barrier.abort()
    finally:
        app.close()
        results.put((index, outcomes))


def run_in_processes(app: Armarius, settings: Settings, actors: dict[str, Actor],
                     race: Race) -> list[tuple[str, list[Outcome]]]:
    slugs = [f"{race.name}/processes-{number}" for number in range(ROUNDS)]
    if race.setup:
        for slug in slugs:
            _setup_entry(app, actors["agent"], slug)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT)
    results = context.Queue()
    delays = head_starts(race)
    processes = [
        context.Process(target=_process_racer, name=f"racer-{index}", daemon=True, args=(
            settings, actors[who], operation, slugs, [pair[index] for pair in delays], barrier, results, index))
        for index, (who, operation) in enumerate(race.racers)
    ]
    try:
        for process in processes:
            process.start()
        collected = dict(results.get(timeout=240) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join()
            process.close()
        results.close()
        results.join_thread()
    for index in (0, 1):
        crashed = [outcome for outcome in collected[index] if "exception" in outcome]
        assert not crashed, crashed[0]["traceback"]
        assert len(collected[index]) == ROUNDS
    return [(slug, [collected[0][number], collected[1][number]]) for number, slug in enumerate(slugs)]


# What the stored state must look like ----------------------------------------------------------


@dataclass
class State:
    entry: dict[str, Any]
    revisions: list[dict[str, Any]]
    events: list[audit.AuditEvent]


def _state(app: Armarius, actors: dict[str, Actor], slug: str, events: list[audit.AuditEvent]) -> State:
    return State(app.memory.read(actors["human"], slug), app.memory.history(actors["human"], slug)["revisions"],
                 events)


def replay(slug: str, state: State) -> None:
    """Replay the slug's audit events in chain order against its revisions and its current state.

    The invariant: a revision that replaced a curated revision is an override with its reason on
    record, and an update of an uncurated revision is not; curation names the revision it saw.
    """
    revision, curated, needs_review = 0, None, False
    stored = {row["revision"]: row for row in state.revisions}
    for event in state.events:
        assert event.subject == slug
        if event.action == "memory.created":
            assert revision == 0, state
            revision = 1
        elif event.action == "memory.curated":
            assert event.details == {"revision": revision}, state
            curated, needs_review = revision, False
        elif event.action in ("memory.updated", "memory.curated_override"):
            replaced_curated = curated == revision
            assert (event.action == "memory.curated_override") == replaced_curated, state
            assert event.details["revision"] == revision + 1, state
            revision += 1
            assert stored[revision]["overrode_curated"] is replaced_curated, state
            if replaced_curated:
                assert stored[revision]["reason"] == event.details["reason"] == REASON, state
                assert event.details["curated_revision"] == curated, state
            needs_review = needs_review or replaced_curated
        else:
            pytest.fail(f"unexpected audit event {event.action} for {slug}")
    assert sorted(stored) == list(range(1, revision + 1)), state
    entry = state.entry
    assert (entry["revision"], entry["curated_revision"], entry["needs_review"]) == (revision, curated, needs_review)
    assert entry["curated"] is (curated is not None and curated == revision), state


def _listed(app: Armarius, actor: Actor, prefix: str, **flags: bool) -> set[str]:
    slugs: set[str] = set()
    after = None
    while True:
        page = app.memory.list_entries(actor, prefix=prefix, after=after, limit=200, **flags)
        slugs.update(entry["slug"] for entry in page["entries"])
        after = page.get("next_after")
        if after is None:
            return slugs


def check_rounds(app: Armarius, actors: dict[str, Actor], race: Race,
                 rounds: list[tuple[str, list[Outcome]]]) -> Counter[str]:
    """Classify every round, replay every entry, and check the lists agree with the entries."""
    for slug, outcomes in rounds:
        unexpected = [outcome for outcome in outcomes if "exception" in outcome]
        assert not unexpected, f"{slug}: {unexpected[0]['exception']}\n{unexpected[0]['traceback']}"
    workspace = actors["agent"].workspace_id
    events: dict[str, list[audit.AuditEvent]] = defaultdict(list)
    for event in audit.tail(app.database, workspace, limit=1_000_000):
        events[event.subject].append(event)
    counts: Counter[str] = Counter()
    curated, needs_review = set(), set()
    states: dict[str, State] = {}
    for slug, outcomes in rounds:
        state = states[slug] = _state(app, actors, slug, events[slug])
        counts[race.classify(app, actors, slug, outcomes, state)] += 1
        replay(slug, state)
        if state.entry["curated"]:
            curated.add(slug)
        if state.entry["needs_review"]:
            needs_review.add(slug)
    prefix = rounds[0][0].rsplit("-", 1)[0]
    assert _listed(app, actors["human"], prefix, curated=True) == curated
    assert _listed(app, actors["human"], prefix, needs_review=True) == needs_review
    review = {item["slug"]: item for item in app.memory.needs_review(actors["human"])}
    assert set(review) == needs_review
    for slug, item in review.items():
        # Each entry to review names the curated revision and every override since, with its reason.
        overrides = [(row["revision"], row["reason"]) for row in states[slug].revisions if row["overrode_curated"]]
        assert item["curated_revision"] == states[slug].entry["curated_revision"]
        assert [(o["revision"], o["reason"]) for o in item["overrides"]] == overrides != []
    checked, broken = audit.verify_chain(app.database, workspace)
    assert broken is None, broken
    assert checked > 0
    return counts


# The categories each race allows ---------------------------------------------------------------


def _written(outcome: Outcome, revision: int, *, created: bool) -> bool:
    result = outcome.get("ok", {})
    return result.get("status") == "written" and result["revision"] == revision and result["created"] is created


def _conflict(outcome: Outcome, **details: Any) -> bool:
    return outcome.get("type") == "Conflict" and all(outcome["details"].get(k) == v for k, v in details.items())


def classify_curation(app: Armarius, actors: dict[str, Actor], slug: str, outcomes: list[Outcome], state: State, *,
                      overriding: bool) -> str:
    """Agent (update, with or without override) against human (curate revision 1)."""
    agent, human = outcomes
    actions = [event.action for event in state.events]
    entry, revisions = state.entry, state.revisions
    context = f"{slug}: agent {agent}, human {human}, entry {entry}, revisions {revisions}, audit {actions}"
    if human.get("ok") == {"slug": slug, "revision": 1, "curated": True, "changed": True}:
        if overriding:
            # The human was first: the override is written, on record, and waits for review.
            assert _written(agent, 2, created=False), context
            assert agent["ok"]["needs_review"] is True, context
            assert actions == ["memory.created", "memory.curated", "memory.curated_override"], context
            assert (entry["revision"], entry["curated_revision"], entry["curated"], entry["needs_review"]) == (
                2, 1, False, True), context
            assert [r["overrode_curated"] for r in revisions] == [False, True], context
            assert (revisions[1]["reason"], revisions[1]["author"]) == (REASON, actors["agent"].audit_name), context
            return "curated, then override recorded"
        # The human was first: the agent is told the entry is curated, and nothing is written.
        answer = agent.get("ok", {})
        assert (answer.get("status"), answer.get("code")) == ("judgment_required", "curated_entry"), context
        assert (answer["written"], answer["revision"]) == (False, 1), context
        assert actions == ["memory.created", "memory.curated"], context
        assert (entry["revision"], entry["curated"], entry["needs_review"]) == (1, True, False), context
        assert len(revisions) == 1, context
        return "curated, then agent told curated_entry"
    # The agent was first: a plain update, and the human's curation of what it saw is refused.
    assert _conflict(human, current_revision=2, reviewed_revision=1), context
    assert _written(agent, 2, created=False), context
    assert "needs_review" not in agent["ok"], context
    assert actions == ["memory.created", "memory.updated"], context
    assert (entry["revision"], entry["curated_revision"], entry["needs_review"]) == (2, None, False), context
    assert [r["overrode_curated"] for r in revisions] == [False, False], context
    assert revisions[1]["reason"] == (REASON if overriding else None), context
    return "updated, then curation refused (conflict)"


def classify_same_revision(app: Armarius, actors: dict[str, Actor], slug: str, outcomes: list[Outcome],
                           state: State) -> str:
    """Two agents update revision 1 (expected_revision 1): one wins, the other is told revision 2."""
    context = f"{slug}: {outcomes}, entry {state.entry}, revisions {state.revisions}"
    winners = [index for index, outcome in enumerate(outcomes) if _written(outcome, 2, created=False)]
    assert len(winners) == 1, context
    winner, loser = ("agent", "agent2") if winners == [0] else ("agent2", "agent")
    assert _conflict(outcomes[1 - winners[0]], current_revision=2, expected_revision=1, slug=slug), context
    assert [r["revision"] for r in state.revisions] == [1, 2], context
    assert state.revisions[1]["author"] == actors[winner].audit_name, context
    assert state.entry["body"] == _body(slug, "changed", actors[winner]), context
    assert [event.action for event in state.events] == ["memory.created", "memory.updated"], context
    return f"{winner} wins, {loser} gets conflict"


def classify_creation(app: Armarius, actors: dict[str, Actor], slug: str, outcomes: list[Outcome], state: State, *,
                      expecting_none: bool) -> str:
    """Two agents create the same new slug: one entry; the loser is refused or (without
    expected_revision) updates the winner's entry, which the spec allows ("creates or updates")."""
    context = f"{slug}: {outcomes}, entry {state.entry}, revisions {state.revisions}"
    winners = [index for index, outcome in enumerate(outcomes) if _written(outcome, 1, created=True)]
    assert len(winners) == 1, context
    winner = ("agent", "agent2")[winners[0]]
    loser_name = ("agent", "agent2")[1 - winners[0]]
    loser = outcomes[1 - winners[0]]
    assert state.revisions[0]["author"] == actors[winner].audit_name, context
    actions = [event.action for event in state.events]
    if not expecting_none and _written(loser, 2, created=False):
        assert [r["author"] for r in state.revisions] == [actors[winner].audit_name, actors[loser_name].audit_name]
        assert state.entry["body"] == _body(slug, "created", actors[loser_name]), context
        assert actions == ["memory.created", "memory.updated"], context
        return "one created, the other updated it (revision 2)"
    assert len(state.revisions) == 1, context
    assert state.entry["body"] == _body(slug, "created", actors[winner]), context
    assert actions == ["memory.created"], context
    if _conflict(loser, slug=slug, current_revision=1, expected_revision=0):
        return "one created, the other got conflict (revision 1 seen)"
    if loser.get("type") == "Conflict" and loser["details"] == {"slug": slug}:
        return "one created, the other got conflict (unique slug)"
    answer = loser.get("ok", {})
    assert (answer.get("status"), answer.get("code")) == ("judgment_required", "possible_duplicate"), context
    assert answer["written"] is False, context
    assert any(candidate["slug"] == slug for candidate in answer["candidates"]), context
    return "one created, the other got possible_duplicate"


def _curation_race(overriding: bool) -> Callable[..., str]:
    def classify(app: Armarius, actors: dict[str, Actor], slug: str, outcomes: list[Outcome], state: State) -> str:
        return classify_curation(app, actors, slug, outcomes, state, overriding=overriding)
    return classify


def _creation_race(expecting_none: bool) -> Callable[..., str]:
    def classify(app: Armarius, actors: dict[str, Actor], slug: str, outcomes: list[Outcome], state: State) -> str:
        return classify_creation(app, actors, slug, outcomes, state, expecting_none=expecting_none)
    return classify


RACES = {
    race.name: race for race in (
        Race("override-vs-curate", True, (("agent", "update_overriding"), ("human", "curate_revision_1")),
             _curation_race(overriding=True)),
        Race("update-vs-curate", True, (("agent", "update"), ("human", "curate_revision_1")),
             _curation_race(overriding=False)),
        Race("same-revision", True, (("agent", "update_expecting_1"), ("agent2", "update_expecting_1")),
             classify_same_revision),
        Race("create-new", False, (("agent", "create_expecting_none"), ("agent2", "create_expecting_none")),
             _creation_race(expecting_none=True)),
        Race("create-or-update", False, (("agent", "create_or_update"), ("agent2", "create_or_update")),
             _creation_race(expecting_none=False)),
    )
}

#: The categories each race may end in: anything outside them is a failure.
ALLOWED = {
    "override-vs-curate": {"curated, then override recorded", "updated, then curation refused (conflict)"},
    "update-vs-curate": {"curated, then agent told curated_entry", "updated, then curation refused (conflict)"},
    "same-revision": {"agent wins, agent2 gets conflict", "agent2 wins, agent gets conflict"},
    "create-new": {"one created, the other got conflict (revision 1 seen)",
                   "one created, the other got conflict (unique slug)",
                   "one created, the other got possible_duplicate"},
    "create-or-update": {"one created, the other updated it (revision 2)",
                         "one created, the other got conflict (revision 1 seen)",
                         "one created, the other got conflict (unique slug)",
                         "one created, the other got possible_duplicate"},
}

#: Races whose both orders must show up in 200 rounds: proof that the callers really raced. (The
#: creation races are exempt: on SQLite the write lock always lets the second one see the entry.)
BOTH_ORDERS = {"override-vs-curate", "update-vs-curate", "same-revision"}


def check_counts(name: str, counts: Counter[str]) -> None:
    assert sum(counts.values()) == ROUNDS
    assert set(counts) <= ALLOWED[name], counts
    if name in BOTH_ORDERS:
        assert set(counts) == ALLOWED[name], f"only one order in {ROUNDS} rounds: {counts}"


# The tests -------------------------------------------------------------------------------------


@pytest.fixture
def actors(app: Armarius) -> dict[str, Actor]:
    """An agent, a second agent and a human in one workspace."""
    team = make_team(app, WORKSPACE)
    app.directory.add_principal(f"{WORKSPACE}-agent2", Kind.AGENT, workspace=WORKSPACE, role=Role.EDITOR, by=OPERATOR)
    token = app.directory.issue_token(f"{WORKSPACE}-agent2", workspace=WORKSPACE, by=OPERATOR).token
    return {"agent": team.agent, "agent2": app.directory.authenticate_token(token), "human": team.human}


def _report(request: pytest.FixtureRequest, race: Race, mode: str, counts: Counter[str]) -> None:
    engine = request.node.callspec.params["settings"]
    line = ", ".join(f"{category}: {count}" for category, count in sorted(counts.items()))
    request.node.user_properties.append(("outcomes", f"{race.name} [{engine}, {mode}] {line}"))
    print(f"\n{race.name} [{engine}, {mode}] {line}")


@pytest.mark.parametrize("name", list(RACES))
def test_race_between_threads(app: Armarius, actors: dict[str, Actor], name: str,
                              request: pytest.FixtureRequest) -> None:
    race = RACES[name]
    counts = check_rounds(app, actors, race, run_in_threads(app, actors, race))
    _report(request, race, "threads", counts)
    check_counts(name, counts)


@pytest.mark.parametrize("name", list(RACES))
def test_race_between_processes(app: Armarius, settings: Settings, actors: dict[str, Actor], name: str,
                                request: pytest.FixtureRequest) -> None:
    race = RACES[name]
    counts = check_rounds(app, actors, race, run_in_processes(app, settings, actors, race))
    _report(request, race, "processes", counts)
    check_counts(name, counts)


def test_near_duplicate_slugs_created_at_once(app: Armarius, settings: Settings, actors: dict[str, Actor],
                                             request: pytest.FixtureRequest) -> None:
    """Two agents create 'x-server' and 'x-servers' at once: the duplicate check must see the other.

    Creations queue up per workspace (SQLite's write lock; an advisory lock on PostgreSQL), so the
    second always sees the first.
    """
    race = Race("near-duplicates", False, (("agent", "create_near_duplicate"), ("agent2", "create_near_duplicate")),
                classify_creation)
    counts: Counter[str] = Counter()
    for slug, outcomes in run_in_threads(app, actors, race):
        unexpected = [outcome for outcome in outcomes if "exception" in outcome or "error" in outcome]
        assert not unexpected, f"{slug}: {unexpected}"
        statuses = sorted(outcome["ok"]["status"] for outcome in outcomes)
        stored = [entry["slug"] for entry in app.memory.list_entries(actors["human"], prefix=f"{slug}-")["entries"]]
        if statuses == ["judgment_required", "written"]:
            flagged = next(outcome["ok"] for outcome in outcomes if outcome["ok"]["status"] == "judgment_required")
            assert flagged["code"] == "possible_duplicate"
            assert [candidate["slug"] for candidate in flagged["candidates"]] == stored
            counts["one created, the other got possible_duplicate"] += 1
        else:
            raise AssertionError(f"{slug}: both near-duplicates were created: {outcomes}")
    _report(request, race, "threads", counts)
    assert counts == {"one created, the other got possible_duplicate": ROUNDS}


def test_creations_and_new_revisions_at_once_never_deadlock(app: Armarius) -> None:
    """Every writer takes a workspace's locks in one order (the turn among creations, the vectors'
    numbering, the audit chain's head): four threads creating entries and revising their own at once, on
    one workspace, all succeed (PostgreSQL would detect a deadlock and fail one of them otherwise)."""
    team = make_team(app)
    failures: list[str] = []

    def writer(number: int) -> None:
        own = f"writers/own-{number}"
        try:
            app.memory.remember(team.agent, RememberRequest(own, "Own entry", _words(own)))
            for step in range(25):
                slug = f"writers/{number}-{step}"
                app.memory.remember(team.agent, RememberRequest(slug, _title(slug), _words(slug)))
                app.memory.remember(team.agent, RememberRequest(own, "Own entry", f"{_words(own)} step {step}"))
        except Exception:  # any failure is the finding
            failures.append(traceback.format_exc())

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BARRIER_TIMEOUT)
    assert not failures, failures[0]
    assert len(app.memory.list_entries(team.agent, prefix="writers/", limit=200)["entries"]) == 4 * 26
