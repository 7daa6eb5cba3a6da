"""`armarius serve` killed with SIGKILL at random points, hundreds of times, loses no acknowledged write.

Two agents (the SDK's MCP client over streamable HTTP) run the write workload of
tests/reliability/crash_workload.py against a server process: new entries and updates, curated
overrides, draft proposals and drafts (with the approval a human issued from this process through
the services, collected by the agent), research sessions and project queries against a real git
repository, repair proposals. After a random delay (up to ``BURST_SECONDS``; in one start out of
``STARTUP_KILL_EVERY``, during the server's start-up instead) the server is killed with SIGKILL,
nearly always in the middle of requests, and started again on the same data. Between lives the
human approves the new proposals and curates a few entries (so that the agents meet curated entries
and override them). This happens before every other start; on SQLite the human's connections are
closed again at once, so the other starts find the dead server's write-ahead log and recover it
themselves.

Start-up cost decides how many kills a run affords: the first life of each engine is the real
`armarius serve` command (its cold start is measured and printed); every later one is forked from a
process that imported the command's modules once (tests/reliability/crash_servers.py).

After the last kill, every invariant is checked on the store as the kills left it:

* no server life logged an error, a traceback or a 5xx answer before its kill;
* ``armarius audit verify`` (the real CLI) passes;
* every acknowledged write is there, byte for byte: each entry revision (title, body, tags, operation
  id), each proposal, approval, curation and draft (title, text, operation), each session, each
  evidence record (its capture, whose bytes hash to its id and hold the origin and result the agent
  was shown) and each repair (its alternative and conflict);
* nothing is half applied: every entry equals its latest revision, every revision has its audit event,
  every draft its operation record, its audit event and a consumed approval, and no approval is
  consumed without its draft; no repair is outside the six statuses, and a receipt file, where there
  is one, holds the store's receipt as it was after one of its transitions (every acknowledged repair
  has one);
* no evidence record lacks its capture row, and `armarius sessions verify` (the CLI, for every session,
  after a touch released what the dead servers held) finds nothing but the leftovers a kill may leave
  and verify names: a complete capture file whose record never committed, a temporary file;
* the search index matches the entries: every entry is found by the unique word its body holds; on
  SQLite the FTS5 tables, which are external-content tables, pass ``integrity-check`` against their
  content, and ``PRAGMA integrity_check`` is ok; on PostgreSQL every entry's search vector is the one its
  content gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.config import Settings
from armarius.errors import PortInUse
from armarius.repairs.model import Status
from tests import scale
from tests.e2e.servers import free_port, run_cli
from tests.helpers import OPERATOR, OwnerSQL, Team, make_team
from tests.reliability.crash_servers import Ended, Zygote, healthy, kill, start_cold
from tests.reliability.crash_workload import UNIQUE_PREFIX, Agent, Ledger, agent_life
from tests.research.repos import build_repo, source_entry, write_config

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(scale.pick(ci=900, local=7200))]

WORKSPACE = "crash"
#: Server lives (each ended by one SIGKILL) per engine: at least 200 in all in a CI run.
KILLS = {"sqlite": scale.pick(ci=125, local=600), "postgresql": scale.pick(ci=80, local=400)}
#: The longest an agent talks to a server before it is killed.
BURST_SECONDS = 0.6
#: One start in this many is killed during start-up rather than while serving.
STARTUP_KILL_EVERY = 8
#: How long an agent may keep talking to a killed server before the test fails.
GIVE_UP_SECONDS = 30


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    forks = Zygote(tmp_path_factory.mktemp("zygote") / "zygote.log")
    yield forks
    forks.close()


def _engine(settings: Settings) -> str:
    return "sqlite" if settings.database_url is None else "postgresql"


def _environment(settings: Settings) -> dict[str, str]:
    env = {"ARMARIUS_RESEARCH_CONFIG": "research.toml"}
    if settings.database_url is not None:
        env["ARMARIUS_DATABASE_URL"] = settings.database_url
    return env


class Lab:
    """The store under test, the people and agents of its workspace, and the human's side of the work."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        repo = build_repo(folder / "repo")
        write_config(settings.data_dir / "research.toml", [source_entry(repo)])
        # The approvals the human issues here outlive the whole run (the server checks their stored expiry).
        self.settings = replace(settings, research_config=Path("research.toml"), approval_ttl_seconds=86_400)
        self.sqlite = settings.database_url is None
        self.env = _environment(settings)
        self.log = folder / "servers.log"
        self.app: Armarius = open_app(self.settings)
        self.team: Team = make_team(self.app, WORKSPACE)
        directory = self.app.directory
        directory.add_principal(f"{WORKSPACE}-agent-2", Kind.AGENT, workspace=WORKSPACE, role=Role.EDITOR, by=OPERATOR)
        second = directory.issue_token(f"{WORKSPACE}-agent-2", workspace=WORKSPACE, by=OPERATOR).token
        self.tokens = [self.team.agent_token, second]
        self.agents: list[Actor] = [directory.authenticate_token(token) for token in self.tokens]
        self.rest()

    def rest(self) -> None:
        """On SQLite, close this process's connections: the next server start recovers the dead one's log."""
        if self.sqlite:
            self.app.database.close()

    def serve_args(self, port: int) -> list[str]:
        return ["--data-dir", str(self.settings.data_dir), "serve", "--port", str(port), "--workers", "1"]

    def human_turn(self, ledger: Ledger, chance: random.Random) -> None:
        """The human approves every new proposal and curates up to two entries (through the services)."""
        human = self.team.human
        for proposal in ledger.proposals.values():
            if proposal.approval_id is None:
                issued = self.app.drafts.approve(human, proposal_id=proposal.proposal)
                proposal.approval_id = issued.approval_id
                ledger.approvals.append(issued.approval_id)
        for slug in chance.sample(ledger.slugs, min(2, len(ledger.slugs))):
            entry = self.app.memory.read(human, slug)
            if not entry["curated"]:
                self.app.memory.curate(human, slug, entry["revision"])
                ledger.curations.append((slug, entry["revision"]))
        self.rest()


