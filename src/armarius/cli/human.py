"""Human authentication for the CLI's trust-changing commands.

The principal is named with --as (or ARMARIUS_PRINCIPAL); the password comes from
ARMARIUS_PASSWORD (for scripts) or is asked for without echo on the terminal.

The workspace is looked up before the password is asked for, so that a mistyped workspace says
so instead of reading as a wrong password. That is the local operator's view (a shell with the
data folder can list the workspaces anyway); the network surfaces never tell an unauthenticated
caller which workspaces exist.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.cli.context import CliContext
from armarius.errors import NotFound, Unauthenticated, echo
from armarius.textview import REVEAL_NOTE, reveal

F = TypeVar("F", bound=Callable[..., Any])


def human_options(command: F) -> F:
    command = click.option("--password", envvar="ARMARIUS_PASSWORD", show_envvar=True, hidden=True,
                           help="The principal's password (prefer the prompt or the environment variable).")(command)
    command = click.option("--as", "principal", envvar="ARMARIUS_PRINCIPAL", show_envvar=True, required=True,
                           help="The human principal acting (asked for its password).")(command)
    return click.option("--workspace", required=True, help="The workspace to act in.")(command)


def human_actor(cli: CliContext, app: Armarius, principal: str, password: str | None, workspace: str) -> Actor:
    if not any(space.name == workspace for space in app.directory.workspaces()):
        raise NotFound(f"There is no workspace named {echo(workspace)}. "
                       f"`{cli.command_line('workspace', 'list')}` lists the workspaces.", workspace=workspace)
    if password is None:
        password = _ask_password(principal)
    return app.directory.authenticate_password(principal, password, workspace=workspace)


def _ask_password(principal: str) -> str:
    if not _terminal_available():
        raise Unauthenticated(
            f"This command acts as {echo(principal)} and needs its password, and there is no terminal to ask "
            "on. Run it in a terminal, or set ARMARIUS_PASSWORD in its environment."
        )
    return str(click.prompt(f"Password for {principal}", hide_input=True, err=True))


def _terminal_available() -> bool:
    """Whether a password prompt can be answered: getpass reads the controlling terminal."""
    if sys.stdin is not None and sys.stdin.isatty():
        return True
    try:
        with open("/dev/tty", "rb"):
            return True
    except OSError:
        return False


@contextmanager
def acting_human(cli: CliContext, workspace: str, principal: str, password: str | None, *, research: bool = False
                 ) -> Iterator[tuple[Armarius, Actor]]:
    """The application and the authenticated human acting in it. Opened without research sources unless
    the command queries them (``research``): a missing repository must not stop a human from reviewing."""
    with cli.app(research=research) as app:
        yield app, human_actor(cli, app, principal, password, workspace)


def with_reveal_note(text: str, *shown: str) -> str:
    """The text, and the markers' explanation when anything in ``shown`` needed one."""
    return text + (f"\n\n{REVEAL_NOTE}" if any(reveal(part) != part for part in shown) else "")
