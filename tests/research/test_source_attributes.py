"""No attribute file changes a search: only the pinned commit's blobs do.

``git grep -I`` decides "binary" with gitattributes, and git reads those from the working tree, the
index and ``$GIT_DIR/info/attributes`` (and a ``diff`` driver from the repository's configuration),
never from the pinned commit. Searches run where none of these reach git, so for a search as for
``source.read`` a file is binary exactly when a NUL is in its first 8,000 bytes: an attribute can
neither hide pinned code behind a complete, empty answer nor make a binary file searchable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from armarius.errors import ArmariusError
from armarius.research.service import ResearchService
from armarius.research.source import ONE_PASS_OFFSET, SEARCH_ABSENCE
from tests.research.repos import Repo, git, open_config, open_service

#: The pinned tree: text files with ``attr_marker``, one with a committed .gitattributes that marks
#: Markdown as binary (as a checkout puts it into the working tree), and NUL bytes at the edge of
#: git's and source.read's 8,000-byte test (byte 7,999: binary; byte 8,000: text).
EDGE = b"attr_marker at the edge\n" + (b"y" * 79 + b"\n") * 100
PINNED = {
    "src/app.py": b"attr_marker = 'python'\nprint(attr_marker)\n",
    "src/schema.sql": b"CREATE TABLE attr_marker (id integer);\n",
    "docs/notes.md": b"# attr_marker in Markdown\n",
    "data/image.bin": b"attr_marker\0 binary from the start\n",
    "data/nul_inside.txt": EDGE[:7999] + b"\0\n",
    "data/nul_after.txt": EDGE[:8000] + b"\0 attr_marker after the test\n",
    ".gitattributes": b"*.md -diff\n",
}
BINARY = {path for path, content in PINNED.items() if b"\0" in content[:8000]}
#: (path, line) of every line holding the marker in a file that is not binary, in git's order.
EXPECTED = sorted((path, number) for path, content in PINNED.items() if path not in BINARY
                  for number, line in enumerate(content.split(b"\n"), start=1) if b"attr_marker" in line)
QUERIES: list[dict[str, Any]] = [
    {"kind": "source.search", "text": "attr_marker"},
    {"kind": "source.search", "text": "attr_marker", "path_prefix": "data"},
    {"kind": "source.symbol", "symbol": "attr_marker"},
    {"kind": "source.registration", "symbol": "attr_marker"},
    {"kind": "source.schema", "text": "attr_marker"},
    {"kind": "source.search", "text": "attr_marker", "offset": ONE_PASS_OFFSET},  # counted per file first
]


def build_attributes_repo(root: Path) -> Repo:
    root.mkdir(parents=True)
    git(root, "init", "-q", ".")
    for path, content in PINNED.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pinned")
    return Repo(root, git(root, "rev-parse", "HEAD").decode().strip())


def answer(service: ResearchService, query: dict[str, Any]) -> dict[str, Any]:
    return service.query(dict(query))["result"]


def hits(result: dict[str, Any]) -> list[tuple[str, int]]:
    return [(hit["path"], hit["line"]) for hit in result["hits"]]


def check_answers(service: ResearchService) -> None:
    """Every query answers from the pinned blobs alone, binary meaning a NUL in the first 8,000 bytes."""
    everything = answer(service, QUERIES[0])
    assert hits(everything) == EXPECTED
    assert (everything["complete"], everything["total_hits"]) == (True, len(EXPECTED))
    assert hits(answer(service, QUERIES[1])) == [hit for hit in EXPECTED if hit[0].startswith("data/")]
    assert hits(answer(service, QUERIES[2])) == EXPECTED
    assert hits(answer(service, QUERIES[3])) == EXPECTED
    assert hits(answer(service, QUERIES[4])) == [("src/schema.sql", 1)]
    assert answer(service, QUERIES[5])["total_hits"] == len(EXPECTED)
    for path in PINNED:  # searched exactly when readable
        if path in BINARY:
            with pytest.raises(ArmariusError) as refused:
                service.query({"kind": "source.read", "path": path, "start_line": 1, "end_line": 1})
            assert "binary" in refused.value.message
        else:
            service.query({"kind": "source.read", "path": path, "start_line": 1, "end_line": 1})
    nothing = answer(service, {"kind": "source.search", "text": "binary from the start"})
    assert (nothing["hits"], nothing["complete"], nothing["absence"]) == ([], True, SEARCH_ABSENCE)


def test_the_pinned_blobs_alone_decide_what_a_search_finds(tmp_path: Path) -> None:
    """The committed .gitattributes (checked out in the working tree) hides no Markdown either."""
    assert {"data/image.bin", "data/nul_inside.txt"} == BINARY
    repo = build_attributes_repo(tmp_path / "repo")
    check_answers(open_service(tmp_path, repo))


def _working_tree(repo: Repo) -> None:
    (repo.path / ".gitattributes").write_bytes(b"* -diff\n*.bin diff\n*.txt diff\n")
    (repo.path / "src/.gitattributes").write_bytes(b"*.py binary\n")


def _info(repo: Repo) -> None:
    (repo.path / ".git/info").mkdir(exist_ok=True)
    (repo.path / ".git/info/attributes").write_bytes(b"*.py binary\n*.sql -diff\n* diff\n")


def _index_only(repo: Repo) -> None:
    """Staged, then gone from the working tree: git falls back to the index's copy."""
    (repo.path / "src/.gitattributes").write_bytes(b"* binary\n")
    repo.git("add", "src/.gitattributes")
    (repo.path / "src/.gitattributes").unlink()


