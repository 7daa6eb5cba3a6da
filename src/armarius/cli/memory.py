"""`armarius memory …`: the human side of memory: find, read, curate, revert, review.

Every text an agent may have written (titles, bodies, reasons, diffs, snippets) is printed through
:func:`armarius.textview.reveal`, the same view `approve` uses: what the curator sees is what they
curate. ``--json`` prints the service's answer unchanged.
"""

from __future__ import annotations

from typing import Any

import click

from armarius.app import Armarius
from armarius.cli.context import NUMBER, CliContext, counted, format_table, pass_cli, progress
from armarius.cli.human import acting_human, human_options, with_reveal_note
from armarius.memory.service import LIST_MAX, RECALL_MAX, RECALL_MODES
from armarius.textview import reveal


@click.group()
def memory() -> None:
    """Find, read and curate entries; review and revert agents' overrides."""



@memory.command("list")
@click.option("--prefix", help="Only slugs that start with this (for example ops/).")
@click.option("--tag", help="Only entries with this tag.")
@click.option("--curated/--not-curated", default=None, help="Only curated entries, or only the others.")
@click.option("--needs-review", is_flag=True, help="Only entries whose curation an agent overrode.")
@click.option("--after", metavar="SLUG", help="The next page: the slug the previous page said to continue after.")
@click.option("--limit", type=click.IntRange(1, LIST_MAX), default=50, show_default=True)
@human_options
@pass_cli
def memory_list(cli: CliContext, prefix: str | None, tag: str | None, curated: bool | None, needs_review: bool,
                after: str | None, limit: int, workspace: str, principal: str, password: str | None) -> None:
    """Entries in slug order, a page at a time."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        page = app.memory.list_entries(actor, prefix=prefix, tag=tag, curated=curated,
                                       needs_review=True if needs_review else None, after=after, limit=limit)
    entries = page["entries"]
    rows = [(e["slug"], e["revision"], "yes" if e["curated"] else "", "yes" if e["needs_review"] else "",
             ",".join(e["tags"]), reveal(e["title"])) for e in entries]
    text = format_table([("SLUG", "REV", "CURATED", "REVIEW", "TAGS", "TITLE"), *rows])
    if "next_after" in page:
        text += ("\nMore entries follow: " + cli.command_line(
            "memory", "list", *_list_filters(prefix, tag, curated, needs_review), "--after", page["next_after"],
            "--limit", str(limit), "--workspace", workspace, "--as", principal))
    cli.emit(page, text=with_reveal_note(text, *(e["title"] for e in entries)))


def _list_filters(prefix: str | None, tag: str | None, curated: bool | None, needs_review: bool) -> list[str]:
    options = [*(["--prefix", prefix] if prefix else []), *(["--tag", tag] if tag else [])]
    if curated is not None:
        options.append("--curated" if curated else "--not-curated")
    return options + (["--needs-review"] if needs_review else [])


@memory.command("search")
@click.argument("words", nargs=-1, required=True)
@click.option("--tag", "tags", multiple=True, help="Only entries with this tag (repeat it: entries with all of them).")
@click.option("--curated-only", is_flag=True, help="Only curated entries.")
@click.option("--limit", type=click.IntRange(1, RECALL_MAX), default=10, show_default=True)
@click.option("--mode", type=click.Choice(RECALL_MODES), default="hybrid", show_default=True,
              help="By words and meaning fused, by words only (lexical), or by meaning only (semantic).")
@human_options
@pass_cli
def memory_search(cli: CliContext, words: tuple[str, ...], tags: tuple[str, ...], curated_only: bool, limit: int,
                  mode: str, workspace: str, principal: str, password: str | None) -> None:
    """Ranked search, the same recall agents use: by words (no query syntax) and by meaning."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        found = app.memory.recall(actor, " ".join(words), limit=limit, tags=list(tags) or None,
                                  curated_only=curated_only, mode=mode)
    results = found["results"]
    heading = {"all": f"{counted(len(results), 'best match', 'best matches')} of all the words:",
               "any": "No entry holds all the words; these hold some of them:",
               "meaning": "No entry holds the words; these are close in meaning:",
               "none": "No entry matches."}[found["match"]]
    lines = [heading]
    for hit in results:
        curated = "curated" if hit["curated"] else "not curated"
        lines += ["", f"{hit['slug']}  (revision {hit['revision']}, {curated})", f"  {reveal(hit['title'])}",
                  f"  {reveal(hit['snippet'])}"]
    cli.emit(found, text=with_reveal_note("\n".join(lines), *(h["title"] + h["snippet"] for h in results)))


