"""A writer killed in the middle of an edit leaves the unit's file whole: the old file or the new one.

A child process opens the application and edits an active unit; a real function of the file writer is
wrapped to run and then kill the process with SIGKILL:

* ``temporary_written``: the new content is in its temporary file (forced to disk), before the rename;
* ``renamed``: the rename happened (and the folder was forced to disk), before the transaction commits.

After the first kill the unit's file holds exactly the old bytes, the store still says revision 1, and
the temporary file left behind is no unit: the listing, the snapshot and its problems know nothing of it
(``show`` names it as a leftover). After the second the file holds the new revision the store never
committed: ``show`` and the snapshot's problems say the file differs, and ``restore`` writes revision 1
back. Either way the next edit succeeds as revision 2.

On SQLite the parent closes its connections first and the child keeps a tiny page cache, so the open
transaction's pages reach the WAL before the kill (tests/crash_child.py).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from tests.crash_child import PRELUDE, run_child
from tests.evidence.conftest import ADMIN_PASSWORD, Lab
from tests.helpers import OwnerSQL

NAME = "deploy/staging-host"
OLD_BODY = "Staging runs on the host zeppelin.\n"
NEW_BODY = "Staging moved to the host airship.\n"

CHILD = PRELUDE + r"""
from armarius import files

human = app.directory.authenticate_password(job["human"], job["password"], workspace=job["workspace"])
path = app.evidence.unit_path(job["workspace"], job["unit"])
seen = {"pid": os.getpid()}

real_temporary = files._write_temporary
real_write = files.write_atomically


def temporary_then_die(folder, name, content, *more):
    temporary = real_temporary(folder, name, content, *more)
    if job["kill"] == "temporary_written":
        seen.update(temporary=temporary.name, temporary_holds_new=temporary.read_bytes() == content,
                    file_holds_new=path.read_bytes() == content)
        report_and_die(seen)
    return temporary


def write_then_die(target, content, **where):
    real_write(target, content, **where)
    seen.update(file_holds_new=target.read_bytes() == content, new_bytes=content.decode("utf-8"))
    report_and_die(seen)


files._write_temporary = temporary_then_die
files.write_atomically = write_then_die
app.evidence.edit(human, job["unit"], 1, body=job["body"])
print("edit returned: the process was not killed", flush=True)
"""


def _stored(app: Armarius) -> dict[str, Any]:
    with OwnerSQL(app.settings) as sql:
        return {"units": sql.rows("SELECT name, revision, status, active_revision FROM evidence_units"),
                "revisions": sql.rows("SELECT revision FROM evidence_revisions ORDER BY revision"),
                "edits": sql.rows("SELECT count(*) FROM audit_events WHERE action = 'evidence.edited'")[0][0]}


@pytest.mark.parametrize("kill", ["temporary_written", "renamed"])
def test_an_edit_killed_around_the_rename_leaves_the_old_file_or_the_new_one(app: Armarius, lab: Lab,
                                                                               kill: str) -> None:
    lab.active(NAME, "Where staging runs", OLD_BODY)
    path = lab.path(NAME)
    old_bytes = path.read_bytes()
    folder = path.parent
    if app.database.dialect == "sqlite":  # the child is then the only connection
        app.database.close()
        lab.app.database.close()
    seen = run_child(app.settings, {"agent_token": lab.team.agent_token, "human": "alpha-admin",
                                    "password": ADMIN_PASSWORD, "workspace": "alpha", "unit": NAME, "body": NEW_BODY,
                                    "kill": kill}, CHILD)
    restarted = open_app(app.settings)
    try:
        evidence = restarted.evidence
        human = restarted.directory.authenticate_password("alpha-admin", ADMIN_PASSWORD, workspace="alpha")
        # Nothing of the edit committed.
        assert _stored(restarted) == {"units": [(NAME, 1, "active", 1)], "revisions": [(1,)], "edits": 0}
        listing = evidence.list_units(human)["units"]
        assert [unit["unit"] for unit in listing] == [NAME]
        assert evidence.snapshot(human) == {NAME: evidence.current(human, NAME).fingerprint}
        shown = evidence.show(human, NAME)
        if kill == "temporary_written":
            assert seen["temporary_holds_new"] is True
            assert seen["file_holds_new"] is False
            assert path.read_bytes() == old_bytes  # the old file, whole
            assert sorted(os.listdir(folder)) == sorted([path.name, seen["temporary"]])
            assert seen["temporary"].startswith(f".{path.name}.")
            assert shown["temporary_files"] == [seen["temporary"]]
            assert shown["file"]["state"] == "matches"
            assert evidence.snapshot_problems(human) == []
        else:
            assert seen["file_holds_new"] is True
            assert path.read_bytes().decode("utf-8") == seen["new_bytes"]  # the new file, whole
            assert NEW_BODY in seen["new_bytes"]
            assert os.listdir(folder) == [path.name]
            assert shown["file"]["state"] == "differs"
            assert [problem.split(": ", 1)[0] for problem in evidence.snapshot_problems(human)] == [NAME]
            assert evidence.restore(human, NAME)["was"] == "differs"
            assert path.read_bytes() == old_bytes
            assert evidence.snapshot_problems(human) == []
        # The unit goes on: the next edit is revision 2, and its file is written whole.
        edited = evidence.edit(human, NAME, 1, body=NEW_BODY)
        assert edited["revision"] == 2
        assert evidence.file_fingerprint(human, NAME) == edited["fingerprint"]
        assert json.loads(json.dumps(evidence.show(human, NAME)["lineage"]))[-1]["revision"] == 2
    finally:
        restarted.close()
