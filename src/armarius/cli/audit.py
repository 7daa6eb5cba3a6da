"""`armarius audit verify|tail`."""

from __future__ import annotations

import sys

import click

from armarius.audit import chain
from armarius.cli.context import CliContext, pass_cli


@click.group()
def audit() -> None:
    """The hash-chained audit log."""


@audit.command("verify")
@pass_cli
def audit_verify(cli: CliContext) -> None:
    """Check every chain; exit 1 and name the first broken link of each broken chain."""
    with cli.app() as app:
        names = {w.id: w.name for w in app.directory.workspaces()}
        checked, breaks = chain.verify_all(app.database, names)
    problems = [{"workspace": names.get(b.workspace_id, "(system)"), "seq": b.seq, "problem": b.problem}
                for b in breaks]
    cli.emit(
        {"events_checked": checked, "intact": not breaks, "breaks": problems},
        text="\n".join([f"{checked} events checked."] + [
            f"BROKEN: chain {p['workspace']} at event {p['seq']}: {p['problem']}" for p in problems
        ] + ([] if breaks else ["The audit log is intact."])),
    )
    if breaks:
        sys.exit(1)


@audit.command("tail")
@click.option("--workspace", help="A workspace's chain (default: the system chain).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@pass_cli
def audit_tail(cli: CliContext, workspace: str | None, limit: int) -> None:
    """Show the newest events of one chain, with the head hash to record elsewhere."""
    with cli.app() as app:
        workspace_id = app.directory.workspace(workspace).id if workspace else None
        events = chain.tail(app.database, workspace_id, limit)
    cli.emit(
        [event.to_dict() for event in events],
        table=[("SEQ", "AT", "ACTOR", "ACTION", "SUBJECT", "HASH"),
               *[(e.seq, e.at, e.actor, e.action, e.subject, e.hash[:16]) for e in events]],
    )
