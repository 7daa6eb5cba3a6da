"""`armarius evidence …`: evidence units, the human side: list, show, create, edit, review, activate, make one
from a session's captures, and restore a unit's file.

A unit's canonical file (``<data>/evidence/<workspace>/units/<name>.md``) is yours to edit in any
editor; `edit` without a body takes it as the next revision. `review` and `activate` act on the
revision you name and only while the file still holds it. None of these commands queries a research
source, so the application is opened without the research configuration. Every text an agent or a
capture may have written is printed through :func:`armarius.textview.reveal`; ``--json`` prints the
service's answer unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from armarius.cli.context import NUMBER, CliContext, format_table, pass_cli
from armarius.cli.human import acting_human, human_options, with_reveal_note
from armarius.evidence.service import LIST_MAX
from armarius.textview import reveal, short_fingerprint

_STATUSES = ("edited", "reviewed", "active")




def _body(body: str | None, body_file: str | None) -> str | None:
    """The body given on the command line, or read from a file ('-': standard input) as UTF-8."""
    if body is not None and body_file is not None:
        raise click.UsageError("give the body once: --body or --body-file")
    if body_file is None:
        return body
    data = sys.stdin.buffer.read() if body_file == "-" else _read(body_file)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise click.BadParameter("the file is not UTF-8 text", param_hint="--body-file") from None


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise click.BadParameter(f"cannot read {path}: {error.strerror}", param_hint="--body-file") from None


def _next(cli: CliContext, view: dict[str, Any], workspace: str, principal: str) -> str:
    """The human's next step for a unit, as a command to paste."""
    name, revision, acting = view["unit"], str(view["revision"]), ("--workspace", workspace, "--as", principal)
    if view["status"] == "edited":
        return "Review it: " + cli.command_line("evidence", "review", name, "--revision", revision, *acting)
    if view["status"] == "reviewed":
        return "Activate it: " + cli.command_line("evidence", "activate", name, "--revision", revision, *acting)
    return "It is active: recall finds it."


@click.group()
def evidence() -> None:
    """Evidence units: local documents you edit, review and activate into what recall searches."""


@evidence.command("list")
@click.option("--status", type=click.Choice(_STATUSES), help="Only units in this state.")
@click.option("--after", metavar="NAME", help="The next page: the name the previous page said to continue after.")
@click.option("--limit", type=click.IntRange(1, LIST_MAX), default=LIST_MAX, show_default=True)
@human_options
@pass_cli
def evidence_list(cli: CliContext, status: str | None, after: str | None, limit: int, workspace: str, principal: str,
                  password: str | None) -> None:
    """Units in name order: state, latest, reviewed and active revision."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        page = app.evidence.list_units(actor, status=status, after=after, limit=limit)
    units = page["units"]
    rows = [(u["unit"], u["status"], u["revision"], u["reviewed_revision"] or "", u["active_revision"] or "",
             reveal(u["title"])) for u in units]
    text = format_table([("UNIT", "STATUS", "REV", "REVIEWED", "ACTIVE", "TITLE"), *rows])
    if "next_after" in page:
        text += "\nMore units follow: " + cli.command_line(
            "evidence", "list", *(["--status", status] if status else []), "--after", page["next_after"],
            "--limit", str(limit), "--workspace", workspace, "--as", principal)
    cli.emit(page, text=with_reveal_note(text, *(u["title"] for u in units)))


@evidence.command("show")
@click.argument("name")
@click.option("--revision", type=NUMBER, help="An older revision.")
@human_options
@pass_cli
def evidence_show(cli: CliContext, name: str, revision: int | None, workspace: str, principal: str,
                  password: str | None) -> None:
    """A unit in full: its state, provenance, lineage, revisions, and whether its file holds the latest revision."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.evidence.show(actor, name, revision)
    file_says = {"matches": f"holds revision {view['current_revision']}",
                 "differs": f"differs from revision {view['current_revision']} (changed outside Armarius)",
                 "missing": "is missing"}[view["file"]["state"]]
    lines = [
        f"{view['unit']}  revision {view['revision']}  ({view['status']}; latest {view['current_revision']}, "
        f"reviewed {view['reviewed_revision'] or '-'}, active {view['active_revision'] or '-'})",
        f"File: {view['path']} {file_says}",
        f"Fingerprint: {short_fingerprint(view['fingerprint'])}",
        f"Provenance: {', '.join(view['provenance']) or '- (written by hand)'}",
        f"# {reveal(view['title'])}", "", reveal(view["body"]), "",
        format_table([("REV", "VIA", "AUTHOR", "AT", "FINGERPRINT", "REASON"), *[
            (r["revision"], r["via"], r["author"], r["at"], short_fingerprint(r["fingerprint"]),
             reveal(r["reason"] or "")) for r in view["revisions"]]]),
    ]
    if view["temporary_files"]:
        lines.append("Temporary files an interrupted write left (not units; safe to delete): "
                     + ", ".join(view["temporary_files"]))
    if view["file"]["state"] != "matches":
        lines.append("Take the file as a new revision: " + cli.command_line(
            "evidence", "edit", view["unit"], "--expected-revision", str(view["current_revision"]),
            "--workspace", workspace, "--as", principal) + "\nOr write the latest revision back: " + cli.command_line(
            "evidence", "restore", view["unit"], "--workspace", workspace, "--as", principal))
    elif view["revision"] == view["current_revision"]:
        lines.append(_next(cli, view, workspace, principal))
    cli.emit(view, text=with_reveal_note("\n".join(lines), view["title"], view["body"],
                                   *(r["reason"] or "" for r in view["revisions"])))