def _diff_driver(repo: Repo) -> None:
    """A driver of the repository's configuration that says binary, or converts text."""
    repo.git("config", "diff.hide.binary", "true")
    repo.git("config", "diff.shout.textconv", "tr a-z A-Z")
    (repo.path / ".git/info").mkdir(exist_ok=True)
    (repo.path / ".git/info/attributes").write_bytes(b"*.py diff=hide\n*.sql diff=shout\n")


def _moved_on(repo: Repo) -> None:
    """A later commit checked out whose .gitattributes makes everything binary."""
    (repo.path / ".gitattributes").write_bytes(b"* binary\n")
    repo.git("commit", "-q", "-am", "everything binary")


@pytest.mark.parametrize("hostile", [_working_tree, _info, _index_only, _diff_driver, _moved_on],
                         ids=lambda change: change.__name__.strip("_"))
def test_no_attribute_file_of_the_repository_changes_an_answer(tmp_path: Path,
                                                                hostile: Callable[[Repo], None]) -> None:
    repo = build_attributes_repo(tmp_path / "repo")
    service = open_service(tmp_path / "before", repo)
    check_answers(service)
    hostile(repo)
    check_answers(service)
    check_answers(open_service(tmp_path / "fresh", repo))  # nothing cached


def _linked_worktree(repo: Repo, root: Path) -> Repo:
    repo.git("worktree", "add", "-q", "--detach", str(root / "linked"), repo.pin)
    (root / "linked/.gitattributes").write_bytes(b"* -diff\n")
    (repo.path / ".git/info").mkdir(exist_ok=True)
    (repo.path / ".git/info/attributes").write_bytes(b"* binary\n")
    return Repo(root / "linked", repo.pin)


def _bare_clone(repo: Repo, root: Path) -> Repo:
    git(root, "clone", "-q", "--bare", str(repo.path), str(root / "bare.git"))
    (root / "bare.git/info").mkdir(exist_ok=True)
    (root / "bare.git/info/attributes").write_bytes(b"* binary\n")
    return Repo(root / "bare.git", repo.pin)


def _shared_clone(repo: Repo, root: Path) -> Repo:
    """Its objects are only in the repository it borrows them from (objects/info/alternates)."""
    git(root, "clone", "-q", "--shared", "--no-checkout", str(repo.path), str(root / "shared"))
    assert not list((root / "shared/.git/objects/pack").iterdir())
    (root / "shared/.gitattributes").write_bytes(b"* -diff\n")
    (root / "shared/.git/info/attributes").write_bytes(b"* binary\n")
    return Repo(root / "shared", repo.pin)


@pytest.mark.parametrize("layout", [_linked_worktree, _bare_clone, _shared_clone],
                         ids=lambda layout: layout.__name__.strip("_"))
def test_worktrees_bare_repositories_and_borrowed_objects_are_searched_the_same(
        tmp_path: Path, layout: Callable[[Repo, Path], Repo]) -> None:
    repo = build_attributes_repo(tmp_path / "repo")
    check_answers(open_service(tmp_path / "config", layout(repo, tmp_path)))


def test_a_sha256_repository_is_searched_without_its_attributes(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "--object-format=sha256", ".")
    (root / "app.py").write_bytes(b"attr_marker = 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pinned")
    (root / ".git/info/attributes").write_bytes(b"* binary\n")
    repo = Repo(root, git(root, "rev-parse", "HEAD").decode().strip())
    assert len(repo.pin) == 64
    result = answer(open_service(tmp_path, repo), QUERIES[0])
    assert (hits(result), result["complete"]) == ([("app.py", 1)], True)


def test_searches_go_on_when_the_temporary_folder_they_run_in_is_removed(tmp_path: Path) -> None:
    repo = build_attributes_repo(tmp_path / "repo")
    config = open_config(tmp_path, repo)
    service = ResearchService(config)
    assert hits(answer(service, QUERIES[0])) == EXPECTED
    bare = config.sources["app"].repository._bare
    assert bare is not None
    shutil.rmtree(bare)  # a cleaner of /tmp, say
    assert hits(answer(service, QUERIES[0])) == EXPECTED
    again = config.sources["app"].repository._bare
    assert again is not None
    assert Path(again, "HEAD").is_file()


