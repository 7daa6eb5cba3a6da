"""Every integer the CLI accepts is bounded by what storage holds (the CLI's side of the schema
bounds in tests/mcp_surface/test_schema_bounds.py)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from armarius.cli.main import cli
from armarius.validation import INT64_MAX


def commands(group: click.Command, path: str = "armarius") -> Iterator[tuple[str, click.Command]]:
    yield path, group
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            yield from commands(command, f"{path} {name}")


def test_every_integer_option_and_argument_has_a_bound_storage_holds() -> None:
    unbounded = [
        f"{path} {param.name}"
        for path, command in commands(cli)
        for param in command.params
        if isinstance(param.type, click.types.IntParamType)
        and not (isinstance(param.type, click.IntRange) and param.type.max is not None
                 and param.type.max <= INT64_MAX)
    ]
    assert unbounded == []
