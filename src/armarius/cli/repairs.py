"""`armarius memory repair-…` and `armarius memory repairs`: archive repairs from the human side.

Read a target and prepare a proposal (as an agent would, with human credentials), show a proposal with
each alternative's complete current and resulting content and their diff, and decide: apply one option
(administrators), reject all or ask for a reformulation, retry an interrupted application.

The commands open the application without the research configuration: a repair never queries a source,
and a missing repository must not stop a human from deciding. Every text an agent may have written
(conflicts, titles, bodies, rationales, comments) is printed through :func:`armarius.textview.reveal`,
bodies split at line feeds only (every other line separator shows as its marker), and a diff's cost and
length are bounded (:mod:`armarius.repairs.compare`); ``--json`` prints the service's answer unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import click

from armarius.app import Armarius
from armarius.auth.model import Actor
from armarius.cli.context import NUMBER, CliContext, counted, format_table, pass_cli
from armarius.cli.human import acting_human, human_options, with_reveal_note
from armarius.errors import NotFound
from armarius.repairs import compare
from armarius.repairs.model import Status, TargetKind
from armarius.textview import reveal

#: How much of a conflict a listing shows (`repair-show` prints all of it).
CONFLICT_SHOWN = 60




def _cut(text: str) -> str:
    shown = reveal(text[:CONFLICT_SHOWN]).replace("\n", "⟦U+000A LINE FEED⟧")
    return shown + ("…" if len(text) > CONFLICT_SHOWN else "")


def _status(view: dict[str, Any]) -> str:
    flags = [flag for flag, on in (("reformulation requested", view["reformulation_requested"]),
                                   ("activation left pending", view["activation_deferred"])) if on]
    return f"{view['status']} ({', '.join(flags)})" if flags else view["status"]


def _alternative(item: dict[str, Any], kind_note: str) -> tuple[list[str], list[str]]:
    """An alternative as a human compares it: target, rationale, the diff, then the complete result (and the
    complete current content when the diff is not shown line by line)."""
    target, current, result = item["target"], item["current"], item["result"]
    diff = compare.diff(current, result, fromfile=f"{target['name']}@{target['revision']} (current)",
                        tofile=f"{target['name']} ({item['option']})")
    shown = [item["rationale"], compare.content_text(current), compare.content_text(result)]
    lines = [
        f"== {item['option']}: {target['kind']} {target['name']} at revision {target['revision']}{kind_note}",
        f"   Rationale: {reveal(item['rationale'])}",
        "   Changes:",
        *(f"   {reveal(line)}" for line in diff.lines),
    ]
    if diff.note:
        lines += [f"   {diff.note}",
                  f"   Current content in full ({compare.ending(current)}):",
                  *(f"   | {reveal(line)}" for line in compare.content_lines(current))]
    return [
        *lines,
        f"   Resulting content in full ({compare.ending(result)}):",
        *(f"   | {reveal(line)}" for line in compare.content_lines(result)),
        "",
    ], shown


def _repair_text(cli: CliContext, view: dict[str, Any], workspace: str, principal: str,
                 session_owner: str | None = None) -> str:
    """``session_owner``: the other principal whose open session the repair is in (applying takes it over)."""
    acting = ("--workspace", workspace, "--as", principal)
    repair = str(view["repair"])
    lines = [
        f"Repair {repair} in session {view['session']}: {_status(view)}",
        f"Proposed by {reveal(view['proposer'])} at {view['created_at']}",
        f"Conflict: {reveal(view['conflict'])}",
        f"Outcome:  {view['outcome']}",
    ]
    shown = [view["conflict"], view["proposer"]]
    if view["decided_by"]:
        lines.append(f"Decided by {reveal(view['decided_by'])}" + (
            f": {view['chosen_option']}, revision {view['applied_revision']}" if view["chosen_option"] else ""))
    if view["comment"]:
        lines.append(f"Comment: {reveal(view['comment'])}")
        shown.append(view["comment"])
    lines.append("")
    for item in view["alternatives"]:
        chosen = " - CHOSEN" if item["option"] == view["chosen_option"] else ""
        described, texts = _alternative(item, chosen)
        lines += described
        shown += texts
    history = [(e["seq"], e["event"], e["status"], reveal(e["actor"]), e["at"]) for e in view["history"]]
    lines += ["History:", format_table([("SEQ", "EVENT", "STATUS", "ACTOR", "AT"), *history])]
    if view["pending_operations"]:
        lines += ["", "Pending operations (repair-retry completes them):", format_table(
            [("ID", "KIND", "ATTEMPTS", "LAST ERROR"), *[(o["id"], o["kind"], o["attempts"], o["last_error"] or "")
                                                        for o in view["pending_operations"]]])]
    if view["status"] == Status.PROPOSED:
        options = [item["option"] for item in view["alternatives"]]
        take_over = ("--take-over",) if session_owner is not None else ()
        lines += ["", "Decide:",
                  "  Apply one:      " + cli.command_line("memory", "repair-apply", repair, "--option", options[0],
                                                          *take_over, *acting),
                  *([f"                  (--take-over: session {view['session']} is open and belongs to "
                     f"{reveal(session_owner)}; applying takes it over first, recorded, so that the receipt names "
                     "you)"] if session_owner is not None else []),
                  "  Reject all:     " + cli.command_line("memory", "repair-reject", repair, *acting),
                  "  Reformulate:    " + cli.command_line("memory", "repair-reject", repair, "--reformulate",
                                                          "--comment", "WHAT TO CHANGE", *acting)]
    elif view["status"] in (Status.APPLYING, Status.PENDING_ACTIVATION) or view["pending_operations"]:
        lines += ["", "Go on: " + cli.command_line("memory", "repair-retry", repair, *acting)]
    return with_reveal_note("\n".join(lines), *shown)


@click.command("repair-target")
@click.argument("name")
@click.option("--session", "session_id", type=NUMBER, required=True, help="Your open research session.")
@click.option("--kind", type=click.Choice([kind.value for kind in TargetKind]), default="entry", show_default=True)
@human_options
@pass_cli
def repair_target(cli: CliContext, name: str, session_id: int, kind: str, workspace: str, principal: str,
                  password: str | None) -> None:
    """The complete current content and revision of an entry or evidence unit, to prepare a repair against."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        current = app.repairs.target(actor, session_id, kind, name)
    lines = [f"{kind} {name} at revision {current['revision']} ({compare.ending(current)})",
             *(reveal(line) for line in compare.content_lines(current))]
    cli.emit(current, text=with_reveal_note("\n".join(lines), current["title"], current["body"]))


