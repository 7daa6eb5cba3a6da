"""Imports from the reference memory server's JSONL graph and from Markdown folders, through the CLI,
on both engines: the result, idempotence, the audit trail, and bad input refused with nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain
from armarius.config import Settings
from armarius.memory.service import RememberRequest
from tests.cli.test_cli import Cli
from tests.helpers import Team, make_team

# Written by hand in the reference server's format (src/memory: saveGraph writes one JSON object a
# line, entities first, each with "type"), with what real files hold: underscores and capitals in
# names, an accented name, a relation to an entity that is not there, a repeated entity.
GRAPH = """\
{"type":"entity","name":"John_Smith","entityType":"person","observations":["Speaks fluent Spanish","Graduated in 2019"]}
{"type":"entity","name":"Anthropic","entityType":"organization","observations":["AI safety company"]}
{"type":"entity","name":"Zoë Café","entityType":"place","observations":["Coffee on Rue Oberkampf"]}

{"type":"entity","name":"John_Smith","entityType":"person","observations":["Speaks fluent Spanish","Plays chess"]}
{"type":"relation","from":"John_Smith","to":"Anthropic","relationType":"works_at"}
{"type":"relation","from":"John_Smith","to":"Zoë Café","relationType":"meets friends at"}
{"type":"relation","from":"Anthropic","to":"Acme Corp","relationType":"competes_with"}
"""


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def run(settings: Settings, team: Team, *args: str) -> tuple[int, Any, str]:
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.human_password}
    result = command("--json", *args, "--workspace", team.workspace, "--as", f"{team.workspace}-human")
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else None, result.stderr


def error_of(stderr: str) -> dict[str, Any]:
    """The error a command ended with (after its progress lines)."""
    return dict(json.loads(stderr.strip().splitlines()[-1])["error"])


def snapshot(app: Armarius, team: Team) -> tuple[Any, ...]:
    """Everything an import may change: entries with their revisions, tags and links, and the audit chain
    (apart from the human's logins: every CLI command as a human logs in)."""
    with app.database.transaction(workspace_id=team.human.workspace_id) as tx:
        rows = (tx.all("SELECT slug, title, body, tags, revision, curated_revision FROM entries ORDER BY slug"),
                tx.all("SELECT entry_id, revision, body FROM entry_revisions ORDER BY entry_id, revision"),
                tx.all("SELECT tag FROM entry_tags ORDER BY tag"),
                tx.all("SELECT target_slug FROM entry_links ORDER BY target_slug"))
    events = chain.tail(app.database, team.human.workspace_id, 10_000)
    return (*rows, [event.hash for event in events if not event.action.startswith("login.")])


def test_a_memory_server_graph_becomes_linked_entries_and_a_rerun_changes_nothing(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH, encoding="utf-8")
    code, report, err = run(settings, team, "import", "graph", str(source))
    assert code == 0, err
    assert report["counts"] == {"created": 3, "updated": 0, "unchanged": 0, "curated_kept": 0}
    assert {(item["name"], item["slug"]) for item in report["renamed"]} == {
        ("John_Smith", "john-smith"), ("Anthropic", "anthropic"), ("Zoë Café", "zoe-cafe")}
    assert any("Acme Corp" in line and "line 8" in line for line in report["notices"])
    assert any("second entity named 'John_Smith'" in line for line in report["notices"])

    john = app.memory.read(team.human, "john-smith")
    assert john["title"] == "John_Smith"
    assert john["tags"] == ["person"]
    assert john["body"] == ("Type: person\n\n- Speaks fluent Spanish\n- Graduated in 2019\n- Plays chess\n\n"
                            "## Relations\n\n- works_at [[anthropic]]\n- meets friends at [[zoe-cafe]]\n")
    assert john["curated"] is False
    assert app.memory.read(team.human, "john-smith")["links"] == ["anthropic", "zoe-cafe"]
    assert "- competes_with Acme Corp" in app.memory.read(team.human, "anthropic")["body"]
    assert app.memory.recall(team.human, "chess")["results"][0]["slug"] == "john-smith"
    events = [(e.action, e.actor) for e in chain.tail(app.database, team.human.workspace_id, 10)]
    assert events[-4:] == [("memory.created", "human:alpha-human")] * 3 + [("memory.imported", "human:alpha-human")]

    before = snapshot(app, team)
    code, again, _ = run(settings, team, "import", "graph", str(source))
    assert code == 0
    assert again["counts"] == {"created": 0, "updated": 0, "unchanged": 3, "curated_kept": 0}
    assert again["written"] is False
    assert snapshot(app, team) == before


def write_vault(root: Path) -> None:
    (root / ".obsidian").mkdir(parents=True)
    (root / ".obsidian" / "workspace.md").write_text("not a note")
    (root / "Projects").mkdir()
    (root / "Projects" / "Staging Server.md").write_text(
        "---\ntitle: Staging server\ntags: [ops, '#Infra/Hosts']\naliases: [staging]\n---\n\n"
        "Runs on stage-3. See [[Deploy Checklist|the checklist]] and [[Missing Note]].\n![[diagram.png]]\n",
        encoding="utf-8")
    (root / "Deploy Checklist.md").write_text(
        "# Deploy checklist\n\n1. Tag the release\n2. Ask [[Projects/Staging Server#Hosts]] for a slot\n",
        encoding="utf-8")
    (root / "basic.md").write_text(
        "---\ntitle: Coding standards\ntype: note\npermalink: standards/coding\ntags: python, style\n---\n"
        "Use ruff. Links: [[Staging server]].\n", encoding="utf-8")


def test_a_markdown_folder_becomes_entries_with_its_links_and_a_rerun_changes_nothing(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    write_vault(tmp_path / "vault")
    code, report, err = run(settings, team, "import", "markdown", str(tmp_path / "vault"), "--prefix", "notes/")
    assert code == 0, err
    assert report["counts"]["created"] == 3
    slugs = {item["name"]: item["slug"] for item in report["renamed"]}
    assert slugs == {"Projects/Staging Server": "notes/projects/staging-server",
                     "Deploy Checklist": "notes/deploy-checklist", "basic": "notes/standards/coding"}
    staging = app.memory.read(team.human, "notes/projects/staging-server")
    assert (staging["title"], staging["tags"]) == ("Staging server", ["infra:hosts", "ops"])
    assert staging["body"] == ("Runs on stage-3. See the checklist ([[notes/deploy-checklist]]) and "
                               "[[notes/missing-note]].\n![[diagram.png]]\n")
    checklist = app.memory.read(team.human, "notes/deploy-checklist")
    assert checklist["title"] == "Deploy checklist"
    assert "Ask [[notes/projects/staging-server]] for a slot" in checklist["body"]
    coding = app.memory.read(team.human, "notes/standards/coding")
    assert (coding["title"], coding["tags"], coding["body"]) == (
        "Coding standards", ["python", "style"], "Use ruff. Links: [[notes/projects/staging-server]].\n")
    assert any("[[Missing Note]]" in line and "Staging Server.md" in line for line in report["notices"])

    before = snapshot(app, team)
    code, again, _ = run(settings, team, "import", "markdown", str(tmp_path / "vault"), "--prefix", "notes/")
    assert (code, again["counts"]["unchanged"], again["written"]) == (0, 3, False)
    assert snapshot(app, team) == before


def test_a_dry_run_counts_and_writes_nothing(app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    app.memory.remember(team.agent, RememberRequest("anthropic", "Anthropic", "Older text"))
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH, encoding="utf-8")
    before = snapshot(app, team)
    code, report, _ = run(settings, team, "import", "graph", str(source), "--dry-run")
    assert code == 0
    assert report["counts"] == {"created": 2, "updated": 1, "unchanged": 0, "curated_kept": 0}
    assert (report["dry_run"], report["written"]) == (True, False)
    assert snapshot(app, team) == before


def test_an_update_keeps_the_older_revision_in_history(app: Armarius, settings: Settings, team: Team,
                                                       tmp_path: Path) -> None:
    app.memory.remember(team.agent, RememberRequest("anthropic", "Anthropic", "Older text"))
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH, encoding="utf-8")
    assert run(settings, team, "import", "graph", str(source))[0] == 0
    history = app.memory.history(team.human, "anthropic")["revisions"]
    assert [r["revision"] for r in history] == [1, 2]
    assert history[1]["reason"] == "imported from memory.jsonl line 2"


BAD_GRAPHS = {
    "a truncated line": ('{"type":"entity","name":"A","entityType":"x","observations":[]}\n'
                         '{"type":"entity","name":"B","entityType":"x","observ', "memory.jsonl line 2",
                         "not a complete JSON object"),
    "an unknown record type": ('{"type":"entity","name":"A","entityType":"x","observations":[]}\n\n'
                               '{"type":"triple","s":"A"}\n', "memory.jsonl line 3", "unknown record type 'triple'"),
    "a field of the wrong type": ('{"type":"entity","name":"A","entityType":"x","observations":"one"}\n',
                                  "memory.jsonl line 1", "a list of texts 'observations'"),
    "a NUL in an observation": ('{"type":"entity","name":"A","entityType":"x","observations":["a\\u0000b"]}\n',
                                "memory.jsonl line 1", "NUL"),
    "an entity too large for an entry": (
        json.dumps({"type": "entity", "name": "Big", "entityType": "x", "observations": ["word " * 20_000]}) + "\n",
        "memory.jsonl line 1", "the limit is"),
}


@pytest.mark.parametrize("case", BAD_GRAPHS)
def test_a_bad_graph_names_its_line_and_nothing_is_imported(app: Armarius, settings: Settings, team: Team,
                                                            tmp_path: Path, case: str) -> None:
    text, where, problem = BAD_GRAPHS[case]
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH + text, encoding="utf-8") if "line 1" not in where else source.write_text(text)
    if "line 1" not in where:  # the good records come first: the bad line is further down
        where = f"memory.jsonl line {GRAPH.count(chr(10)) + int(where.rsplit(' ', 1)[1])}"
    before = snapshot(app, team)
    code, _, err = run(settings, team, "import", "graph", str(source))
    error = error_of(err)
    assert (code, error["code"]) == (3, "invalid_input")
    assert where in error["message"], error["message"]
    assert problem in error["message"], error["message"]
    assert "nothing was imported" in error["message"]
    assert snapshot(app, team) == before


