"""`armarius`: the entry point. Errors are mapped here once: stderr and a distinct exit code."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from armarius.cli.audit import audit
from armarius.cli.connect import connect
from armarius.cli.context import CliContext
from armarius.cli.doctor import doctor
from armarius.cli.drafts import approve, drafts
from armarius.cli.evidence import evidence
from armarius.cli.identity import principal, token, workspace
from armarius.cli.memory import memory
from armarius.cli.repairs import COMMANDS as REPAIR_COMMANDS
from armarius.cli.research import research
from armarius.cli.server import demo, init, mcp, serve
from armarius.cli.sessions import sessions
from armarius.cli.transfer import export, import_group
from armarius.config import one_blas_thread
from armarius.errors import ArmariusError, InternalError

logger = logging.getLogger("armarius.cli")


class ArmariusGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ArmariusError as error:
            _fail(ctx, error)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception:
            logger.exception("command failed unexpectedly")
            _fail(ctx, InternalError())


#: The CLI's own next step for errors that leave it to the surface (they carry an agent_hint in
#: the agent tools' terms, which a person cannot follow), by command group and code.
_NEXT_STEPS = {
    ("memory", "not_found"): "`{armarius} memory list` and `{armarius} memory search WORDS` (with your --workspace "
                             "and --as) show the entries there are.",
    ("sessions", "not_found"): "`{armarius} sessions list` (with your --workspace and --as) shows the sessions you "
                               "may see.",
    ("evidence", "not_found"): "`{armarius} evidence list` (with your --workspace and --as) shows the units there are.",
}


def _fail(ctx: click.Context, error: ArmariusError) -> None:
    shown = error.to_dict(for_agent=False)
    step = _NEXT_STEPS.get((ctx.invoked_subcommand or "", error.code)) if error.agent_hint else None
    cli_context = ctx.find_object(CliContext)
    if step and cli_context is not None:
        shown["message"] += " " + step.format(armarius=cli_context.command_line())
    if ctx.params.get("as_json"):
        click.echo(json.dumps({"error": shown}, ensure_ascii=False), err=True)
    else:
        click.echo(f"error [{error.code}]: {shown['message']}", err=True)
    sys.exit(error.exit_code)


@click.group(cls=ArmariusGroup)
@click.option("--data-dir", type=click.Path(path_type=Path), envvar="ARMARIUS_DATA_DIR", show_envvar=True,
              help="The data folder (default ./.armarius).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.version_option(package_name="armarius")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, as_json: bool) -> None:
    """Armarius: governed memory and read-only research server for AI agents."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ctx.obj = CliContext(data_dir=data_dir, as_json=as_json)


for command in (init, serve, mcp, demo, connect, workspace, principal, token, memory, approve, drafts, research,
                sessions, evidence, import_group, export, audit, doctor):
    cli.add_command(command)
for command in REPAIR_COMMANDS:
    memory.add_command(command)


def main() -> None:
    one_blas_thread()
    cli(prog_name="armarius")
