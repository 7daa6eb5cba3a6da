"""A session's capture files when someone who can write below the evidence folder put a symbolic link, a FIFO,
a folder or a device where a folder or a capture file belongs, on both engines.

Every capture file and spare file is reached from the evidence folder without following a link and opened
without waiting: readers (verify, capture_files) take such a thing for no file and say so, writers (a query,
rebuild-files) refuse it (``conflict``, naming the path below the evidence folder) and write nothing through
it. A call that a regression would leave waiting on a FIFO runs in a thread and fails the test after a minute
(:func:`tests.research.blocking.within`); one that would read a device without end runs in a child process
whose memory is capped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from armarius.errors import Conflict
from armarius.research.captures import verify_capture
from tests.crash_child import REPO
from tests.helpers import make_team
from tests.research.blocking import PATIENCE, within
from tests.sessions.conftest import Lab

READ = {"kind": "source.read", "path": "src/app.py", "start_line": 1, "end_line": 2}
SEARCH = {"kind": "source.search", "text": "def "}


def _first_capture(lab: Lab) -> tuple[int, str, Path]:
    """A session with one answer: its id, the capture's id and the capture file."""
    sessions, agent = lab.app.sessions, lab.team.agent
    session = sessions.open(agent, "q", budget=5)["session"]
    capture = sessions.query(agent, session, READ)["capture"]
    return session, capture, sessions.session_folder(agent.workspace, session) / f"{capture}.json"


def _below(lab: Lab, path: Path) -> str:
    return str(path.relative_to(lab.app.sessions.evidence_dir))


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry below ``folder`` with its bytes (None: not a regular file), links not followed."""
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() and not path.is_symlink() else None
            for path in sorted(folder.rglob("*"))}


def _used(lab: Lab, session: int) -> dict[str, int]:
    return lab.app.sessions.show(lab.team.agent, session)["budget"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("linked", ["session", "captures"])
def test_a_linked_session_folder_is_neither_written_nor_read_through(lab: Lab, tmp_path: Path, linked: str) -> None:
    sessions, agent, human = lab.app.sessions, lab.team.agent, lab.team.human
    session, capture, file = _first_capture(lab)
    folder = file.parent
    replaced = folder.parent if linked == "session" else folder  # sessions/<id>, or its captures/
    outside = tmp_path / "outside"
    shutil.move(replaced, outside)  # the files a read through the link would find are intact ones
    os.symlink(outside, replaced)
    before, budget = _tree(outside), _used(lab, session)

    with pytest.raises(Conflict) as refused:
        sessions.query(agent, session, SEARCH)
    assert refused.value.details["path"] == _below(lab, replaced)
    assert _tree(outside) == before  # no capture written through the link
    assert _used(lab, session) == budget  # the refused query's action was given back

    report = sessions.verify(agent, session)
    assert not report["ok"]
    assert report["problems"] == [{"problem": "missing_file", "file": file.name}]  # not read through the link
    assert sessions.capture_files(agent, session, [capture])[capture]["state"] == "missing"

    with pytest.raises(Conflict) as refused:
        sessions.rebuild_files(human, session)
    assert refused.value.details["path"] == _below(lab, replaced)
    assert _tree(outside) == before
    assert os.readlink(replaced) == str(outside)

    os.unlink(replaced)  # the link removed, the folder is made again and the files restored from the store
    assert sessions.rebuild_files(human, session)["restored"] == [capture]
    assert sessions.verify(agent, session)["ok"]


def test_a_linked_spare_folder_is_neither_swept_nor_filled(lab: Lab, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    evidence = sessions.evidence_dir
    victim = tmp_path / "operator-documents"
    victim.mkdir()
    for name in ("contract.pdf", "notes.txt"):
        (victim / name).write_text(f"precious {name}")
        os.utime(victim / name, (time.time() - 7200, time.time() - 7200))  # older than a stale spare
    evidence.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(evidence / ".spare", ignore_errors=True)
    os.symlink(victim, evidence / ".spare")
    before = _tree(victim)

    caplog.set_level(logging.WARNING, logger="armarius.research")
    session = sessions.open(agent, "q")["session"]
    capture = sessions.query(agent, session, READ)["capture"]  # starts the pool, which would sweep and fill
    sessions._spares.fill()  # the pool's first fill, now (or after its own thread's, which it waits for)
    assert _tree(victim) == before
    assert sessions.verify(agent, session)["ok"]  # the writer made its file itself
    assert verify_capture(sessions.session_folder(agent.workspace, session) / f"{capture}.json")
    assert any(".spare" in record.getMessage() for record in caplog.records)


def test_a_fifo_where_a_capture_file_belongs_refuses_a_repeated_query_without_holding_the_store(lab: Lab) -> None:
    sessions, agent = lab.app.sessions, lab.team.agent
    session, _capture, file = _first_capture(lab)
    file.unlink()
    os.mkfifo(file)
    budget = _used(lab, session)

    with pytest.raises(Conflict) as refused:
        within(lambda: sessions.query(agent, session, READ), fifo=file)  # the same answer, so the same file
    assert refused.value.details["path"] == _below(lab, file)
    assert _used(lab, session) == budget
    other = make_team(lab.app, "beta")  # other writers of the store go on
    assert within(lambda: lab.app.sessions.open(other.agent, "unrelated"))["status"] == "open"
    assert file.is_fifo()  # left as it was


@pytest.mark.parametrize("thing", ["fifo", "folder", "link to a copy", "link to other bytes"])
def test_what_is_not_a_regular_file_where_a_capture_file_belongs_is_reported_and_refused(
        lab: Lab, tmp_path: Path, thing: str) -> None:
    sessions, agent, human = lab.app.sessions, lab.team.agent, lab.team.human
    session, capture, file = _first_capture(lab)
    content = file.read_bytes()
    file.unlink()
    copy = tmp_path / "copy.json"
    copy.write_bytes(content if thing == "link to a copy" else b'{"not": "the capture"}')
    if thing == "fifo":
        os.mkfifo(file)
    elif thing == "folder":
        file.mkdir()
    else:
        os.symlink(copy, file)
    fifo = file if thing == "fifo" else None

    report = within(lambda: sessions.verify(agent, session), fifo)
    assert not report["ok"]
    assert report["problems"] == [{"problem": "not_a_file", "file": file.name}]
    found = within(lambda: sessions.capture_files(agent, session, [capture]), fifo)[capture]
    assert (found["state"], found["size"], "document" in found) == ("missing", None, False)
    with pytest.raises(Conflict) as refused:
        within(lambda: sessions.rebuild_files(human, session), fifo)
    assert refused.value.details["path"] == _below(lab, file)
    assert file.is_symlink() or file.is_fifo() or file.is_dir()  # left as it was, and what it points to too
    assert copy.read_bytes() == (content if thing == "link to a copy" else b'{"not": "the capture"}')


def test_a_folder_named_like_a_capture_file_is_reported_not_read(lab: Lab) -> None:
    sessions, agent, human = lab.app.sessions, lab.team.agent, lab.team.human
    session, _capture, file = _first_capture(lab)
    (file.parent / f"{'0' * 64}.json").mkdir()
    os.symlink(file, file.parent / f"{'1' * 64}.json")
    report = sessions.verify(agent, session)
    assert report["problems"] == [{"problem": "not_a_file", "file": f"{'0' * 64}.json"},
                                  {"problem": "not_a_file", "file": f"{'1' * 64}.json"}]
    rebuilt = sessions.rebuild_files(human, session)  # nothing of the store's to restore: the others are listed
    assert (rebuilt["restored"], rebuilt["extra_files"]) == ([], [f"{'0' * 64}.json", f"{'1' * 64}.json"])


_ENDLESS_CHILD = r"""
import json, os, resource, sys
from pathlib import Path

