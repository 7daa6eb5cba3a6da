"""Child processes that kill themselves with SIGKILL in the middle of a call, for the crash tests.

A child is a script run with ``python -c``; it reads its job, a JSON object, from stdin and prints
what it saw as JSON on the last line of its output before it dies. ``run_child`` adds the settings
to the job (``data_dir``, ``database_url``, ``research_config``), runs the script, checks that it
died of SIGKILL and returns that last line.

``PRELUDE`` begins a script that crashes inside a transaction: it opens the application with a
tiny SQLite page cache, so the open transaction's uncommitted pages reach the WAL before the kill,
and authenticates the job's ``agent_token``. It leaves ``job``, ``settings``, ``app``, ``agent``,
``wal_size()`` and ``report_and_die(seen)`` to the rest of the script.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from armarius.config import Settings

REPO = Path(__file__).resolve().parents[1]

PRELUDE = r"""
import json, os, signal, sys
from pathlib import Path

from armarius.app import open_app
from armarius.config import Settings
from armarius.store.engine import SqliteDatabase

job = json.loads(sys.stdin.read())
settings = Settings(data_dir=Path(job["data_dir"]), database_url=job["database_url"],
                    research_config=Path(job["research_config"]) if job["research_config"] else None)
wal = Path(str(settings.sqlite_path) + "-wal")


def wal_size():
    return wal.stat().st_size if wal.exists() else 0


def report_and_die(seen):
    print(json.dumps(seen), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


plain_connect = SqliteDatabase.connect


def small_cache_connect(self):
    # A tiny page cache spills the open transaction's pages into the WAL before the commit.
    connection = plain_connect(self)
    connection.execute("PRAGMA cache_size = 2")
    return connection


SqliteDatabase.connect = small_cache_connect
app = open_app(settings)
agent = app.directory.authenticate_token(job["agent_token"])
"""


def run_child(settings: Settings, job: dict[str, Any], script: str) -> dict[str, Any]:
    """Run ``script`` on ``job`` and the store of ``settings``; what it printed last before SIGKILL killed it."""
    job = {**job, "data_dir": str(settings.data_dir), "database_url": settings.database_url,
           "research_config": None if settings.research_config is None else str(settings.research_config)}
    child = subprocess.run([sys.executable, "-c", script], input=json.dumps(job), capture_output=True, text=True,
                           cwd=REPO, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL, f"exit {child.returncode}\n{child.stdout}\n{child.stderr}"
    seen: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return seen
