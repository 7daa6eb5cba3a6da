"""Imports and exports that a hostile file, folder or neighbour tries to derail, through the CLI on both
engines: a note swapped for a link or a FIFO while the folder is read, revision numbers far beyond any
history, JSON nested too deeply to parse, names with terminal escapes, repeated entries, values that
`remember` would store in another form, an export folder redirected while it is written, and an export
file that is there already. Each is refused clearly (or stored as remember stores it), nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain
from armarius.config import Settings
from armarius.errors import InvalidInput
from armarius.memory.service import RememberRequest
from armarius.transfer import export as export_module
from armarius.transfer import markdown
from armarius.transfer.export import REVISION_MAX, TABLES, read_export
from tests.cli.test_cli import Cli
from tests.helpers import Team, make_team
from tests.transfer.test_hostile_input import HEADER, entry, forge, refused, revision
from tests.transfer.test_import import error_of, run, snapshot, write_vault

SECRET = "TOPSECRET key material outside the vault"


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    result = Cli(settings)(*args)
    return result.exit_code, result.stdout, result.stderr


# 1. A note replaced after the folder was listed -------------------------------------------------------------


@pytest.mark.parametrize("replacement", ["link", "fifo"])
def test_a_note_replaced_by_a_link_or_fifo_after_the_listing_is_refused_never_read(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        replacement: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    vault = tmp_path / "vault"
    write_vault(vault)
    listed: Callable[..., list[Path]] = markdown._files

    def swapped(*args: Any) -> list[Path]:
        """The listing as it was; then the attacker's swap, before any file is read."""
        files = listed(*args)
        target = vault / "Deploy Checklist.md"
        assert target in files
        target.unlink()
        if replacement == "link":
            target.symlink_to(secret)
        else:
            os.mkfifo(target)  # reading it would wait for a writer forever
        return files

    monkeypatch.setattr(markdown, "_files", swapped)
    message = refused(app, settings, team, "markdown", str(vault))
    assert "Deploy Checklist.md: a symbolic link or not a regular file when it was read" in message, message
    assert SECRET not in message
    assert app.memory.list_entries(team.human)["entries"] == []


# 2. Revision numbers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [2**63 - 1, REVISION_MAX + 1, 0])
def test_a_revision_number_beyond_what_the_store_keeps_is_refused(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, number: int) -> None:
    source = forge(tmp_path / "x.jsonl", [entry(revision=number), revision()])
    message = refused(app, settings, team, "armarius", str(source))
    assert f"x.jsonl entries row 1: 'revision' is not a whole number from 1 to {REVISION_MAX}" in message, message


