"""`armarius sessions …`: the human side of research sessions: review, resume, take over, raise the
budget, close, and check or rebuild a session's capture files.

None of these commands runs a query, so they open the application without the research
configuration: they work while a source's repository is missing or a research database is down,
which is exactly when a session blocks and a human is asked to look at it. Every text an agent
may have written (subjects, requests, notes) is printed through :func:`armarius.textview.reveal`;
``--json`` prints the service's answer unchanged.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from typing import Any

import click

from armarius.cli.context import NUMBER, CliContext, counted, format_table, pass_cli
from armarius.cli.human import acting_human, human_options, with_reveal_note
from armarius.errors import ConfigError
from armarius.textview import reveal

#: Exit code of `sessions verify` when it found a problem.
PROBLEMS_FOUND = 1
#: How much of a subject a listing shows (`sessions show` prints all of it).
SUBJECT_SHOWN = 60




def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def _cut(subject: str) -> str:
    """A subject on one table line: its first SUBJECT_SHOWN characters (… when there are more), line
    breaks marked like the other characters reveal makes visible."""
    shown = reveal(subject[:SUBJECT_SHOWN]).replace("\n", "⟦U+000A LINE FEED⟧")
    return shown + ("…" if len(subject) > SUBJECT_SHOWN else "")


def _status(view: dict[str, Any]) -> str:
    return f"{view['status']} ({view['reason']})" if view.get("reason") else view["status"]


def _budget(budget: dict[str, Any]) -> str:
    parts = [f"{budget['used']} used of {budget['total']}"]
    parts += [f"{budget[key]} {key}" for key in ("held", "running") if budget[key]]
    return f"{', '.join(parts)}; {budget['left']} left"


@click.group()
def sessions() -> None:
    """Research sessions: review, resume, take over, raise the budget, close, verify the evidence."""


@sessions.command("list")
@click.option("--status", type=click.Choice(["open", "blocked", "closed"]), help="Only sessions in this state.")
@click.option("--mine", is_flag=True, help="Only your own sessions (otherwise all of the workspace's, if you "
                                           "manage sessions).")
@human_options
@pass_cli
def sessions_list(cli: CliContext, status: str | None, mine: bool, workspace: str, principal: str,
                  password: str | None) -> None:
    """Sessions, newest first (subjects cut short; `sessions show ID` prints one in full)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        listing = app.sessions.list_sessions(actor, status=status, everyone=not mine)
    rows = [(s["session"], _status(s), reveal(s["owner"]), f"{s['budget']['used']}/{s['budget']['total']}",
             s["updated_at"], _cut(s["subject"])) for s in listing]
    text = format_table([("ID", "STATUS", "OWNER", "BUDGET", "UPDATED", "SUBJECT"), *rows])
    cli.emit(listing, text=with_reveal_note(text, *(s["subject"] for s in listing)))


