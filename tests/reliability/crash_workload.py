"""The write workload of the server crash test, and the ledger of what the server acknowledged.

Each agent is the SDK's MCP client over streamable HTTP. It calls tools in a random mix until the
server dies under it: new entries and updates (``remember``; a curated entry's ``judgment_required``
is answered with ``override_curated``, a possible duplicate with ``confirm_distinct``), draft
proposals, drafts created with the approval a human issued and the agent collected
(``proposal_status`` with its collection key, then ``create_draft`` with one operation id per
proposal, so that a repeat after a lost answer is a replay), research sessions and
``project_query`` against a real git repository, and ``repair_prepare`` against an entry's
current revision (``repair_target``).

Only an answer the client received in full counts: it goes into the :class:`Ledger` with exactly
what was sent (content, tags, payload) and what the server answered (revision, operation, proposal,
capture, evidence number, repair). A call the kill cut short is counted as cut and recorded nowhere:
it may or may not have been applied, and the invariants allow either.
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

_WORD_TEXT = (
    "resolver cache primary replica staging deploy ledger quorum shard rollback backoff lease token vault "
    "kernel socket buffer thread queue batch cron index vacuum checkpoint snapshot archive mirror gateway "
    "proxy cipher digest audit review budget session capture receipt draft proposal approval curator "
    "harbor lantern meadow orchard quarry ribbon saddle tundra velvet walnut yonder zephyr amber basil "
    "cobalt dune ember fjord granite hazel iris jasper kelp lilac maple nectar onyx pepper quill russet"
)
WORDS = tuple(_WORD_TEXT.split())
#: The unique word every written body carries: the search check finds each entry by it.
UNIQUE_PREFIX = "uq"
QUERIES: tuple[dict[str, Any], ...] = (
    {"kind": "source.search", "text": "handle_order"},
    {"kind": "source.search", "text": "register", "path_prefix": "src/"},
    {"kind": "source.symbol", "symbol": "register"},
    {"kind": "source.files", "substring": "src"},
    {"kind": "source.schema", "text": "orders"},
)
#: Tool answers that are normal refusals under this workload (never an acknowledgement).
EXPECTED_REFUSALS = {"budget_exhausted", "session_blocked", "session_closed", "research_unavailable", "conflict",
                     "storage_unavailable"}


def unique_word(chance: random.Random) -> str:
    return UNIQUE_PREFIX + "".join(chance.choice(string.ascii_lowercase) for _ in range(12))


def body_text(chance: random.Random, *, link: str | None = None) -> str:
    """Markdown with a unique word, non-ASCII text, a trailing space and a CRLF line: bytes that must come back."""
    words = " ".join(chance.choice(WORDS) for _ in range(chance.randint(10, 40)))
    lines = [f"{words}.", "", f"Marker {unique_word(chance)}: Grüße aus dem Absturz, naïve café — ✓ 🙂 ",
             "windows line\r", f"- {chance.choice(WORDS)} {chance.randint(0, 10**6)}"]
    if link is not None:
        lines.append(f"See [[{link}]].")
    return "\n".join(lines) + "\n"


def title_text(chance: random.Random) -> str:
    return f"{chance.choice(WORDS).capitalize()} {chance.choice(WORDS)} {chance.randint(0, 10**6)}"


@dataclass
class EntryAck:
    slug: str
    revision: int
    title: str
    body: str
    tags: list[str]
    operation: str
    override: bool


@dataclass
class Proposal:
    proposal: int
    agent: int
    collection_key: str
    payload: dict[str, str]
    operation: str
    approval_id: int | None = None
    token: str | None = None
    drafted: bool = False


@dataclass
class QueryAck:
    session: int
    evidence: int
    capture: str
    origin: Any
    result: Any


@dataclass
class RepairAck:
    repair: int
    session: int
    conflict: str
    target: dict[str, Any]
    result: dict[str, Any]
    rationale: str


@dataclass
class Ledger:
    """Every acknowledged write, and what the workload did."""

    entries: list[EntryAck] = field(default_factory=list)
    slugs: list[str] = field(default_factory=list)
    proposals: dict[int, Proposal] = field(default_factory=dict)
    drafts: dict[str, Proposal] = field(default_factory=dict)
    sessions: dict[int, int] = field(default_factory=dict)  # session -> agent
    open_session: dict[int, int | None] = field(default_factory=dict)  # agent -> its current session
    queries: list[QueryAck] = field(default_factory=list)
    repairs: list[RepairAck] = field(default_factory=list)
    approvals: list[int] = field(default_factory=list)  # issued by the human, in the test process
    curations: list[tuple[str, int]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    #: The budget of each research session the agents open.
    session_budget: int = 60

    def acknowledged(self) -> int:
        return (len(self.entries) + len(self.proposals) + len(self.drafts) + len(self.sessions) + len(self.queries)
                + len(self.repairs) + len(self.approvals) + len(self.curations))


class Refused(Exception):
    """A tool answered with an error (isError): a refusal, not an acknowledgement."""

    def __init__(self, code: str, answer: dict[str, Any]) -> None:
        super().__init__(code)
        self.code = code
        self.answer = answer


@dataclass
class Agent:
    """One agent's client for one server life."""

    index: int
    name: str
    ledger: Ledger
    chance: random.Random
    client: Client | None = None
    #: The tool whose answer the agent waits for.
    in_flight: str | None = None

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        assert self.client is not None
        self.ledger.counts["calls sent"] += 1
        self.in_flight = tool
        result = await self.client.call_tool(tool, arguments)
        self.in_flight = None
        answer: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
        self.ledger.counts["answers received"] += 1
        if result.is_error:
            code = str(answer["code"])
            self.ledger.counts[f"refused: {tool} {code}"] += 1
            raise Refused(code, answer)
        return answer

    # Memory ----------------------------------------------------------------------------------------

    async def remember_new(self) -> None:
        chance = self.chance
        slug = f"crash/{self.name}-{''.join(chance.choice(string.ascii_lowercase) for _ in range(10))}"
        link = chance.choice(self.ledger.slugs) if self.ledger.slugs and chance.random() < 0.3 else None
        await self._remember(slug, title_text(chance), body_text(chance, link=link),
                             sorted({chance.choice(WORDS) for _ in range(chance.randint(0, 3))}), new=True)

    async def remember_update(self) -> None:
        if not self.ledger.slugs:
            return await self.remember_new()
        chance = self.chance
        await self._remember(chance.choice(self.ledger.slugs), title_text(chance), body_text(chance),
                             sorted({chance.choice(WORDS) for _ in range(chance.randint(0, 3))}), new=False)
        return None

    async def _remember(self, slug: str, title: str, body: str, tags: list[str], *, new: bool) -> None:
        arguments: dict[str, Any] = {"slug": slug, "title": title, "body": body, "tags": tags}
        if new:
            arguments["expected_revision"] = 0
        override = False
        for _ in range(3):
            answer = await self.call("remember", **arguments)
            if answer["status"] == "written":
                self.ledger.entries.append(EntryAck(slug, answer["revision"], title, body, tags, answer["operation"],
                                                    override))
                self.ledger.counts["curated overrides acknowledged" if override else "remember acknowledged"] += 1
                if answer["created"]:
                    self.ledger.slugs.append(slug)
                return
            assert answer["status"] == "judgment_required", answer
            self.ledger.counts[f"judgment_required {answer['code']}"] += 1
            if answer["code"] == "curated_entry":
                override = True
                arguments.update(override_curated=True, reason="Observed otherwise in the crash test.")
            else:
                arguments.update(confirm_distinct=True, reason="A different crash-test note.")
        raise AssertionError(f"remember never wrote {slug}")

    # Drafts ----------------------------------------------------------------------------------------

    async def propose(self) -> None:
        chance = self.chance
        payload = {"slug": f"draft/{self.name}-{''.join(chance.choice(string.ascii_lowercase) for _ in range(10))}",
                   "title": title_text(chance), "text": body_text(chance)}
        answer = await self.call("propose_draft", **payload)
        operation = f"op-{chance.getrandbits(64):x}"
        self.ledger.proposals[answer["proposal"]] = Proposal(answer["proposal"], self.index, answer["collection_key"],
                                                             payload, operation)
        self.ledger.counts["proposals acknowledged"] += 1

    async def create_draft(self) -> None:
        ready = [proposal for proposal in self.ledger.proposals.values()
                 if proposal.agent == self.index and proposal.approval_id is not None and not proposal.drafted]
        if not ready:
            return await self.propose()
        proposal = self.chance.choice(ready)
        if proposal.token is None:
            status = await self.call("proposal_status", proposal=proposal.proposal,
                                     collection_key=proposal.collection_key)
            if "approval" not in status:
                self.ledger.counts[f"proposal_status without approval: {status['status']}"] += 1
                return None
            proposal.token = status["approval"]
        answer = await self.call("create_draft", **proposal.payload, approval=proposal.token,
                                 operation=proposal.operation)
        assert (answer["draft"], answer["slug"]) == (True, proposal.payload["slug"]), answer
        proposal.drafted = True
        self.ledger.drafts[proposal.payload["slug"]] = proposal
        self.ledger.counts["drafts replayed" if answer["replayed"] else "drafts created"] += 1
        return None

    # Research sessions and repairs -----------------------------------------------------------------

    async def session(self) -> int:
        current = self.ledger.open_session.get(self.index)
        if current is None:
            answer = await self.call("session_open", subject=f"Crash test {self.name} {self.chance.getrandbits(32)}",
                                     budget=self.ledger.session_budget)
            current = int(answer["session"])
            self.ledger.sessions[current] = self.index
            self.ledger.open_session[self.index] = current
            self.ledger.counts["sessions acknowledged"] += 1
        return current

    async def query(self) -> None:
        session = await self.session()
        chance = self.chance
        if chance.random() < 0.4:
            start = chance.randint(1, 12)
            arguments: dict[str, Any] = {"kind": "source.read", "path": "src/app.py", "start_line": start,
                                         "end_line": start + chance.randint(0, 4)}
        else:
            arguments = dict(chance.choice(QUERIES))
        try:
            answer = await self.call("project_query", session=session, arguments=arguments)
        except Refused as refused:
            if refused.code in ("budget_exhausted", "session_blocked", "session_closed", "research_unavailable"):
                self.ledger.open_session[self.index] = None  # the next query opens a new session
                return
            raise
        self.ledger.queries.append(QueryAck(session, answer["evidence"], answer["capture"], answer["origin"],
                                            answer["result"]))
        self.ledger.counts["evidence records acknowledged"] += 1

    async def repair(self) -> None:
        if not self.ledger.slugs:
            return await self.remember_new()
        session = await self.session()
        slug = self.chance.choice(self.ledger.slugs)
        target = await self.call("repair_target", session=session, kind="entry", name=slug)
        alternative: dict[str, Any] = {"target": {"kind": "entry", "name": slug, "revision": target["revision"]},
                       "title": title_text(self.chance), "body": body_text(self.chance),
                       "tags": ["repaired"], "rationale": f"The session showed otherwise ({unique_word(self.chance)})."}
        conflict = f"The capture contradicts {slug}."
        answer = await self.call("repair_prepare", session=session, conflict=conflict, alternatives=[alternative])
        assert answer["status"] == "proposed", answer
        self.ledger.repairs.append(RepairAck(answer["repair"], session, conflict, alternative["target"],
                                             {"title": alternative["title"], "body": alternative["body"],
                                              "tags": alternative["tags"]}, alternative["rationale"]))
        self.ledger.counts["repairs acknowledged"] += 1
        return None

    async def one_call(self) -> None:
        action = self.chance.choices([self.remember_new, self.remember_update, self.propose, self.create_draft,
                                      self.query, self.repair], weights=[3, 3, 1, 2, 3, 1])[0]
        try:
            await action()
        except Refused as refused:
            if refused.code not in EXPECTED_REFUSALS:
                raise AssertionError(f"{action.__name__}: unexpected refusal {refused.answer}") from None


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def is_cut_connection(error: BaseException) -> bool:
    """Whether an exception is what a client sees when the server dies: an HTTP transport error (refused,
    reset, a response cut short), a closed stream, or the SDK's report of a closed connection."""
    return all(isinstance(leaf, httpx2.TransportError | anyio.ClosedResourceError | anyio.BrokenResourceError
                          | anyio.EndOfStream)
               or (isinstance(leaf, MCPError) and leaf.error.code == CONNECTION_CLOSED)
               for leaf in _leaves(error))


async def agent_life(url: str, token: str, agent: Agent, talking: anyio.Event, give_up_after: float) -> None:
    """Call tools until the server dies (or ``give_up_after`` seconds pass, which fails the test); ``talking``
    is set once the MCP session is initialized."""
    with anyio.move_on_after(give_up_after) as gave_up:
        try:
            async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
                        Client(streamable_http_client(url, http_client=http)) as client):
                agent.client = client
                talking.set()
                while True:
                    await agent.one_call()
        except Exception as error:  # a cut connection ends the life; anything else fails
            if not is_cut_connection(error):
                raise
            agent.ledger.counts["client lives ended by the kill"] += 1
            agent.ledger.counts[f"cut during {agent.in_flight}"] += 1
    assert not gave_up.cancelled_caught, f"agent {agent.name} still talked to a killed server after {give_up_after} s"
