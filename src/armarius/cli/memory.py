"""`armarius memory …`: the human side of memory (curation, review) and reading."""

from __future__ import annotations

import click

from armarius.cli.context import CliContext, pass_cli
from armarius.cli.human import acting_human, human_options


@click.group()
def memory() -> None:
    """Curate entries, review agents' overrides, read entries and their history."""


@memory.command("curate")
@click.argument("slug")
@click.option("--revision", type=int, required=True, help="The revision you read (it must be the current one).")
@human_options
@pass_cli
def memory_curate(cli: CliContext, slug: str, revision: int, workspace: str, principal: str,
                  password: str | None) -> None:
    """Mark the revision you reviewed as curated."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.memory.curate(actor, slug, revision)
    cli.emit(result, text=f"{slug} revision {revision} is curated." if result["changed"]
             else f"{slug} revision {revision} was curated already.")


@memory.command("uncurate")
@click.argument("slug")
@human_options
@pass_cli
def memory_uncurate(cli: CliContext, slug: str, workspace: str, principal: str, password: str | None) -> None:
    """Remove the curated mark."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.memory.uncurate(actor, slug)
    cli.emit(result, text=f"{slug} is no longer curated." if result["changed"] else f"{slug} was not curated.")


@memory.command("needs-review")
@human_options
@pass_cli
def memory_needs_review(cli: CliContext, workspace: str, principal: str, password: str | None) -> None:
    """Entries whose curation an agent overrode, with reasons and a diff against the curated revision."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        listing = app.memory.needs_review(actor)
    lines = []
    for item in listing:
        lines.append(f"== {item['slug']} (revision {item['revision']}, curated was {item['curated_revision']})")
        lines += [f"   overridden in revision {override['revision']} by {override['author']}: {override['reason']}"
                  for override in item["overrides"]]
        lines.append(item["diff"])
    cli.emit(listing, text="\n".join(lines) if lines else "Nothing needs review.")


@memory.command("show")
@click.argument("slug")
@click.option("--revision", type=int, help="An older revision.")
@human_options
@pass_cli
def memory_show(cli: CliContext, slug: str, revision: int | None, workspace: str, principal: str,
                password: str | None) -> None:
    """Print an entry in full."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        entry = app.memory.read(actor, slug, revision)
    curated = "curated" if entry["curated"] else "not curated"
    header = f"{entry['slug']}  revision {entry['revision']}  ({curated}; tags: {', '.join(entry['tags']) or '-'})"
    cli.emit(entry, text=f"{header}\n# {entry['title']}\n\n{entry['body']}")


@memory.command("history")
@click.argument("slug")
@human_options
@pass_cli
def memory_history(cli: CliContext, slug: str, workspace: str, principal: str, password: str | None) -> None:
    """Every revision: who, when, why."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        history = app.memory.history(actor, slug)
    rows = [(r["revision"], r["at"], r["author"], "override" if r["overrode_curated"] else "", r["reason"] or "")
            for r in history["revisions"]]
    cli.emit(history, table=[("REV", "AT", "AUTHOR", "", "REASON"), *rows])