@sessions.command("show")
@click.argument("session_id", metavar="ID", type=NUMBER)
@click.option("--facts", "with_facts", is_flag=True, help="Also every enrichment fact, with its provenance.")
@human_options
@pass_cli
def sessions_show(cli: CliContext, session_id: int, with_facts: bool, workspace: str, principal: str,
                  password: str | None) -> None:
    """A session in full: its state, budget, every checkpoint and every evidence record."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        history = app.sessions.history(actor, session_id)
    evidence = history["evidence"]
    lines = [
        f"Session {session_id}: {_status(history)}",
        f"Subject: {reveal(history['subject'])}",
        f"Owner:   {reveal(history['owner'])} (opened {history['created_at']}, updated {history['updated_at']})",
        f"Budget:  {_budget(history['budget'])}",
    ]
    shown = [history["subject"]]
    if history["status"] == "blocked":
        state = _compact(history["resume_state"])
        shown.append(state)
        lines += [f"Reason:  {history['reason']}",
                  f"Retry not before: {history['retry_not_before'] or '- (a human may resume it now)'}",
                  f"Resume state: {reveal(state)}",
                  "Resume it: " + cli.command_line("sessions", "resume", str(session_id), "--workspace", workspace,
                                                   "--as", principal)]
    details = [_compact(c["details"]) for c in history["checkpoints"]]
    shown += details
    lines += ["", "Checkpoints:", format_table([("SEQ", "EVENT", "STATUS", "ACTOR", "AT", "DETAILS"), *[
        (c["seq"], c["event"], f"{c['status']} ({c['reason']})" if c["reason"] else c["status"], reveal(c["actor"]),
         c["created_at"], reveal(detail)) for c, detail in zip(history["checkpoints"], details, strict=True)]])]
    lines += ["", f"Evidence: {counted(evidence['records'], 'record')}, {counted(evidence['repeats'], 'repeat')}",
              format_table([("SEQ", "KIND", "CAPTURE", "REPEAT_OF", "ACTOR", "AT"), *[
                  (r["seq"], r["kind"], r["capture"], r["repeat_of"] or "", reveal(r["actor"]), r["at"])
                  for r in evidence["records_list"]]])]
    if with_facts:
        for revision, facts in history["fact_revisions"].items():
            objects = [_compact(fact["object"]) for fact in facts]
            shown += objects
            rows = [(fact["seq"], fact["kind"], reveal(fact["subject"]), reveal(fact["predicate"]), reveal(stated),
                     fact["capture"] or "", fact["pointer"] or "") for fact, stated in zip(facts, objects, strict=True)]
            lines += ["", f"Facts of input revision {revision}:", format_table(
                [("SEQ", "KIND", "SUBJECT", "PREDICATE", "OBJECT", "CAPTURE", "POINTER"), *rows])]
    cli.emit(history, text=with_reveal_note("\n".join(lines), *shown))


def _input(text: str) -> dict[str, Any]:
    entity_type, separator, value = text.partition(":")
    if not separator or not entity_type or not value:
        raise click.BadParameter(f"{text!r} is not TYPE:ID", param_hint="--input")
    number = value[1:] if value.startswith("-") else value
    return {"entity_type": entity_type, "id": int(value) if number.isascii() and number.isdecimal() else value}


@sessions.command("enrich")
@click.argument("session_id", metavar="ID", type=NUMBER)
@click.option("--input", "inputs", multiple=True, required=True, metavar="TYPE:ID",
              help="An entity the session is about, e.g. creature:1001 (repeat for several; digits are numbers).")
@human_options
@pass_cli
def sessions_enrich(cli: CliContext, session_id: int, inputs: tuple[str, ...], workspace: str, principal: str,
                    password: str | None) -> None:
    """Give a session a new revision of its inputs and resolve them into facts (earlier revisions stay)."""
    wanted = [_input(text) for text in inputs]
    with acting_human(cli, workspace, principal, password, research=True) as (app, actor):
        view = app.sessions.enrich(actor, session_id, wanted)
    facts = view.get("facts", {})
    cli.emit(view, text=f"Session {session_id}: {_status(view)}; facts of input revision "
                        f"{facts.get('revision') or facts.get('pending')}: "
                        f"{counted(len(facts.get('entities', {})), 'entity', 'entities')}, "
                        f"{counted(len(facts.get('relationships', [])), 'relationship')}, "
                        f"{len(facts.get('not_followed', []))} not followed.")


@sessions.command("resume")
@click.argument("session_id", metavar="ID", type=NUMBER)
@click.option("--note", help="Why it may go on (recorded with the resume checkpoint).")
@human_options
@pass_cli
def sessions_resume(cli: CliContext, session_id: int, note: str | None, workspace: str, principal: str,
                    password: str | None) -> None:
    """Let a blocked session go on (not before its retry time); a held action is used by the next query.
    A session blocked during enrichment has it completed now when its sources can be loaded (otherwise
    before the agent's next query)."""
    with ExitStack() as stack:
        try:
            app, actor = stack.enter_context(acting_human(cli, workspace, principal, password, research=True))
        except ConfigError:  # a source that cannot even be loaded: resume without it (enrichment waits)
            app, actor = stack.enter_context(acting_human(cli, workspace, principal, password))
        view = app.sessions.resume(actor, session_id, note)
    cli.emit(view, text=f"Session {session_id} resumed: it is {view['status']} again "
                        f"(budget: {_budget(view['budget'])}).")


@sessions.command("takeover")
@click.argument("session_id", metavar="ID", type=NUMBER)
@human_options
@pass_cli
def sessions_takeover(cli: CliContext, session_id: int, workspace: str, principal: str,
                      password: str | None) -> None:
    """Make another principal's session yours (administrators): what follows in it is recorded as yours."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.sessions.take_over(actor, session_id)
    cli.emit(view, text=f"Session {session_id} now belongs to {reveal(view['owner'])} ({_status(view)}).")


@sessions.command("close")
@click.argument("session_id", metavar="ID", type=NUMBER)
@click.option("--note", help="Why it ends (recorded with the closing checkpoint).")
@human_options
@pass_cli
def sessions_close(cli: CliContext, session_id: int, note: str | None, workspace: str, principal: str,
                   password: str | None) -> None:
    """Close a session: it takes no more queries; its evidence stays readable."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.sessions.close(actor, session_id, note)
    cli.emit(view, text=f"Session {session_id} is closed; its "
                        f"{counted(view['evidence']['records'], 'evidence record')} stay readable.")


@sessions.command("budget")
@click.argument("session_id", metavar="ID", type=NUMBER)
@click.argument("budget", metavar="N", type=NUMBER)
@human_options
@pass_cli
def sessions_budget(cli: CliContext, session_id: int, budget: int, workspace: str, principal: str,
                    password: str | None) -> None:
    """Raise a session's budget to N actions in all (never lower)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        view = app.sessions.raise_budget(actor, session_id, budget)
    cli.emit(view, text=f"Session {session_id}'s budget is now {counted(view['budget']['total'], 'action')} "
                        f"({_budget(view['budget'])}).")


_PROBLEMS = {
    "record_without_capture": "evidence record {evidence}: the store holds no capture {capture}",
    "capture_altered": "evidence record {evidence}: the store's capture {capture} no longer hashes to its id",
    "request_mismatch": "evidence record {evidence}: its request differs from the one in capture {capture}",
    "modified_file": "{file}: differs from the store's capture (or no longer hashes to its name); "
                     "rebuild-files writes it again",
    "missing_file": "{file}: missing; rebuild-files writes it again",
    "not_a_file": "{file}: a link or something other than a file has the capture's name; nobody reads it, and "
                  "rebuild-files refuses to replace it: remove it by hand, then run rebuild-files",
    "stale_temporary_file": "{file}: left by a writer that stopped before it renamed it; it may be removed",
    "extra_file": "{file}: no evidence record of this session names it",
    "budget_mismatch": "budget: {used} used, but {consumed_reservations} consumed reservations and "
                       "{evidence_records} evidence records",
    "interrupted_reservation": "reservation {reservation} was interrupted; it is released the next time "
                               "the session is touched",
}


def _problem_line(problem: dict[str, Any]) -> str:
    template = _PROBLEMS.get(problem["problem"])
    facts = {key: value for key, value in problem.items() if key != "problem"}
    try:
        described = template.format(**facts) if template else None
    except KeyError:
        described = None
    return f"{problem['problem'].upper().replace('_', ' ')}: " + (
        described or ", ".join(f"{key} {value}" for key, value in facts.items()))


@sessions.command("verify")
@click.argument("session_id", metavar="ID", type=NUMBER)
@human_options
@pass_cli
def sessions_verify(cli: CliContext, session_id: int, workspace: str, principal: str, password: str | None) -> None:
    """Check a session's evidence: every record against its stored capture, every capture file against
    its hash and the store, and the budget against the records.

    Reads only the store and the session's folder: no repository or research database is needed.

    \b
    Exit status:
      0  everything matches
      1  a problem was found (each is printed; with --json, under "problems")
    """
    with acting_human(cli, workspace, principal, password) as (app, actor):
        report = app.sessions.verify(actor, session_id)
    lines = [_problem_line(problem) for problem in report["problems"]]
    summary = (f"Session {session_id}: {counted(report['evidence_records'], 'evidence record')}, "
               f"{counted(report['captures'], 'capture')}, "
               f"files in {report['folder']}.")
    lines = [summary, *lines, "OK: the records, the store and the files agree." if report["ok"]
             else f"{counted(len(report['problems']), 'problem')} found."]
    cli.emit(report, text="\n".join(lines))
    if not report["ok"]:
        sys.exit(PROBLEMS_FOUND)


@sessions.command("rebuild-files")
@click.argument("session_id", metavar="ID", type=NUMBER)
@human_options
@pass_cli
def sessions_rebuild_files(cli: CliContext, session_id: int, workspace: str, principal: str,
                           password: str | None) -> None:
    """Write a session's missing or altered capture files again from the store (the store is the record).

    Files that no evidence record names are listed and left as they are."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.sessions.rebuild_files(actor, session_id)
    restored, extra = result["restored"], result["extra_files"]
    lines = [f"Restored {len(restored)} of {result['captures']} capture files in {result['folder']}"
             + (":" if restored else "."), *(f"  {capture}.json" for capture in restored)]
    if extra:
        lines += ["Files no evidence record names (left as they are):", *(f"  {reveal(name)}" for name in extra)]
    cli.emit(result, text="\n".join(lines))
