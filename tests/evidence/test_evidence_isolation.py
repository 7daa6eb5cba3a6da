"""Units belong to one workspace: invisible to another through every service call (on both engines) and
to the application's login role scoped to another workspace (PostgreSQL row-level security). Revisions
are records: the server role can only add them."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
import pytest

from armarius.errors import NotFound
from tests.evidence.conftest import TABLES, Lab, add_admin, changes_nothing
from tests.helpers import make_team

NAME = "deploy/staging-host"


def test_units_of_another_workspace_do_not_exist_for_it(lab: Lab) -> None:
    lab.active(NAME, "Where alpha's staging runs", "Alpha's staging host is zeppelin.\n")
    lab.app.evidence.create(lab.team.human, "alpha/only", "Alpha only", "Edited, never reviewed.\n")
    beta = make_team(lab.app, "beta")
    beta_admin = add_admin(lab.app, "beta")
    evidence, memory = lab.app.evidence, lab.app.memory
    assert evidence.list_units(beta.human) == {"units": []}
    assert evidence.snapshot(beta.human) == {}
    assert evidence.snapshot_problems(beta.human) == []
    assert memory.recall(beta.agent, "zeppelin")["evidence"] == []
    assert memory.recall(beta.agent, "where does alpha stage its releases", mode="semantic")["evidence"] == []
    assert evidence.file_fingerprint(beta.human, NAME) is None  # beta's folder has no such file
    for attempt in (lambda: evidence.show(beta.human, NAME), lambda: evidence.current(beta.agent, NAME),
                    lambda: evidence.edit(beta.human, NAME, 1, body="b"), lambda: evidence.review(beta.human, NAME, 1),
                    lambda: evidence.activate(beta_admin, NAME, 1), lambda: evidence.restore(beta.human, NAME),
                    lambda: evidence.correction(beta_admin, NAME, base_revision=1, title="T", body="b",
                                                via="repair 1")):
        with changes_nothing(lab.app, NotFound) as caught:
            attempt()
        assert "zeppelin" not in caught[0].message
    # The same name is beta's own unit, in beta's folder.
    evidence.create(beta.human, NAME, "Where beta's staging runs", "Beta's staging host is airship.\n")
    evidence.review(beta.human, NAME, 1)
    evidence.activate(beta_admin, NAME, 1)
    assert evidence.unit_path("beta", NAME) != lab.path(NAME)
    assert [hit["title"] for hit in memory.recall(beta.agent, "staging host")["evidence"]] == [
        "Where beta's staging runs"]
    assert [hit["title"] for hit in memory.recall(lab.team.agent, "staging host")["evidence"]] == [
        "Where alpha's staging runs"]
    assert memory.recall(beta.agent, "zeppelin")["evidence"] == []
    assert set(evidence.snapshot(beta.human)) == {NAME}
    assert evidence.current(lab.team.human, NAME).title == "Where alpha's staging runs"


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgresql"], indirect=True)
def test_the_login_role_scoped_to_another_workspace_sees_no_unit_rows(lab: Lab) -> None:
    lab.active(NAME, "Where staging runs", "The staging host is zeppelin.\n")
    lab.app.evidence.edit(lab.team.human, NAME, 1, body="Edited.\n")
    beta = make_team(lab.app, "beta")
    url = lab.app.settings.database_url
    assert url is not None
    with psycopg.connect(url) as connection:
        def run(workspace: int, statement: str) -> Any:
            with connection.transaction():
                connection.execute("SELECT set_config('armarius.workspace_id', %s, true)", (str(workspace),))
                cursor = connection.execute(statement)
                return cursor.fetchone() if statement.startswith("SELECT") else None

        alpha = lab.team.human.workspace_id
        for table in TABLES:
            assert run(alpha, f"SELECT count(*) FROM {table}")[0] > 0, table
            assert run(beta.human.workspace_id, f"SELECT count(*) FROM {table}")[0] == 0, table
        searched = "SELECT count(*) FROM evidence_search WHERE tsv @@ to_tsquery('simple', 'zeppelin')"
        assert run(alpha, searched)[0] == 1
        assert run(beta.human.workspace_id, searched)[0] == 0
        # Rows of alpha cannot be changed from beta's scope: nothing is visible there to change.
        run(beta.human.workspace_id, "UPDATE evidence_units SET title = 'forged'")
        assert run(alpha, "SELECT count(*) FROM evidence_units WHERE title = 'forged'")[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # and a row for alpha cannot be made there
            run(beta.human.workspace_id, f"INSERT INTO evidence_search (unit_id, workspace_id, revision, name, title, "
                                         f"body) VALUES (1, {alpha}, 1, 'x', 'x', 'x')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor a vector
            run(beta.human.workspace_id, f"INSERT INTO unit_vectors (unit_id, workspace_id, seq, revision, model, "
                                         f"vector) SELECT 1, {alpha}, 99, 1, id, '\\x00' FROM vector_models")
        for statement in ("UPDATE evidence_revisions SET body = 'forged'", "DELETE FROM evidence_revisions",
                          "DELETE FROM evidence_units", "DELETE FROM evidence_search", "DELETE FROM unit_vectors"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                run(alpha, statement)
