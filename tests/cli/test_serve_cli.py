"""The real `armarius` command where the shell around it matters: a taken port, no terminal to
ask a password on, and printed hints that must run as printed."""

from __future__ import annotations

import gc
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from armarius.app import Armarius
from armarius.config import Settings
from tests.cli.test_cli import Cli
from tests.e2e.servers import ARMARIUS
from tests.helpers import make_team

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another program (this test) listens on."""
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        yield int(occupant.getsockname()[1])


def environment(settings: Settings | None = None, *, path: str | None = None) -> dict[str, str]:
    """This process's environment without Armarius's own variables (and with another PATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARMARIUS_") or k.startswith("ARMARIUS_TEST")}
    if settings is not None and settings.database_url is not None:
        env["ARMARIUS_DATABASE_URL"] = settings.database_url
        env["ARMARIUS_DATABASE_MIGRATE_URL"] = settings.database_migrate_url or ""
    if path is not None:
        env["PATH"] = path
    return env


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A new session has no controlling terminal, as under cron, CI or an agent's shell.
    return subprocess.run(command, input="", capture_output=True, text=True, timeout=120, env=env, check=False,
                          start_new_session=True)


def path_without_the_venv() -> str:
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != VENV_BIN)


# A taken port --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_a_taken_port_is_said_plainly_before_anything_is_set_up(tmp_path: Path, taken_port: int,
                                                                command: str) -> None:
    data_dir = tmp_path / "data"
    if command == "serve":
        assert run([*ARMARIUS, "--data-dir", str(data_dir), "init"], environment()).returncode == 0
    result = run([*ARMARIUS, "--data-dir", str(data_dir), command, "--port", str(taken_port)], environment())
    assert result.returncode == 10, result.stderr
    assert f"error [port_in_use]: Port {taken_port} on 127.0.0.1 is taken" in result.stderr
    # The next port that was free when asked (another test may hold the one right after it meanwhile).
    suggested = re.search(r"for example --port (\d+) ", result.stderr)
    assert suggested is not None, result.stderr
    assert int(suggested.group(1)) > taken_port
    assert "Serving on" not in result.stdout + result.stderr
    assert "Errno" not in result.stderr
    if command == "demo":  # nothing was set up, so no credentials were shown and lost
        assert not data_dir.exists()
        assert result.stdout == ""


def test_serve_on_a_taken_port_in_process(settings: Settings, taken_port: int) -> None:
    result = Cli(settings)("--json", "serve", "--port", str(taken_port))
    assert result.exit_code == 10
    assert json.loads(result.stderr)["error"] == {
        "code": "port_in_use", "message": json.loads(result.stderr)["error"]["message"],
        "details": {"host": "127.0.0.1", "port": taken_port}}


def test_an_address_this_machine_does_not_have_is_refused_before_serving(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = run([*ARMARIUS, "--data-dir", str(data_dir), "demo", "--host", "192.0.2.1", "--port", "8765"],
                 environment())
    assert result.returncode == 3, result.stderr
    assert "error [invalid_input]: Cannot listen on 192.0.2.1 port 8765" in result.stderr
    assert "Traceback" not in result.stderr
    assert not data_dir.exists()


# No terminal to ask a password on ----------------------------------------------------------------


def test_a_human_command_without_terminal_or_password_says_how_to_give_one(app: Armarius,
                                                                          settings: Settings) -> None:
    team = make_team(app)
    base = [*ARMARIUS, "--data-dir", str(settings.data_dir), "memory", "list", "--workspace", "alpha",
            "--as", "alpha-human"]
    refused = run(base, environment(settings))
    assert refused.returncode == 4, refused.stderr
    assert refused.stderr.startswith("error [unauthenticated]: ")
    assert "ARMARIUS_PASSWORD" in refused.stderr
    assert "terminal" in refused.stderr
    assert "GetPassWarning" not in refused.stderr
    assert "Aborted" not in refused.stderr
    allowed = run(base, {**environment(settings), "ARMARIUS_PASSWORD": team.human_password})
    assert allowed.returncode == 0, allowed.stderr


# Hints run as printed ----------------------------------------------------------------------------


@pytest.mark.parametrize("venv_on_path", [False, True])
def test_the_demos_printed_commands_run_as_printed(tmp_path: Path, venv_on_path: bool) -> None:
    path = VENV_BIN + os.pathsep + path_without_the_venv() if venv_on_path else path_without_the_venv()
    env = environment(path=path)
    data_dir = tmp_path / "demo"
    first = run([*ARMARIUS, "--json", "--data-dir", str(data_dir), "demo", "--no-serve"], env)
    assert first.returncode == 0, first.stderr
    shown = json.loads(first.stdout)
    # From another folder, in a shell whose PATH may lack the venv, with the password in the environment.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in shown["review"]:
        assert command.startswith("armarius " if venv_on_path else shlex.quote(str(Path(VENV_BIN) / "armarius")))
        ran = subprocess.run(shlex.split(command), input="", capture_output=True, text=True, timeout=120, check=False,
                             cwd=elsewhere, env={**env, "ARMARIUS_PASSWORD": shown["admin"]["password"]},
                             start_new_session=True)
        assert ran.returncode == 0, (command, ran.stderr)

    again = run([*ARMARIUS, "--data-dir", str(data_dir), "demo", "--no-serve"], env)
    assert again.returncode == 0, again.stderr
    token_hint = next(line for line in again.stdout.splitlines() if "New agent token:" in line)
    issued = subprocess.run(shlex.split(token_hint.split(":", 1)[1]), capture_output=True, text=True, timeout=120,
                            check=False, cwd=elsewhere, env=env)
    assert issued.returncode == 0, issued.stderr
    assert "arm_" in issued.stdout
    assert ("is not on your PATH" in again.stdout) is not venv_on_path
    if not venv_on_path:
        assert f"source {Path(VENV_BIN) / 'activate'}" in again.stdout


# The heap of a started server ------------------------------------------------------------------------


def test_what_a_server_started_with_is_left_out_of_full_collections() -> None:
    """settle_heap, which every server command calls before it answers: afterwards a full collection
    passes over none of the objects there were, and there is no garbage left among them."""
    from armarius.cli.server import settle_heap

    before = len(gc.get_objects())
    try:
        settle_heap()
        assert gc.get_freeze_count() >= before * 0.9
        assert len(gc.get_objects()) < before * 0.1
    finally:
        gc.unfreeze()
