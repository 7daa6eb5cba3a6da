"""A corpus of hostile query inputs for every kind and field.

Each answer is a refusal (``invalid_input``, or ``not_found`` for a path or source that does not
exist) or a literal treatment whose every hit lies inside the pinned tree; nothing is ever read
from or written to anywhere else, and the repository (working tree, index, refs, config) is the
same afterwards. Paths that could leave the tree or enter git's metadata are refused before any
lookup; every other spelling is a name, looked up byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from armarius.app import Armarius
from armarius.errors import ArmariusError
from armarius.research.service import ResearchService, query_schema
from tests.helpers import agent_of, make_team
from tests.research.repos import PINNED, Repo, build_repo, open_service, walk

#: Spellings that could reach outside the tree or into git's metadata: refused before any lookup.
TRAVERSALS = [
    "../etc/passwd", "../../../../../../etc/passwd", "src/../../outside", "src/../src/app.py", "..", ".",
    "./src/app.py", "src/./app.py", "/etc/passwd", "//etc/passwd", "/", "/proc/self/environ", "file:///etc/passwd",
    ".git/config", ".git", ".git/", ".GIT/config", ".Git/HEAD", "src/.git/config", ".git/objects", "src/app.py/",
    "src//app.py", "src/app.py//", "src/app.py/.", "src/app.py\x00", "src/app.py\x00.txt", "\ud800", "src/\udce9.py",
]
#: Spellings that only look like one: in a git tree each is a plain name (a backslash, a percent sign, a
#: fullwidth dot, a control character are bytes of a name), so each is looked up byte for byte, and is not there.
LOOKALIKES = [
    "..\\..\\etc\\passwd", "src\\app.py", "..\\", "%2e%2e/etc/passwd", "%2E%2E%2Fetc%2Fpasswd", "..%2fetc%2fpasswd",
    "%252e%252e/etc/passwd", "src%2fapp.py", "C:\\Windows\\win.ini", "\uff0e\uff0e/etc/passwd", "\u2025/etc/passwd",
    "\u2024\u2024/etc/passwd", "src\uff0fapp.py", "\uff0fetc\uff0fpasswd", "src\u2215app.py", "\u2216etc",
    "s\u0301rc/app.py", "src/app\u200b.py", "\u202eyp.ppa/crs", "\ufeffsrc/app.py", "src/app.py\n", "src/app.py\r",
    "src/\x1b[31mapp.py", "src/app.py\t", "src/app.py\u2028", "~/.ssh/id_rsa", "$HOME/.ssh", "`id`", "$(id)",
    "src/app.py;id", "...", ".git.", ".gitx/config", "a.git/config", " .git", "git~1/config",
]
INJECTIONS = [
    "--output=evil.txt", "-Oevil.txt", "-O", "--open-files-in-pager=touch evil.txt", "-e", "--", "-", "--help",
    "-f/etc/passwd", "--file=/etc/passwd", "--no-index", "--exec=touch evil.txt", "-C/", "--git-dir=/tmp",
    "--output=x", "-c core.pager=touch evil.txt",
]
MAGIC = [
    ":(top)", ":(top)src/app.py", ":!src", ":^src", ":(exclude)src", ":(glob)**/*.py", ":(icase)SRC", ":/", ":",
    "*", "**", "src/*.py", "src/app.p?", "[s]rc/app.py", "glob[1]*.txt", "a?b", "[abc]", ".*", "^", "$", "\\", "(",
    "|", "handle_.*", "HEAD", "HEAD:src/app.py", "main:src/app.py", "@{upstream}", "HEAD~1", "refs/heads/main",
]
CONTROL = ["\x00", "a\x00b", "a\nb", "a\rb", "\n", "\x1b[31m", "\t", "\x7f", "\u202e", "\u0085", "\udce9"]
LONG = ["x" * 256, "x" * 257, "x" * 1024, "x" * 1025, "a/" * 300 + "a", "x" * 100_000]
TEXTS = TRAVERSALS + LOOKALIKES + INJECTIONS + MAGIC + CONTROL + LONG + ["", " ", "handle_order"]
WRONG_TYPES: list[Any] = [None, 1, 1.5, True, [], {}, ["src"], {"$ne": 1}]
WRONG_INTEGERS: list[Any] = [None, "1", 1.5, 1.0, True, False, -1, 10**30, [], {}, [1]]

TEXT_FIELD = {"source.files": "substring", "source.search": "text", "source.schema": "text",
              "source.symbol": "symbol", "source.registration": "symbol"}
BASE: dict[str, dict[str, Any]] = {
    "source.files": {"kind": "source.files", "substring": "app"},
    "source.search": {"kind": "source.search", "text": "handle_order"},
    "source.symbol": {"kind": "source.symbol", "symbol": "handle_order"},
    "source.registration": {"kind": "source.registration", "symbol": "register"},
    "source.schema": {"kind": "source.schema", "text": "orders"},
    "source.read": {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 3},
}


PATHS = TRAVERSALS + LOOKALIKES + INJECTIONS + MAGIC + CONTROL + LONG + ["", "src", "src/", "db"] + WRONG_TYPES
SOURCES = ["../app", "/etc", "app; rm -rf /", "APP", "app ", "\x00", "x" * 65, "", "other", "..", ".git", "app\n",
           "\udce9", *WRONG_TYPES]
UNKNOWN_FIELDS = ["repository", "commit", "branch", "url", "root", "cwd", "config", "timeout_seconds", "max_hits",
                  "__proto__", "sql", "shell", "ref", "pathspec"]
KINDS = [None, 1, [], ["source.read"], {}, {"source.read": 1}, "", "source", "source.*", "SOURCE.READ",
         "source.read ", "database.rows", "database.tables", "shell", "../source.read", "source.read\x00"]
NOT_OBJECTS = [None, [], "source.files", 1, True, [BASE["source.files"]]]


def _variations() -> Iterator[tuple[str, Any]]:
    """(name, query): one hostile value in one field of an otherwise good query of each kind."""
    for kind, base in BASE.items():
        field = TEXT_FIELD.get(kind)
        if field:
            yield from ((f"{kind}.{field}", {**base, field: value}) for value in TEXTS + WRONG_TYPES)
            yield from ((f"{kind}.offset", {**base, "offset": value}) for value in WRONG_INTEGERS)
            yield from ((f"{kind}.limit", {**base, "limit": value}) for value in [*WRONG_INTEGERS, 0])
        else:
            yield from ((f"{kind}.path", {**base, "path": value}) for value in PATHS)
            yield from ((f"{kind}.{name}", {**base, name: value}) for name in ("start_line", "end_line")
                        for value in [*WRONG_INTEGERS, 0])
        if "path_prefix" in SCHEMA_FIELDS[kind]:
            yield from ((f"{kind}.path_prefix", {**base, "path_prefix": value}) for value in PATHS)
        else:
            yield f"{kind}.path_prefix-unknown", {**base, "path_prefix": "db"}
        yield from ((f"{kind}.source", {**base, "source": value}) for value in SOURCES)
        yield from ((f"{kind}.unknown", {**base, name: "HEAD"}) for name in UNKNOWN_FIELDS)
    yield from (("kind", {**BASE["source.read"], "kind": value}) for value in KINDS)
    yield from (("arguments", value) for value in NOT_OBJECTS)


SCHEMA_FIELDS = {definition["properties"]["kind"]["const"]: set(definition["properties"])
                 for definition in query_schema()["$defs"].values() if "kind" in definition.get("properties", {})}
CORPUS = [pytest.param(query, id=f"{name}-{number}") for number, (name, query) in enumerate(_variations())]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Repo, ResearchService]:
    base = tmp_path_factory.mktemp("hostile")
    repo = build_repo(base / "repo")
    return base, repo, open_service(base, repo)


def listing(folder: Path) -> set[tuple[str, bool, int, int]]:
    """Every path under ``folder`` except the evidence folder, with its kind, size and modification time."""
    found = set()
    for path in walk(folder, skip={folder / "evidence"}):
        info = path.lstat()
        found.add((str(path.relative_to(folder)), path.is_symlink(), info.st_size, info.st_mtime_ns))
    return found


def outcome(service: ResearchService, query: Any) -> tuple[str, dict[str, Any]]:
    try:
        return "ok", service.query(query)
    except ArmariusError as error:
        return error.code, error.to_dict()


def check_answer(repo: Repo, query: Any, code: str, answer: dict[str, Any]) -> None:
    """A refusal with an allowed code, or an answer that stays inside the pinned tree and is literal."""
    if code != "ok":
        well_formed_lookup = (isinstance(query, dict) and query.get("kind") == "source.read") or (
            isinstance(query, dict) and "source" in query)
        assert code in ({"invalid_input", "not_found"} if well_formed_lookup else {"invalid_input"}), (query, answer)
        return
    assert answer["origin"]["commit"] == repo.pin
    result = answer["result"]
    tree = repo.tree_paths()
    kind = query["kind"]
    if kind == "source.files":
        assert all(entry["path"] in tree and query["substring"] in entry["path"] for entry in result["files"])
    elif kind == "source.read":
        assert query["path"] in PINNED
        expected = PINNED[query["path"]].split(b"\n")
        for line in result["lines"]:
            assert line["text"] == expected[line["line"] - 1].decode("utf-8", "replace")
    else:
        prefix = result["path_prefix"]
        for hit in result["hits"]:
            assert hit["path"] in tree
            assert prefix is None or hit["path"] == prefix or hit["path"].startswith(prefix + "/")
            assert hit["blob"] == repo.blob(hit["path"])
            needle = query.get("text") or query.get("symbol")
            assert hit.get("truncated") or needle in hit["text"]
            if kind == "source.schema":
                assert hit["path"].endswith(".sql")
    dumped = repr(result)
    for outside in ("root:x:", "/bin/bash", "nologin", "[core]", "repositoryformatversion"):
        assert outside not in dumped


@pytest.mark.parametrize("query", CORPUS)
def test_hostile_query(world: tuple[Path, Repo, ResearchService], query: Any) -> None:
    base, repo, service = world
    state, files, cwd = repo.state(), listing(base), set(os.listdir(Path.cwd()))
    code, answer = outcome(service, query)
    check_answer(repo, query, code, answer)
    if code == "ok":
        assert Draft202012Validator(query_schema()).is_valid(query)
    assert repo.state() == state
    assert listing(base) == files
    assert set(os.listdir(Path.cwd())) == cwd


def test_the_corpus_covers_every_kind_and_field() -> None:
    seen = {(case.values[0]["kind"], field) for case in CORPUS
            if isinstance(case.values[0], dict) and isinstance(case.values[0].get("kind"), str)
            for field in case.values[0]}
    for kind, base in BASE.items():
        for field in base:
            assert (kind, field) in seen
        for field in ("source", "offset", "limit", "path_prefix"):
            if kind == "source.read" and field in ("offset", "limit", "path_prefix"):
                continue
            if kind in ("source.files", "source.schema") and field == "path_prefix":
                continue
            assert (kind, field) in seen, (kind, field)
    assert len(CORPUS) > 500


@pytest.mark.parametrize("path", TRAVERSALS)
def test_every_traversal_spelling_is_refused_before_any_lookup(world: tuple[Path, Repo, ResearchService],
                                                               path: str) -> None:
    _base, _repo, service = world
    code, error = outcome(service, {**BASE["source.read"], "path": path})
    assert code == "invalid_input", error
    assert error["details"]["field"] == "path"
    code, error = outcome(service, {**BASE["source.search"], "path_prefix": path})
    if path == "src/app.py/":  # a prefix may end with one '/': 'src/app.py', literally
        assert code == "ok"
        return
    assert code == "invalid_input", (path, error)
    assert error["details"]["field"] == "path_prefix"


@pytest.mark.parametrize("path", LOOKALIKES)
def test_every_lookalike_is_a_name_looked_up_literally(world: tuple[Path, Repo, ResearchService], path: str) -> None:
    _base, repo, service = world
    assert path not in repo.tree_paths()
    code, error = outcome(service, {**BASE["source.read"], "path": path})
    assert code == "not_found", error
    assert error["details"] == {"path": path}
    code, answer = outcome(service, {**BASE["source.search"], "path_prefix": path})
    assert code == "ok", answer
    assert answer["result"]["hits"] == []  # nothing under a name the tree does not hold
    assert answer["result"]["path_prefix"] == path


def test_the_corpus_has_both_refusals_and_literal_answers(world: tuple[Path, Repo, ResearchService]) -> None:
    _base, _repo, service = world
    codes = [outcome(service, case.values[0])[0] for case in CORPUS]
    assert codes.count("ok") > 200
    assert codes.count("invalid_input") > 800
    assert set(codes) == {"ok", "invalid_input", "not_found"}


def test_option_spellings_are_searched_literally_and_create_nothing(world: tuple[Path, Repo, ResearchService]
                                                                    ) -> None:
    base, _repo, service = world
    before = listing(base)
    for text in ("--output=evil.txt", "-Oevil.txt", "--output=", "-O"):
        answer = service.query({"kind": "source.search", "text": text})["result"]
        assert [(hit["path"], hit["line"]) for hit in answer["hits"]] == [("docs/options.md", 1)], text
        assert answer["complete"] is True
    assert [hit["path"] for hit in service.query({"kind": "source.search", "text": "dash_marker"})["result"]["hits"]
            ] == ["--output=x", "-O"]
    assert listing(base) == before
    assert not any(base.rglob("evil.txt"))
    assert not any(Path.cwd().glob("evil.txt"))


def test_pathspec_magic_and_globs_are_literal(world: tuple[Path, Repo, ResearchService]) -> None:
    _base, _repo, service = world
    for text in (":(top)", ":!src", "src/*.py", "a?b", "[abc]", "../../etc/passwd"):
        answer = service.query({"kind": "source.search", "text": text})["result"]
        assert [hit["path"] for hit in answer["hits"]] == ["docs/options.md"], text
    assert service.query({"kind": "source.search", "text": "handle_.*"})["result"]["hits"] == []
    assert service.query({"kind": "source.search", "text": "handle_order",
                          "path_prefix": ":(top)"})["result"]["hits"] == []
    top = service.query({"kind": "source.search", "text": "top_marker", "path_prefix": ":(top)"})["result"]
    assert [hit["path"] for hit in top["hits"]] == [":(top)"]  # the file of that name, nothing else
    assert service.query({"kind": "source.search", "text": "handle_order", "path_prefix": ":!src"}
                         )["result"]["hits"] == []
    assert service.query({"kind": "source.search", "text": "handle_order", "path_prefix": "*"})["result"]["hits"] == []
    glob = service.query({"kind": "source.search", "text": "glob_marker", "path_prefix": "glob[1]*.txt"})["result"]
    assert [hit["path"] for hit in glob["hits"]] == ["glob[1]*.txt"]


def test_refusals_name_the_field_and_do_not_echo_the_value(world: tuple[Path, Repo, ResearchService]) -> None:
    _base, _repo, service = world
    secretish = "--output=/tmp/" + "y" * 1100
    for query, field in [({**BASE["source.search"], "text": secretish}, "text"),
                         ({**BASE["source.read"], "path": secretish}, "path"),
                         ({**BASE["source.files"], "repository": secretish}, None)]:
        code, error = outcome(service, query)
        assert code == "invalid_input"
        assert secretish not in error["message"]
        if field:
            assert error["details"]["field"] == field


# --- through MCP, on both engines -----------------------------------------------------------------------------




@pytest.mark.anyio
async def test_the_corpus_through_the_mcp_tool(research_app: tuple[Armarius, Repo],
                                               world: tuple[Path, Repo, ResearchService]) -> None:
    application, repo = research_app
    _base, _repo, reference = world
    agent = make_team(application, "alpha").agent
    state = repo.state()
    async with agent_of(application, agent) as call:
        for case in CORPUS[::3]:
            query = case.values[0]
            session = (await call("session_open", subject="one hostile query", budget=1))["session"]
            answer = await call("project_query", session=session, arguments=query)
            expected, _ = outcome(reference, query)
            if not isinstance(query, dict):
                assert answer["error"] == "invalid_input"
                continue
            assert answer.get("error", "ok") == expected, query
            check_answer(repo, query, answer.get("error", "ok"), answer)
    assert repo.state() == state
