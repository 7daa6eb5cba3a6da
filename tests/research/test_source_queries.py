"""Every source query kind on a real repository, at the pinned commit, whatever the repository does later."""

from __future__ import annotations

import hashlib
import json
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from armarius.config import Settings
from armarius.errors import ArmariusError
from armarius.research.captures import verify_capture
from armarius.research.config import SourceLimits
from armarius.research.git import _grep_counts, _grep_runs
from armarius.research.service import ResearchService
from armarius.research.source import COUNT_AHEAD, LEXICAL_NOTE, ONE_PASS_OFFSET, REGISTRATION_NOTE, _LineReader
from tests.cli.test_cli import Cli
from tests.research.repos import (
    APP_PY,
    GITLINK,
    LONG_LINE,
    NAMED_CONTENT,
    NEWLINE_NAME,
    NOT_UTF8_NAME,
    NOT_UTF8_SHOWN,
    PINNED,
    SPACED_NAME,
    UNUSUAL_NAMES,
    UNUSUAL_NOT_UTF8,
    UNUSUAL_SUBMODULE,
    Repo,
    build_many_hits_repo,
    build_names_repo,
    build_repo,
    build_tree_repo,
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
    assert files == [{"path": path, "blob": repo.blob(path), "blob_sha256": repo.blob_sha256(path)}
                     for path in ("src/app.py", "src/cr.txt", "src/registry.py")]
    assert answer["result"]["total"] == 3
    assert answer["result"]["next_offset"] is None
    assert answer["result"]["complete"] is True
    assert answer["result"]["bytes"] == sum(len(path.encode()) for path in ("src/app.py", "src/cr.txt",
                                                                             "src/registry.py"))
    assert "absence" not in answer["result"]


def test_a_complete_listing_without_files_says_what_its_absence_means(service: ResearchService) -> None:
    answer = result(service, kind="source.files", substring="no_such_name")
    assert (answer["files"], answer["total"], answer["next_offset"], answer["complete"]) == ([], 0, None, True)
    assert "evidence of absence for this snapshot and substring only" in answer["absence"]
    beyond = result(service, kind="source.files", substring="src/", offset=10)
    assert (beyond["files"], beyond["complete"]) == ([], False)
    assert "absence" not in beyond  # a page past the end is not a complete listing


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
    assert by_path[NEWLINE_NAME] == {"path": NEWLINE_NAME, "path_escaped": "odd\\nname.txt",
                                     "blob": repo.blob(NEWLINE_NAME), "blob_sha256": repo.blob_sha256(NEWLINE_NAME)}
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
    inside = refusal(service, kind="source.read", path="vendor/lib/setup.py", start_line=1, end_line=4)
    assert inside.code == "not_found"
    assert "'vendor/lib' is a submodule" in inside.message


@pytest.mark.parametrize("path", ["src", "docs", "data"])
def test_read_of_a_folder_says_it_is_one_and_how_to_list_it(service: ResearchService, path: str) -> None:
    error = refusal(service, kind="source.read", path=path, start_line=1, end_line=4)
    assert error.code == "invalid_input"
    assert error.details == {"field": "path", "folder": True}
    assert f"{path!r} is a folder" in error.message
    assert f"source.files (substring {path + '/'!r})" in error.message
    assert f"path_prefix {path!r}" in error.message
    listed = result(service, kind="source.files", substring=path + "/")["files"]
    assert listed  # the advice works
    assert all(entry["path"].startswith(path + "/") for entry in listed)


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


def test_files_with_a_newline_or_not_utf8_in_their_names_are_found_and_read(repo: Repo,
                                                                            service: ResearchService) -> None:
    answer = result(service, kind="source.search", text="odd_marker")
    by_path = {hit["path"]: hit for hit in answer["hits"]}
    assert set(by_path) == {NEWLINE_NAME, NOT_UTF8_SHOWN}
    assert by_path[NEWLINE_NAME]["blob"] == repo.blob(NEWLINE_NAME)
    assert by_path[NEWLINE_NAME]["path_escaped"] == "odd\\nname.txt"
    assert by_path[NOT_UTF8_SHOWN]["path_not_utf8"] is True
    assert "path_not_utf8" not in by_path[NEWLINE_NAME]
    assert answer["complete"] is True
    json.dumps(answer, ensure_ascii=False).encode("utf-8")  # the answer is valid UTF-8 JSON
    for hit in answer["hits"]:  # the path a hit shows is the path to read it by
        read = result(service, kind="source.read", path=hit["path"], start_line=hit["line"], end_line=hit["line"])
        assert (read["path"], read["blob"], read["lines"][0]["text"]) == (hit["path"], hit["blob"], hit["text"])
        assert read.get("path_not_utf8") == hit.get("path_not_utf8")


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


# --- names: whatever source.files lists, source.read reads --------------------------------------------------


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> tuple[Repo, ResearchService]:
    base = tmp_path_factory.mktemp("names")
    repo = build_names_repo(base / "repo")
    return repo, open_service(base, repo)


def every_listed(service: ResearchService, substring: str) -> list[dict[str, Any]]:
    listed, offset = [], 0
    while True:
        answer = result(service, kind="source.files", substring=substring, offset=offset, limit=7)
        listed += answer["files"]
        if answer["next_offset"] is None:
            return listed
        offset = answer["next_offset"]


def test_every_listed_file_is_readable_by_the_path_the_listing_shows(names: tuple[Repo, ResearchService]) -> None:
    _repo, service = names
    raw_names = [name.encode() for name in UNUSUAL_NAMES] + UNUSUAL_NOT_UTF8
    expected = {raw.decode("utf-8", "replace"): NAMED_CONTENT.format(index) for index, raw in enumerate(raw_names)}
    listed = every_listed(service, ".")
    readable = [entry for entry in listed if "skipped" not in entry]
    assert sorted(entry["path"] for entry in readable) == sorted(expected)  # every name, each once
    for entry in readable:
        answer = result(service, kind="source.read", path=entry["path"], start_line=1, end_line=1)
        assert answer["lines"] == [{"line": 1, "text": expected[entry["path"]].rstrip("\n")}], entry
        assert (answer["path"], answer["blob"], answer["blob_sha256"]) == (
            entry["path"], entry["blob"], entry["blob_sha256"])
        assert answer.get("path_escaped") == entry.get("path_escaped")
        assert answer.get("path_not_utf8") == entry.get("path_not_utf8")
        assert hashlib.sha256(expected[entry["path"]].encode()).hexdigest() == entry["blob_sha256"]
    skipped = {entry["path"]: entry["skipped"] for entry in listed if "skipped" in entry}
    assert skipped == {"link.txt": "symlink: not a readable source file",
                       UNUSUAL_SUBMODULE: "submodule: not a readable source file"}
    for path in skipped:
        assert refusal(service, kind="source.read", path=path, start_line=1, end_line=1).code == "invalid_input"


def test_every_hit_of_a_search_is_readable_by_its_path(names: tuple[Repo, ResearchService]) -> None:
    _repo, service = names
    answer = result(service, kind="source.search", text="named_marker")
    assert len(answer["hits"]) == len(UNUSUAL_NAMES) + len(UNUSUAL_NOT_UTF8)
    assert answer["complete"] is True
    for hit in answer["hits"]:
        read = result(service, kind="source.read", path=hit["path"], start_line=hit["line"], end_line=hit["line"])
        assert (read["blob"], read["lines"][0]["text"]) == (hit["blob"], hit["text"])


def test_both_normalizations_are_distinct_files_read_byte_for_byte(names: tuple[Repo, ResearchService]) -> None:
    _repo, service = names
    nfc = result(service, kind="source.read", path="caf\u00e9.txt", start_line=1, end_line=1)
    nfd = result(service, kind="source.read", path="cafe\u0301.txt", start_line=1, end_line=1)
    assert nfc["blob"] != nfd["blob"]
    assert nfc["lines"][0]["text"] == NAMED_CONTENT.format(0).strip()
    assert nfd["lines"][0]["text"] == NAMED_CONTENT.format(1).strip()
    assert "path_escaped" not in nfd  # a combining accent is visible: nothing to escape
    in_folder = result(service, kind="source.search", text="named_marker", path_prefix="re\u0301sume\u0301")
    assert [hit["path"] for hit in in_folder["hits"]] == ["re\u0301sume\u0301/notes.txt"]
    composed = result(service, kind="source.search", text="named_marker", path_prefix="r\u00e9sum\u00e9")
    assert composed["hits"] == []  # another name: matched byte for byte


def test_a_name_that_is_not_in_the_tree_is_not_found_with_advice(names: tuple[Repo, ResearchService]) -> None:
    _repo, service = names
    for path in ("ohm \u03a9.txt", "CAF\u00c9.txt", "\u30c7\u30fc\u30bf1.txt", "new line.txt"):
        error = refusal(service, kind="source.read", path=path, start_line=1, end_line=1)
        assert error.code == "not_found", path
        assert "byte for byte" in error.message
        assert "source.files" in error.message


@pytest.mark.parametrize(("name", "escaped"), [
    ("new\nline.txt", "new\\nline.txt"), ("tab\tname.txt", "tab\\tname.txt"), ("cr\rname.txt", "cr\\rname.txt"),
    ("esc\x1b[31mred.txt", "esc\\u001b[31mred.txt"), ("del\x7f.txt", "del\\u007f.txt"),
    ("bidi \u202etxt.exe", "bidi \\u202etxt.exe"), ("zero\u200bwidth.txt", "zero\\u200bwidth.txt"),
    ("\ufeffbom.txt", "\\ufeffbom.txt"), ("line\u2028separator.txt", "line\\u2028separator.txt"),
    ("tag \U000e0041.txt", "tag \\U000e0041.txt"), ("isolate \u2067x\u2069.txt", "isolate \\u2067x\\u2069.txt"),
])
def test_control_and_invisible_characters_in_names_are_shown_escaped(names: tuple[Repo, ResearchService],
                                                                     name: str, escaped: str) -> None:
    _repo, service = names
    listed = [entry for entry in every_listed(service, ".") if entry["path"] == name]
    assert len(listed) == 1
    assert listed[0]["path_escaped"] == escaped
    read = result(service, kind="source.read", path=name, start_line=1, end_line=1)
    assert (read["path"], read["path_escaped"]) == (name, escaped)
    hits = [hit for hit in result(service, kind="source.search", text="named_marker")["hits"] if hit["path"] == name]
    assert [hit["path_escaped"] for hit in hits] == [escaped]


def test_names_without_hidden_characters_carry_no_escaped_form(names: tuple[Repo, ResearchService]) -> None:
    _repo, service = names
    plain = {entry["path"]: entry for entry in every_listed(service, ".")}
    for name in ("\u30c7\u30fc\u30bf\uff11.txt", "nbsp\u00a0name.txt", "back\\slash.txt", "...",
                 "emoji \U0001f600.txt"):
        assert "path_escaped" not in plain[name], name


def test_a_shown_name_that_is_not_utf8_reads_only_when_it_is_unambiguous(tmp_path: Path) -> None:
    files = {b"caf\xe9.txt": b"latin-1 e\n", b"caf\xe8.txt": b"latin-1 e grave\n", b"\xff.txt": b"alone\n",
             "\ufffd.txt".encode(): b"a real replacement character\n"}
    repo = build_tree_repo(tmp_path / "repo", files)
    service = open_service(tmp_path, repo)
    listed = {(entry["path"], entry.get("path_not_utf8", False)) for entry in every_listed(service, ".")}
    assert listed == {("caf\ufffd.txt", True), ("\ufffd.txt", True), ("\ufffd.txt", False)}
    # The real name wins over a name that only shows like it; two names that show alike read neither.
    real = result(service, kind="source.read", path="\ufffd.txt", start_line=1, end_line=1)
    assert (real["lines"][0]["text"], "path_not_utf8" in real) == ("a real replacement character", False)
    assert refusal(service, kind="source.read", path="caf\ufffd.txt", start_line=1, end_line=1).code == "not_found"


NAME_CHARACTERS = st.characters(exclude_categories=["Cs"], exclude_characters="/\x00")
SEGMENTS = st.text(NAME_CHARACTERS, min_size=1, max_size=10).filter(
    lambda segment: segment not in (".", "..") and segment.lower() != ".git")


def _unambiguous(paths: list[str]) -> bool:
    """No path is also a folder of another (a tree cannot hold both)."""
    return not any(other.startswith(path + "/") for path in paths for other in paths)


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(SEGMENTS, min_size=1, max_size=3).map(lambda parts: "/".join(parts) + ".t"),
                min_size=1, max_size=12, unique=True).filter(_unambiguous))
