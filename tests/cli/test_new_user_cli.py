"""What a new user met, through the real `armarius` command in a subprocess: a command run where there is
no store creates nothing and says how to find one; printed commands run as printed; a suggested port is
free; counts and refusals read right in the CLI's own terms."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from armarius.app import Armarius
from armarius.cli import server
from armarius.config import Settings
from armarius.memory.service import RememberRequest
from tests.cli.test_cli import Cli
from tests.cli.test_serve_cli import environment
from tests.e2e.servers import ARMARIUS
from tests.helpers import make_team
from tests.repairs.conftest import ADMINS, make_desk
from tests.research.repos import build_repo, source_entry, write_config


def run(command: list[str], env: dict[str, str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # A new session has no controlling terminal; input is empty: nothing waits for a password.
    return subprocess.run(command, input="", capture_output=True, text=True, timeout=120, env=env, cwd=cwd,
                          check=False, start_new_session=True)


def everything_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# 1. No store where the command runs ---------------------------------------------------------------------


NEEDS_A_STORE = [
    ["memory", "list", "--workspace", "demo", "--as", "admin"],
    ["token", "list"],
    ["workspace", "add", "demo"],
    ["audit", "verify"],
]


@pytest.mark.parametrize("command", NEEDS_A_STORE, ids=lambda command: " ".join(command[:2]))
def test_a_command_run_where_there_is_no_data_folder_creates_nothing_and_says_how_to_find_one(
        tmp_path: Path, command: list[str]) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run([*ARMARIUS, *command], {**environment(), "ARMARIUS_PASSWORD": "whatever"}, cwd=elsewhere)
    assert result.returncode == 7, result.stderr
    assert result.stderr.startswith(f"error [config_invalid]: There is no Armarius data folder at "
                                    f"{elsewhere / '.armarius'}. Pass --data-dir (or set ARMARIUS_DATA_DIR")
    assert "init` to make one there." in result.stderr
    assert "schema" not in result.stderr
    assert everything_under(elsewhere) == []  # no stray .armarius/armarius.sqlite3


def test_a_data_folder_without_a_database_is_left_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n", encoding="utf-8")
    result = run([*ARMARIUS, "--json", "--data-dir", str(folder), "token", "list"], environment())
    assert result.returncode == 7, result.stderr
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "config_invalid"
    assert error["message"].startswith(f"The data folder {folder} holds no Armarius database (armarius.sqlite3).")
    assert error["details"] == {"key": "data_dir", "data_dir": str(folder)}
    assert everything_under(folder) == ["notes.txt"]


def test_the_printed_init_makes_the_store_and_the_command_then_works(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "data"
    refused = run([*ARMARIUS, "--data-dir", str(folder), "token", "list"], environment())
    assert refused.returncode == 7, refused.stderr
    printed = re.search(r"run `([^`]+)` to make one there", refused.stderr)
    assert printed is not None, refused.stderr
    assert not folder.exists()
    made = run(shlex.split(printed.group(1)), environment())
    assert made.returncode == 0, made.stderr
    assert (folder / "armarius.sqlite3").is_file()
    listed = run([*ARMARIUS, "--data-dir", str(folder), "token", "list"], environment())
    assert listed.returncode == 0, listed.stderr


def test_the_demo_still_makes_its_store_where_there_is_none(tmp_path: Path) -> None:
    result = run([*ARMARIUS, "demo", "--no-serve"], environment(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ".armarius" / "armarius.sqlite3").is_file()


@pytest.mark.parametrize("settings", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_on_postgresql_the_data_folder_is_not_required_and_nothing_is_created_in_it(
        settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "not-there"
    result = run([*ARMARIUS, "--data-dir", str(folder), "token", "list"], environment(settings))
    assert "There is no Armarius data folder" not in result.stderr
    assert "holds no Armarius database" not in result.stderr
    assert not folder.exists()


# 2. repair-show's "Apply one" runs as printed --------------------------------------------------------


def test_repair_show_prints_an_apply_command_that_takes_the_agents_session_over(app: Armarius,
                                                                               settings: Settings) -> None:
    desk = make_desk(app)
    repair = desk.prepare(desk.open_session())["repair"]  # in the agent's open session
    env = {**environment(settings), "ARMARIUS_PASSWORD": ADMINS["alpha-admin"]}
    shown = run([*ARMARIUS, "--data-dir", str(settings.data_dir), "memory", "repair-show", str(repair),
                 "--workspace", "alpha", "--as", "alpha-admin"], env)
    assert shown.returncode == 0, shown.stderr
    apply_line = next(line for line in shown.stdout.splitlines() if line.strip().startswith("Apply one:"))
    printed = apply_line.split("Apply one:", 1)[1].strip()
    assert "--take-over" in shlex.split(printed)
    assert "belongs to agent:alpha-agent; applying takes it over first" in shown.stdout
    applied = run(shlex.split(printed), env)
    assert applied.returncode == 0, applied.stderr
    assert f"Repair {repair}: active." in applied.stdout


def test_repair_show_says_no_take_over_in_the_admins_own_session(app: Armarius, settings: Settings) -> None:
    desk = make_desk(app)
    repair = desk.prepare(desk.open_session(owner=desk.admin), actor=desk.admin)["repair"]
    env = {**environment(settings), "ARMARIUS_PASSWORD": ADMINS["alpha-admin"]}
    base = [*ARMARIUS, "--data-dir", str(settings.data_dir), "memory"]
    acting = ["--workspace", "alpha", "--as", "alpha-admin"]
    shown = run([*base, "repair-show", str(repair), *acting], env)
    assert shown.returncode == 0, shown.stderr
    assert "--take-over" not in shown.stdout
    printed = next(line for line in shown.stdout.splitlines() if "Apply one:" in line).split("Apply one:")[1]
    assert run(shlex.split(printed), env).returncode == 0


# 3. A port suggested when the one asked for is taken is free --------------------------------------------


@pytest.fixture
def two_taken_ports() -> Iterator[int]:
    """Two neighbouring ports on 127.0.0.1 that this test listens on: the first of them."""
    for _ in range(50):
        with ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            if port >= 65535:
                continue
            second = stack.enter_context(socket.socket())
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            first.listen()
            second.listen()
            yield port
            return
    pytest.fail("found no two free neighbouring ports")


def test_the_suggested_port_is_free(tmp_path: Path, two_taken_ports: int) -> None:
    port = two_taken_ports
    data_dir = tmp_path / "data"
    result = run([*ARMARIUS, "--data-dir", str(data_dir), "demo", "--port", str(port)], environment())
    assert result.returncode == 10, result.stderr
    suggested = re.search(r"for example --port (\d+)", result.stderr)
    assert suggested is not None, result.stderr
    other = int(suggested.group(1))
    assert other not in (port, port + 1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", other))  # free now, as suggested
    assert not data_dir.exists()


def test_no_port_is_suggested_when_none_nearby_is_free(settings: Settings, two_taken_ports: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "PORTS_TRIED", 1)
    result = Cli(settings)("serve", "--port", str(two_taken_ports))
    assert result.exit_code == 10
    assert "for example" not in result.stderr
    assert "Stop it, or pick another port with --port (or set [server] port" in result.stderr


# 4. Wording ----------------------------------------------------------------------------------------------


def test_one_search_result_is_one_best_match(app: Armarius, settings: Settings) -> None:
    team = make_team(app)
    app.memory.remember(team.agent, RememberRequest("ops/staging", "Staging host", "Staging runs on stage-07."))
    env = {**environment(settings), "ARMARIUS_PASSWORD": team.human_password}
    found = run([*ARMARIUS, "--data-dir", str(settings.data_dir), "memory", "search", "staging", "--mode",
                 "lexical", "--workspace", "alpha", "--as", "alpha-human"], env)
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith("1 best match of all the words:\n")


def test_approve_counts_one_line_as_one_line(app: Armarius, settings: Settings, tmp_path: Path) -> None:
    team = make_team(app)
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps({"slug": "news/one", "title": "One", "text": "A single line of text"}),
                        encoding="utf-8")
    env = {**environment(settings), "ARMARIUS_PASSWORD": team.human_password}
    shown = run([*ARMARIUS, "--data-dir", str(settings.data_dir), "approve", str(proposal), "--workspace", "alpha",
                 "--as", "alpha-human"], env)
    assert shown.returncode == 9, shown.stderr
    assert "text (21 characters, 1 line):" in shown.stdout


def test_the_offline_query_refusal_names_the_query_file_not_the_tools_arguments(tmp_path: Path) -> None:
    repo = build_repo(tmp_path / "repo")
    config = write_config(tmp_path / "research.toml", [source_entry(repo)])
    query = tmp_path / "query.json"
    query.write_text(json.dumps({"kind": "source.search"}), encoding="utf-8")
    arguments = ["--data-dir", str(tmp_path / "data"), "research", "query", "--config", str(config), "--query",
                 str(query)]
    command = [*ARMARIUS, *arguments]
    refused = run(command, environment())
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.startswith(f"error [invalid_input]: The query in {query} is invalid (required: kind, "
                                     "text).")
    assert "arguments" not in refused.stderr
    assert "call again" not in refused.stderr
    assert "run the command again" in refused.stderr
    query.write_text(json.dumps({"kind": "source.search", "txt": "x"}), encoding="utf-8")
    unknown = run([*ARMARIUS, "--json", *arguments], environment())
    error = json.loads(unknown.stderr)["error"]
    assert error["message"].startswith(f"'txt' is not a field of the query in {query}; the fields are:")
    assert "call again" not in error["message"]
    query.write_text(json.dumps({"kind": "source.search", "text": 5}), encoding="utf-8")
    wrong = run(command, environment())
    assert f"'text' of the query in {query} is invalid" in wrong.stderr
    assert "call again" not in wrong.stderr
    assert not (tmp_path / "data").exists()
