"""Every source query kind on a real repository, at the pinned commit, whatever the repository does later."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from armarius.config import Settings
from armarius.errors import ArmariusError
from armarius.research.captures import verify_capture
from armarius.research.service import ResearchService
from armarius.research.source import LEXICAL_NOTE, REGISTRATION_NOTE
from tests.cli.test_cli import Cli
from tests.research.repos import (
    APP_PY,
    GITLINK,
    LONG_LINE,
    NEWLINE_NAME,
    NOT_UTF8_NAME,
    NOT_UTF8_SHOWN,
    PINNED,
    SPACED_NAME,
    Repo,
    build_repo,
    expected_lines,
    open_service,
    source_entry,
    write_config,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Repo, ResearchService]:
    """One repository and service for the tests that only read (nothing here moves the repository)."""
    base = tmp_path_factory.mktemp("queries")
    repo = build_repo(base / "repo")
    return repo, open_service(base, repo)


@pytest.fixture
def repo(world: tuple[Repo, ResearchService]) -> Repo:
    return world[0]


@pytest.fixture
def service(world: tuple[Repo, ResearchService]) -> ResearchService:
    return world[1]


def result(service: ResearchService, **query: Any) -> dict[str, Any]:
    return service.query(query)["result"]


def refusal(service: ResearchService, **query: Any) -> ArmariusError:
    with pytest.raises(ArmariusError) as caught:
        service.query(query)
    return caught.value


def hits(answer: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(hit["path"], hit["line"], hit["text"]) for hit in answer["hits"]]


def assert_blob_ids(repo: Repo, answer: dict[str, Any]) -> None:
    for hit in answer["hits"]:
        assert hit["blob"] == repo.blob(hit["path"])
        assert hit["blob_sha256"] == repo.blob_sha256(hit["path"])


# --- source.files ---------------------------------------------------------------------------------------------


def test_files_lists_paths_with_blob_ids(repo: Repo, service: ResearchService) -> None:
    answer = service.query({"kind": "source.files", "substring": "src/"})
    assert answer["origin"] == {"kind": "git", "source": "app", "url": "https://git.example.invalid/app.git",
                                "commit": repo.pin}
    files = answer["result"]["files"]
    assert files == [{"path": path, "blob": repo.blob(path)}
                     for path in ("src/app.py", "src/cr.txt", "src/registry.py")]
    assert answer["result"]["total"] == 3
    assert answer["result"]["next_offset"] is None
    assert answer["result"]["complete"] is True


def test_files_lists_symlinks_and_the_submodule_as_skipped(service: ResearchService) -> None:
    assert result(service, kind="source.files", substring="link.py")["files"] == [
        {"path": "link.py", "skipped": "symlink: not a readable source file"}]
    assert result(service, kind="source.files", substring="outside")["files"] == [
        {"path": "outside", "skipped": "symlink: not a readable source file"}]
    assert result(service, kind="source.files", substring="vendor")["files"] == [
        {"path": "vendor/lib", "skipped": "submodule: not a readable source file"}]


def test_files_matches_the_substring_literally(repo: Repo, service: ResearchService) -> None:
    assert [f["path"] for f in result(service, kind="source.files", substring="*")["files"]] == ["glob[1]*.txt"]
    assert [f["path"] for f in result(service, kind="source.files", substring="[1]")["files"]] == ["glob[1]*.txt"]
    assert [f["path"] for f in result(service, kind="source.files", substring="-O")["files"]] == ["-O"]
    assert [f["path"] for f in result(service, kind="source.files", substring="--output")["files"]] == ["--output=x"]
    assert [f["path"] for f in result(service, kind="source.files", substring=":(top)")["files"]] == [":(top)"]
    assert [f["path"] for f in result(service, kind="source.files", substring="\u2603")["files"]] == [SPACED_NAME]
    assert result(service, kind="source.files", substring="*.py")["files"] == []
    assert result(service, kind="source.files", substring=".git")["files"] == []


def test_files_with_awkward_names_are_listed(repo: Repo, service: ResearchService) -> None:
    files = result(service, kind="source.files", substring="name")["files"]
    by_path = {entry["path"]: entry for entry in files}
    assert by_path[NEWLINE_NAME] == {"path": NEWLINE_NAME, "blob": repo.blob(NEWLINE_NAME)}
    # A name that is not UTF-8 is shown with replacement characters and said to be so.
    assert by_path[NOT_UTF8_SHOWN]["path_not_utf8"] is True
    assert by_path[NOT_UTF8_SHOWN]["blob"] == repo.blob(NOT_UTF8_SHOWN) == repo.git(
        "rev-parse", repo.pin.encode() + b":" + NOT_UTF8_NAME).decode().strip()


# --- source.search, source.symbol, source.registration, source.schema -----------------------------------------


def test_search_hits_carry_path_line_text_blob_and_sha256(repo: Repo, service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="handle_order")
    assert hits(answer) == expected_lines("handle_order")
    assert ("src/app.py", 6, "def handle_order(order_id):") in hits(answer)
    assert ("src/app.py", 11, "def handle_order_line(line):") in hits(answer)
    assert_blob_ids(repo, answer)
    assert answer["total_hits"] == len(answer["hits"])
    assert answer["files"] == len({hit["path"] for hit in answer["hits"]})
    assert answer["complete"] is True
    assert answer["next_offset"] is None
    assert "data/logo.bin" not in {hit["path"] for hit in answer["hits"]}  # binary: skipped by search


def test_every_search_answer_says_it_is_lexical(service: ResearchService) -> None:
    for query in ({"kind": "source.search", "text": "register"}, {"kind": "source.symbol", "symbol": "register"},
                  {"kind": "source.schema", "text": "orders"}):
        assert service.query(query)["result"]["note"] == LEXICAL_NOTE
    note = result(service, kind="source.registration", symbol="register")["note"]
    assert note == REGISTRATION_NOTE
    assert "registered" in note
    assert "proves neither a definition, a registration nor an execution" in LEXICAL_NOTE


def test_symbol_matches_whole_words_only(repo: Repo, service: ResearchService) -> None:
    answer = result(service, kind="source.symbol", symbol="handle_order")
    assert hits(answer) == expected_lines("handle_order", whole_word=True)
    assert answer["whole_word"] is True
    texts = [hit["text"] for hit in answer["hits"]]
    assert "def handle_order_line(line):" not in texts
    assert "def handle_order(order_id):" in texts
    assert 'register("handle_order")' in texts
    assert_blob_ids(repo, answer)
    assert result(service, kind="source.symbol", symbol="handle_orde")["hits"] == []


def test_registration_gives_whole_word_occurrences(repo: Repo, service: ResearchService) -> None:
    answer = result(service, kind="source.registration", symbol="register")
    assert hits(answer) == expected_lines("register", whole_word=True)
    assert ("src/app.py", 15, 'register("handler")') in hits(answer)
    assert ("src/registry.py", 4, "def register(name):") in hits(answer)
    assert_blob_ids(repo, answer)
    assert answer["complete"] is True


def test_schema_searches_sql_files_only(repo: Repo, service: ResearchService) -> None:
    everywhere = result(service, kind="source.search", text="CREATE TABLE orders")
    assert {hit["path"] for hit in everywhere["hits"]} == {"db/schema.sql", "docs/notes.md"}
    answer = result(service, kind="source.schema", text="CREATE TABLE orders")
    assert hits(answer) == [("db/schema.sql", 1, "CREATE TABLE orders (")]
    assert hits(result(service, kind="source.schema", text="handle_order")) == expected_lines(
        "handle_order", suffix=".sql")
    assert_blob_ids(repo, answer)


def test_path_prefix_is_component_wise(service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="handle_order", path_prefix="src")
    assert hits(answer) == [hit for hit in expected_lines("handle_order") if hit[0].startswith("src/")]
    assert answer["path_prefix"] == "src"
    assert result(service, kind="source.search", text="handle_order", path_prefix="src/")["hits"] == answer["hits"]
    assert result(service, kind="source.search", text="handle_order", path_prefix="sr")["hits"] == []
    assert hits(result(service, kind="source.search", text="handle_order", path_prefix="src/app.py")) == [
        hit for hit in expected_lines("handle_order") if hit[0] == "src/app.py"]


def test_a_complete_search_without_hits_says_what_its_absence_means(service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="no such text anywhere")
    assert answer["hits"] == []
    assert answer["complete"] is True
    assert "evidence of absence for this snapshot and pattern only" in answer["absence"]
    assert "absence" not in result(service, kind="source.search", text="handle_order")


def test_binary_files_are_skipped_by_search_and_refused_by_read(service: ResearchService) -> None:
    assert result(service, kind="source.search", text="IHDR")["hits"] == []
    error = refusal(service, kind="source.read", path="data/logo.bin", start_line=1, end_line=2)
    assert error.code == "invalid_input"
    assert "binary" in error.message


def test_symlinks_are_never_followed_nor_searched_as_source(service: ResearchService) -> None:
    """git grep over a tree searches regular files only: a link's target text is not a hit."""
    answer = result(service, kind="source.search", text="src/app.py")
    assert answer["hits"] == []
    assert "skipped" not in answer
    outside = result(service, kind="source.search", text="/etc/passwd")
    assert [hit["path"] for hit in outside["hits"]] == ["docs/options.md"]
    for text in ("root:x:", "root:", "/bin/bash", "nologin", "/usr/sbin"):
        assert result(service, kind="source.search", text=text)["hits"] == [], text