def test_any_name_a_tree_holds_is_listed_and_read(paths: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        repo = build_tree_repo(base / "repo", {path.encode(): f"line {index}\n".encode()
                                               for index, path in enumerate(paths)})
        service = open_service(base, repo)
        listed = every_listed(service, ".t")
        assert sorted(entry["path"] for entry in listed) == sorted(paths)
        for entry in listed:
            read = result(service, kind="source.read", path=entry["path"], start_line=1, end_line=1)
            assert read["lines"] == [{"line": 1, "text": f"line {paths.index(entry['path'])}"}]
            assert read["blob"] == entry["blob"]
            escaped = entry.get("path_escaped", entry["path"])
            assert not any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in escaped)


# --- source.files limits --------------------------------------------------------------------------------------


def test_the_byte_limit_cuts_a_file_listing_and_pages_on(tmp_path: Path) -> None:
    files = {f"pkg/{'long_name_' * 8}{number:03}.py".encode(): b"x = 1\n" for number in range(40)}
    repo = build_tree_repo(tmp_path / "repo", files)
    service = open_service(tmp_path, repo, max_bytes=1024)
    first = result(service, kind="source.files", substring="pkg/")
    path_bytes = len(f"pkg/{'long_name_' * 8}000.py".encode())
    assert len(first["files"]) == 1024 // path_bytes < 40
    assert first["bytes"] == len(first["files"]) * path_bytes <= 1024
    assert (first["next_offset"], first["total"], first["complete"]) == (len(first["files"]), 40, False)
    paged = every_listed(service, "pkg/")
    assert [entry["path"].encode() for entry in paged] == sorted(files)
    assert result(service, kind="source.files", substring="pkg/", limit=2)["next_offset"] == 2