@pytest.mark.timeout(30)  # the old reader waited for a FIFO's writer, or read /dev/zero, for ever
@pytest.mark.parametrize("kind", ["a FIFO", "a device"])
def test_a_graph_source_that_is_no_regular_file_is_refused_without_waiting(
        app: Armarius, settings: Settings, team: Team, tmp_path: Path, kind: str) -> None:
    if kind == "a FIFO":
        source = tmp_path / "memory.jsonl"
        os.mkfifo(source)
    else:
        source = Path("/dev/zero")
        if not source.exists():
            pytest.skip("this system has no /dev/zero")
    before = snapshot(app, team)
    code, _, err = run(settings, team, "import", "graph", str(source))
    error = error_of(err)
    assert (code, error["code"]) == (3, "invalid_input")
    assert f"{source.name} is not a regular file" in error["message"]
    assert "nothing was imported" in error["message"]
    assert snapshot(app, team) == before


BAD_NOTES = {
    "invalid front matter": (b"---\ntitle: Fine\ntags: [unclosed\n---\nBody\n", "bad.md line 3", "not valid YAML"),
    "front matter that is not a mapping": (b"---\n- a\n- b\n---\nBody\n", "bad.md line 2", "a YAML mapping"),
    "unclosed front matter": (b"---\ntitle: Fine\nBody\n", "bad.md line 1", "never closed"),
    "a file that is not UTF-8": (b"caf\xe9\nline two\n", "bad.md line 1", "not UTF-8"),
    "a NUL in the body": (b"a\x00b\n", "bad.md", "NUL"),
    # Front matter of the wrong shape, or with YAML anchors or aliases (an alias bomb grows tenfold a level).
    "an alias bomb": (b"---\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                      b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                      b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                      b"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
                      b"title: *h\ntags: *h\n---\nBody\n", "bad.md line 2", "anchors or aliases"),
    "an anchor alone": (b"---\ntitle: &t Fine\n---\nBody\n", "bad.md line 2", "anchors or aliases"),
    "a title that is a list": (b"---\ntitle: [a, b]\n---\nBody\n", "bad.md line 2", "its title is not text"),
    "a slug that is a number": (b"---\nslug: 5\n---\nBody\n", "bad.md line 2", "its slug is not text"),
    "tags that are a mapping": (b"---\ntags: {a: b}\n---\nBody\n", "bad.md line 2", "its tags are neither"),
    "tags that are nested lists": (b"---\ntags: [[a, b]]\n---\nBody\n", "bad.md line 2", "its tags are neither"),
}