from armarius.app import open_app
from armarius.config import Settings

job = json.loads(sys.stdin.read())
app = open_app(Settings(data_dir=Path(job["data_dir"]), database_url=job["database_url"],
                        research_config=Path(job["research_config"])))
agent = app.directory.authenticate_token(job["agent_token"])
# A reader that followed the link would read /dev/zero until memory runs out: make that quick.
used = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY))
seen = {}
for name, call in (("verify", lambda: app.sessions.verify(agent, job["session"])["problems"]),
                   ("capture_files", lambda: app.sessions.capture_files(agent, job["session"], [job["capture"]]))):
    try:
        seen[name] = call()
    except MemoryError:
        seen[name] = "MemoryError"
print(json.dumps(seen), flush=True)
os._exit(0)
"""


def test_a_capture_file_linked_to_an_endless_device_is_not_read(lab: Lab) -> None:
    session, capture, file = _first_capture(lab)
    file.unlink()
    os.symlink("/dev/zero", file)
    settings = lab.app.settings
    assert settings.research_config is not None
    job = {"data_dir": str(settings.data_dir), "database_url": settings.database_url,
           "research_config": str(settings.research_config), "agent_token": lab.team.agent_token,
           "session": session, "capture": capture}
    child = subprocess.run([sys.executable, "-c", _ENDLESS_CHILD], input=json.dumps(job), capture_output=True,
                           text=True, cwd=REPO, timeout=4 * PATIENCE, check=False)
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen["verify"] == [{"problem": "not_a_file", "file": file.name}]
    assert seen["capture_files"][capture]["state"] == "missing"