def test_a_file_listing_page_holds_at_least_one_entry(tmp_path: Path) -> None:
    long_names = [("d/" + "n" * 250 + "/") * 5 + f"{number}.py" for number in range(3)]
    repo = build_tree_repo(tmp_path / "repo", {path.encode(): b"y\n" for path in long_names})
    page = result(open_service(tmp_path, repo, max_bytes=1024), kind="source.files", substring="d/")
    assert [entry["path"] for entry in page["files"]] == long_names[:1]
    assert page["bytes"] > 1024
    assert (page["next_offset"], page["complete"]) == (1, False)


# --- deep pages: git stops once a page is known, the answer says what it counted ---------------------------------

#: Enough hits for pages read in one pass (offsets below ONE_PASS_OFFSET) and in two, some of them far
#: enough from the end that git is stopped early.
MANY_FILES, MANY_LINES = 40, (ONE_PASS_OFFSET + COUNT_AHEAD + 2000) // 40


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Repo, ResearchService, list[tuple[str, int]]]:
    base = tmp_path_factory.mktemp("many")
    repo = build_many_hits_repo(base / "repo", MANY_FILES, MANY_LINES)
    expected = [(f"many/f_{number:04}.txt", line + 1) for number in range(MANY_FILES) for line in range(MANY_LINES)]
    return repo, open_service(base, repo, max_hits=5000, max_files=1000), expected


