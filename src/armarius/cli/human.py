"""Human authentication for the CLI's trust-changing commands.

The principal is named with --as (or ARMARIUS_PRINCIPAL); the password comes from
ARMARIUS_PASSWORD (for scripts) or is asked for without echo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.cli.context import CliContext

F = TypeVar("F", bound=Callable[..., Any])


def human_options(command: F) -> F:
    command = click.option("--password", envvar="ARMARIUS_PASSWORD", show_envvar=True, hidden=True,
                           help="The principal's password (prefer the prompt or the environment variable).")(command)
    command = click.option("--as", "principal", envvar="ARMARIUS_PRINCIPAL", show_envvar=True, required=True,
                           help="The human principal acting (asked for its password).")(command)
    return click.option("--workspace", required=True, help="The workspace to act in.")(command)


def human_actor(app: Armarius, principal: str, password: str | None, workspace: str) -> Actor:
    if password is None:
        password = click.prompt(f"Password for {principal}", hide_input=True, err=True)
    return app.directory.authenticate_password(principal, password, workspace=workspace)


@contextmanager
def acting_human(cli: CliContext, workspace: str, principal: str, password: str | None
                 ) -> Iterator[tuple[Armarius, Actor]]:
    """The opened application and the authenticated human acting in it."""
    with cli.app() as app:
        yield app, human_actor(app, principal, password, workspace)