class Lives:
    """Starts, kills and reaps the server, and keeps the numbers."""

    def __init__(self, lab: Lab, forks: Zygote) -> None:
        self.lab, self.forks = lab, forks
        self.kills = 0
        self.startup_kills = 0
        self.lost_ports = 0
        self.cold_startup = 0.0
        self.forked_startups: list[float] = []
        #: Wall-clock seconds spent in each phase of the lives.
        self.phases: defaultdict[str, float] = defaultdict(float)

    def life(self, ledger: Ledger, chance: random.Random, *, cold: bool = False) -> None:
        """One server life: start it (``cold``: the real command, else forked), let the agents talk to it for a
        random while - or, once in ``STARTUP_KILL_EVERY`` forked starts, not even wait for it to come up - and kill
        it with SIGKILL. A start that lost its free port to another program is repeated, uncounted."""
        during_startup = not cold and self.kills % STARTUP_KILL_EVERY == STARTUP_KILL_EVERY - 1
        while True:
            port = free_port()
            started = time.monotonic()
            args = self.lab.serve_args(port)
            process = start_cold(args, env=self.lab.env, log=self.lab.log) if cold else None
            pid = process.pid if process is not None else self.forks.spawn(args, env=self.lab.env, log=self.lab.log)
            try:
                if during_startup:
                    time.sleep(chance.uniform(0, 0.15))
                elif healthy(f"http://127.0.0.1:{port}", pid, timeout=60):
                    startup = time.monotonic() - started
                    if cold:
                        self.cold_startup = startup
                    else:
                        self.forked_startups.append(startup)
                    self.phases["start-up"] += startup
                    anyio.run(self._burst, port, pid, ledger, chance)
            finally:
                kill(pid)
                ended = self._reap(process, pid)
            if ended.exit == PortInUse(" ").exit_code:
                self.lost_ports += 1
                continue
            if ended.signal != signal.SIGKILL:
                tail = self.lab.log.read_text(errors="replace")[-4000:]
                raise AssertionError(f"the server was not killed by the test: it ended {ended}\n{tail}")
            self.kills += 1
            self.startup_kills += during_startup
            self.phases["lives"] += time.monotonic() - started
            return

    def _reap(self, process: subprocess.Popen[bytes] | None, pid: int) -> Ended:
        if process is None:
            return self.forks.reap(pid)
        code = process.wait()
        return Ended(-code, None) if code < 0 else Ended(None, code)

    async def _burst(self, port: int, pid: int, ledger: Ledger, chance: random.Random) -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        talking = anyio.Event()
        began = time.monotonic()
        async with anyio.create_task_group() as group:
            for index, token in enumerate(self.lab.tokens):
                agent = Agent(index, f"a{index}", ledger, random.Random(chance.getrandbits(64)))
                group.start_soon(agent_life, url, token, agent, talking, GIVE_UP_SECONDS)
            with anyio.move_on_after(GIVE_UP_SECONDS):  # the burst starts when an agent is connected
                await talking.wait()
            self.phases["handshakes"] += time.monotonic() - began
            delay = chance.uniform(0, BURST_SECONDS)
            self.phases["bursts"] += delay
            await anyio.sleep(delay)
            kill(pid)
            killed = time.monotonic()
        self.phases["agents ending"] += time.monotonic() - killed