def located(answer: dict[str, Any]) -> list[tuple[str, int]]:
    return [(hit["path"], hit["line"]) for hit in answer["hits"]]


def test_a_first_page_stops_early_and_says_the_total_is_a_lower_bound(
        many: tuple[Repo, ResearchService, list[tuple[str, int]]]) -> None:
    _repo, service, expected = many
    first = result(service, kind="source.search", text="many_marker", limit=100)
    assert located(first) == expected[:100]
    assert first["total_hits"] is None  # not counted to the end
    assert 100 + COUNT_AHEAD < first["total_hits_at_least"] < len(expected)
    assert (first["next_offset"], first["complete"]) == (100, False)
    assert "absence" not in first
    assert [hit["text"] for hit in first["hits"][:2]] == ["many_marker 0-0", "many_marker 0-1"]


@pytest.mark.parametrize(("offset", "limit"), [
    (0, 5000), (1, 1), (299, 3), (MANY_LINES - 1, 2), (COUNT_AHEAD - 7, 50), (ONE_PASS_OFFSET - 1, 2),
    (ONE_PASS_OFFSET, 10), (ONE_PASS_OFFSET + 5, 100), (MANY_FILES * MANY_LINES - 700, 100),
    (MANY_FILES * MANY_LINES - 1, 5)])
def test_any_page_is_the_same_slice_of_all_hits(many: tuple[Repo, ResearchService, list[tuple[str, int]]],
                                                offset: int, limit: int) -> None:
    _repo, service, expected = many
    page = result(service, kind="source.search", text="many_marker", offset=offset, limit=limit)
    assert located(page) == expected[offset:offset + limit]
    assert page["next_offset"] == (offset + limit if offset + limit < len(expected) else None)
    assert page["complete"] is False  # an offset, or a next page
    if offset + limit + COUNT_AHEAD < len(expected):
        assert page["total_hits"] is None  # git was stopped: the count is a lower bound, and a true one
        assert offset + limit + COUNT_AHEAD < page["total_hits_at_least"] < len(expected)
    else:
        assert page["total_hits"] == len(expected)
        assert "total_hits_at_least" not in page
    for hit in page["hits"]:
        assert hit["text"] == f"many_marker {int(hit['path'][7:11])}-{hit['line'] - 1}"


