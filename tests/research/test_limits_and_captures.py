"""Limits (each triggers its flag; ``complete`` is false whenever anything was cut) and captures
(content-addressed, byte-identical for identical answers, verifiable and readable with no repository)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.auth.permissions import Role
from armarius.canonical import canonical_json
from armarius.errors import ArmariusError
from armarius.research.captures import verify_capture
from armarius.research.git import _exit_status
from armarius.research.service import ResearchService
from tests.helpers import OwnerSQL, agent_of, make_team
from tests.research.repos import (
    EMOJI_LINE,
    WIDE_LINE,
    WIDE_LINES,
    Repo,
    build_bulk_repo,
    build_repo,
    bulk_hits,
    open_service,
)

SEARCH = {"kind": "source.search", "text": "bulk_marker"}


@pytest.fixture(scope="module")
def bulk(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return build_bulk_repo(tmp_path_factory.mktemp("bulk") / "repo")


def service_with(tmp_path: Path, repo: Repo, **limits: Any) -> ResearchService:
    return open_service(tmp_path, repo, **limits)


def pages(service: ResearchService, query: dict[str, Any]) -> list[dict[str, Any]]:
    """Every page of a search or file listing, following next_offset to the end."""
    found, offset = [], 0
    while True:
        answer = service.query({**query, **({"offset": offset} if offset else {})})["result"]
        found.append(answer)
        if answer["next_offset"] is None:
            return found
        assert answer["next_offset"] > offset, "paging must move on"
        offset = answer["next_offset"]
        assert len(found) < 1000


def paged_hits(service: ResearchService, query: dict[str, Any]) -> list[tuple[str, int]]:
    return [(hit["path"], hit["line"]) for page in pages(service, query) for hit in page["hits"]]


def utf8_size(answer: dict[str, Any]) -> int:
    return sum(len(hit["text"].encode()) + len(hit["path"].encode()) for hit in answer["hits"])


# --- limits ---------------------------------------------------------------------------------------------------


def test_an_uncut_answer_is_complete(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_hits=1000)
    answer = service.query(SEARCH)["result"]
    assert [(hit["path"], hit["line"]) for hit in answer["hits"]] == bulk_hits()
    assert (answer["total_hits"], answer["next_offset"], answer["omitted_files"], answer["truncated_lines"]) == (
        650, None, 0, 0)
    assert answer["complete"] is True


def test_a_query_limit_pages_the_hits(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk)
    answer = service.query({**SEARCH, "limit": 7})["result"]
    assert [(hit["path"], hit["line"]) for hit in answer["hits"]] == bulk_hits()[:7]
    assert (answer["next_offset"], answer["total_hits"], answer["complete"]) == (7, 650, False)
    every_page = pages(service, {**SEARCH, "limit": 100})
    assert all(page["complete"] is False for page in every_page)  # later pages start at an offset
    assert paged_hits(service, {**SEARCH, "limit": 100}) == bulk_hits()
    assert paged_hits(service, {**SEARCH, "limit": 649}) == bulk_hits()
    last = service.query({**SEARCH, "offset": 640, "limit": 100})["result"]
    assert (len(last["hits"]), last["next_offset"], last["complete"]) == (10, None, False)
    beyond = service.query({**SEARCH, "offset": 5000})["result"]
    assert (beyond["hits"], beyond["complete"]) == ([], False)
    assert "absence" not in beyond  # a partial search is never evidence of absence


def test_the_default_hit_limit_cuts_a_large_answer(tmp_path: Path, bulk: Repo) -> None:
    answer = service_with(tmp_path, bulk).query(SEARCH)["result"]
    assert (len(answer["hits"]), answer["next_offset"], answer["complete"]) == (500, 500, False)


def test_the_configured_hit_limit_caps_every_query(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_hits=50)
    for query in (SEARCH, {**SEARCH, "limit": 10_000}, {"kind": "source.symbol", "symbol": "bulk_marker"},
                  {"kind": "source.registration", "symbol": "bulk_marker"}):
        answer = service.query(query)["result"]
        assert (len(answer["hits"]), answer["next_offset"], answer["complete"]) == (50, 50, False), query
    assert service.query({**SEARCH, "limit": 5})["result"]["next_offset"] == 5
    assert paged_hits(service, SEARCH) == bulk_hits()


def test_the_file_limit_omits_files_and_pages_on(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_files=3)
    answer = service.query(SEARCH)["result"]
    assert {hit["path"] for hit in answer["hits"]} == {"pkg/mod_00.py", "pkg/mod_01.py", "pkg/mod_02.py"}
    assert answer["files"] == 3
    assert answer["omitted_files"] > 0
    assert answer["next_offset"] == 60
    assert answer["complete"] is False
    assert paged_hits(service, SEARCH) == bulk_hits()

    listed = service.query({"kind": "source.files", "substring": "pkg/", "limit": 100})["result"]
    assert [entry["path"] for entry in listed["files"]] == ["pkg/mod_00.py", "pkg/mod_01.py", "pkg/mod_02.py"]
    assert (listed["total"], listed["next_offset"], listed["complete"]) == (30, 3, False)
    all_files = [entry["path"] for page in pages(service, {"kind": "source.files", "substring": "pkg/"})
                 for entry in page["files"]]
    assert all_files == [f"pkg/mod_{number:02}.py" for number in range(30)]


def test_a_file_listing_limit_pages_on(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk)
    first = service.query({"kind": "source.files", "substring": "/", "limit": 4})["result"]
    assert (len(first["files"]), first["next_offset"], first["total"], first["complete"]) == (4, 4, 32, False)
    whole = service.query({"kind": "source.files", "substring": "/"})["result"]
    assert (len(whole["files"]), whole["next_offset"], whole["complete"]) == (32, None, True)


def test_the_byte_limit_counts_utf8_bytes_and_pages_on(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_bytes=1024)
    answer = service.query(SEARCH)["result"]
    assert answer["bytes"] == utf8_size(answer) <= 1024
    assert answer["next_offset"] == len(answer["hits"])
    assert answer["complete"] is False
    emoji = service.query({**SEARCH, "path_prefix": "uni"})["result"]
    assert emoji["bytes"] == utf8_size(emoji) <= 1024  # four bytes a character, not one
    assert len(emoji["hits"]) == 1024 // len((EMOJI_LINE.format(0) + "uni/emoji.txt").encode()) == 2
    assert emoji["complete"] is False
    assert paged_hits(service, SEARCH) == bulk_hits()

    read = service.query({"kind": "source.read", "path": "uni/emoji.txt", "start_line": 1, "end_line": 50})["result"]
    assert sum(len(line["text"].encode()) for line in read["lines"]) <= 1024
    assert read["next_start_line"] == len(read["lines"]) + 1
    assert read["complete"] is False


def test_one_hit_larger_than_the_byte_limit_still_moves_paging_on(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_bytes=1024, max_line_length=2000)
    wide = {"kind": "source.search", "text": "wide_marker"}
    every_page = pages(service, wide)
    assert [len(page["hits"]) for page in every_page] == [1] * WIDE_LINES
    assert [hit["text"] for page in every_page for hit in page["hits"]] == [
        WIDE_LINE.format(line) for line in range(WIDE_LINES)]
    start, lines = 1, []
    while start is not None:
        read = service.query({"kind": "source.read", "path": "wide/long.txt", "start_line": start,
                              "end_line": WIDE_LINES})["result"]
        lines += [line["line"] for line in read["lines"]]
        assert read["next_start_line"] is None or read["next_start_line"] > start
        start = read["next_start_line"]
    assert lines == list(range(1, WIDE_LINES + 1))


def test_the_line_length_limit_truncates_and_flags(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_line_length=16)
    answer = service.query({**SEARCH, "path_prefix": "uni"})["result"]
    assert all(hit["truncated"] is True and len(hit["text"]) == 16 for hit in answer["hits"])
    assert answer["truncated_lines"] == len(answer["hits"]) == 50
    assert answer["next_offset"] is None
    assert answer["complete"] is False
    short = service.query({**SEARCH, "path_prefix": "pkg/mod_00.py"})["result"]
    assert short["truncated_lines"] == 20  # "value_0 = 'bulk_marker 0-0'" is longer than 16 too
    read = service.query({"kind": "source.read", "path": "uni/emoji.txt", "start_line": 1, "end_line": 3})["result"]
    assert [line["text"] for line in read["lines"]] == [EMOJI_LINE.format(line)[:16] for line in range(3)]
    assert read["truncated_lines"] == 3
    assert read["next_start_line"] is None
    assert read["complete"] is False


def test_the_read_line_limit_pages_a_read(tmp_path: Path, bulk: Repo) -> None:
    service = service_with(tmp_path, bulk, max_read_lines=5)
    read = service.query({"kind": "source.read", "path": "pkg/mod_00.py", "start_line": 1, "end_line": 20})["result"]
    assert [line["line"] for line in read["lines"]] == [1, 2, 3, 4, 5]
    assert (read["end_line"], read["next_start_line"], read["total_lines"], read["complete"]) == (5, 6, 20, False)
    start, seen = 1, []
    while start is not None:
        read = service.query({"kind": "source.read", "path": "pkg/mod_00.py", "start_line": start,
                              "end_line": 20})["result"]
        seen += [line["line"] for line in read["lines"]]
        start = read["next_start_line"]
    assert seen == list(range(1, 21))
    assert read["complete"] is True  # the last range, 16-20, was read whole


def test_the_time_limit_stops_git_and_says_so(tmp_path: Path) -> None:
    """A loose object replaced by a FIFO: git blocks opening it, deterministically, until it is killed."""
    repo = build_repo(tmp_path / "repo")
    service = service_with(tmp_path, repo, timeout_seconds=0.2).research  # the bare service (no session to block)
    blob = repo.blob("src/app.py")
    loose = repo.path / ".git" / "objects" / blob[:2] / blob[2:]
    loose.unlink()
    os.mkfifo(loose)
    for query in ({"kind": "source.search", "text": "handle_order"}, {"kind": "source.symbol", "symbol": "register"},
                  {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}):
        started = time.monotonic()
        with pytest.raises(ArmariusError) as caught:
            service.query(query)
        assert time.monotonic() - started < 5
        assert caught.value.code == "research_unavailable"
        assert caught.value.details == {"timeout_seconds": 0.2}
        assert "0.2 seconds" in caught.value.message
    # The tree is still readable (a listing hashes each file it lists: src/app.py's blob is the FIFO).
    files = service.query({"kind": "source.files", "substring": "db/"})["result"]
    assert files["complete"] is True


def test_the_wait_for_git_to_end_keeps_the_time_limit_and_the_exit_status() -> None:
    """After git closes its output it is waited for on a process descriptor: an end is seen at once with its
    status, and a process that closed its output but goes on is given up at the deadline (and killed by the caller)."""
    lingering = subprocess.Popen(["sh", "-c", "exec >&- 2>&-; sleep 30"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    try:
        started = time.monotonic()
        assert _exit_status(lingering, started + 0.2) is None
        assert 0.15 < time.monotonic() - started < 5
    finally:
        lingering.kill()
        lingering.wait()
    for command, status in ((["true"], 0), (["sh", "-c", "exit 3"], 3)):
        ending = subprocess.Popen(command)
        assert _exit_status(ending, time.monotonic() + 30) == status
        assert ending.returncode == status


# --- captures -------------------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return build_repo(tmp_path / "repo")


def test_an_identical_answer_is_one_capture_written_once(tmp_path: Path, repo: Repo) -> None:
    service = service_with(tmp_path, repo)
    query = {"kind": "source.search", "text": "handle_order"}
    first = service.query(query)
    file = service.evidence_dir / f"{first['capture']}.json"
    os.utime(file, (1_000_000_000, 1_000_000_000))
    again = service.query(dict(query))
    assert again == first
    assert sorted(os.listdir(service.evidence_dir)) == [file.name]  # no second file, no temporary left
    assert file.stat().st_mtime == 1_000_000_000
    other_service = service_with(tmp_path / "other", repo)
    other = other_service.query(query)
    assert other["capture"] == first["capture"]
    assert (other_service.evidence_dir / file.name).read_bytes() == file.read_bytes()
    assert service.query({**query, "limit": 3})["capture"] != first["capture"]


@pytest.mark.parametrize("torn", [b"", b'{"format":1,"sche', b"x" * 100_000])
def test_a_torn_capture_file_is_replaced_when_the_capture_recurs(tmp_path: Path, repo: Repo, torn: bytes) -> None:
    service = service_with(tmp_path, repo)
    query = {"kind": "source.search", "text": "handle_order"}
    first = service.query(query)
    file = service.evidence_dir / f"{first['capture']}.json"
    intact = file.read_bytes()
    file.write_bytes(torn)  # what a power loss can leave of a file that never reached the disk
    assert not verify_capture(file)
    assert service.query(query) == first
    assert file.read_bytes() == intact
    assert sorted(os.listdir(service.evidence_dir)) == [file.name]


def test_a_capture_is_named_by_its_hash_and_holds_request_origin_and_result(tmp_path: Path, repo: Repo) -> None:
    service = service_with(tmp_path, repo)
    query = {"kind": "source.read", "path": "src/app.py", "start_line": 6, "end_line": 8}
    answer = service.query(query)
    file = service.evidence_dir / f"{answer['capture']}.json"
    content = file.read_bytes()
    assert hashlib.sha256(content).hexdigest() == answer["capture"] == file.stem
    assert verify_capture(file)
    document = json.loads(content)
    assert document == {"format": 1, "schema": "project-query-v1", "request": query, "origin": answer["origin"],
                        "result": answer["result"]}
    assert content == canonical_json(document).encode("utf-8")
    assert document["origin"] == {"kind": "git", "source": "app", "url": "https://git.example.invalid/app.git",
                                  "commit": repo.pin}
    assert str(repo.path) not in content.decode()  # the origin is the URL, not a server path
    tampered = tmp_path / "copy" / file.name
    tampered.parent.mkdir()
    tampered.write_bytes(content.replace(b"order_id", b"order_ID"))
    assert not verify_capture(tampered)


def test_an_empty_answer_keeps_its_request_and_coverage(tmp_path: Path, repo: Repo) -> None:
    service = service_with(tmp_path, repo)
    query = {"kind": "source.symbol", "symbol": "never_defined", "path_prefix": "src"}
    answer = service.query(query)
    document = json.loads((service.evidence_dir / f"{answer['capture']}.json").read_bytes())
    assert document["request"] == query
    assert document["result"]["hits"] == []
    assert (document["result"]["total_hits"], document["result"]["complete"]) == (0, True)
    assert document["result"]["path_prefix"] == "src"
    assert "absence" in document["result"]


def test_captures_are_readable_with_no_repository(tmp_path: Path, repo: Repo) -> None:
    service = service_with(tmp_path, repo)
    answers = [service.query(query) for query in (
        {"kind": "source.search", "text": "handle_order"}, {"kind": "source.files", "substring": "src/"},
        {"kind": "source.read", "path": "db/schema.sql", "start_line": 1, "end_line": 5})]
    shutil.rmtree(repo.path)
    for answer in answers:
        file = service.evidence_dir / f"{answer['capture']}.json"
        assert verify_capture(file)
        document = json.loads(file.read_text(encoding="utf-8"))
        assert document["result"] == answer["result"]
        assert document["origin"]["commit"] == repo.pin
    read = json.loads((service.evidence_dir / f"{answers[2]['capture']}.json").read_bytes())
    assert read["result"]["lines"][0] == {"line": 1, "text": "CREATE TABLE orders ("}


# --- through the MCP tool, on both engines --------------------------------------------------------------------




def research_events(sql: OwnerSQL, workspace_id: int) -> list[dict[str, Any]]:
    rows = sql.rows("SELECT actor, subject, details FROM audit_events WHERE action = 'research.query' "
                    "AND workspace_id = ? ORDER BY seq", (workspace_id,))
    return [{"actor": actor, "subject": subject, **json.loads(details)} for actor, subject, details in rows]


@pytest.mark.anyio
async def test_the_tool_stores_the_capture_in_the_workspace_and_audits_it(research_app: tuple[Armarius, Repo]
                                                                         ) -> None:
    application, repo = research_app
    alpha = make_team(application, "alpha", agent_role=Role.READER)
    beta = make_team(application, "beta", agent_role=Role.READER)
    query = {"kind": "source.search", "text": "handle_order", "path_prefix": "src"}
    async with agent_of(application, alpha.agent) as call:
        assert "project_query" in await call.tools()
        session = (await call("session_open", subject="Where are orders handled?"))["session"]
        first = await call("project_query", session=session, arguments=query)
        again = await call("project_query", session=session, arguments=query)
        refused = await call("project_query", session=session, arguments={"kind": "source.read", "path": ".git/config",
                                                                          "start_line": 1, "end_line": 2})
    async with agent_of(application, beta.agent) as call:
        other_session = (await call("session_open", subject="Where are orders handled?"))["session"]
        other = await call("project_query", session=other_session, arguments=query)
    assert "error" not in first
    assert (first["evidence"], again["evidence"], again["repeat_of"]) == (1, 2, 1)
    assert {key: again[key] for key in ("capture", "origin", "result")} == {
        key: first[key] for key in ("capture", "origin", "result")}
    assert {key: other[key] for key in ("capture", "origin", "result")} == {
        key: first[key] for key in ("capture", "origin", "result")}
    assert refused["error"] == "invalid_input"
    assert first["origin"]["commit"] == repo.pin
    file = application.sessions.session_folder("alpha", session) / f"{first['capture']}.json"
    assert verify_capture(file)
    assert json.loads(file.read_bytes())["result"] == first["result"]
    with OwnerSQL(application.settings) as sql:
        rows = sql.rows("SELECT workspace_id, capture_id, content FROM captures ORDER BY workspace_id")
        assert [(workspace, capture) for workspace, capture, _ in rows] == [
            (alpha.agent.workspace_id, first["capture"]), (beta.agent.workspace_id, first["capture"])]
        assert all(content.encode("utf-8") == file.read_bytes() for _, _, content in rows)
        events = research_events(sql, alpha.agent.workspace_id)
        assert events == [
            {"actor": "agent:alpha-agent", "subject": "app", "session": session, "kind": "source.search",
             "capture": first["capture"], "evidence": 1, "commit": repo.pin, "new": True},
            {"actor": "agent:alpha-agent", "subject": "app", "session": session, "kind": "source.search",
             "capture": first["capture"], "evidence": 2, "commit": repo.pin, "new": False, "repeat_of": 1},
        ]
        assert [event["new"] for event in research_events(sql, beta.agent.workspace_id)] == [True]
    from armarius.audit.chain import verify_chain

    assert verify_chain(application.database, alpha.agent.workspace_id)[1] is None


def test_a_human_reader_may_query_too(research_app: tuple[Armarius, Repo]) -> None:
    application, _repo = research_app
    team = make_team(application, "alpha", human_role=Role.READER)
    session = application.sessions.open(team.human, "Which files are there?")["session"]
    answer = application.sessions.query(team.human, session, {"kind": "source.files", "substring": "src/"})
    assert len(answer["result"]["files"]) == 3
    with OwnerSQL(application.settings) as sql:
        assert [event["actor"] for event in research_events(sql, team.human.workspace_id)] == ["human:alpha-human"]


@pytest.mark.anyio
async def test_without_a_research_configuration_there_is_no_research_tool(app: Armarius) -> None:
    assert app.research is None
    team = make_team(app, "alpha")
    async with agent_of(app, team.agent) as call:
        assert not {"project_query", "session_open"} & await call.tools()
        refused = await call("project_query", session=1, arguments={"kind": "source.files", "substring": "src"})
    assert refused["error"] == "not_found"
    with OwnerSQL(app.settings) as sql:
        assert sql.count("captures") == 0