def test_a_server_killed_hundreds_of_times_keeps_every_acknowledged_write(
        settings: Settings, tmp_path: Path, zygote: Zygote) -> None:
    engine = _engine(settings)
    began, cpu_began = time.monotonic(), os.times()
    chance = random.Random()
    seed = chance.getrandbits(32)
    chance.seed(seed)
    lab = Lab(settings, tmp_path)
    ledger = Ledger()
    lives = Lives(lab, zygote)
    try:
        lives.life(ledger, chance, cold=True)
        while lives.kills < KILLS[engine]:
            if lives.kills % 2 == 0:
                turn = time.monotonic()
                lab.human_turn(ledger, chance)
                lives.phases["human turns"] += time.monotonic() - turn
            lives.life(ledger, chance)
        killed_at = time.monotonic()
        checked = check_invariants(lab, ledger, zygote)
    finally:
        lab.app.close()
    scale.record("SIGKILLs", lives.kills)
    scale.record("acknowledged writes checked", checked)
    scale.record("calls cut by a SIGKILL", ledger.counts["calls sent"] - ledger.counts["answers received"])
    startups = sorted(lives.forked_startups)
    finished, cpu = time.monotonic(), os.times()
    zygote_cpu = zygote.cpu_seconds()
    print(f"\n[{engine}] seed {seed}: {lives.kills} SIGKILLs ({lives.startup_kills} during start-up) in "
          f"{killed_at - began:.1f} s, invariants checked in {finished - killed_at:.1f} s; "
          f"{lives.lost_ports} starts repeated (port taken); CPU seconds: this process (the agents, the human, the "
          f"checks) {cpu.user + cpu.system - cpu_began.user - cpu_began.system:.1f}, processes it waited for "
          f"{cpu.children_user + cpu.children_system - cpu_began.children_user - cpu_began.children_system:.1f}, "
          f"forked servers and CLIs so far {zygote_cpu:.1f}")
    print(f"[{engine}] start-up: cold `armarius serve` {lives.cold_startup:.2f} s (imports, paid once by the "
          f"zygote: {zygote.import_seconds:.2f} s); forked median {statistics.median(startups):.3f} s, "
          f"max {startups[-1]:.3f} s")
    print(f"[{engine}] phases (s): { {phase: round(seconds, 1) for phase, seconds in lives.phases.items()} }")
    print(f"[{engine}] {checked} acknowledged writes checked; {dict(sorted(ledger.counts.items()))}")


