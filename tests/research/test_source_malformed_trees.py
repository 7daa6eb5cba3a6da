"""A pinned commit whose tree git's own checks refuse, and a crafted repository can still hold (``git fsck``
is off by default when a repository is cloned): two entries of one name, or a name that is empty, '.', '..'
or '.git'. Such a tree credited a search hit to the other same-named file's blob (which does not hold the
line), lost hits of a page, and listed names source.read then refused; the source is now unavailable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from armarius.errors import ArmariusError
from armarius.research.service import ResearchService
from tests.research.repos import Repo, git, open_config

QUERIES: list[dict[str, Any]] = [
    {"kind": "source.search", "text": "MARKER"},
    {"kind": "source.read", "path": "dup.py", "start_line": 1, "end_line": 2},
    {"kind": "source.files", "substring": "py"},
]


def crafted(root: Path, names: list[bytes]) -> Repo:
    """A repository whose one commit's tree holds a blob under each of ``names`` (made with git's plumbing, as
    `git add` never would)."""
    root.mkdir()
    git(root, "init", "-q", ".")
    entries = b""
    for number, name in enumerate(names):
        blob = git(root, "hash-object", "-w", "--stdin", stdin=f"MARKER {number}\n".encode()).strip().decode()
        entries += b"100644 " + name + b"\0" + bytes.fromhex(blob)
    tree = git(root, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", stdin=entries).strip().decode()
    commit = git(root, "commit-tree", tree, "-m", "crafted").strip().decode()
    return Repo(root, commit)


@pytest.mark.parametrize("names", [
    [b"dup.py", b"dup.py"],
    [b"..", b"dup.py"],
    [b".", b"dup.py"],
    [b".GIT", b"dup.py"],
], ids=["duplicate", "dotdot", "dot", "dotgit"])
@pytest.mark.parametrize("query", QUERIES, ids=[query["kind"] for query in QUERIES])
def test_a_tree_git_fsck_refuses_is_no_source(tmp_path: Path, names: list[bytes], query: dict[str, Any]) -> None:
    repository = crafted(tmp_path / "repo", names)
    service = ResearchService(open_config(tmp_path, repository))
    try:
        with pytest.raises(ArmariusError) as refused:
            service.query(dict(query))
    finally:
        service.close()
    assert refused.value.code == "research_unavailable"
    assert "The pinned commit's tree is malformed" in refused.value.message
    assert str(tmp_path) not in refused.value.message


def test_the_same_names_in_a_well_formed_tree_are_a_source(tmp_path: Path) -> None:
    repository = crafted(tmp_path / "repo", [b"dup.py", b"other.py"])
    service = ResearchService(open_config(tmp_path, repository))
    try:
        read = service.query(dict(QUERIES[1]))
    finally:
        service.close()
    assert read["result"]["lines"][0]["text"] == "MARKER 0"