def test_the_last_pages_count_to_the_end(many: tuple[Repo, ResearchService, list[tuple[str, int]]]) -> None:
    _repo, service, expected = many
    last = result(service, kind="source.search", text="many_marker", offset=len(expected) - 3, limit=10)
    assert located(last) == expected[-3:]
    assert (last["total_hits"], last["next_offset"], last["complete"]) == (len(expected), None, False)
    beyond = result(service, kind="source.search", text="many_marker", offset=len(expected) + 5)
    assert (beyond["hits"], beyond["total_hits"], beyond["next_offset"]) == ([], len(expected), None)
    assert "absence" not in beyond
    pages, offset = [], 0
    while offset is not None:
        page = result(service, kind="source.search", text="many_marker", offset=offset)
        pages += located(page)
        offset = page["next_offset"]
    assert pages == expected


@pytest.mark.parametrize("first_file", [5, 30])  # an offset read in one pass, and one in two
def test_a_path_prefix_and_the_file_limit_keep_paging_exact(tmp_path: Path, first_file: int,
                                                            many: tuple[Repo, ResearchService, list[tuple[str, int]]]
                                                            ) -> None:
    repo, _service, expected = many
    service = open_service(tmp_path, repo, max_files=3, max_hits=5000)
    offset = MANY_LINES * first_file + 10
    page = result(service, kind="source.search", text="many_marker", offset=offset, limit=5000)
    assert located(page) == expected[offset:MANY_LINES * (first_file + 3)]  # the rest of one file, then two
    assert (page["files"], page["next_offset"]) == (3, MANY_LINES * (first_file + 3))
    assert page["omitted_files"] > 0
    name = f"many/f_{first_file:04}.txt"
    one_file = result(service, kind="source.search", text="many_marker", path_prefix=name, offset=7)
    assert located(one_file) == [hit for hit in expected if hit[0] == name][7:]
    assert one_file["total_hits"] == MANY_LINES


# --- source.read streams the blob --------------------------------------------------------------------------------


def reference_read(content: bytes, start: int, end: int, limits: SourceLimits) -> dict[str, Any]:
    """What source.read answers, computed from the whole content at once."""
    all_lines = content.split(b"\n")
    if all_lines[-1] == b"":
        all_lines.pop()
    last = min(end, len(all_lines), start + limits.max_read_lines - 1)
    lines, size = [], 0
    for number in range(start, last + 1):
        raw = all_lines[number - 1].removesuffix(b"\r")
        try:
            text, not_utf8 = raw.decode("utf-8"), False
        except UnicodeDecodeError:
            text, not_utf8 = raw.decode("utf-8", "replace"), True
        line: dict[str, Any] = {"line": number, "text": text[:limits.max_line_length]}
        if lines and size + len(line["text"].encode()) > limits.max_bytes:
            break
        if len(text) > limits.max_line_length:
            line["truncated"] = True
        if not_utf8:
            line["not_utf8"] = True
        size += len(line["text"].encode())
        lines.append(line)
    return {"total": len(all_lines), "lines": lines}


LINE_CONTENT = st.lists(st.sampled_from([b"a", b"\xc3\xa9", b"\xe9", b"\r", b"\n", b"\n", b"long " * 9, b"\x00"]),
                        max_size=60).map(b"".join)


@hypothesis_settings(max_examples=300, deadline=None)
@given(LINE_CONTENT, st.integers(1, 12), st.integers(0, 12), st.lists(st.integers(1, 40), max_size=8))
def test_a_read_in_chunks_is_the_read_of_the_whole(content: bytes, start: int, extra: int, cuts: list[int]) -> None:
    limits = SourceLimits(max_read_lines=5, max_line_length=20, max_bytes=60)
    reader = _LineReader(limits, start, min(start + extra, start + limits.max_read_lines - 1))
    position = 0
    for size in [*cuts, len(content)]:  # the same bytes, cut anywhere
        reader.feed(content[position:position + size])
        position += size
    total = reader.finish()
    expected = reference_read(content, start, start + extra, limits)
    assert total == expected["total"]
    assert reader.sha256.hexdigest() == hashlib.sha256(content).hexdigest()
    if start <= max(total, 1):
        assert reader.lines == expected["lines"]
    assert reader.binary(at_end=True) == (b"\0" in content[:8000])


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, ResearchService]:
    """A 5 MB file of numbered lines (several pipe chunks), one without a final newline, a late NUL."""
    base = tmp_path_factory.mktemp("large")
    content = "".join(f"line {number} {'x' * (number % 97)}\n" for number in range(1, 80_001)).encode()
    repo = build_tree_repo(base / "repo", {b"big.txt": content, b"open.txt": b"one\ntwo", b"empty.txt": b"",
                                           b"late_nul.txt": b"text\n" * 2000 + b"\0 after 10000 bytes\n"})
    return content, open_service(base, repo, max_read_lines=1000, max_bytes=10_000_000)