# The invariants ----------------------------------------------------------------------------------------


def check_invariants(lab: Lab, ledger: Ledger, forks: Zygote) -> int:
    check_server_log(lab.log)
    check_audit(lab)
    check_storage(lab)
    workspace = lab.team.agent.workspace_id
    with OwnerSQL(lab.settings) as sql:
        check_entries(sql, workspace, ledger)
        check_drafts(sql, workspace, ledger)
        check_evidence(sql, workspace, ledger)
        check_repairs(sql, workspace, ledger, lab.settings.data_dir)
        sessions = [(int(session), int(owner)) for session, owner in sql.rows(
            "SELECT id, owner_id FROM sessions WHERE workspace_id = ? ORDER BY id", (workspace,))]
        bodies = sql.rows("SELECT slug, body FROM entries WHERE workspace_id = ?", (workspace,))
    check_sessions(lab, forks, sessions, ledger)
    check_search(lab, bodies)
    return ledger.acknowledged()


def check_server_log(log: Path) -> None:
    """No server life logged an error, a traceback or a 5xx answer before it was killed."""
    problems = [line for line in log.read_text(errors="replace").splitlines()
                if line.startswith(("ERROR", "Traceback", "CRITICAL")) or re.search(r'HTTP/1\.1" 5\d\d', line)]
    assert problems == []


