"""`armarius approve` and `armarius drafts …`: the human side of drafts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from armarius.cli.context import NUMBER, CliContext, counted, pass_cli
from armarius.cli.human import acting_human, human_options
from armarius.drafts.model import DraftPayload
from armarius.drafts.steps import withdrawal_note
from armarius.errors import InvalidInput
from armarius.textview import REVEAL_NOTE, reveal, short_fingerprint

#: Exit code when the content was shown but not confirmed (nothing was approved).
NOT_CONFIRMED = 9


def read_proposal_file(path: Path) -> Any:
    """Strict JSON: no duplicate keys, no NaN or Infinity; the shape is checked by the service."""
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if len(keys) != len(set(keys)):
            raise InvalidInput("The proposal file repeats a key.", field="proposal")
        return dict(pairs)

    def no_constants(name: str) -> Any:
        raise InvalidInput(f"The proposal file contains {name}, which is not JSON.", field="proposal")

    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicates,
                          parse_constant=no_constants)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidInput(f"The proposal file cannot be read as UTF-8 JSON: {error}", field="proposal") from None


def review_text(content: DraftPayload, heading: str) -> str:
    """The complete content under a heading, with nothing hidden: what a human approves or reads."""
    rule = "─" * 72
    return "\n".join([
        rule,
        heading,
        f"Fingerprint: {short_fingerprint(content.fingerprint)}  (sha256 {content.fingerprint})",
        rule,
        f"slug:  {reveal(content.slug)}",
        f"title: {reveal(content.title)}",
        f"text ({counted(len(content.text), 'character')}, {counted(len(content.text.splitlines()), 'line')}):",
        rule,
        reveal(content.text),
        rule,
        REVEAL_NOTE,
    ])


@click.command()
@click.argument("proposal_file", required=False, type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--proposal", "proposal_id", type=NUMBER, help="A proposal from the review queue (filed by an agent).")
@click.option("--confirm-exact-content", is_flag=True,
              help="Approve exactly the content shown. Without it, the content is printed and nothing is approved.")
@human_options
@pass_cli
def approve(cli: CliContext, proposal_file: Path | None, proposal_id: int | None, confirm_exact_content: bool,
            workspace: str, principal: str, password: str | None) -> None:
    """Review a draft proposal in full and, with --confirm-exact-content, issue its single-use approval."""
    if (proposal_file is None) == (proposal_id is None):
        raise click.UsageError("give either PROPOSAL_FILE or --proposal ID")
    with acting_human(cli, workspace, principal, password) as (app, actor):
        if proposal_id is not None:
            shown = app.drafts.proposal(actor, proposal_id)
            content = DraftPayload(shown["slug"], shown["title"], shown["text"])
            origin, payload = f"proposal {proposal_id} by {reveal(shown['proposed_by'])}, {shown['status']}", None
        else:
            payload = read_proposal_file(proposal_file) if proposal_file else None
            content = app.drafts.parse(payload)
            origin = reveal(str(proposal_file))
        click.echo(review_text(content, f"Approve a draft ({origin})"), err=cli.as_json)
        if not confirm_exact_content:
            click.echo("Not approved. Read the content above; to approve exactly it, repeat with "
                       "--confirm-exact-content.", err=True)
            sys.exit(NOT_CONFIRMED)
        issued = app.drafts.approve(actor, proposal_id=proposal_id, payload=payload,
                                    reviewed_fingerprint=content.fingerprint)
    handover = ("The proposing agent collects it with proposal_status and its collection key (again if an answer "
                "is lost, until the approval is used or expires)." if proposal_id is not None
                else "Hand it to the agent that will call create_draft with exactly this content.")
    if issued.replaces is not None:
        handover += (f"\nIt replaces approval {issued.replaces} ({issued.replaced_outcome}), which no longer works.")
    cli.emit(
        {"approval": issued.token, "approval_id": issued.approval_id, "expires_at": issued.expires_at,
         "fingerprint": issued.fingerprint, "proposal": issued.proposal_id, "replaces": issued.replaces,
         "replaced_outcome": issued.replaced_outcome},
        text=f"Approved. Single-use token, valid until {issued.expires_at} (shown once):\n{issued.token}\n{handover}",
    )


@click.group()
def drafts() -> None:
    """Draft proposals, approved drafts, and promotion to memory."""


@drafts.command("proposals")
@click.option("--status", type=click.Choice(["pending", "approved", "expired", "drafted", "rejected", "all"]),
              default="pending", show_default=True,
              help="expired: approved, but the approval ran out unused (approve it again with approve --proposal).")
@human_options
@pass_cli
def drafts_proposals(cli: CliContext, status: str, workspace: str, principal: str, password: str | None) -> None:
    """The review queue (text with hidden characters made visible, as approve shows it)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        listing = app.drafts.proposals(actor, None if status == "all" else status)
    cli.emit(listing, table=[("ID", "STATUS", "SLUG", "TITLE", "BY", "FINGERPRINT"), *[
        (p["proposal"], p["status"], reveal(p["slug"]), reveal(p["title"]), reveal(p["proposed_by"]),
         p["fingerprint_short"])
        for p in listing]])


@drafts.command("reject")
@click.argument("proposal_id", type=NUMBER)
@click.option("--note", help="What to change; the proposing agent sees it.")
@human_options
@pass_cli
def drafts_reject(cli: CliContext, proposal_id: int, note: str | None, workspace: str, principal: str,
                  password: str | None) -> None:
    """Reject a proposal (the agent must reformulate); an approval of it that was not used is withdrawn."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.drafts.reject(actor, proposal_id, note)
    cli.emit(result, text=f"Proposal {proposal_id} rejected.{withdrawal_note(result)}")


@drafts.command("list")
@human_options
@pass_cli
def drafts_list(cli: CliContext, workspace: str, principal: str, password: str | None) -> None:
    """Drafts written with an approval."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        listing = app.drafts.drafts(actor)
    cli.emit(listing, table=[("SLUG", "TITLE", "BY", "CREATED", "PROMOTED"), *[
        (reveal(d["slug"]), reveal(d["title"]), reveal(d["created_by"]), d["created_at"], d["promoted_revision"] or "")
        for d in listing]])


@drafts.command("show")
@click.argument("slug")
@human_options
@pass_cli
def drafts_show(cli: CliContext, slug: str, workspace: str, principal: str, password: str | None) -> None:
    """A draft in full, with hidden characters made visible."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        draft = app.drafts.draft(actor, slug)
    promoted = ("not promoted" if draft["promoted_revision"] is None
                else f"promoted to entry revision {draft['promoted_revision']} by {reveal(draft['promoted_by'])}")
    heading = (f"Draft {reveal(draft['slug'])} (written by {reveal(draft['created_by'])} at {draft['created_at']}, "
               f"{promoted})")
    cli.emit(draft, text=review_text(DraftPayload(draft["slug"], draft["title"], draft["text"]), heading))


@drafts.command("promote")
@click.argument("slug")
@human_options
@pass_cli
def drafts_promote(cli: CliContext, slug: str, workspace: str, principal: str, password: str | None) -> None:
    """Turn a draft into a memory entry (recorded in the audit log)."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.drafts.promote(actor, slug)
    cli.emit(result, text=f"Draft {slug} is now memory entry {slug} (revision {result['revision']}).")
