"""`armarius audit verify|anchor|rotate-key|tail`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from armarius.audit import chain
from armarius.audit.anchors import anchor_line, append_anchor_line, format_head, parse_head, read_anchor_file
from armarius.audit.keys import ENV_VARIABLE, rotating_key_file
from armarius.audit.verify import verify_log
from armarius.cli.context import CliContext, counted, pass_cli
from armarius.errors import ConfigError
from armarius.store import utc_now

#: How each kind of finding is listed, in this order.
_FINDINGS = (
    (chain.BROKEN_LINK, "broken_links", "BROKEN LINK"),
    (chain.BAD_MAC, "bad_macs", "BAD MAC"),
    (chain.MALFORMED_EVENT, "malformed_events", "MALFORMED EVENT"),
    (chain.UNKNOWN_WORKSPACE, "unknown_workspaces", "UNKNOWN WORKSPACE"),
    (chain.ANCHOR_NOT_FOUND, "anchors_not_found", "ANCHOR NOT FOUND"),
    (chain.ANCHOR_UNREADABLE, "anchors_unreadable", "UNREADABLE ANCHOR"),
)
#: How `audit tail` shows what :func:`armarius.audit.chain.mac_checks` found of each event's MAC.
_MAC_SHOWN = {chain.SIGNED: "ok", chain.UNSIGNED: "legacy", chain.UNKNOWN_KEY: "UNKNOWN KEY",
              chain.MAC_MISMATCH: "BAD MAC"}


@click.group()
def audit() -> None:
    """The hash-chained, authenticated audit log."""


@audit.command("verify")
@click.option("--expect", "expected", multiple=True, metavar="CHAIN:SEQ:HASH",
              help="A head recorded earlier (repeatable): it must still be on its chain.")
@click.option("--anchors", "anchor_files", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A file written by `armarius audit anchor` (repeatable): each head in it must still be there.")
@pass_cli
def audit_verify(cli: CliContext, expected: tuple[str, ...], anchor_files: tuple[Path, ...]) -> None:
    """Check every chain in the database: links, MACs, workspaces and anchors; exit 1 on any finding."""
    anchors = [parse_head(text, source="--expect") for text in expected]
    unreadable: list[str] = []
    for path in anchor_files:
        read, problems = read_anchor_file(path)
        anchors, unreadable = anchors + read, unreadable + problems
    with cli.app() as app:
        names = {space.id: space.name for space in app.directory.workspaces()}
        report = verify_log(app.database, known_workspaces=names, anchors=anchors, unreadable_anchors=unreadable)
    findings: dict[str, list[dict[str, Any]]] = {}
    lines = [f"{counted(report.events_checked, 'event')} checked in {counted(report.chains, 'chain')}"
             + (f" ({counted(report.legacy_events, 'legacy event')} from before the log was authenticated)"
                if report.legacy_events else "")
             + (f"; {counted(report.anchors_checked, 'anchored head')} checked." if anchors else ".")]
    for kind, key, label in _FINDINGS:
        found = report.of_kind(kind)
        findings[key] = [{"chain": p.workspace_id, "workspace": _chain_name(names, p.workspace_id), "seq": p.seq,
                          "problem": p.problem} for p in found]
        lines += [f"{label}: " + ("" if p.workspace_id is None else f"chain {_chain_label(names, p.workspace_id)}"
                                   + (f" at event {p.seq}" if p.seq else "") + ": ") + p.problem for p in found]
    lines.append("The audit log is intact." if report.intact else
                 "The audit log FAILED verification; see docs/security.md for what each finding means.")
    cli.emit({"events_checked": report.events_checked, "chains_checked": report.chains,
              "legacy_events": report.legacy_events, "anchors_checked": report.anchors_checked,
              "intact": report.intact, **findings}, text="\n".join(lines))
    if not report.intact:
        sys.exit(1)


def _chain_name(names: dict[int, str], chain_id: int | None) -> str | None:
    return "(system)" if chain_id == chain.SYSTEM_CHAIN else None if chain_id is None else names.get(chain_id)


def _chain_label(names: dict[int, str], chain_id: int) -> str:
    return f"{_chain_name(names, chain_id) or '(no such workspace)'} [{chain_id}]"


@audit.command("anchor")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path, allow_dash=True))
@pass_cli
def audit_anchor(cli: CliContext, file: Path) -> None:
    """Append the head of every chain, with the time, to FILE (`-`: print the line).

    Keep FILE out of reach of the database and of the server's OS user (another host, append-only
    storage); `armarius audit verify --anchors FILE` then finds truncations, wipes and rewrites.
    """
    with cli.app() as app:
        names = {space.id: space.name for space in app.directory.workspaces()}
        heads = chain.last_events(app.database)
    line = anchor_line(heads, at=utc_now())
    if str(file) == "-":
        click.echo(line)
        return
    append_anchor_line(file, line)
    cli.emit(
        {"file": str(file), "heads": [{"chain": c, "workspace": _chain_name(names, c), "seq": s, "hash": h}
                                      for c, s, h in heads]},
        table=[("CHAIN", "WORKSPACE", "HEAD"),
               *[(c, _chain_name(names, c) or "(no such workspace)", format_head(c, s, h)) for c, s, h in heads]],
    )


@audit.command("rotate-key")
@pass_cli
def audit_rotate_key(cli: CliContext) -> None:
    """Add a new audit key that signs from now on; older keys stay in the file to verify older events.

    Restart every server process afterwards (and copy the key file to every host) so that all sign
    with the new key.
    """
    settings = cli.settings
    if settings.audit_key is not None:
        raise ConfigError(
            f"The audit keys come from {ENV_VARIABLE}, which Armarius cannot change. Generate a key with "
            "`python3 -c 'import secrets; print(secrets.token_hex(32))'`, append it to the variable after a "
            "comma (keep the old keys before it), and restart every server (docs/security.md).",
            key=ENV_VARIABLE,
        )
    with cli.app():  # opened once first: nothing is rotated when the database cannot be opened
        pass
    # The record is written under the rotation's lock, so that another rotation at the same time neither
    # loses a key nor has this record name a key the file does not hold as this rotation left it.
    with rotating_key_file(settings.audit_key_path) as (retired, new_key), cli.app() as app:
        chain.record_key_rotation(app.database, by=cli.operator, retired_key_id=retired.id, key_id=new_key.id)
    cli.emit({"key_file": str(settings.audit_key_path), "key_id": new_key.id, "retired_key_id": retired.id},
             text=f"New audit key {new_key.id} added to {settings.audit_key_path} (the retired key {retired.id} "
                  "stays there to verify older events). Restart every server process, copy the file to "
                  "every host that serves this database, and replace your backup of the key file with it: "
                  "an older copy cannot verify what the new key signs.")


@audit.command("tail")
@click.option("--workspace", help="A workspace's chain (default: the system chain).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@pass_cli
def audit_tail(cli: CliContext, workspace: str | None, limit: int) -> None:
    """Show the newest events of one chain, with their hashes, the key that signed them and whether each
    event's MAC checks (MAC: ok, legacy, BAD MAC, UNKNOWN KEY; MALFORMED: a row Armarius never writes).
    `armarius audit verify` checks the whole chain."""
    with cli.app() as app:
        workspace_id = app.directory.workspace(workspace).id if workspace else None
        events = chain.tail(app.database, workspace_id, limit)
        checks = chain.mac_checks(app.database, events)
    cli.emit(
        [{**event.to_dict(), "mac_check": check} for event, check in zip(events, checks, strict=True)],
        table=[("SEQ", "AT", "ACTOR", "ACTION", "SUBJECT", "HASH", "KEY", "MAC"),
               *[(e.seq, e.at, e.actor, e.action, e.subject, e.hash[:16],
                  e.key_id or ("(legacy)" if check == chain.UNSIGNED else "(none)"),
                  _MAC_SHOWN[check] + (" MALFORMED" if e.malformed else ""))
                 for e, check in zip(events, checks, strict=True)]],
    )
