"""A source that is not there is an outage, not a bad configuration.

The research configuration is refused only for what is wrong in the file itself. A repository
folder that is missing (moved away, not cloned yet) or a pinned commit the repository does not
have (yet) loads: the server and every command work, memory included, and a query on that source
is ``research_unavailable`` saying what is missing, which blocks its session until a human resumes
it, as for a repository moved away while the server runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from armarius.app import Armarius, open_app
from armarius.errors import ResearchUnavailable, SessionBlocked
from armarius.memory.service import RememberRequest
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService
from tests.e2e.servers import run_cli
from tests.helpers import OwnerSQL, Team, make_team
from tests.research.repos import Repo, build_repo, git, source_entry, write_config
from tests.sessions.conftest import Clock

SEARCH = {"kind": "source.search", "text": "import"}
UNKNOWN_COMMIT = "0123456789abcdef" * 2 + "01234567"


def gone(repo: Repo) -> Path:
    """The repository moved away (``mv repo repo.gone``); where it went."""
    away = repo.path.with_name(repo.path.name + ".gone")
    repo.path.rename(away)
    return away


def refusal(service: ResearchService) -> ResearchUnavailable:
    with pytest.raises(ResearchUnavailable) as caught:
        service.query(SEARCH)
    return caught.value


# --- the loader -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["moved away", "never cloned", "empty folder"])
def test_a_missing_repository_loads_and_its_queries_say_what_is_missing(tmp_path: Path, state: str) -> None:
    repo = build_repo(tmp_path / "repo")
    entry = source_entry(repo)
    if state == "moved away":
        gone(repo)
    else:
        entry["repository"] = str(tmp_path / "not-cloned-yet")
        if state == "empty folder":
            (tmp_path / "not-cloned-yet").mkdir()
    config = load_research_config(write_config(tmp_path / "research.toml", [entry]))
    folder = Path(entry["repository"])
    assert config.sources["app"].repository.path == folder
    assert config.sources["app"].commit == repo.pin
    error = refusal(ResearchService(config))
    assert error.code == "research_unavailable"
    assert "The repository of source 'app' is missing: its folder " in error.message
    assert ("holds no git repository" if state == "empty folder" else "is not on the server") in error.message
    assert "armarius doctor" in error.message
    assert str(tmp_path) not in error.message  # the server's own paths are not an agent's business
    assert error.details == {"source": "app", "missing": "repository"}


def test_a_pin_not_yet_in_the_repository_loads_and_answers_once_fetched(tmp_path: Path) -> None:
    upstream = build_repo(tmp_path / "upstream")
    git(tmp_path, "clone", "-q", str(upstream.path), str(tmp_path / "clone"))
    upstream.move_on()  # a commit the clone does not have yet
    assert upstream.later is not None
    path = write_config(tmp_path / "research.toml", [{**source_entry(upstream), "repository": "clone",
                                                      "commit": upstream.later}])
    service = ResearchService(load_research_config(path))
    error = refusal(service)
    assert error.message.startswith(f"The pinned commit {upstream.later} of source 'app' is not in its repository "
                                    "(not fetched yet?)")
    assert error.details == {"source": "app", "missing": "commit", "commit": upstream.later}
    git(tmp_path / "clone", "fetch", "-q", "origin")
    answer = service.query(SEARCH)
    assert answer["origin"]["commit"] == upstream.later
    assert answer["result"]["hits"]


def test_an_unknown_pin_loads_and_is_unavailable_at_query_time(tmp_path: Path) -> None:
    repo = build_repo(tmp_path / "repo")
    path = write_config(tmp_path / "research.toml", [{**source_entry(repo), "commit": UNKNOWN_COMMIT}])
    error = refusal(ResearchService(load_research_config(path)))
    assert f"The pinned commit {UNKNOWN_COMMIT} of source 'app' is not in its repository" in error.message
    assert error.details["missing"] == "commit"


def test_a_pin_naming_another_kind_of_object_is_still_refused_when_the_folder_comes_back(tmp_path: Path) -> None:
    """Loaded while the folder was away, a tree pin is then named for what it is, not as an outage to wait out."""
    repo = build_repo(tmp_path / "repo")
    tree = repo.git("rev-parse", f"{repo.pin}^{{tree}}").decode().strip()
    away = gone(repo)
    service = ResearchService(load_research_config(write_config(tmp_path / "research.toml", [
        {**source_entry(repo), "commit": tree}])))
    assert refusal(service).details["missing"] == "repository"
    away.rename(repo.path)
    error = refusal(service)
    assert f"The pin {tree} of source 'app' names a tree in its repository, not a commit" in error.message
    assert error.details["missing"] == "commit"


# --- the application: memory works, a session blocks and resumes ------------------------------------------------


@dataclass
class Outage:
    app: Armarius
    repo: Repo
    away: Path
    team: Team
    clock: Clock


@pytest.fixture
def outage(app: Armarius, tmp_path: Path) -> Iterator[Outage]:
    """The application opened on a research configuration whose repository was moved away before."""
    repo = build_repo(tmp_path / "repo")
    write_config(app.settings.data_dir / "research.toml", [source_entry(repo)])
    away = gone(repo)
    application = open_app(replace(app.settings, research_config=Path("research.toml")))
    clock = Clock(datetime.now(UTC))
    application.sessions.clock = clock
    try:
        yield Outage(application, repo, away, make_team(application, "alpha"), clock)
    finally:
        application.close()


def test_the_app_opens_memory_works_and_a_session_blocks_until_the_repository_is_back(outage: Outage) -> None:
    app, agent, human = outage.app, outage.team.agent, outage.team.human
    assert app.research is not None
    app.memory.remember(agent, RememberRequest("notes/outage", "While the repository is away",
                                               "Memory keeps working while a research source is missing."))
    assert app.memory.read(agent, "notes/outage")["title"] == "While the repository is away"

    session = app.sessions.open(agent, "Where is handle_order registered?", budget=2)["session"]
    with OwnerSQL(app.settings) as sql:
        before = (sql.count("captures"), sql.count("evidence_records"))
    with pytest.raises(SessionBlocked) as blocked:
        app.sessions.query(agent, session, SEARCH)
    cause = blocked.value.details["cause"]
    assert cause["code"] == "research_unavailable"
    assert cause["details"] == {"source": "app", "missing": "repository"}
    assert "The repository of source 'app' is missing: its folder is not on the server" in blocked.value.message
    assert "is now blocked (research_unavailable)" in blocked.value.message
    shown = app.sessions.show(agent, session)
    assert (shown["status"], shown["reason"]) == ("blocked", "research_unavailable")
    assert shown["budget"] == {"total": 2, "used": 0, "running": 0, "held": 1, "left": 1}
    assert shown["evidence"]["records"] == 0
    with OwnerSQL(app.settings) as sql:  # nothing half-written
        assert (sql.count("captures"), sql.count("evidence_records")) == before
    assert not app.sessions.session_folder(agent.workspace, session).exists()

    outage.away.rename(outage.repo.path)  # the operator puts it back
    outage.clock.advance(app.sessions.limits.retry_after.total_seconds())
    assert app.sessions.resume(human, session, note="the repository is back")["status"] == "open"
    answer = app.sessions.query(agent, session, SEARCH)  # takes the held action
    assert answer["origin"]["commit"] == outage.repo.pin
    assert answer["result"]["hits"]
    assert app.sessions.show(agent, session)["budget"] == {"total": 2, "used": 1, "running": 0, "held": 0,
                                                           "left": 1}


# --- the commands and the stdio server --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_commands_and_the_stdio_server_work_while_a_repository_is_missing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    repo = build_repo(tmp_path / "repo")
    assert run_cli("init", data_dir=data).returncode == 0
    write_config(data / "research.toml", [source_entry(repo)])
    gone(repo)
    env = {"ARMARIUS_RESEARCH_CONFIG": "research.toml"}
    for command in (["workspace", "add", "alpha"],
                    ["principal", "add", "bot", "--kind", "agent", "--workspace", "alpha", "--role", "editor"],
                    ["principal", "list", "--workspace", "alpha"], ["token", "list"], ["audit", "verify"],
                    ["connect", "http", "--principal", "bot", "--workspace", "alpha"]):
        done = run_cli(*command, data_dir=data, env=env)
        assert done.returncode == 0, (command, done.stderr)
    issued = run_cli("--json", "token", "issue", "bot", "--workspace", "alpha", data_dir=data, env=env)
    assert issued.returncode == 0, issued.stderr
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "armarius", "--data-dir", str(data), "mcp"],
        env={**env, "ARMARIUS_TOKEN": json.loads(issued.stdout)["token"]})
    async with Client(parameters) as client:
        assert {"remember", "project_query"} <= {tool.name for tool in (await client.list_tools()).tools}
        remembered = await client.call_tool("remember", {"slug": "notes/outage", "title": "Outage",
                                                         "body": "Memory works while the repository is away."})
        opened = await client.call_tool("session_open", {"subject": "Where is handle_order registered?"})
        session = json.loads(opened.content[0].text)["session"]  # type: ignore[union-attr]
        queried = await client.call_tool("project_query", {"session": session, "arguments": SEARCH})
    assert not remembered.is_error, remembered.content
    assert queried.is_error
    error = json.loads(queried.content[0].text)  # type: ignore[union-attr]
    assert error["code"] == "session_blocked"
    assert error["details"]["cause"]["details"]["missing"] == "repository"
    assert "its folder is not on the server" in error["message"]
    assert str(repo.path) not in error["message"]