@pytest.mark.parametrize(("path", "what"), [("link.py", "symlink"), ("outside", "symlink"),
                                            ("vendor/lib", "submodule")])
def test_read_refuses_symlinks_and_submodules(service: ResearchService, path: str, what: str) -> None:
    error = refusal(service, kind="source.read", path=path, start_line=1, end_line=5)
    assert error.code == "invalid_input"
    assert what in error.message
    assert GITLINK not in error.message


# --- flags ----------------------------------------------------------------------------------------------------


def test_lines_that_are_not_utf8_are_flagged(repo: Repo, service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="latin_marker")
    assert [(hit["line"], hit.get("not_utf8")) for hit in answer["hits"]] == [(1, True), (2, None)]
    assert answer["hits"][0]["text"] == "prix = 'caf\ufffd'  # latin_marker"
    assert_blob_ids(repo, answer)
    assert answer["complete"] is True  # decoding is flagged, not a cut
    read = result(service, kind="source.read", path="legacy/latin1.txt", start_line=1, end_line=2)
    assert read["lines"] == [{"line": 1, "text": "prix = 'caf\ufffd'  # latin_marker", "not_utf8": True},
                             {"line": 2, "text": "plain latin_marker line"}]


def test_long_lines_are_truncated_and_flagged(service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="long_marker")
    assert [(hit["line"], hit.get("truncated")) for hit in answer["hits"]] == [(2, True), (3, None)]
    assert answer["hits"][0]["text"] == LONG_LINE[:500]
    assert answer["truncated_lines"] == 1
    assert answer["complete"] is False
    assert answer["next_offset"] is None
    read = result(service, kind="source.read", path="data/long.txt", start_line=1, end_line=3)
    assert [line.get("truncated") for line in read["lines"]] == [None, True, None]
    assert read["lines"][1]["text"] == LONG_LINE[:500]
    assert read["truncated_lines"] == 1
    assert read["complete"] is False


