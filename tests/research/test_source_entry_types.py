"""Every kind of tree entry against every source query that names a path.

A path names a file (mode 100644 or 100755), a symlink (120000), a folder (040000) or a submodule (160000,
a commit of another repository); and a crafted tree, which ``git fsck`` refuses but a repository can still
hold, can name under a file's mode an object that is no blob: a tree, a commit or a tag (``git ls-tree``
shows it as a blob all the same). Such an entry made ``source.read`` and ``source.files`` fail with
``research_unavailable`` ("could not be read", "answered out of order": the ``git cat-file --batch`` reader
met a header it did not expect), made every search whose hits reached it fail the same way (``git grep``
searches a commit's or a tag's text as if it were the file's), and so blocked the query's session until a
human resumed it, for a request that only named a path. A symlink or a submodule given as ``path_prefix``
answered a complete search without hits, evidence of absence for what was never searched.

Now each is the request's own refusal, naming the path and what it is (``invalid_input``; ``not_found`` for
a path inside a symlink or a submodule), listings show such an entry as skipped, searches leave it out, and
the next ordinary query of the same session answers. A folder entry whose object is no tree is different:
git cannot list that tree at all, so the source is unavailable, naming the entry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from armarius.errors import ArmariusError, echo
from armarius.research.git import GitRepository, _batch_digests
from armarius.research.service import ResearchService
from armarius.research.source import ONE_PASS_OFFSET
from tests.research.repos import Repo, git, open_config, open_service

MISSING_COMMIT = "1234567890abcdef1234567890abcdef12345678"
FILE_TEXT, EXEC_TEXT, INNER_TEXT = b"MARKER file\n", b"MARKER exec\nsecond line\n", b"MARKER inner\n"
SCHEMA_TEXT = b"CREATE TABLE t (MARKER integer);\n"


@dataclass(frozen=True)
class Kind:
    """One entry of the crafted tree: its name, mode and the object it names (a key of :func:`objects`)."""

    name: str
    mode: str
    target: str
    #: How a refusal names it ('' for a readable file).
    what: str


KINDS = [
    Kind("file.txt", "100644", "file", ""),
    Kind("exec.sh", "100755", "exec", ""),
    Kind("link", "120000", "link target", "symlink"),
    Kind("dir", "40000", "folder", "folder"),
    Kind("sub", "160000", "missing commit", "submodule"),
    Kind("blob-tree", "100644", "folder", "its object is a tree"),
    Kind("blob-commit", "100644", "commit", "its object is a commit"),
    Kind("blob-tag", "100644", "tag", "its object is a tag"),
    Kind("exec-commit", "100755", "commit", "its object is a commit"),
    Kind("link-tree", "120000", "folder", "symlink"),
    Kind("sub-blob", "160000", "file", "submodule"),
]
BY_NAME = {kind.name: kind for kind in KINDS}
#: Files (a real blob each) whose hits every whole-tree search finds, in git's order; nothing else holds MARKER
#: but the commit's and the tag's own text, which no file holds.
FILES = {"db/schema.sql": SCHEMA_TEXT, "dir/inner.txt": INNER_TEXT, "exec.sh": EXEC_TEXT, "file.txt": FILE_TEXT}


def _object(root: Path, kind: str, content: bytes) -> str:
    return git(root, "hash-object", "-t", kind, "--literally", "-w", "--stdin", stdin=content).decode().strip()


def _tree(root: Path, entries: list[tuple[str, str, str]]) -> str:
    """A tree object of (mode, name, object id) entries, in git's order (a folder sorts as 'name/')."""
    def order(entry: tuple[str, str, str]) -> bytes:
        return entry[1].encode() + (b"/" if entry[0] == "40000" else b"")
    body = b"".join(f"{mode} {name}".encode() + b"\0" + bytes.fromhex(oid)
                    for mode, name, oid in sorted(entries, key=order))
    return _object(root, "tree", body)