def test_a_high_revision_number_is_compared_without_counting_up_to_it(tmp_path: Path) -> None:
    """An entry at revision 5,000,000 with one revision row: refused by the count of its rows, without a list of
    five million numbers (300,000,000 took 12 GB)."""
    source = forge(tmp_path / "x.jsonl", [entry(revision=5_000_000), revision()])
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match="1 revisions exported for revision 5000000"):
            read_export(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak


# 4. JSON nested too deeply ----------------------------------------------------------------------------------


def forge_lines(path: Path, lines: list[bytes], counts: dict[str, int] | None = None) -> Path:
    """An export of the given lines (bytes, without their line breaks) and a correct end line."""
    body = b"".join(line + b"\n" for line in lines)
    end = {"type": "end", "counts": {**dict.fromkeys(TABLES, 0), **(counts or {})},
           "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(body + json.dumps(end).encode() + b"\n")
    return path


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("where", ["header", "row"])
def test_json_nested_too_deeply_in_an_export_is_refused_naming_its_line(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, where: str) -> None:
    header = json.dumps(HEADER).encode()
    if where == "header":
        lines = [header[:-1] + b', "deep": ' + DEEP + b"}"]
    else:
        lines = [header, b'{"table": "entries", "row": {"id": 1, "deep": ' + DEEP + b"}}"]
    source = forge_lines(tmp_path / "x.jsonl", lines, {"entries": 1} if where == "row" else None)
    message = refused(app, settings, team, "armarius", str(source))
    assert f"x.jsonl line {len(lines)}: JSON nested too deeply to read" in message, message


def test_json_nested_too_deeply_in_a_graph_is_refused_naming_its_line(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_bytes(b'{"type":"entity","name":"A","entityType":"x","observations":["ok"]}\n'
                       b'{"type":"entity","name":"B","entityType":"x","observations":' + DEEP + b"}\n")
    message = refused(app, settings, team, "graph", str(source))
    assert "memory.jsonl line 2: JSON nested too deeply to read" in message, message


# 5. Stored as remember stores it -------------------------------------------------------------------------------


def test_an_import_stores_what_remember_would_store(app: Armarius, settings: Settings, team: Team,
                                                     tmp_path: Path) -> None:
    """Repeated and unsorted tags, a title with spaces around it, a blank reason: as remember stores them
    (the repeated tag once, not an internal error)."""
    source = forge(tmp_path / "x.jsonl", [
        entry(revision=2, title="  Spaced  ", tags='["b", "a", "a"]'),
        revision(title="  Spaced  ", tags='["b", "a", "a"]', reason="   "),
        revision(revision=2, title="  Spaced  ", tags='["b", "a", "a"]', reason="  why  ")])
    code, report, err = run(settings, team, "import", "armarius", str(source))
    assert code == 0, err
    assert report["counts"]["created"] == 1
    app.memory.remember(team.agent, RememberRequest("b", "  Spaced  ", "b", tags=["b", "a", "a"], reason="   "))
    imported, remembered = app.memory.read(team.human, "a"), app.memory.read(team.human, "b")
    assert (imported["title"], imported["tags"]) == (remembered["title"], remembered["tags"]) == ("Spaced", ["a", "b"])
    history = app.memory.history(team.human, "a")["revisions"]
    assert [(row["title"], row["reason"]) for row in history] == [("Spaced", None), ("Spaced", "why")]
    assert app.memory.history(team.human, "b")["revisions"][0]["reason"] is None
    code, report, err = run(settings, team, "import", "armarius", str(source))  # a re-run changes nothing
    assert (code, report["counts"]["unchanged"]) == (0, 1), err


# 6. Names shown escaped ----------------------------------------------------------------------------------------


def test_a_vault_file_name_with_terminal_escapes_is_shown_escaped(app: Armarius, settings: Settings, team: Team,
                                                                  tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "evil\x1b[2J\u202eDM.md").write_text("---\ntitle: [unclosed\n---\nBody\n")
    message = refused(app, settings, team, "markdown", str(vault))
    assert "evil\\x1b[2J\\u202eDM.md line 2: front matter is not valid YAML" in message, message
    assert "\x1b" not in message
    assert "\u202e" not in message


@pytest.mark.parametrize("json_output", [True, False])
def test_an_export_file_name_with_terminal_escapes_is_shown_escaped(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, json_output: bool) -> None:
    source = tmp_path / "bad\x1b[31mRED\u202e.jsonl"
    source.write_text('{"type": "something else"}\n')
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.human_password}
    result = command(*(["--json"] if json_output else []), "import", "armarius", str(source),
                     "--workspace", team.workspace, "--as", f"{team.workspace}-human")
    assert result.exit_code == 3, result.stderr
    message = error_of(result.stderr)["message"] if json_output else result.stderr
    assert "bad\\x1b[31mRED\\u202e.jsonl line 1: not an Armarius export" in message, message
    assert "\x1b" not in message
    assert "\u202e" not in message


# 8. Each entry once ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("repeated", ["slug", "id"])
def test_an_export_with_an_entry_twice_is_refused_naming_both_lines(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, repeated: str) -> None:
    second = entry(id=2, title="T2") if repeated == "slug" else entry(slug="b", title="T2")
    source = forge(tmp_path / "x.jsonl", [entry(), second, revision(), revision(entry_id=2, title="T2")])
    message = refused(app, settings, team, "armarius", str(source))
    value = "'a'" if repeated == "slug" else "1"
    assert (f"x.jsonl line 3: the entry's {repeated} {value} again, already the {repeated} of the entry on "
            "line 2") in message, message


# 3. An export folder redirected while it is written ----------------------------------------------------------


def test_an_export_folder_redirected_while_it_is_written_is_never_written_through(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for slug in ("a", "b", "c"):
        app.memory.remember(team.agent, RememberRequest(slug, slug.upper(), "body " + slug))
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    rendered: Callable[..., str] = export_module.render_note
    calls = []

    def redirect(*args: Any) -> str:
        """After the first entry's file, the attacker puts a link where the entries folder was."""
        calls.append(args)
        if len(calls) == 2:
            (out / "entries").rename(out / "moved")
            (out / "entries").symlink_to(elsewhere, target_is_directory=True)
        return rendered(*args)

    monkeypatch.setattr(export_module, "render_note", redirect)
    code, _, err = cli(settings, "--json", "export", str(out), "--workspace", "alpha")
    assert code == 6, err
    error = error_of(err)
    assert error["code"] == "conflict"
    assert "'entries' was put into the export folder" in error["message"], error
    assert list(elsewhere.iterdir()) == []
    assert not any(event.action == "workspace.exported"
                   for event in chain.tail(app.database, team.human.workspace_id, 100))


def test_an_export_folder_and_its_files_are_the_owners_only(app: Armarius, settings: Settings, team: Team,
                                                            tmp_path: Path) -> None:
    app.memory.remember(team.agent, RememberRequest("ops/db", "DB", "db-1"))
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    assert cli(settings, "export", str(out), "--workspace", "alpha")[0] == 0
    assert oct((out / "entries").stat().st_mode & 0o777) == oct(0o700)
    assert oct((out / "entries" / "ops").stat().st_mode & 0o777) == oct(0o700)
    assert oct((out / "entries" / "ops" / "db.md").stat().st_mode & 0o777) == oct(0o600)


# 7. An export file that is there already, or no place for one ----------------------------------------------


def test_an_export_never_replaces_a_file_unless_told_to(app: Armarius, settings: Settings, team: Team,
                                                        tmp_path: Path) -> None:
    app.memory.remember(team.agent, RememberRequest("a", "A", "body"))
    out = tmp_path / "notes.jsonl"
    out.write_text("someone's unrelated notes\n")
    before = snapshot(app, team)
    code, _, err = cli(settings, "--json", "export", str(out), "--workspace", "alpha")
    assert (code, error_of(err)["code"]) == (3, "invalid_input"), err
    assert "notes.jsonl' exists" in error_of(err)["message"]
    assert "--overwrite" in error_of(err)["message"]
    assert out.read_text() == "someone's unrelated notes\n"
    assert snapshot(app, team) == before  # not even the export's audit event
    code, _, err = cli(settings, "export", str(out), "--workspace", "alpha", "--overwrite")
    assert code == 0, err
    assert out.read_text().startswith('{"exported_at"')


@pytest.mark.parametrize("place", ["a folder", "below a file", "a link"])
def test_an_export_file_that_cannot_be_written_there_is_invalid_input(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, place: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    if place == "a folder":
        out = tmp_path / "dir.jsonl"
        out.mkdir()
        expected = "is a folder"
    elif place == "below a file":
        out = tmp_path / "file.txt" / "out.jsonl"
        expected = "cannot be written to"
    else:
        out = tmp_path / "link.jsonl"
        out.symlink_to(tmp_path / "file.txt")
        expected = "is not a regular file"
    before = snapshot(app, team)
    code, _, err = cli(settings, "--json", "export", str(out), "--workspace", "alpha", "--overwrite")
    assert (code, error_of(err)["code"]) == (3, "invalid_input"), err
    assert expected in error_of(err)["message"], err
    assert (tmp_path / "file.txt").read_text() == "x"
    assert snapshot(app, team) == before
