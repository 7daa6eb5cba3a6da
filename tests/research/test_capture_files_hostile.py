"""Capture files and spare files when a symbolic link, a FIFO or a folder is where one of them (or a folder on
their way) belongs: nothing is followed, nothing waits, a writer refuses (``conflict``, naming the path below
the root) and a reader takes it for no file. Calls a regression would leave waiting on a FIFO run through
:func:`tests.research.blocking.within`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from armarius.errors import Conflict
from armarius.research.captures import Capture, SpareFiles, build_capture, verify_capture, write_capture
from tests.research.blocking import within


def _capture(number: int) -> Capture:
    return build_capture({"kind": "source.read", "path": f"file{number}.txt"}, {"kind": "git"}, {"lines": [number]})


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry below ``folder`` with its bytes (None: not a regular file), links not followed."""
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() and not path.is_symlink() else None
            for path in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("thing", ["fifo", "folder", "link to a copy", "link to other bytes"])
def test_a_writer_refuses_what_is_not_a_regular_file_where_the_capture_file_belongs(tmp_path: Path,
                                                                                  thing: str) -> None:
    folder = tmp_path / "captures"
    folder.mkdir()
    capture = _capture(1)
    target = folder / capture.file_name
    copy = tmp_path / "copy.json"
    copy.write_bytes(capture.content if thing == "link to a copy" else b"other bytes")
    if thing == "fifo":
        os.mkfifo(target)
    elif thing == "folder":
        target.mkdir()
    else:
        os.symlink(copy, target)
    before = _tree(tmp_path)
    with pytest.raises(Conflict) as refused:
        within(lambda: write_capture(folder, capture), target if thing == "fifo" else None)
    assert refused.value.details["path"] == capture.file_name  # below the root: by default the folder itself
    assert _tree(tmp_path) == before  # nothing replaced, nothing written through the link, no temporary left
    assert not within(lambda: verify_capture(target), target if thing == "fifo" else None)


def test_a_writer_below_a_root_refuses_a_link_on_the_way_and_writes_nothing_through_it(tmp_path: Path) -> None:
    root = tmp_path / "evidence"
    folder = root / "alpha" / "sessions" / "1" / "captures"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "alpha" / "sessions").mkdir(parents=True)
    os.symlink(outside, root / "alpha" / "sessions" / "1")
    with pytest.raises(Conflict) as refused:
        write_capture(folder, _capture(1), root=root)
    assert refused.value.details["path"] == "alpha/sessions/1"
    assert list(outside.iterdir()) == []
    (root / "alpha" / "sessions" / "1").unlink()
    (root / "alpha" / "sessions" / "1").write_text("a file where a folder belongs")
    with pytest.raises(Conflict) as refused:
        write_capture(folder, _capture(1), root=root)
    assert refused.value.details["path"] == "alpha/sessions/1"


def test_a_linked_root_is_the_deployments_and_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "real-evidence"
    real.mkdir()
    os.symlink(real, tmp_path / "evidence")
    path = write_capture(tmp_path / "evidence" / "alpha", _capture(1), root=tmp_path / "evidence")
    assert verify_capture(path, root=tmp_path / "evidence")
    assert (real / "alpha" / _capture(1).file_name).read_bytes() == _capture(1).content


def test_a_linked_pool_folder_is_neither_swept_nor_filled(tmp_path: Path) -> None:
    victim = tmp_path / "operator-documents"
    victim.mkdir()
    (victim / "contract.pdf").write_text("precious")
    os.utime(victim / "contract.pdf", (time.time() - 7200, time.time() - 7200))  # older than a stale spare
    os.symlink(victim, tmp_path / "spare")
    pool = SpareFiles(tmp_path / "spare", keep=4)  # reached from its parent folder, without following links
    pool.fill()
    try:
        assert _tree(victim) == {"contract.pdf": b"precious"}
        assert pool.take() is None
        path = write_capture(tmp_path / "captures", _capture(1), pool)  # the writer makes its file itself
        assert verify_capture(path)
        assert _tree(victim) == {"contract.pdf": b"precious"}
    finally:
        pool.close()
    assert _tree(victim) == {"contract.pdf": b"precious"}


def test_spares_replaced_by_a_link_a_fifo_or_a_second_name_are_not_written_through(tmp_path: Path) -> None:
    spare_folder = tmp_path / "spare"
    pool = SpareFiles(spare_folder, keep=3)
    pool.fill()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    other = spare_folder / "not-a-spare"
    other.write_text("another file of the folder")
    spares = sorted(os.listdir(spare_folder))
    spares.remove("not-a-spare")
    for spare, replace in zip(spares, ("link", "fifo", "second name"), strict=True):
        os.unlink(spare_folder / spare)
        if replace == "link":
            os.symlink(victim, spare_folder / spare)
        elif replace == "fifo":
            fifo = spare_folder / spare
            os.mkfifo(fifo)
        else:
            os.link(other, spare_folder / spare)
    folder = tmp_path / "captures"
    try:
        captures = [_capture(number) for number in range(3)]
        for capture in captures:
            path = within(lambda capture=capture: write_capture(folder, capture, pool), fifo)
            assert path.read_bytes() == capture.content
            assert path.is_file()
            assert not path.is_symlink()
            assert path.stat().st_nlink == 1
    finally:
        pool.close()
    assert victim.read_text() == "precious"
    assert other.read_text() == "another file of the folder"
    assert sorted(os.listdir(spare_folder)) == ["not-a-spare"]  # the spares' names are gone, used up
    assert sorted(os.listdir(folder)) == sorted(capture.file_name for capture in captures)  # no temporary left