# --- source.read ----------------------------------------------------------------------------------------------


def test_read_gives_a_bounded_line_range(repo: Repo, service: ResearchService) -> None:
    answer = result(service, kind="source.read", path="src/app.py", start_line=6, end_line=8)
    assert answer["lines"] == [{"line": 6, "text": "def handle_order(order_id):"},
                               {"line": 7, "text": '    """Handle one order."""'},
                               {"line": 8, "text": "    return order_id"}]
    assert answer["total_lines"] == APP_PY.count("\n") == 16
    assert (answer["start_line"], answer["end_line"], answer["next_start_line"]) == (6, 8, None)
    assert answer["blob"] == repo.blob("src/app.py")
    assert answer["blob_sha256"] == repo.blob_sha256("src/app.py") == hashlib.sha256(APP_PY.encode()).hexdigest()
    assert answer["complete"] is True
    whole = result(service, kind="source.read", path="src/app.py", start_line=1, end_line=1000)
    assert [line["text"] for line in whole["lines"]] == APP_PY.split("\n")[:-1]
    assert (whole["end_line"], whole["next_start_line"], whole["complete"]) == (16, None, True)


def test_read_refuses_impossible_ranges_and_unknown_paths(service: ResearchService) -> None:
    error = refusal(service, kind="source.read", path="src/app.py", start_line=17, end_line=20)
    assert (error.code, error.details["total_lines"]) == ("invalid_input", 16)
    assert refusal(service, kind="source.read", path="src/app.py", start_line=5, end_line=4).code == "invalid_input"
    missing = refusal(service, kind="source.read", path="src/missing.py", start_line=1, end_line=4)
    assert missing.code == "not_found"
    assert refusal(service, kind="source.read", path="src", start_line=1, end_line=4).code == "not_found"