@click.command("repair-prepare")
@click.option("--session", "session_id", type=NUMBER, required=True, help="Your open research session.")
@click.option("--conflict", required=True, help="What was observed, and what in the archive it contradicts.")
@click.option("--alternatives", "alternatives_file", type=click.File("r", encoding="utf-8"), required=True,
              help="A JSON file (- for standard input) with the list of 1 to 5 alternatives, each {target: "
                   "{kind, name, revision}, title, body, tags?, rationale}.")
@human_options
@pass_cli
def repair_prepare(cli: CliContext, session_id: int, conflict: str, alternatives_file: Any, workspace: str,
                   principal: str, password: str | None) -> None:
    """Propose a repair: alternatives with complete resulting contents, for a human to choose from."""
    try:
        alternatives = json.load(alternatives_file)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error.msg} (line {error.lineno})", param_hint="--alternatives"
                                 ) from None
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.repairs.prepare(actor, session_id, conflict, alternatives)
    cli.emit(view, text=f"Repair {view['repair']} proposed in session {session_id} with "
                        f"{counted(len(view['alternatives']), 'alternative')}: " + cli.command_line(
                            "memory", "repair-show", str(view["repair"]), "--workspace", workspace, "--as",
                            principal))


@click.command("repair-show")
@click.argument("repair_id", metavar="ID", type=NUMBER)
@human_options
@pass_cli
def repair_show(cli: CliContext, repair_id: int, workspace: str, principal: str, password: str | None) -> None:
    """A repair in full: the conflict, each alternative's diff and complete result, the decision, the history.
    Checks the target again first (a saved correction changed since is superseded)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.repairs.show(actor, repair_id)
        owner = _other_owner(app, actor, view["session"]) if view["status"] == Status.PROPOSED else None
    cli.emit(view, text=_repair_text(cli, view, workspace, principal, owner))


def _other_owner(app: Armarius, actor: Actor, session_id: int) -> str | None:
    """The owner of the session when it is open and not the actor's: repair-apply must take it over first.
    None otherwise, and for an actor who may not see the session (who may not take it over either)."""
    try:
        with app.database.transaction(workspace_id=actor.workspace_id) as tx:
            session = app.sessions.state(actor, session_id, within=tx)
    except NotFound:
        return None
    if session["status"] == "closed" or session["owner_id"] == actor.principal_id:
        return None
    return str(session["owner"])


@click.command("repairs")
@click.option("--session", "session_id", type=NUMBER, help="Only the repairs of this session.")
@click.option("--status", type=click.Choice([status.value for status in Status]), help="Only repairs in this state.")
@human_options
@pass_cli
def repairs_list(cli: CliContext, session_id: int | None, status: str | None, workspace: str, principal: str,
                 password: str | None) -> None:
    """Repair receipts, newest first (conflicts cut short; `repair-show ID` prints one in full)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        listing = app.repairs.list_repairs(actor, session=session_id, status=status)
    rows = [(r["repair"], r["session"], _status(r), r["chosen_option"] or "", r["applied_revision"] or "",
             reveal(r["proposer"]), r["updated_at"], _cut(r["conflict"])) for r in listing]
    text = format_table([("ID", "SESSION", "STATUS", "OPTION", "REVISION", "PROPOSER", "UPDATED", "CONFLICT"), *rows])
    cli.emit(listing, text=with_reveal_note(text, *(r["conflict"] for r in listing)))