@pytest.mark.parametrize(("start", "end"), [(1, 3), (26_000, 26_999), (40_000, 40_002), (79_999, 90_000),
                                            (80_000, 80_000)])
def test_a_large_file_reads_any_range(large: tuple[bytes, ResearchService], start: int, end: int) -> None:
    content, service = large
    answer = result(service, kind="source.read", path="big.txt", start_line=start, end_line=end)
    expected = content.decode().split("\n")
    assert [line["text"] for line in answer["lines"]] == expected[start - 1:min(end, 80_000)]
    assert answer["total_lines"] == 80_000
    assert answer["blob_sha256"] == hashlib.sha256(content).hexdigest()
    assert answer["bytes"] == sum(len(line["text"].encode()) for line in answer["lines"])
    refused = refusal(service, kind="source.read", path="big.txt", start_line=80_001, end_line=80_001)
    assert (refused.code, refused.details["total_lines"]) == ("invalid_input", 80_000)


def test_the_last_line_without_a_newline_empty_files_and_late_nul_bytes(large: tuple[bytes, ResearchService]) -> None:
    _content, service = large
    opened = result(service, kind="source.read", path="open.txt", start_line=2, end_line=5)
    assert (opened["lines"], opened["total_lines"], opened["complete"]) == ([{"line": 2, "text": "two"}], 2, True)
    empty = result(service, kind="source.read", path="empty.txt", start_line=1, end_line=1)
    assert (empty["lines"], empty["total_lines"], empty["end_line"], empty["complete"]) == ([], 0, 0, True)
    late = result(service, kind="source.read", path="late_nul.txt", start_line=2001, end_line=2001)
    assert late["lines"] == [{"line": 2001, "text": "\0 after 10000 bytes"}]  # git's binary test reads 8,000 bytes


# --- git's output, however it is cut into chunks -----------------------------------------------------------------

GREP_NAMES = st.sampled_from([b"a.py", b"src/b c.txt", b"odd\nname.txt", b"\n", b"caf\xe9.txt", b"x\n\ny", b"-O"])
GREP_TEXT = st.binary(max_size=12).map(lambda raw: raw.replace(b"\n", b" "))  # a line holds no newline


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    chunks, position = [], 0
    for size in cuts:
        chunks.append(data[position:position + size])
        position += size
    return [*chunks, data[position:]]


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(GREP_NAMES, st.lists(GREP_TEXT, min_size=1, max_size=4)), max_size=6),
       st.lists(st.integers(1, 30), max_size=12))
def test_grep_output_parses_the_same_however_it_arrives(files: list[tuple[bytes, list[bytes]]],
                                                        cuts: list[int]) -> None:
    prefix = b"c0ffee:"
    files = [(name, texts) for index, (name, texts) in enumerate(files)
             if all(other != name for other, _ in files[:index])]  # git names each file once
    lines_output = b"".join(prefix + name + b"\0" + str(number).encode() + b"\0" + text + b"\n"
                            for name, texts in files for number, text in enumerate(texts, start=1))
    counts_output = b"".join(prefix + name + b"\0" + str(len(texts)).encode() + b"\n" for name, texts in files)
    expected = [(name.decode("utf-8", "surrogateescape"), number, text)
                for name, texts in files for number, text in enumerate(texts, start=1)]
    runs = list(_grep_runs(iter(cut(lines_output, cuts)), prefix))
    assert [(line.path, line.line, line.text) for run in runs for line in run.lines()] == expected
    assert [run.count for run in runs] == [len(list(run.lines())) for run in runs]
    assert list(_grep_counts(iter(cut(counts_output, cuts)), prefix)) == [
        (name.decode("utf-8", "surrogateescape"), len(texts)) for name, texts in files]