@pytest.mark.parametrize("path", ["-O", "--output=x", ":(top)", "glob[1]*.txt", SPACED_NAME])
def test_awkward_names_are_read_literally(repo: Repo, service: ResearchService, path: str) -> None:
    answer = result(service, kind="source.read", path=path, start_line=1, end_line=1)
    assert answer["lines"] == [{"line": 1, "text": PINNED[path].decode().rstrip("\n")}]
    assert answer["blob"] == repo.blob(path)


def test_hit_line_numbers_are_the_lines_that_read_returns(service: ResearchService) -> None:
    """git counts lines by '\\n' only; a bare carriage return must not shift read's numbering."""
    for text in ("cr_marker", "handle_order", "latin_marker", "register", "dash_marker", "top_marker"):
        for hit in result(service, kind="source.search", text=text)["hits"]:
            read = result(service, kind="source.read", path=hit["path"], start_line=hit["line"], end_line=hit["line"])
            assert read["lines"][0]["text"] == hit["text"], (text, hit)
            assert read["blob"] == hit["blob"]


def test_files_whose_names_cannot_be_given_as_a_path_still_answer_searches(repo: Repo,
                                                                          service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="odd_marker")
    by_path = {hit["path"]: hit for hit in answer["hits"]}
    assert set(by_path) == {NEWLINE_NAME, NOT_UTF8_SHOWN}
    assert by_path[NEWLINE_NAME]["blob"] == repo.blob(NEWLINE_NAME)
    assert by_path[NOT_UTF8_SHOWN]["path_not_utf8"] is True
    assert "path_not_utf8" not in by_path[NEWLINE_NAME]
    assert answer["complete"] is True
    json.dumps(answer, ensure_ascii=False).encode("utf-8")  # the answer is valid UTF-8 JSON


# --- the pin holds --------------------------------------------------------------------------------------------