def objects(root: Path) -> dict[str, str]:
    """The objects the entries name, by :attr:`Kind.target`: blobs, a folder, a commit and an annotated tag whose
    texts hold MARKER, and a commit the repository does not have."""
    blob = _object(root, "blob", FILE_TEXT)
    folder = _tree(root, [("100644", "inner.txt", _object(root, "blob", INNER_TEXT))])
    commit = git(root, "commit-tree", folder, "-m", "MARKER in a commit message").decode().strip()
    tag = _object(root, "tag", f"object {blob}\ntype blob\ntag v1\ntagger T <t@example.invalid> 0 +0000\n\n"
                               "MARKER in a tag message\n".encode())
    return {"file": blob, "exec": _object(root, "blob", EXEC_TEXT), "link target": _object(root, "blob", b"file.txt"),
            "folder": folder, "commit": commit, "tag": tag, "missing commit": MISSING_COMMIT}


def build_kinds_repo(root: Path, kinds: list[Kind] = KINDS) -> Repo:
    root.mkdir(parents=True)
    git(root, "init", "-q", ".")
    ids = objects(root)
    db = _tree(root, [("100644", "schema.sql", _object(root, "blob", SCHEMA_TEXT)),
                      ("100644", "commit.sql", ids["commit"])])  # a .sql entry that is a commit: source.schema
    entries = [(kind.mode, kind.name, ids[kind.target]) for kind in kinds] + [("40000", "db", db)]
    commit = git(root, "commit-tree", _tree(root, entries), "-m", "pinned").decode().strip()
    return Repo(root, commit)


@pytest.fixture(scope="module")
def kinds_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return build_kinds_repo(tmp_path_factory.mktemp("kinds") / "repo")


@pytest.fixture
def service(kinds_repo: Repo, tmp_path: Path) -> Iterator[ResearchService]:
    """A fresh session over the crafted source: a research_unavailable would block it for the next query."""
    session = open_service(tmp_path, kinds_repo)
    yield session
    session.close()


SKIPPED = ("listed as a file, but its object is a {} (a malformed tree entry, which git's own checks refuse): "
           "not a readable source file")


