"""Several `armarius serve` processes on one store (a PostgreSQL database, or one SQLite file), raced by
agents over real HTTP (issue 16).

Two topologies: separate `armarius serve` commands on separate ports (MCP with sessions, each agent
pinned to one process), and one `armarius serve --workers N` (MCP without sessions, the kernel
handing each connection to a worker). Agents are the SDK's streamable-HTTP client, several per
process; people are logged in to the web pages of every process. Two workspaces, ``north`` and
``south``, are raced at the same time, round after round, so that their audit chains are written by
every process at once. In each workspace and round:

* **one approval, every agent's create_draft at once** (each with its own operation id, spread over
  the processes): exactly one draft; every other call is refused ``approval_used`` (docs/drafts.md).
  Every third round all use one operation id: one draft, every other call its replay;
* **a curation race**: an agent updates an entry through one process while a person curates its
  revision 1 through another (with ``--workers``, through whichever workers the kernel hands their
  connections to; ``north``: the agent overrides the curation with a reason; ``south``:
  a plain update). The rounds are judged by the rules of tests/memory/test_memory_races.py (the
  same classification and replay): a curated revision is never replaced unseen;
* **a counter**: every agent writes one entry with ``expected_revision`` (read, write, on conflict
  read again), until each has its writes acknowledged: every acknowledged revision is in the
  history exactly once, with its body, and the revision numbers have no gap.

After the servers stop: `armarius audit verify` passes, every chain's sequence numbers run 1…n
without a gap, the drafts, approvals and audit events agree with every round, and no server wrote
an error or a traceback to its log.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.auth.model import Actor
from armarius.config import Settings
from tests.e2e.servers import run_cli
from tests.helpers import OwnerSQL, Team, make_team
from tests.memory.test_memory_races import ALLOWED, RACES, REASON, Race, _body, _title, check_rounds
from tests.racers import Outcome
from tests.reliability.http_agents import HttpAgent, HttpHuman, Server, log_problems, server_environment, serving
from tests.scale import pick, record

pytestmark = [pytest.mark.reliability, pytest.mark.anyio,
              pytest.mark.timeout(pick(ci=300, local=3600))]

#: Server processes: separate commands, or the workers of one.
PROCESSES = pick(ci=3, local=4)
#: Agents (MCP clients, each with its own connections) per server process, in each workspace.
AGENTS_PER_PROCESS = pick(ci=2, local=3)
ROUNDS = pick(ci=6, local=40)
#: Acknowledged writes each agent must get into the round's counter entry.
WRITES_PER_AGENT = 1
#: In odd rounds of a curation race, one side (at random) waits up to this long: both orders must be possible.
MAX_HEAD_START = 0.02
#: The curation race of each workspace.
WORKSPACE_RACES = {"north": "override-vs-curate", "south": "update-vs-curate"}

POSTGRES = pytest.param("postgresql", marks=pytest.mark.postgres)


async def at_once(calls: list[Callable[[], Awaitable[Outcome]]], delays: list[float] | None = None) -> list[Outcome]:
    """Start every call at the same moment (after its delay, if any); their outcomes in order."""
    outcomes: list[Outcome] = [{} for _ in calls]
    go = anyio.Event()

    async def run(index: int, call: Callable[[], Awaitable[Outcome]]) -> None:
        await go.wait()
        if delays and delays[index]:
            await anyio.sleep(delays[index])
        outcomes[index] = await call()

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(run, index, call)
        await anyio.sleep(0)
        go.set()
    return outcomes


def no_exception(context: str, outcomes: list[Outcome]) -> None:
    crashed = [outcome for outcome in outcomes if "exception" in outcome]
    assert not crashed, f"{context}: {crashed[0]['exception']}\n{crashed[0]['traceback']}"


# One workspace's agents, people and rounds -----------------------------------------------------


@dataclass
class DraftRound:
    slug: str
    approval_id: int
    winner: str
    same_operation: bool


@dataclass
class Ack:
    """One acknowledged write of a counter entry."""

    revision: int
    operation: str
    body: str


@dataclass
class Workspace:
    team: Team
    race: Race
    #: Each agent, and the index of the server it talks to.
    agents: list[tuple[HttpAgent, int]]
    #: A logged-in person per server.
    humans: list[HttpHuman]
    drafts: list[DraftRound] = field(default_factory=list)
    curations: list[tuple[str, list[Outcome]]] = field(default_factory=list)
    counters: dict[str, list[Ack]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.team.workspace

    @property
    def actors(self) -> dict[str, Actor]:
        return {"agent": self.team.agent, "human": self.team.human}

    async def token_race(self, app: Armarius, number: int) -> None:
        """One approval; every agent calls create_draft with it at once, each with its own operation id (in
        every third round, all with the same one: a retry arriving through several processes at once)."""
        payload = {"slug": f"drafts/round-{number}", "title": f"Round {number} of {self.name}",
                   "text": f"Round {number} of the {self.name} race.\nZweite Zeile: grüße, 🙂\n"}
        approval = await anyio.to_thread.run_sync(partial(app.drafts.approve, self.team.human, payload=payload))
        same = number % 3 == 2
        operations = [f"op-{self.name}-{number}" if same else f"op-{self.name}-{number}-{index}"
                      for index in range(len(self.agents))]
        outcomes = await at_once([partial(agent.call, "create_draft", **payload, approval=approval.token, operation=op)
                                  for (agent, _), op in zip(self.agents, operations, strict=True)])
        context = f"{self.name} {payload['slug']}: {list(zip(operations, outcomes, strict=True))}"
        no_exception(context, outcomes)
        created = [index for index, outcome in enumerate(outcomes)
                   if outcome.get("ok") == {"slug": payload["slug"], "draft": True, "replayed": False}]
        assert len(created) == 1, context
        for index, outcome in enumerate(outcomes):
            if index == created[0]:
                continue
            if same:  # the first result again, nothing written
                assert outcome.get("ok") == {"slug": payload["slug"], "draft": True, "replayed": True}, context
            else:  # the documented refusal (docs/drafts.md)
                assert (outcome.get("error"), outcome["details"].get("slug"), outcome["details"].get("next_step")) \
                    == ("approval_used", payload["slug"], "none"), context
        self.drafts.append(DraftRound(payload["slug"], approval.approval_id, operations[created[0]], same))

    async def curation_race(self, number: int, chance: random.Random) -> None:
        """An agent updates an entry through one server while a person curates revision 1 through another."""
        slug = f"{self.race.name}/mp-{number}"
        agent, server = self.agents[number % len(self.agents)]
        human = self.humans[(server + 1) % len(self.humans)]
        actor = self.team.agent
        setup = await agent.call("remember", slug=slug, title=_title(slug), body=_body(slug, "original", actor),
                                 confirm_distinct=True, reason="a race needs its own entry")
        assert (setup.get("ok", {}).get("status"), setup["ok"].get("revision")) == ("written", 1), setup
        update: dict[str, Any] = {"slug": slug, "title": _title(slug), "body": _body(slug, "changed", actor)}
        if self.race.name == "override-vs-curate":
            update |= {"override_curated": True, "reason": REASON}
        delay = 0.0 if number % 2 == 0 else chance.uniform(0, MAX_HEAD_START)
        delays = [delay, 0.0] if chance.random() < 0.5 else [0.0, delay]
        outcomes = await at_once([partial(agent.call, "remember", **update),
                                  partial(human.post, "/api/entries/curate", {"slug": slug, "revision": 1})], delays)
        no_exception(f"{self.name} {slug}", outcomes)
        self.curations.append((slug, outcomes))

    async def counter(self, number: int) -> None:
        """Every agent writes one entry with expected_revision until each has its writes acknowledged."""
        slug = f"counter/round-{number}"
        title = f"Counter {number} of {self.name}"
        first, _ = self.agents[0]
        created = await first.call("remember", slug=slug, title=title, body=f"{slug} starts empty.",
                                   expected_revision=0, confirm_distinct=True, reason="a counter of its own")
        assert (created.get("ok", {}).get("status"), created["ok"].get("revision")) == ("written", 1), created
        acks: list[Ack] = []

        async def write(index: int, agent: HttpAgent) -> Outcome:
            mine = 0
            for attempt in range(500):
                seen = await agent.call("read", slug=slug)
                no_exception(f"{slug} read", [seen])
                revision = seen["ok"]["revision"]
                body = f"{slug}: write {mine} by agent {index}, attempt {attempt}, after revision {revision}."
                answer = await agent.call("remember", slug=slug, title=title, body=body, expected_revision=revision)
                context = f"{self.name} {slug} agent {index}: {answer}"
                no_exception(context, [answer])
                if "ok" in answer:
                    assert answer["ok"]["status"] == "written", context
                    assert answer["ok"]["revision"] == revision + 1, context
                    acks.append(Ack(answer["ok"]["revision"], answer["ok"]["operation"], body))
                    mine += 1
                    if mine == WRITES_PER_AGENT:
                        return answer
                    continue
                assert answer["error"] == "conflict", context
                assert answer["details"]["expected_revision"] == revision, context
                assert answer["details"]["current_revision"] > revision, context
            raise AssertionError(f"{slug}: agent {index} never got its writes in")

        await at_once([partial(write, index, agent) for index, (agent, _) in enumerate(self.agents)])
        self.counters[slug] = acks

    # Checks after the servers stopped -----------------------------------------------------------

    def check_drafts(self, app: Armarius) -> None:
        workspace = self.team.agent.workspace_id
        expected = {round_.slug: round_ for round_ in self.drafts}
        with OwnerSQL(app.settings) as sql:
            drafts = sql.rows("SELECT slug, operation_id, approval_id FROM drafts WHERE workspace_id = ?", (workspace,))
            approvals = {row[0]: (row[1], row[2]) for row in sql.rows(
                "SELECT id, outcome, operation_id FROM approvals WHERE workspace_id = ?", (workspace,))}
        assert Counter(row[0] for row in drafts) == Counter(dict.fromkeys(expected, 1))
        for slug, operation, approval_id in drafts:
            assert (operation, approval_id) == (expected[slug].winner, expected[slug].approval_id), slug
            assert approvals[approval_id] == ("consumed", operation), slug
        assert len(approvals) == len(expected)
        events: dict[str, Counter[str]] = {slug: Counter() for slug in expected}
        for event in audit.tail(app.database, workspace, limit=1_000_000):
            if event.subject in expected:
                code = event.details.get("code")
                events[event.subject][f"{event.action}:{code}" if code else event.action] += 1
        losers = len(self.agents) - 1
        for slug, round_ in expected.items():
            lost = "draft.replayed" if round_.same_operation else "draft.refused:approval_used"
            assert events[slug] == Counter({"approval.issued": 1, "draft.created": 1, "approval.consumed": 1,
                                            lost: losers}), slug

    def check_curations(self, app: Armarius) -> Counter[str]:
        counts = check_rounds(app, self.actors, self.race, self.curations)
        assert set(counts) <= ALLOWED[self.race.name], counts
        return counts

    def check_counters(self, app: Armarius) -> int:
        human = self.team.human
        events = Counter(event.subject for event in audit.tail(app.database, self.team.agent.workspace_id,
                                                                 limit=1_000_000)
                         if event.action == "memory.updated")
        for slug, acks in self.counters.items():
            revisions = app.memory.history(human, slug)["revisions"]
            acknowledged = sorted(ack.revision for ack in acks)
            assert acknowledged == list(range(2, len(acks) + 2)), (slug, acknowledged)  # each once, no gap
            assert [row["revision"] for row in revisions] == list(range(1, len(acks) + 2)), slug
            by_revision = {row["revision"]: row for row in revisions}
            for ack in acks:
                assert by_revision[ack.revision]["operation"] == ack.operation, (slug, ack)
                assert app.memory.read(human, slug, revision=ack.revision)["body"] == ack.body, (slug, ack)
            assert events[slug] == len(acks), slug
        return sum(len(acks) for acks in self.counters.values())


# The test ---------------------------------------------------------------------------------------


@pytest.fixture
def teams(app: Armarius) -> dict[str, Team]:
    return {name: make_team(app, name) for name in WORKSPACE_RACES}


def check_chains(app: Armarius, settings: Settings) -> dict[str, Any]:
    """`armarius audit verify` passes, and every chain's sequence numbers run 1…n."""
    verified = run_cli("--json", "audit", "verify", data_dir=settings.data_dir, env=server_environment(settings))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with OwnerSQL(app.settings) as sql:
        chains: dict[int, list[int]] = {}
        for workspace, seq in sql.rows("SELECT workspace_id, seq FROM audit_events ORDER BY workspace_id, seq"):
            chains.setdefault(int(workspace), []).append(int(seq))
        heads = dict(sql.rows("SELECT workspace_id, seq FROM audit_heads"))
    for workspace, seqs in chains.items():
        assert seqs == list(range(1, len(seqs) + 1)), f"chain {workspace} has a gap"
        assert heads[workspace] == len(seqs), workspace
    report: dict[str, Any] = json.loads(verified.stdout)
    return report


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("settings", ["sqlite", POSTGRES], indirect=True)
@pytest.mark.parametrize("topology", ["processes", "workers"])
async def test_several_server_processes_keep_every_promise(app: Armarius, settings: Settings,
                                                           teams: dict[str, Team], logs: Path, topology: str) -> None:
    count, workers = (PROCESSES, 1) if topology == "processes" else (1, PROCESSES)
    chance = random.Random(f"multiprocess-{topology}")
    with serving(settings, logs, count, workers=workers) as servers:
        async with AsyncExitStack() as stack:
            spaces = [await open_workspace(stack, servers, teams[name], RACES[race])
                      for name, race in WORKSPACE_RACES.items()]
            for number in range(ROUNDS):
                async with anyio.create_task_group() as group:
                    for space in spaces:
                        group.start_soon(space.token_race, app, number)
                        group.start_soon(space.curation_race, number, chance)
                        group.start_soon(space.counter, number)
        served = [server_requests(server) for server in servers]
    record("multi-process rounds", ROUNDS)
    problems = {server.log.name: log_problems(server.log) for server in servers}
    assert not any(problems.values()), problems
    report = check_chains(app, settings)
    writes, curations = 0, {}
    for space in spaces:
        space.check_drafts(app)
        curations[space.race.name] = dict(space.check_curations(app))
        writes += space.check_counters(app)
    print(f"\n{topology}: {count} x `armarius serve`{f' --workers {workers}' if workers > 1 else ''}, "
          f"{len(spaces[0].agents)} agents per workspace, {ROUNDS} rounds; MCP requests per process: {served}; "
          f"{writes} counter writes acknowledged; {report['events_checked']} audit events verified; "
          f"curation races: {curations}")
    if topology == "processes":
        assert all(sum(per_pid.values()) > 0 for per_pid in served), served


async def open_workspace(stack: AsyncExitStack, servers: list[Server], team: Team, race: Race) -> Workspace:
    """Agents spread over the servers (AGENTS_PER_PROCESS per process), and a person logged in to each."""
    processes = PROCESSES if len(servers) == 1 else len(servers)
    agents = []
    for index in range(processes * AGENTS_PER_PROCESS):
        server = index % len(servers)
        agents.append((await stack.enter_async_context(HttpAgent(servers[server].mcp_url, team.agent_token)), server))
    humans = []
    for each in servers:
        human = await HttpHuman(each.base_url).log_in(f"{team.workspace}-human", team.human_password,
                                                        team.workspace)
        stack.push_async_callback(human.close)
        humans.append(human)
    return Workspace(team, race, agents, humans)


def server_requests(server: Server) -> dict[str, int]:
    """POST /mcp requests in a server's log, by the process that answered (workers name their pid)."""
    counts: Counter[str] = Counter()
    for line in server.log.read_text(errors="replace").splitlines():
        if '"POST /mcp HTTP/1.1"' in line:
            pid = line.split("[", 1)[1].split("]", 1)[0] if line.startswith("INFO:     [") else str(server.pid)
            counts[pid] += 1
    return dict(counts)