PIN_QUERIES: list[dict[str, Any]] = [
    {"kind": "source.files", "substring": "."},
    {"kind": "source.files", "substring": "link"},
    {"kind": "source.search", "text": "handle_order"},
    {"kind": "source.search", "text": "long_marker"},
    {"kind": "source.search", "text": "added later"},
    {"kind": "source.search", "text": "untracked"},
    {"kind": "source.search", "text": "handle_order", "path_prefix": "src"},
    {"kind": "source.symbol", "symbol": "process_order"},
    {"kind": "source.symbol", "symbol": "handle_order"},
    {"kind": "source.registration", "symbol": "register"},
    {"kind": "source.schema", "text": "orders"},
    {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 16},
    {"kind": "source.read", "path": "db/schema.sql", "start_line": 1, "end_line": 5},
    {"kind": "source.read", "path": "src/registry.py", "start_line": 1, "end_line": 6},
]


def test_answers_follow_the_pin_not_the_working_tree_or_the_branches(tmp_path: Path) -> None:
    repo = build_repo(tmp_path / "repo")
    service = open_service(tmp_path, repo)
    before = [service.query(query) for query in PIN_QUERIES]
    repo.move_on()
    assert repo.later is not None
    assert repo.later != repo.pin
    assert repo.git("rev-parse", "HEAD").decode().strip() == repo.later
    assert repo.git("status", "--porcelain").strip()  # the tree is dirty
    assert not (tmp_path / "repo/db/schema.sql").exists()
    assert [service.query(query) for query in PIN_QUERIES] == before
    fresh = open_service(tmp_path / "again", repo)  # nothing cached: git is asked again
    assert [fresh.query(query) for query in PIN_QUERIES] == before
    by_kind = {json.dumps(query, sort_keys=True): answer["result"] for query, answer in zip(PIN_QUERIES, before,
                                                                                           strict=True)}
    assert by_kind[json.dumps(PIN_QUERIES[4], sort_keys=True)]["hits"] == []
    assert by_kind[json.dumps(PIN_QUERIES[5], sort_keys=True)]["hits"] == []
    assert by_kind[json.dumps(PIN_QUERIES[7], sort_keys=True)]["hits"] == []
    # The later commit is a different answer: the pin is what made them equal.
    later = open_service(tmp_path / "later", repo, commit=repo.later)
    assert later.query(PIN_QUERIES[2])["result"]["hits"] != before[2]["result"]["hits"]


# --- the CLI --------------------------------------------------------------------------------------------------


def test_the_cli_prints_the_answer_and_writes_the_capture(tmp_path: Path, repo: Repo) -> None:
    config = write_config(tmp_path / "conf" / "research.toml", [source_entry(repo)])
    query = tmp_path / "query.json"
    query.write_text(json.dumps({"kind": "source.search", "text": "handle_order", "path_prefix": "src"}))
    run = Cli(Settings(data_dir=tmp_path / "data"))
    printed = run.json("research", "query", "--config", str(config), "--query", str(query))
    assert hits(printed["result"]) == [hit for hit in expected_lines("handle_order") if hit[0].startswith("src/")]
    assert printed["origin"]["commit"] == repo.pin
    capture = tmp_path / "conf" / "evidence" / f"{printed['capture']}.json"
    assert verify_capture(capture)
    document = json.loads(capture.read_bytes())
    assert document["result"] == printed["result"]
    assert document["request"] == {"kind": "source.search", "text": "handle_order", "path_prefix": "src"}

    elsewhere = tmp_path / "chosen"
    text = run("research", "query", "--config", str(config), "--query", str(query), "--evidence", str(elsewhere))
    assert text.exit_code == 0
    assert json.loads(text.stdout) == printed  # the same answer, pretty-printed
    assert [file.name for file in elsewhere.iterdir()] == [f"{printed['capture']}.json"]

    query.write_text(json.dumps({"kind": "source.read", "path": "../etc/passwd", "start_line": 1, "end_line": 2}))
    refused = run("--json", "research", "query", "--config", str(config), "--query", str(query))
    assert refused.exit_code == 3
    assert json.loads(refused.stderr)["error"]["code"] == "invalid_input"
    query.write_bytes(b"\xff not json")
    assert run("research", "query", "--config", str(config), "--query", str(query)).exit_code == 3