@pytest.mark.parametrize("case", BAD_NOTES)
def test_a_bad_note_names_its_file_and_line_and_nothing_is_imported(app: Armarius, settings: Settings, team: Team,
                                                                    tmp_path: Path, case: str) -> None:
    content, where, problem = BAD_NOTES[case]
    write_vault(tmp_path / "vault")
    (tmp_path / "vault" / "bad.md").write_bytes(content)
    before = snapshot(app, team)
    code, _, err = run(settings, team, "import", "markdown", str(tmp_path / "vault"))
    error = error_of(err)
    assert (code, error["code"]) == (3, "invalid_input")
    assert f"{where}:" in error["message"], error["message"]
    assert problem in error["message"], error["message"]
    assert snapshot(app, team) == before


def test_a_curated_entry_is_never_overwritten(app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    app.memory.remember(team.agent, RememberRequest("anthropic", "Anthropic", "Reviewed text"))
    app.memory.curate(team.human, "anthropic", 1)
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH, encoding="utf-8")
    before = snapshot(app, team)
    code, _, err = run(settings, team, "import", "graph", str(source))
    error = error_of(err)
    assert (code, error["code"], error["details"]["curated"]) == (6, "conflict", ["anthropic"])
    assert "nothing was imported" in error["message"]
    assert snapshot(app, team) == before

    code, report, _ = run(settings, team, "import", "graph", str(source), "--skip-curated")
    assert code == 0
    assert (report["counts"]["created"], report["curated_kept"]) == (2, ["anthropic"])
    kept = app.memory.read(team.human, "anthropic")
    assert (kept["body"], kept["revision"], kept["curated"]) == ("Reviewed text", 1, True)


def test_an_agent_or_a_reader_cannot_import(app: Armarius, settings: Settings, tmp_path: Path) -> None:
    from armarius.auth.permissions import Role
    team = make_team(app, human_role=Role.READER)
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH, encoding="utf-8")
    before = snapshot(app, team)
    code, _, err = run(settings, team, "import", "graph", str(source))
    assert (code, error_of(err)["code"]) == (4, "not_allowed")
    assert snapshot(app, team) == before


def test_progress_lines_when_not_a_terminal(app: Armarius, settings: Settings, team: Team, tmp_path: Path) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_text(GRAPH, encoding="utf-8")
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": team.human_password}
    result = command("import", "graph", str(source), "--workspace", "alpha", "--as", "alpha-human")
    assert result.exit_code == 0, result.stderr
    assert "Importing: 3/3" in result.stderr
    assert "3 created, 0 updated, 0 unchanged" in result.stdout
    assert "'John_Smith' -> john-smith" in result.stdout
