"""`armarius import graph|markdown|armarius` and `armarius export`.

Imports act as a human principal (``--as``), who needs memory.write in the workspace: what comes
in is attributed to them. An export is the operator's (like `audit verify`: direct access to the
data folder); it is recorded in the workspace's audit log.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from armarius.app import Armarius, initialize, open_app
from armarius.audit import chain as audit
from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password
from armarius.cli.context import CliContext, counted, pass_cli, progress
from armarius.cli.human import acting_human, human_options
from armarius.config import Settings
from armarius.memory.model import MemoryLimits, check_slug
from armarius.store.schema import latest_version
from armarius.textview import reveal
from armarius.transfer.export import chain_problems, read_export, read_records, write_folder, write_jsonl
from armarius.transfer.graph import read_graph
from armarius.transfer.markdown import read_folder
from armarius.transfer.model import Plan
from armarius.transfer.service import ImportService

READERS: dict[str, Callable[..., Plan]] = {"graph": read_graph, "markdown": read_folder, "armarius": read_export}


@click.group("import")
def import_group() -> None:
    """Bring notes in from other memory servers or from an Armarius export (never curated)."""


def _import_command(kind: str, path_type: click.Path, summary: str) -> None:
    @import_group.command(kind, help=summary)
    @click.argument("source", type=path_type)
    @click.option("--prefix", default="", metavar="SLUG/",
                  help="Put every slug under this prefix (for example 'imported/').")
    @click.option("--dry-run", is_flag=True, help="Say what would happen, with counts; write nothing.")
    @click.option("--skip-curated", is_flag=True,
                  help="Leave curated entries whose content differs as they are and import the rest.")
    @human_options
    @pass_cli
    def command(cli: CliContext, source: Path, prefix: str, dry_run: bool, skip_curated: bool, workspace: str,
                principal: str, password: str | None) -> None:
        if prefix:
            check_slug(prefix.rstrip("/"), "prefix")
            prefix = prefix.rstrip("/") + "/"
        with acting_human(cli, workspace, principal, password) as (app, actor):
            plan = READERS[kind](source, prefix=prefix)
            service = ImportService(app.database, app.memory, app.memory.limits)
            with progress(len(plan.notes), "Importing") as step:
                report = service.run(actor, plan, dry_run=dry_run, skip_curated=skip_curated, progress=step)
        cli.emit(report, text=_import_text(report, workspace))


FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
FOLDER = click.Path(exists=True, file_okay=False, path_type=Path)
_import_command("graph", FILE, "The reference MCP memory server's knowledge graph (its JSONL file): each entity "
                               "an entry, its relations [[links]] with their types in the text.")
_import_command("markdown", FOLDER, "A folder of Markdown notes with front matter (Obsidian, basic-memory, an "
                                    "Armarius export folder): paths become slugs, [[wikilinks]] links.")
_import_command("armarius", FILE, "An Armarius JSONL export: its entries with every revision (curation is not "
                                  "carried over: a human curates again).")


def _import_text(report: dict[str, Any], workspace: str) -> str:
    counts = report["counts"]
    lines = [("Dry run of " if report["dry_run"] else "Imported ") + f"{report['kind']} {reveal(report['source'])} "
             f"into workspace {workspace}: {counts['created']} created, {counts['updated']} updated, "
             f"{counts['unchanged']} unchanged" + (f", {counts['curated_kept']} curated kept as they are"
                                                   if counts["curated_kept"] else "") + "."]
    if report["dry_run"]:
        lines.append("Nothing was written.")
    elif not report["written"]:
        lines.append("Nothing to change: everything is there already.")
    if report["renamed"]:
        lines += ["", f"Renamed ({report['renamed_count']}):",
                  *(f"  {reveal(item['origin'])}: {item['name']!r} -> {item['slug']}" for item in report["renamed"])]
    if report["notices"]:
        lines += ["", f"Notes ({report['notices_count']}):", *(f"  {reveal(line)}" for line in report["notices"])]
    if report["curated_kept"]:
        lines += ["", "Curated entries left as they are: " + ", ".join(report["curated_kept"])]
    if report["curated_in_source"]:
        lines += ["", f"{counted(len(report['curated_in_source']), 'entry was', 'entries were')} curated in the "
                      "export; curation is a "
                      "human's act, so review and curate them here again (`armarius memory needs-review` does not "
                      "list them: they were never curated here)."]
    return "\n".join(lines)


@click.command("export")
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--workspace", required=True, help="The workspace to export.")
@click.option("--verify", is_flag=True,
              help="Afterwards, import the export into a scratch store and compare it with what was exported.")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT.jsonl when that file exists (a folder is never "
                                                "written over: name a new or empty one).")
@pass_cli
def export(cli: CliContext, output: Path, workspace: str, verify: bool, overwrite: bool) -> None:
    """Write a workspace to OUTPUT: a .jsonl file (everything: history, drafts, sessions, evidence, repairs,
    the audit chain; no secrets), or a folder of Markdown files otherwise. An existing file is refused unless
    --overwrite is given."""
    as_jsonl = output.suffix == ".jsonl"
    with cli.app() as app:
        space = app.directory.workspace(workspace)
        version = latest_version(app.database.dialect)
        if as_jsonl:
            counts = write_jsonl(app.database, space, output, schema_version=version, overwrite=overwrite)
            written: list[dict[str, Any]] = []
        else:
            counts, written = write_folder(app.database, space, output, schema_version=version)
        with app.database.transaction(workspace_id=space.id, write=True) as tx:
            audit.append(tx, actor=cli.operator, action="workspace.exported", subject=workspace,
                         details={"format": "jsonl" if as_jsonl else "markdown", "counts": counts})
    result: dict[str, Any] = {"workspace": workspace, "output": str(output), "format": "jsonl" if as_jsonl
                              else "markdown", "counts": counts}
    lines = [f"Exported workspace {workspace} to {output}: "
             + ", ".join(f"{name} {count}" for name, count in counts.items() if count) + "."]
    if verify:
        limits = app.memory.limits
        problems = verify_jsonl(output, limits) if as_jsonl else verify_folder(output, written, limits)
        result["verified"], result["problems"] = not problems, problems
        lines.append("Verified: a scratch store that imported the export holds the same entries and history."
                     if not problems else "VERIFICATION FAILED:\n" + "\n".join(f"  {p}" for p in problems))
    cli.emit(result, text="\n".join(lines))
    if verify and result["problems"]:
        sys.exit(1)


@contextmanager
def scratch_importer(limits: MemoryLimits) -> Iterator[tuple[Armarius, Callable[[Plan], dict[str, Any]]]]:
    """A new SQLite store in a temporary folder with one workspace and a human to import as, with the
    installation's memory limits (an entry the installation holds fits)."""
    with tempfile.TemporaryDirectory(prefix="armarius-verify-") as folder:
        settings = Settings(data_dir=Path(folder), memory_body_max_bytes=limits.body_max_bytes,
                            memory_duplicate_threshold=limits.duplicate_threshold)
        initialize(settings)
        app = open_app(replace(settings, research_config=None))
        try:
            password, by = new_password(), "operator:verify"
            app.directory.create_workspace("verify", by=by)
            app.directory.add_principal("verifier", Kind.HUMAN, workspace="verify", role=Role.EDITOR, by=by,
                                        password=password)
            actor = app.directory.authenticate_password("verifier", password, workspace="verify")
            service = ImportService(app.database, app.memory, app.memory.limits)
            yield app, lambda plan: service.run(actor, plan)
        finally:
            app.close()


