"""Hostile or malformed sources, through the CLI on both engines: a forged Armarius export (its end
line is a checksum anyone can recompute), rows of the wrong type, forged authorship, symbolic links
and bad names in a Markdown folder; each refused clearly (or left out, named) with nothing written.
(Front matter of the wrong shape and YAML alias bombs are among test_import's bad notes.)"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain
from armarius.config import Settings
from armarius.memory.model import SLUG_MAX
from armarius.memory.service import RememberRequest
from armarius.transfer.export import TABLES
from armarius.transfer.model import SlugBook
from tests.cli.test_cli import Cli
from tests.helpers import Team, make_team
from tests.transfer.test_import import error_of, run, snapshot, write_vault

HEADER = {"type": "armarius-export", "version": 1, "workspace": "source", "exported_at": "2024-01-01T00:00:00.000000Z",
          "schema_version": 1}
AT = "2024-01-01T00:00:00.000000Z"


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def forge(path: Path, rows: list[tuple[str, dict[str, Any]]], header: dict[str, Any] | None = None) -> Path:
    """An export file with a correct end line (its SHA-256 needs no key)."""
    lines = [json.dumps(header or HEADER).encode() + b"\n"]
    counts = dict.fromkeys(TABLES, 0)
    for table, row in rows:
        lines.append(json.dumps({"table": table, "row": row}).encode() + b"\n")
        counts[table] += 1
    lines.append(json.dumps({"type": "end", "counts": counts,
                             "sha256": hashlib.sha256(b"".join(lines)).hexdigest()}).encode() + b"\n")
    path.write_bytes(b"".join(lines))
    return path


def entry(**fields: Any) -> tuple[str, dict[str, Any]]:
    return "entries", {"id": 1, "slug": "a", "title": "T", "body": "b", "tags": "[]", "revision": 1,
                       "curated_revision": None, **fields}


def revision(**fields: Any) -> tuple[str, dict[str, Any]]:
    return "entry_revisions", {"entry_id": 1, "revision": 1, "title": "T", "body": "b", "tags": "[]", "reason": None,
                               "author": "human:someone", "created_at": AT, "overrode_curated": False, **fields}


def refused(app: Armarius, settings: Settings, team: Team, *args: str) -> str:
    """The message an import is refused with (as invalid input), after checking that it changed nothing."""
    before = snapshot(app, team)
    code, _, err = run(settings, team, "import", *args)
    error = error_of(err)
    assert (code, error["code"]) == (3, "invalid_input"), err
    assert "nothing was imported" in error["message"]
    assert snapshot(app, team) == before
    return str(error["message"])


def test_a_well_formed_forged_export_imports_with_its_recorded_authors(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    source = forge(tmp_path / "x.jsonl", [entry(revision=2, title="T2"), revision(),
                                          revision(revision=2, title="T2", author="agent:helper", reason="why")])
    code, report, err = run(settings, team, "import", "armarius", str(source))
    assert code == 0, err
    assert report["counts"]["created"] == 1
    history = app.memory.history(team.human, "a")["revisions"]
    assert [(r["author"], r["at"]) for r in history] == [("human:someone", AT), ("agent:helper", AT)]
    events = chain.tail(app.database, team.human.workspace_id, 3)
    assert [(e.action, e.actor) for e in events][-2:] == [("memory.created", "human:alpha-human"),
                                                          ("memory.imported", "human:alpha-human")]


# The entry's current content is what gets stored: it is checked as remember checks it, and it must be
# its last revision's.
CURRENT = {
    "a body over the limit": ({"body": "x" * (200 * 1024)}, "the limit is 65536"),
    "tags that are no tags": ({"tags": '["NOT A TAG", "../x"]'}, "Tags are a list"),
    "a blank title": ({"title": " "}, "A title is 1 to"),
    "a title with bidi and zero-width characters": ({"title": "T\u202e\u200bRTL"}, "invisible"),
    "content that is not its last revision's": ({"body": "other"}, "differ from its last revision"),
}


@pytest.mark.parametrize("case", CURRENT)
def test_an_entry_is_checked_itself_not_only_its_revisions(app: Armarius, settings: Settings, team: Team,
                                                           tmp_path: Path, case: str) -> None:
    fields, problem = CURRENT[case]
    source = forge(tmp_path / "x.jsonl", [entry(**fields), revision()])
    message = refused(app, settings, team, "armarius", str(source))
    assert "x.jsonl entry 'a'" in message, message
    assert problem in message, message


ROWS: dict[str, tuple[list[tuple[str, dict[str, Any]]], str]] = {
    "tags as a JSON list": ([entry(tags=["x"]), revision(tags=["x"])],
                            "entries row 1: 'tags' is not the JSON text of a list of texts"),
    "tags as a JSON text": ([entry(tags='"abc"'), revision(tags='"abc"')], "revisions row 1: 'tags' is not"),
    "tags that are not JSON": ([entry(tags="[x"), revision(tags="[x")], "entries row 1: 'tags' is not"),
    "a numeric slug": ([entry(slug=5), revision()], "entries row 1: 'slug' is not text"),
    "an entry without id": ([("entries", {key: value for key, value in entry()[1].items() if key != "id"}),
                             revision()], "entries row 1: 'id' is missing"),
    "an entry without body": ([("entries", {key: value for key, value in entry()[1].items() if key != "body"}),
                               revision()], "entries row 1: 'body' is missing"),
    "a revision without author": ([entry(), ("entry_revisions", {key: value for key, value in revision()[1].items()
                                                                 if key != "author"})],
                                  "entry_revisions row 1: 'author' is missing"),
    "a list as id": ([entry(id=[1]), revision(entry_id=[1])], "entries row 1: 'id' is not a whole number"),
    "a null author": ([entry(), revision(author=None)], "entry_revisions row 1: 'author' is not text"),
    "a title that is a number": ([entry(), revision(title=7)], "entry_revisions row 1: 'title' is not text"),
    "a time that is no time": ([entry(), revision(created_at="not a time")], "'created_at' is not a time"),
    "a null time": ([entry(), revision(created_at=None)], "'created_at' is not a time"),
    "a time in another form": ([entry(), revision(created_at="2024-01-01T00:00:00+00:00")],
                               "'created_at' is not a time"),
    "an impossible date": ([entry(), revision(created_at="2024-02-30T00:00:00.000000Z")],
                           "'created_at' is not a time"),
    "a revision count that is text": ([entry(revision="1"), revision()], "'revision' is not a whole number"),
    "a revision count that is true": ([entry(revision=True), revision()], "'revision' is not a whole number"),
    "overrode_curated that is text": ([entry(), revision(overrode_curated="yes")], "'overrode_curated' is not"),
    "revisions numbered 1 and 1": ([entry(revision=2), revision(), revision()], "2 revisions exported"),
    "a workspace that is no name": ([entry(), revision()], "line 1: the header's workspace is not"),
    "a long workspace with an escape": ([entry(), revision()], "line 1: the header's workspace is not"),
}
HEADERS = {"a workspace that is no name": {**HEADER, "workspace": ["x"]},
           "a long workspace with an escape": {**HEADER, "workspace": "\x1b]0;pwned\x07" + "w" * 100_000}}


@pytest.mark.parametrize("case", ROWS)
def test_a_malformed_row_is_refused_naming_it_and_nothing_is_imported(app: Armarius, settings: Settings, team: Team,
                                                                      tmp_path: Path, case: str) -> None:
    rows, problem = ROWS[case]
    source = forge(tmp_path / "x.jsonl", rows, HEADERS.get(case))
    message = refused(app, settings, team, "armarius", str(source))
    assert problem in message, message
    assert "\x1b" not in message
    assert len(message) < 2000


@pytest.mark.parametrize("author", ["A" * 1_000_000, "root", "human:Root Admin", "human:x\x00y", "human:\x1b[31m",
                                    "agent:" + "a" * 65, "robot:x", "system "])
def test_a_revision_author_must_be_a_principal_as_the_store_names_one(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, author: str) -> None:
    source = forge(tmp_path / "x.jsonl", [entry(), revision(author=author)])
    message = refused(app, settings, team, "armarius", str(source))
    assert "author" in message, message
    assert len(message) < 2000


def test_symbolic_links_are_never_followed_out_of_a_markdown_folder(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.txt").write_text("SECRET outside the vault\n")
    (outside / "deep.md").write_text("from the outside folder\n")
    vault = tmp_path / "vault"
    write_vault(vault)
    (vault / "innocent.md").symlink_to(outside / "private.txt")
    (vault / "shared").symlink_to(outside, target_is_directory=True)
    (vault / "Projects" / "again").symlink_to(vault, target_is_directory=True)  # a loop
    code, report, err = run(settings, team, "import", "markdown", str(vault))
    assert code == 0, err
    assert report["counts"]["created"] == 3
    slugs = {row["slug"] for row in app.memory.list_entries(team.human)["entries"]}
    assert slugs == {"projects/staging-server", "deploy-checklist", "standards/coding"}
    links = {line for line in report["notices"] if "symbolic link" in line}
    assert links == {f"{name}: a symbolic link, not followed (left out)"
                     for name in ("innocent.md", "shared", "Projects/again")}


def test_a_file_name_that_is_not_utf8_is_refused(app: Armarius, settings: Settings, team: Team,
                                                  tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    write_vault(vault)
    with open(os.path.join(os.fsencode(vault), b"caf\xe9.md"), "wb") as handle:
        handle.write(b"# Cafe\n")
    message = refused(app, settings, team, "markdown", str(vault))
    assert "caf\\xe9.md: the file name is not UTF-8" in message, message


def test_tags_may_be_scalars_yaml_reads_as_numbers(app: Armarius, settings: Settings, team: Team,
                                                   tmp_path: Path) -> None:
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "n.md").write_text("---\ntags: [2024, ops, null]\n---\nBody\n")
    code, _, err = run(settings, team, "import", "markdown", str(tmp_path / "vault"))
    assert code == 0, err
    assert app.memory.read(team.human, "n")["tags"] == ["2024", "ops"]


def test_a_note_title_loses_the_characters_a_title_may_not_hold(app: Armarius, settings: Settings, team: Team,
                                                                   tmp_path: Path) -> None:
    """A Markdown title is cleaned of every character an entry's title may not hold (the same set:
    memory.model.invisible_in_title), not refused for it."""
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "n.md").write_text("---\ntitle: \"Staging\u3164host\u200b \u2800notes\"\n---\nBody\n")
    code, _, err = run(settings, team, "import", "markdown", str(tmp_path / "vault"))
    assert code == 0, err
    assert app.memory.read(team.human, "n")["title"] == "Staging host notes"


def test_the_text_answer_shows_terminal_escapes_from_the_source(app: Armarius, settings: Settings, team: Team,
                                                                tmp_path: Path) -> None:
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "n.md").write_text("See [[\x1bc pwned\x07 note]].\n")
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.human_password}
    result = command("import", "markdown", str(tmp_path / "vault"), "--workspace", "alpha", "--as", "alpha-human")
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "\x07" not in result.stdout
    assert "⟦U+001B ESCAPE⟧c pwned⟦U+0007 CONTROL⟧ note" in result.stdout


def test_a_long_name_under_a_prefix_is_cut_to_a_valid_slug(app: Armarius, settings: Settings, team: Team,
                                                           tmp_path: Path) -> None:
    assert SlugBook("imported/").assign("a" * 118 + "-" + "b" * 30) == "imported/" + "a" * 118
    source = tmp_path / "memory.jsonl"
    source.write_text(json.dumps({"type": "entity", "name": "a" * 118 + " " + "b" * 30, "entityType": "note",
                                  "observations": ["x"]}) + "\n")
    code, report, err = run(settings, team, "import", "graph", str(source), "--prefix", "imported/")
    assert code == 0, err
    (slug,) = report["created"]
    assert slug == "imported/" + "a" * 118
    assert len(slug) <= SLUG_MAX


def test_export_verify_uses_the_installations_body_limit(settings: Settings, tmp_path: Path) -> None:
    raised = replace(settings, memory_body_max_bytes=200_000)
    app = open_app(raised)
    try:
        team = make_team(app)
        app.memory.remember(team.human, RememberRequest("big", "Big", "x" * 100_000))
    finally:
        app.close()
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_MEMORY_BODY_MAX_BYTES": "200000"}
    for output in (tmp_path / "alpha.jsonl", tmp_path / "alpha-notes"):
        result = command("--json", "export", str(output), "--workspace", "alpha", "--verify")
        assert result.exit_code == 0, result.stdout + result.stderr
        assert (json.loads(result.stdout)["verified"], json.loads(result.stdout)["problems"]) == (True, [])


def test_a_prefix_is_refused_for_an_export_whose_entries_link_to_each_other(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    rows = [entry(body="see [[b]]"), revision(body="see [[b]]"), entry(id=2, slug="b"), revision(entry_id=2)]
    source = forge(tmp_path / "x.jsonl", rows)
    message = refused(app, settings, team, "armarius", str(source), "--prefix", "imported/")
    assert "x.jsonl entry 'a': links to [[b]], an entry of the export" in message, message
    code, report, err = run(settings, team, "import", "armarius", str(source))
    assert (code, report["counts"]["created"]) == (0, 2), err