def check_audit(lab: Lab) -> None:
    """The real CLI, as an operator runs it."""
    verified = run_cli("--json", "audit", "verify", data_dir=lab.settings.data_dir, env=lab.env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["intact"] is True


def check_storage(lab: Lab) -> None:
    with OwnerSQL(lab.settings) as sql:
        if lab.sqlite:
            assert sql.rows("PRAGMA integrity_check") == [("ok",)]
            assert sql.rows("PRAGMA foreign_key_check") == []
            tables = [name for name, text in sql.rows(
                "SELECT name, sql FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'")
                if re.search(r"content\s*=\s*'[^']+'", text)]
            assert "entries_fts" in tables
            for table in tables:  # rank 1: the index against its content table, not only the index itself
                sql.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")
            return
        assert sql.rows("""
            SELECT e.slug FROM entries e LEFT JOIN entry_search s ON s.entry_id = e.id
            WHERE s.entry_id IS NULL OR s.workspace_id <> e.workspace_id
               OR s.tsv <> armarius_entry_vector(e.slug, e.title, coalesce(e.search_body, e.body))""") == []
        assert sql.rows("SELECT s.entry_id FROM entry_search s LEFT JOIN entries e ON e.id = s.entry_id "
                        "WHERE e.id IS NULL") == []


def _audit(sql: OwnerSQL, workspace: int, pattern: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [(action, subject, json.loads(details)) for action, subject, details in sql.rows(
        "SELECT action, subject, details FROM audit_events WHERE workspace_id = ? AND action LIKE ? ORDER BY seq",
        (workspace, pattern))]


def check_entries(sql: OwnerSQL, workspace: int, ledger: Ledger) -> None:
    revisions = {(slug, int(revision)): (title.encode(), body.encode(), json.loads(tags), operation)
                 for slug, revision, title, body, tags, operation in sql.rows(
                     "SELECT e.slug, r.revision, r.title, r.body, r.tags, r.operation_id FROM entry_revisions r "
                     "JOIN entries e ON e.id = r.entry_id WHERE e.workspace_id = ?", (workspace,))}
    for ack in ledger.entries:
        assert revisions.get((ack.slug, ack.revision)) == (ack.title.encode(), ack.body.encode(), ack.tags,
                                                           ack.operation), f"acknowledged {ack} is not stored as sent"
    # Every entry is its latest revision, and every revision has its audit event (nothing half applied).
    for slug, revision, title, body, tags in sql.rows(
            "SELECT slug, revision, title, body, tags FROM entries WHERE workspace_id = ?", (workspace,)):
        assert revisions[(slug, int(revision))][:3] == (title.encode(), body.encode(), json.loads(tags)), slug
        assert (slug, int(revision) + 1) not in revisions, slug
    audited = {(subject, details["revision"], details.get("operation"))
               for action, subject, details in _audit(sql, workspace, "memory.%") if "revision" in details}
    for (slug, revision), (_title, _body, _tags, operation) in revisions.items():
        assert (slug, revision, operation) in audited, f"{slug} revision {revision} has no audit event"
    curated = {(subject, details["revision"]) for _action, subject, details in _audit(sql, workspace, "memory.curated")}
    assert set(ledger.curations) <= curated


def check_drafts(sql: OwnerSQL, workspace: int, ledger: Ledger) -> None:
    proposals = {int(pid): (slug, title, text) for pid, slug, title, text in sql.rows(
        "SELECT id, slug, title, text FROM draft_proposals WHERE workspace_id = ?", (workspace,))}
    for proposal in ledger.proposals.values():
        payload = proposal.payload
        assert proposals.get(proposal.proposal) == (payload["slug"], payload["title"], payload["text"]), proposal
    approvals = {int(aid): outcome for aid, outcome in sql.rows(
        "SELECT id, outcome FROM approvals WHERE workspace_id = ?", (workspace,))}
    assert set(ledger.approvals) <= set(approvals)
    drafts = {slug: (title, text, operation, int(approval)) for slug, title, text, operation, approval in sql.rows(
        "SELECT slug, title, text, operation_id, approval_id FROM drafts WHERE workspace_id = ?", (workspace,))}
    for slug, proposal in ledger.drafts.items():
        stored = drafts.get(slug)
        assert stored is not None, f"acknowledged draft {slug} is missing"
        assert stored == (proposal.payload["title"], proposal.payload["text"], proposal.operation,
                          proposal.approval_id), slug
    # Consumed approvals and drafts come in pairs; every draft has its operation record and audit event.
    assert sql.rows("SELECT a.id FROM approvals a LEFT JOIN drafts d ON d.approval_id = a.id "
                    "WHERE a.workspace_id = ? AND a.outcome = 'consumed' AND d.id IS NULL", (workspace,)) == []
    assert sorted(approvals[approval] for *_content, approval in drafts.values()) == ["consumed"] * len(drafts)
    operations = {operation for (operation,) in sql.rows(
        "SELECT operation_id FROM operations WHERE workspace_id = ?", (workspace,))}
    created = {subject for _action, subject, _details in _audit(sql, workspace, "draft.created")}
    for slug, (_title, _text, operation, _approval) in drafts.items():
        assert operation in operations, slug
        assert slug in created, slug


def check_evidence(sql: OwnerSQL, workspace: int, ledger: Ledger) -> None:
    assert sql.rows("SELECT r.session_id, r.seq FROM evidence_records r LEFT JOIN captures c ON "
                    "c.workspace_id = r.workspace_id AND c.capture_id = r.capture_id "
                    "WHERE r.workspace_id = ? AND c.capture_id IS NULL", (workspace,)) == []
    records = {(int(session), int(seq)): capture for session, seq, capture in sql.rows(
        "SELECT session_id, seq, capture_id FROM evidence_records WHERE workspace_id = ?", (workspace,))}
    captures = dict(sql.rows("SELECT capture_id, content FROM captures WHERE workspace_id = ?", (workspace,)))
    for capture, content in captures.items():
        assert hashlib.sha256(content.encode()).hexdigest() == capture
    owners = dict(sql.rows("SELECT id, owner_id FROM sessions WHERE workspace_id = ?", (workspace,)))
    assert set(ledger.sessions) <= set(owners)
    for ack in ledger.queries:
        assert records.get((ack.session, ack.evidence)) == ack.capture, f"acknowledged evidence {ack} is missing"
        document = json.loads(captures[ack.capture])
        assert (document["origin"], document["result"]) == (ack.origin, ack.result)


def check_repairs(sql: OwnerSQL, workspace: int, ledger: Ledger, data_dir: Path) -> None:
    repairs = {int(rid): (status, int(session), conflict, json.loads(alternatives))
               for rid, status, session, conflict, alternatives in sql.rows(
                   "SELECT id, status, session_id, conflict, alternatives FROM repairs WHERE workspace_id = ?",
                   (workspace,))}
    assert {status for status, *_rest in repairs.values()} <= {status.value for status in Status}
    for ack in ledger.repairs:
        status, session, conflict, alternatives = repairs[ack.repair]
        (alternative,) = alternatives
        assert (status, session, conflict) == ("proposed", ack.session, ack.conflict)
        assert (alternative["target"], alternative["result"], alternative["rationale"]) == (
            ack.target, ack.result, ack.rationale)
    events: dict[int, list[dict[str, Any]]] = {}
    for rid, seq, event, status, actor, details, at in sql.rows(
            "SELECT repair_id, seq, event, status, actor, details, created_at FROM repair_events "
            "WHERE workspace_id = ? ORDER BY repair_id, seq", (workspace,)):
        events.setdefault(int(rid), []).append({"seq": seq, "event": event, "status": status, "actor": actor,
                                                "details": json.loads(details), "at": at})
    acknowledged = {ack.repair for ack in ledger.repairs}
    for rid, (_status, session, _conflict, alternatives) in repairs.items():
        path = data_dir / "evidence" / WORKSPACE / "sessions" / str(session) / "repairs" / f"{rid}.json"
        if not path.exists():
            assert rid not in acknowledged, f"acknowledged repair {rid} has no receipt file"
            continue
        receipt = json.loads(path.read_bytes())
        history = receipt["history"]
        assert history == events[rid][:len(history)], rid
        assert receipt["alternatives"] == alternatives
        assert receipt["decision"]["status"] == history[-1]["status"]


def check_sessions(lab: Lab, forks: Zygote, sessions: list[tuple[int, int]], ledger: Ledger) -> None:
    """Touch every session (its owner looks at it: what dead servers held is released), then verify its files
    with the CLI."""
    owners = {actor.principal_id: actor for actor in lab.agents}
    for session, owner in sessions:
        lab.app.sessions.show(owners[owner], session)
    lab.rest()
    env = {**lab.env, "ARMARIUS_PASSWORD": lab.team.human_password}
    leftovers = 0
    for session, _owner in sessions:
        ended, output = forks.run(["--data-dir", str(lab.settings.data_dir), "--json", "sessions", "verify",
                                   str(session), "--workspace", WORKSPACE, "--as", f"{WORKSPACE}-human"],
                                  env=env, log=lab.log.with_name(f"verify-{session}.log"))
        assert ended.exit in (0, 1), output
        report = json.loads(output)
        assert report["ok"] is (ended.exit == 0), output
        unexpected = [problem for problem in report["problems"]
                      if problem["problem"] not in ("extra_file", "stale_temporary_file")]
        assert unexpected == [], f"session {session}: {report}"
        leftovers += len(report["problems"])
    ledger.counts["capture files a kill left behind"] = leftovers


def check_search(lab: Lab, bodies: list[tuple[Any, ...]]) -> None:
    agent = lab.agents[0]
    word = re.compile(rf"\b{UNIQUE_PREFIX}[a-z]{{12}}\b")
    for slug, body in bodies:
        found = word.findall(body)
        assert found, slug
        hits = lab.app.memory.recall(agent, found[0], limit=5)["results"]
        assert slug in [hit["slug"] for hit in hits], f"{slug} is not found by {found[0]}"
    lab.rest()