def outcome(service: ResearchService, query: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", service.query(dict(query))["result"]
    except ArmariusError as error:
        return error.code, error


def assert_in_step(service: ResearchService) -> None:
    """The same session's next ordinary queries answer, and right: two reads, one of each file mode."""
    for path, content in (("file.txt", FILE_TEXT), ("exec.sh", EXEC_TEXT)):
        code, read = outcome(service, {"kind": "source.read", "path": path, "start_line": 1, "end_line": 10})
        assert code == "ok", read
        assert [line["text"] for line in read["lines"]] == content.decode().splitlines()
        assert read["blob_sha256"] == hashlib.sha256(content).hexdigest()


def assert_refused(code: str, error: Any, expected: str, field: str, path: str, what: str) -> None:
    assert code == expected, error
    assert error.details.get("field") == field or error.details.get("path") == path, error.details
    assert echo(path) in error.message, error.message
    assert what in error.message, error.message


# --- each kind, each query that names a path -----------------------------------------------------------------

PREFIX_KINDS = ["source.search", "source.symbol", "source.registration"]
OPERATIONS = ["source.read", *PREFIX_KINDS, "source.files"]


def request(operation: str, path: str) -> dict[str, Any]:
    if operation == "source.read":
        return {"kind": operation, "path": path, "start_line": 1, "end_line": 10}
    if operation == "source.files":
        return {"kind": operation, "substring": path}
    pattern = {"text": "MARKER"} if operation == "source.search" else {"symbol": "MARKER"}
    return {"kind": operation, **pattern, "path_prefix": path}


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
def test_each_kind_of_entry_is_answered_or_refused_as_the_request_s_own_fault(
        service: ResearchService, kind: Kind, operation: str) -> None:
    code, answer = outcome(service, request(operation, kind.name))
    readable = kind.what == ""
    if operation == "source.read":
        if readable:
            assert code == "ok", answer
            assert answer["lines"][0]["text"].startswith("MARKER")
        else:
            assert_refused(code, answer, "invalid_input", "path", kind.name, kind.what)
            assert answer.details.get("folder", False) is (kind.what == "folder")
    elif operation == "source.files":
        assert code == "ok", answer
        listed = {entry["path"]: entry for entry in answer["files"]}
        if kind.what == "folder":
            assert kind.name not in listed
            assert listed[f"{kind.name}/inner.txt"]["blob_sha256"] == hashlib.sha256(INNER_TEXT).hexdigest()
        elif readable:
            assert listed[kind.name]["blob_sha256"] == hashlib.sha256(FILES[kind.name]).hexdigest()
        else:
            assert "blob" not in listed[kind.name]
            assert "blob_sha256" not in listed[kind.name]
            assert kind.what in listed[kind.name]["skipped"]
            assert listed[kind.name]["skipped"].endswith("not a readable source file")
    elif readable or kind.what == "folder":
        assert code == "ok", answer
        expected = [kind.name] if readable else [f"{kind.name}/inner.txt"]
        assert [hit["path"] for hit in answer["hits"]] == expected
    else:
        assert_refused(code, answer, "invalid_input", "path_prefix", kind.name, kind.what)
    assert_in_step(service)


INSIDE = [kind for kind in KINDS if kind.what not in ("", "folder")]


@pytest.mark.parametrize("operation", ["source.read", *PREFIX_KINDS])
@pytest.mark.parametrize("kind", INSIDE, ids=[kind.name for kind in INSIDE])
def test_a_path_inside_an_entry_that_is_no_folder_is_not_found(service: ResearchService, kind: Kind,
                                                                 operation: str) -> None:
    """Nothing is inside a symlink or a submodule as far as this tree goes: not found, with the reason. Inside a
    file, a search finds nothing (complete: nothing can be there), as under a name the tree does not hold."""
    path = f"{kind.name}/inner.txt"
    code, answer = outcome(service, request(operation, path))
    outer = kind.what if kind.what in ("symlink", "submodule") else "file"
    if operation == "source.read" or outer != "file":
        assert code == "not_found", answer
        assert echo(path) in answer.message
        assert f"{echo(kind.name)} is a {outer}" in answer.message
    else:
        assert code == "ok", answer
        assert answer["hits"] == []
        assert answer["complete"] is True
    assert_in_step(service)


# --- whole-tree answers, and the batch reader in step ---------------------------------------------------------


def test_searches_leave_out_entries_that_are_no_blob(service: ResearchService) -> None:
    """git grep reads a commit or a tag named under a file's mode as the file's text: those lines are no file's."""
    expected = [(path, hashlib.sha256(content).hexdigest()) for path, content in sorted(FILES.items())]
    for query in ({"kind": "source.search", "text": "MARKER"}, {"kind": "source.symbol", "symbol": "MARKER"},
                  {"kind": "source.registration", "symbol": "MARKER"}):
        code, answer = outcome(service, query)
        assert code == "ok", answer
        assert [(hit["path"], hit["blob_sha256"]) for hit in answer["hits"]] == expected
        assert answer["total_hits"] == len(FILES)
        assert answer["complete"] is True
    code, schema = outcome(service, {"kind": "source.schema", "text": "MARKER"})
    assert code == "ok", schema
    assert [hit["path"] for hit in schema["hits"]] == ["db/schema.sql"]
    code, deep = outcome(service, {"kind": "source.search", "text": "MARKER", "offset": ONE_PASS_OFFSET})
    assert code == "ok", deep
    assert deep["total_hits"] == len(FILES)  # counted per file (git grep -c): the commit's text is no file's either
    assert_in_step(service)


def test_a_listing_steps_over_objects_that_are_no_blob(service: ResearchService) -> None:
    """One ``git cat-file --batch`` hashes the listed blobs; a tree, a commit or a tag among them is skipped whole,
    so each blob after it gets its own digest."""
    code, answer = outcome(service, {"kind": "source.files", "substring": "t"})
    assert code == "ok", answer
    listed = [(entry["path"], entry.get("blob_sha256") or entry["skipped"]) for entry in answer["files"]]
    assert listed == [
        ("blob-commit", SKIPPED.format("commit")), ("blob-tag", SKIPPED.format("tag")),
        ("blob-tree", SKIPPED.format("tree")), ("db/commit.sql", SKIPPED.format("commit")),
        ("dir/inner.txt", hashlib.sha256(INNER_TEXT).hexdigest()), ("exec-commit", SKIPPED.format("commit")),
        ("file.txt", hashlib.sha256(FILE_TEXT).hexdigest()), ("link-tree", "symlink: not a readable source file"),
    ]
    assert answer["complete"] is True
    assert_in_step(service)


def test_the_batch_parser_keeps_in_step_however_the_output_is_cut(kinds_repo: Repo) -> None:
    """``git cat-file --batch`` output of blobs and other objects, cut anywhere: each blob's digest, each other
    object's type."""
    ids = objects_of(kinds_repo)
    wanted = [ids["file.txt"], ids["blob-tree"], ids["exec.sh"], ids["blob-commit"], ids["blob-tag"]]
    output = git(kinds_repo.path, "cat-file", "--batch", stdin="".join(f"{name}\n" for name in wanted).encode())
    for size in (1, 2, 7, 64, len(output)):
        chunks = [output[start:start + size] for start in range(0, len(output), size)]
        digests, others = _batch_digests(iter(chunks), wanted)
        assert digests == {ids["file.txt"]: hashlib.sha256(FILE_TEXT).hexdigest(),
                           ids["exec.sh"]: hashlib.sha256(EXEC_TEXT).hexdigest()}
        assert others == {ids["blob-tree"]: "tree", ids["blob-commit"]: "commit", ids["blob-tag"]: "tag"}


def objects_of(repo: Repo) -> dict[str, str]:
    """The object id of each top-level entry of the pinned tree, by name."""
    found = {}
    for record in repo.git("ls-tree", "-z", repo.pin).split(b"\0"):
        if record:
            meta, _, name = record.partition(b"\t")
            found[name.decode()] = meta.split(b" ")[2].decode()
    return found


def test_the_repository_reader_refuses_no_blob_and_reads_the_next_one(kinds_repo: Repo) -> None:
    from armarius.research.git import NotABlob  # here, so that the module's other tests run without it

    repository = GitRepository(kinds_repo.path, timeout=10)
    ids = objects_of(kinds_repo)
    digests, others = repository.blob_sha256([ids["blob-commit"], ids["file.txt"]])
    assert digests == {ids["file.txt"]: hashlib.sha256(FILE_TEXT).hexdigest()}
    assert others == {ids["blob-commit"]: "commit"}
    assert b"".join(repository.blob_chunks(ids["exec.sh"])) == EXEC_TEXT
    empty = git(kinds_repo.path, "hash-object", "-w", "--stdin", stdin=b"").decode().strip()
    assert b"".join(repository.blob_chunks(empty)) == b""
    with pytest.raises(NotABlob) as refused:
        b"".join(repository.blob_chunks(ids["blob-tag"]))  # git cat-file blob would show the blob the tag points to
    assert refused.value.kind == "tag"
    assert b"".join(repository.blob_chunks(ids["file.txt"])) == FILE_TEXT


# --- a folder whose object is no tree: git cannot list the tree --------------------------------------------


@pytest.mark.parametrize("target", ["file", "commit", "tag"])
def test_a_folder_entry_whose_object_is_no_tree_makes_the_source_unavailable_naming_it(
        tmp_path: Path, target: str) -> None:
    kinds = [BY_NAME["file.txt"], Kind("odd", "40000", target, "")]
    repo = build_kinds_repo(tmp_path / "repo", kinds)
    service = ResearchService(open_config(tmp_path, repo))
    try:
        for query in (request("source.read", "file.txt"), request("source.search", "db"),
                      {"kind": "source.files", "substring": "file"}):
            code, error = outcome(service, query)
            assert code == "research_unavailable", error
            kind = "blob" if target == "file" else target
            assert f"a folder named 'odd' whose object is a {kind}" in error.message
            assert "The pinned commit's tree is malformed" in error.message
            assert str(tmp_path) not in error.message
    finally:
        service.close()