def test_a_temporary_folder_that_cannot_be_made_is_research_unavailable(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    repo = build_attributes_repo(tmp_path / "repo")
    service = ResearchService(open_config(tmp_path, repo))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(ArmariusError) as refused:
        service.query(dict(QUERIES[0]))
    assert refused.value.code == "research_unavailable"
    assert str(tmp_path) not in refused.value.message
    monkeypatch.undo()
    assert hits(answer(service, QUERIES[0])) == EXPECTED


_HOLD_A_SEARCH_FOLDER = """
import sys
from pathlib import Path
from armarius.research.git import GitRepository
repository = GitRepository(Path(sys.argv[1]), timeout=30)
folder, _ = repository._bare_git()
print(folder, flush=True)
sys.stdin.read()
"""


def test_a_search_folder_a_killed_process_left_is_removed_by_the_next_one_made(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process removes its own search folder when it ends; one SIGKILLed leaves it behind, and the next
    folder made (by any process) removes it. A folder a live process holds stays."""
    repo = build_attributes_repo(tmp_path / "repo")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    environment = {**os.environ, "TMPDIR": str(scratch)}
    children = [subprocess.Popen([sys.executable, "-c", _HOLD_A_SEARCH_FOLDER, str(repo.path)], env=environment,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        live, killed = (Path(child.stdout.readline().strip()) for child in children if child.stdout is not None)
        children[1].kill()
        children[1].wait()
        assert killed.is_dir()
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        service = ResearchService(open_config(tmp_path, repo))
        assert hits(answer(service, QUERIES[0])) == EXPECTED
        assert not killed.exists()
        assert live.is_dir()
        assert len(list(scratch.iterdir())) == 2  # the live child's and this process's
    finally:
        for child in children:
            child.kill()
            child.wait()
            if child.stdin is not None and child.stdout is not None:
                child.stdin.close()
                child.stdout.close()


def test_a_blob_the_clone_never_fetched_is_no_evidence_of_absence(tmp_path: Path) -> None:
    """A partial clone lacks blobs; Armarius never fetches them, and a search that cannot read one says that it
    could not read the source instead of answering an empty, complete result (git grep exits 1 all the same)."""
    origin = build_attributes_repo(tmp_path / "origin")
    origin.git("config", "uploadpack.allowFilter", "true")
    git(tmp_path, "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{origin.path}", "partial")
    partial = Repo(tmp_path / "partial", origin.pin)
    service = ResearchService(open_config(tmp_path, partial))
    with pytest.raises(ArmariusError) as refused:
        service.query(dict(QUERIES[0]))
    assert refused.value.code == "research_unavailable"


@pytest.mark.parametrize("query", [
    {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2},
    {"kind": "source.files", "substring": "app"},  # hashes the blobs it lists
], ids=["read", "files"])
def test_a_partial_clone_never_fetches_nor_runs_what_its_configuration_names(tmp_path: Path,
                                                                              query: dict[str, Any]) -> None:
    """A partial clone's git fetched a missing blob from its promisor remote as Armarius read it: it wrote into
    the repository, and ran what the repository's configuration names for fetching (here remote.origin.uploadpack,
    as well core.sshCommand or a credential helper). Its transports are now off: the query is research_unavailable
    and nothing ran."""
    origin = build_attributes_repo(tmp_path / "origin")
    origin.git("config", "uploadpack.allowFilter", "true")
    git(tmp_path, "clone", "-q", "--bare", "--filter=blob:none", f"file://{origin.path}", "partial")
    marker = tmp_path / "ran"
    git(tmp_path / "partial", "config", "remote.origin.uploadpack", f"touch {marker}; git-upload-pack")
    objects_before = git(tmp_path / "partial", "count-objects", "-v")
    service = ResearchService(open_config(tmp_path, Repo(tmp_path / "partial", origin.pin)))
    with pytest.raises(ArmariusError) as refused:
        service.query(dict(query))
    assert refused.value.code == "research_unavailable"
    assert not marker.exists()
    assert git(tmp_path / "partial", "count-objects", "-v") == objects_before


def test_a_search_folder_made_again_lets_go_of_the_last_one(tmp_path: Path) -> None:
    """Every time the search folder is made again (a cleaner of the temporary folder removed it), the lock of
    the last one is let go: no file descriptor is left open."""
    repository = build_attributes_repo(tmp_path / "repo")
    config = open_config(tmp_path, repository)
    service = ResearchService(config)
    assert hits(answer(service, QUERIES[0])) == EXPECTED
    opened = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        bare = config.sources["app"].repository._bare
        assert bare is not None
        shutil.rmtree(bare)
        assert hits(answer(service, QUERIES[0])) == EXPECTED
    assert len(os.listdir("/proc/self/fd")) == opened