@evidence.command("create")
@click.argument("name")
@click.option("--title", required=True)
@click.option("--body", help="The Markdown body.")
@click.option("--body-file", metavar="PATH", help="Read the body from this file ('-': standard input).")
@click.option("--reason", help="Why (recorded with the revision).")
@human_options
@pass_cli
def evidence_create(cli: CliContext, name: str, title: str, body: str | None, body_file: str | None,
                    reason: str | None, workspace: str, principal: str, password: str | None) -> None:
    """Write a new unit (revision 1, edited) and its file."""
    text = _body(body, body_file)
    if text is None:
        raise click.UsageError("give the body: --body or --body-file")
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.evidence.create(actor, name, title, text, reason)
    cli.emit(result, text=f"{name} revision 1 is written to {result['path']}.\n"
                          + _next(cli, result, workspace, principal))


@evidence.command("from-capture")
@click.argument("name")
@click.option("--session", "session_id", type=NUMBER, required=True, help="The research session.")
@click.option("--capture", "captures", multiple=True, metavar="ID",
              help="A capture of the session (repeat for several; default: all of them).")
@click.option("--title", help="The unit's title (default: 'Evidence from research session ID').")
@click.option("--reason", help="Why (recorded with the revision).")
@human_options
@pass_cli
def evidence_from_capture(cli: CliContext, name: str, session_id: int, captures: tuple[str, ...], title: str | None,
                          reason: str | None, workspace: str, principal: str, password: str | None) -> None:
    """Make a unit of a session's captures: its provenance is their ids, its body each capture in full
    (edit it from there). Read from the session's capture files, checked against their ids: nothing is
    fetched again."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.evidence.from_capture(actor, name, session_id, list(captures) or None, title=title,
                                           reason=reason)
    cli.emit(result, text=f"{name} revision 1 is written to {result['path']} from session {session_id}'s "
                          "captures.\n" + _next(cli, result, workspace, principal))


@evidence.command("edit")
@click.argument("name")
@click.option("--expected-revision", type=NUMBER, required=True, help="The revision you edited (the latest).")
@click.option("--title", help="A new title.")
@click.option("--body", help="A new Markdown body (default: take title and body from the unit's file).")
@click.option("--body-file", metavar="PATH", help="Read the new body from this file ('-': standard input).")
@click.option("--reason", help="Why (recorded with the revision).")
@human_options
@pass_cli
def evidence_edit(cli: CliContext, name: str, expected_revision: int, title: str | None, body: str | None,
                  body_file: str | None, reason: str | None, workspace: str, principal: str,
                  password: str | None) -> None:
    """Make the next revision (edited): from the unit's file as you changed it in your editor, or from
    --body/--body-file. Provenance stays; lineage grows."""
    text = _body(body, body_file)
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.evidence.edit(actor, name, expected_revision, title=title, body=text, reason=reason)
    if not result["changed"]:
        cli.emit(result, text=f"{name} is unchanged at revision {result['revision']}.")
        return
    cli.emit(result, text=f"{name} revision {result['revision']} is written to {result['path']}.\n"
                          + _next(cli, result, workspace, principal))


@evidence.command("review")
@click.argument("name")
@click.option("--revision", type=NUMBER, required=True, help="The revision you read (it must be the latest).")
@human_options
@pass_cli
def evidence_review(cli: CliContext, name: str, revision: int, workspace: str, principal: str,
                    password: str | None) -> None:
    """Mark the revision you read as reviewed (its file must still hold it)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.evidence.review(actor, name, revision)
    said = "is reviewed" if result["changed"] else f"was {result['status']} already"
    cli.emit(result, text=f"{name} revision {revision} {said}.\n" + _next(cli, result, workspace, principal))


@evidence.command("activate")
@click.argument("name")
@click.option("--revision", type=NUMBER, required=True, help="The reviewed revision.")
@human_options
@pass_cli
def evidence_activate(cli: CliContext, name: str, revision: int, workspace: str, principal: str,
                      password: str | None) -> None:
    """Index the reviewed revision into what recall searches (administrators; its file must still hold it).
    Nothing is fetched: the revision comes from the store."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.evidence.activate(actor, name, revision)
    cli.emit(result, text=f"{name} revision {revision} {'is active' if result['changed'] else 'was active already'}"
                          f" (fingerprint {short_fingerprint(result['fingerprint'])}): recall finds it.")


@evidence.command("restore")
@click.argument("name")
@human_options
@pass_cli
def evidence_restore(cli: CliContext, name: str, workspace: str, principal: str, password: str | None) -> None:
    """Write the unit's file again from its latest revision in the store (when it is missing or differs)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.evidence.restore(actor, name)
    was = "was missing" if result.get("was") == "missing" else f"differed from revision {result['revision']}"
    cli.emit(result, text=(f"{result['path']} {was}; it holds it again." if result["restored"]
                           else f"{result['path']} holds revision {result['revision']} already."))