_REVISION_FIELDS = ("title", "body", "tags", "reason", "author", "created_at", "overrode_curated")


def verify_jsonl(path: Path, limits: MemoryLimits) -> list[str]:
    """The export file is whole, its audit chain links up, and importing it gives the same entries and history."""
    _, exported = read_records(path)
    problems = chain_problems(exported)
    with scratch_importer(limits) as (app, run_import):
        run_import(read_export(path))
        again = Path(app.settings.data_dir) / "again.jsonl"
        write_jsonl(app.database, app.directory.workspace("verify"), again, schema_version=0)
        _, imported = read_records(again)
    return problems + _differences(_history(exported), _history(imported))


def verify_folder(folder: Path, written: list[dict[str, Any]], limits: MemoryLimits) -> list[str]:
    """Importing the folder gives the entries that were written to it."""
    with scratch_importer(limits) as (app, run_import):
        run_import(read_folder(folder))
        with app.database.transaction(workspace_id=app.directory.workspace("verify").id) as tx:
            imported = tx.all("SELECT slug, title, body, tags FROM entries WHERE workspace_id = ?",
                              (tx.require_workspace(),))
    return _differences(_contents(written), _contents(imported))


def _contents(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {row["slug"]: (row["title"], row["body"], row["tags"]) for row in rows}


def _history(tables: dict[str, list[dict[str, Any]]]) -> dict[str, tuple[Any, ...]]:
    """Each entry's content and every revision, by slug."""
    revisions: dict[Any, list[tuple[Any, ...]]] = {}
    for row in tables["entry_revisions"]:
        revisions.setdefault(row["entry_id"], []).append(
            tuple(bool(row[key]) if key == "overrode_curated" else row[key] for key in _REVISION_FIELDS))
    return {row["slug"]: (row["title"], row["body"], row["tags"], row["revision"],
                          tuple(revisions.get(row["id"], ()))) for row in tables["entries"]}


def _differences(exported: dict[str, Any], imported: dict[str, Any]) -> list[str]:
    problems = [f"{slug}: missing after the import" for slug in exported if slug not in imported]
    problems += [f"{slug}: not in the export but imported" for slug in imported if slug not in exported]
    problems += [f"{slug}: differs after the import" for slug, value in exported.items()
                 if slug in imported and imported[slug] != value]
    return problems
