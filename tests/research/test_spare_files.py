"""Spare files: empty files made ahead, one of which becomes each new capture file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from armarius.research.captures import Capture, SpareFiles, build_capture, verify_capture, write_capture


def _capture(number: int) -> Capture:
    return build_capture({"kind": "source.read", "path": f"file{number}.txt"}, {"kind": "git"}, {"lines": [number]})


def _pool(folder: Path, keep: int = 4) -> SpareFiles:
    pool = SpareFiles(folder, keep=keep)
    pool.fill()
    return pool


def _inodes(folder: Path) -> dict[int, str]:
    return {entry.stat().st_ino: entry.name for entry in os.scandir(folder)}


def test_a_spare_becomes_the_capture_file_and_nothing_else_is_left(tmp_path: Path) -> None:
    pool = _pool(tmp_path / "spare")
    spares = _inodes(tmp_path / "spare")
    assert len(spares) == 4
    folder = tmp_path / "captures"
    folder.mkdir()
    capture = _capture(1)
    path = write_capture(folder, capture, pool)
    assert path.read_bytes() == capture.content
    assert verify_capture(path)
    assert path.stat().st_ino in spares  # the file is one of the spares, now under its name
    assert sorted(os.listdir(folder)) == [capture.file_name]  # no temporary file
    assert spares[path.stat().st_ino] not in os.listdir(tmp_path / "spare")  # handed out once
    pool.close()
    assert os.listdir(tmp_path / "spare") == []  # the ones not handed out are removed


def test_the_folders_first_capture_is_written_from_a_spare(tmp_path: Path) -> None:
    pool = _pool(tmp_path / "spare")
    spares = _inodes(tmp_path / "spare")
    folder = tmp_path / "sessions" / "1" / "captures"
    path = write_capture(folder, _capture(1), pool)
    assert verify_capture(path)
    assert path.stat().st_ino in spares
    assert os.listdir(folder) == [path.name]
    pool.close()


def test_a_spare_another_process_removed_is_no_loss(tmp_path: Path) -> None:
    pool = _pool(tmp_path / "spare")
    for name in os.listdir(tmp_path / "spare"):
        os.unlink(tmp_path / "spare" / name)
    folder = tmp_path / "captures"
    folder.mkdir()
    capture = _capture(1)
    path = write_capture(folder, capture, pool)
    assert path.read_bytes() == capture.content
    assert os.listdir(folder) == [capture.file_name]
    pool.close()


def test_an_existing_capture_is_left_as_it_is_and_the_spare_goes(tmp_path: Path) -> None:
    pool = _pool(tmp_path / "spare")
    folder = tmp_path / "captures"
    capture = _capture(1)
    first = write_capture(folder, capture)
    before = first.stat()
    write_capture(folder, capture, pool)
    assert (first.stat().st_ino, first.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert len(os.listdir(tmp_path / "spare")) == 3  # the one taken was removed, not left behind
    pool.close()


def test_spares_on_another_file_system_are_given_up(tmp_path: Path) -> None:
    shared_memory = Path("/dev/shm")  # noqa: S108 - a folder of its own, removed after
    assert shared_memory.stat().st_dev != tmp_path.stat().st_dev, "the test needs /dev/shm on another file system"
    spare_folder = shared_memory / f"armarius-spares-{os.getpid()}-{threading.get_ident()}"
    pool = _pool(spare_folder)
    try:
        folder = tmp_path / "captures"
        paths = [write_capture(folder, _capture(number), pool) for number in range(3)]
        assert all(verify_capture(path) for path in paths)
        assert sorted(os.listdir(folder)) == sorted(path.name for path in paths)
        assert pool.take() is None
        assert os.listdir(spare_folder) == []
    finally:
        pool.close()
        spare_folder.rmdir()


def test_a_starting_pool_removes_spares_an_hour_old_and_keeps_newer_ones(tmp_path: Path) -> None:
    folder = tmp_path / "spare"
    folder.mkdir()
    (folder / "gone-1").touch()
    os.utime(folder / "gone-1", (time.time() - 3700, time.time() - 3700))
    (folder / "other-live-process").touch()
    os.utime(folder / "other-live-process", (time.time() - 3500, time.time() - 3500))
    pool = _pool(folder, keep=2)
    names = os.listdir(folder)
    assert "gone-1" not in names
    assert "other-live-process" in names
    assert len(names) == 3
    pool.close()
    assert os.listdir(folder) == ["other-live-process"]


def test_concurrent_writers_never_share_a_spare(tmp_path: Path) -> None:
    pool = SpareFiles(tmp_path / "spare", keep=4)  # filled by its own thread as writers take them
    folder = tmp_path / "captures"
    captures = [_capture(number) for number in range(400)]

    def write(start: int) -> None:
        for capture in captures[start::8]:
            write_capture(folder, capture, pool)

    threads = [threading.Thread(target=write, args=(start,)) for start in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool.close()
    files = list(folder.iterdir())
    assert sorted(path.name for path in files) == sorted(capture.file_name for capture in captures)
    assert all(verify_capture(path) for path in files)
    assert len({path.stat().st_ino for path in files}) == len(files)  # no two names for one file
    assert os.listdir(tmp_path / "spare") == []


def test_a_forked_process_makes_spares_of_its_own(tmp_path: Path) -> None:
    pool = _pool(tmp_path / "spare")
    parents = sorted(os.listdir(tmp_path / "spare"))
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        spare = pool.take()
        pool.fill()
        ours = [name for name in os.listdir(tmp_path / "spare") if name not in parents]
        report = spare is None and len(ours) == 4 and all(name.startswith(f"{os.getpid()}-") for name in ours)
        pool.close()
        os.write(writing, b"ok" if report else b"wrong")
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading, "rb") as pipe:
        said = pipe.read()
    os.waitpid(child, 0)
    assert said == b"ok"
    assert sorted(os.listdir(tmp_path / "spare")) == parents  # the parent's spares are the parent's
    pool.close()