@click.command("repair-apply")
@click.argument("repair_id", metavar="ID", type=NUMBER)
@click.option("--option", required=True, help="The option id you chose (opt-1 … opt-5), as repair-show lists them.")
@click.option("--take-over", is_flag=True, help="Take the session over first when it is another principal's and "
                                                "open (recorded), so that the receipt names you.")
@click.option("--continue-pending", is_flag=True, help="Evidence units: save the correction but leave its "
                                                       "activation pending (recorded; not a success).")
@human_options
@pass_cli
def repair_apply(cli: CliContext, repair_id: int, option: str, take_over: bool, continue_pending: bool,
                 workspace: str, principal: str, password: str | None) -> None:
    """Apply the option you chose (administrators: memory.manage for entries, evidence.manage for units)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.repairs.apply(actor, repair_id, option, take_over=take_over, continue_pending=continue_pending)
    cli.emit(view, text=f"Repair {repair_id}: {_status(view)}. {view['outcome']}")


@click.command("repair-reject")
@click.argument("repair_id", metavar="ID", type=NUMBER)
@click.option("--reformulate", is_flag=True, help="Ask the agent for a new proposal (needs --comment).")
@click.option("--comment", help="What is wrong, or what to change (the agent reads it).")
@human_options
@pass_cli
def repair_reject(cli: CliContext, repair_id: int, reformulate: bool, comment: str | None, workspace: str,
                  principal: str, password: str | None) -> None:
    """Reject every alternative, or ask for a reformulation with a comment. Nothing in the archive changes."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.repairs.reject(actor, repair_id, comment, reformulate=reformulate)
    cli.emit(view, text=f"Repair {repair_id}: {_status(view)}. {view['outcome']}")


@click.command("repair-retry")
@click.argument("repair_id", metavar="ID", type=NUMBER)
@click.option("--continue-pending", is_flag=True, help="Save the correction but leave its activation pending.")
@human_options
@pass_cli
def repair_retry(cli: CliContext, repair_id: int, continue_pending: bool, workspace: str, principal: str,
                 password: str | None) -> None:
    """Go on with an interrupted application from its receipt, and complete pending operations."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.repairs.retry(actor, repair_id, continue_pending=continue_pending)
    left = len(view["pending_operations"])
    cli.emit(view, text=f"Repair {repair_id}: {_status(view)}. {view['outcome']}" + (
        f" {counted(left, 'operation')} still pending." if left else ""))


#: The commands `armarius memory` gains.
COMMANDS = (repair_target, repair_prepare, repair_show, repairs_list, repair_apply, repair_reject, repair_retry)