@memory.command("show")
@click.argument("slug")
@click.option("--revision", type=NUMBER, help="An older revision.")
@human_options
@pass_cli
def memory_show(cli: CliContext, slug: str, revision: int | None, workspace: str, principal: str,
                password: str | None) -> None:
    """Print an entry in full, with hidden characters made visible."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        entry = app.memory.read(actor, slug, revision)
    curated = "curated" if entry["curated"] else "not curated"
    if entry.get("current_revision", entry["revision"]) != entry["revision"]:
        curated += f"; the current revision is {entry['current_revision']}"
    lines = [
        f"{entry['slug']}  revision {entry['revision']}  ({curated}; tags: {', '.join(entry['tags']) or '-'})",
        f"written by {entry['updated_by']} at {entry['updated_at']}",
        f"# {reveal(entry['title'])}",
        "",
        reveal(entry["body"]),
    ]
    for label, key in (("Links", "links"), ("Broken links", "broken_links"), ("Linked from", "backlinks")):
        if entry[key]:
            lines.append(f"{label}: {', '.join(entry[key])}")
    cli.emit(entry, text=with_reveal_note("\n".join(lines), entry["title"], entry["body"]))


@memory.command("history")
@click.argument("slug")
@human_options
@pass_cli
def memory_history(cli: CliContext, slug: str, workspace: str, principal: str, password: str | None) -> None:
    """Every revision: who, when, why."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        history = app.memory.history(actor, slug)
    revisions = history["revisions"]
    rows = [(r["revision"], r["at"], r["author"], "override" if r["overrode_curated"] else "",
             reveal(r["reason"] or "")) for r in revisions]
    cli.emit(history, text=with_reveal_note(format_table([("REV", "AT", "AUTHOR", "", "REASON"), *rows]),
                                      *(r["reason"] or "" for r in revisions)))


@memory.command("curate")
@click.argument("slug")
@click.option("--revision", type=NUMBER, required=True, help="The revision you read (it must be the current one).")
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


@memory.command("revert")
@click.argument("slug")
@click.option("--to-curated", is_flag=True, help="Back to the last curated revision's title, body and tags.")
@click.option("--reason", required=True, help="Why the changes since the curation go (recorded with the revision).")
@human_options
@pass_cli
def memory_revert(cli: CliContext, slug: str, to_curated: bool, reason: str, workspace: str, principal: str,
                  password: str | None) -> None:
    """Undo an agent's changes: a new revision equal to the last curated one, curated by you."""
    if not to_curated:
        raise click.UsageError("say what to revert to: --to-curated (the last curated revision) is the choice")
    with acting_human(cli, workspace, principal, password) as (app, actor):
        result = app.memory.revert_to_curated(actor, slug, reason)
    cli.emit(result, text=(
        f"{slug} is back to curated revision {result['reverted_to']}'s content as revision {result['revision']}, "
        "curated by you. The reverted revisions stay in its history." if result["changed"]
        else f"{slug} is curated at its current revision {result['revision']}; there is nothing to revert."
    ))


@memory.command("needs-review")
@human_options
@pass_cli
def memory_needs_review(cli: CliContext, workspace: str, principal: str, password: str | None) -> None:
    """Entries whose curation an agent overrode, with reasons, a diff against the curated revision,
    and the two ways to settle each: curate the change, or revert to the curated revision."""
    with acting_human(cli, workspace, principal, password) as (app, actor):
        listing = app.memory.needs_review(actor)
    lines: list[str] = []
    shown: list[str] = []
    for item in listing:
        shown += [item["title"], item["diff"], *(o["reason"] or "" for o in item["overrides"])]
        lines += _review_item(cli, item, workspace, principal)
    text = with_reveal_note("\n".join(lines).rstrip("\n"), *shown) if lines else "Nothing needs review."
    cli.emit(listing, text=text)


def _review_item(cli: CliContext, item: dict[str, Any], workspace: str, principal: str) -> list[str]:
    slug, acting = item["slug"], ("--workspace", workspace, "--as", principal)
    return [
        f"== {slug} (revision {item['revision']}; curated revision {item['curated_revision']}): "
        f"{reveal(item['title'])}",
        *(f"   overridden in revision {o['revision']} by {o['author']} at {o['at']}: {reveal(o['reason'] or '')}"
          for o in item["overrides"]),
        reveal(item["diff"]).rstrip("\n"),
        "   Keep the change:  " + cli.command_line("memory", "curate", slug, "--revision", str(item["revision"]),
                                                   *acting),
        "   Undo it:          " + cli.command_line("memory", "revert", slug, "--to-curated", "--reason", "WHY",
                                                   *acting),
        "",
    ]


@memory.command("reindex")
@click.option("--workspace", help="Only this workspace (default: every workspace).")
@pass_cli
def memory_reindex(cli: CliContext, workspace: str | None) -> None:
    """Embed the entries and active evidence units that have no vector of the current model, for recall by
    meaning (an operator's task, like `audit verify`). Resumable: an interrupted run keeps what it did; a
    second run does nothing."""
    with cli.app() as app:
        results = reindex_all(app, workspace)
    cli.emit(results, text="\n".join(
        f"{name}: {result['embedded']} embedded; {result['with_vector']} of "
        f"{counted(result['entries'], 'entry', 'entries')} and {result['units_with_vector']} of "
        f"{counted(result['units'], 'active evidence unit')} have a vector."
        for name, result in results.items()) or "There are no workspaces.")


def reindex_all(app: Armarius, workspace: str | None = None) -> dict[str, dict[str, int]]:
    """Reindex one workspace or every one, with progress on standard error."""
    results = {}
    for space in [app.directory.workspace(workspace)] if workspace else app.directory.workspaces():
        before = app.memory.vector_counts(space.id)
        missing = 0 if before is None else (before["entries"] - before["with_vector"]
                                            + before["units"] - before["units_with_vector"])
        with progress(missing, f"Embedding {space.name}") as step:
            results[space.name] = app.memory.reindex(space.id, progress=step)
    return results
