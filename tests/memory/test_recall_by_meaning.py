"""Recall by meaning: vectors written with each revision, hybrid/lexical/semantic recall, the model's
identity, reindexing (resumable), isolation between workspaces, offline loading; on both engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.config import Settings
from armarius.errors import InvalidInput
from armarius.memory.service import RememberRequest
from armarius.memory.vectors import ENTRIES, VectorIndex
from tests.cli.test_cli import Cli
from tests.helpers import OwnerSQL, Team, agent_of, make_team

STAGING = RememberRequest("ops/preprod-host", "Deploy host for pre-production",
                          "Releases are rolled out to the pre-production machine stage-3.example.net before they "
                          "reach customers.")
OTHERS = [
    RememberRequest("team/lunch", "Lunch order", "The team orders pizza from Luigi on Fridays."),
    RememberRequest("db/backups", "Database backups", "Nightly pg_dump runs at 02:00 UTC and is kept for 30 days."),
    RememberRequest("ci/runners", "CI runners", "Builds run on four self-hosted runners with 16 GB of memory."),
]
QUESTION = "where is our staging server"


@pytest.fixture
def team(app: Armarius) -> Team:
    team = make_team(app)
    for request in [STAGING, *OTHERS]:
        app.memory.remember(team.agent, request)
    return team


def test_a_paraphrase_is_found_by_meaning_where_words_miss_it(app: Armarius, team: Team) -> None:
    lexical = app.memory.recall(team.agent, QUESTION, mode="lexical")
    assert "ops/preprod-host" not in [hit["slug"] for hit in lexical["results"]]
    hybrid = app.memory.recall(team.agent, QUESTION)
    assert hybrid["mode"] == "hybrid"
    found = {hit["slug"]: hit["ranked_by"] for hit in hybrid["results"]}
    assert found["ops/preprod-host"] == ["semantic"]
    semantic = app.memory.recall(team.agent, QUESTION, mode="semantic")
    assert semantic["results"][0]["slug"] == "ops/preprod-host"
    assert semantic["match"] == "meaning"
    assert all(hit["ranked_by"] == ["semantic"] for hit in semantic["results"])
    both = app.memory.recall(team.agent, "pre-production deploy host")
    assert both["match"] == "all"
    assert both["results"][0]["slug"] == "ops/preprod-host"
    assert both["results"][0]["ranked_by"] == ["lexical", "semantic"]
    assert "**pre**-**production**" in both["results"][0]["snippet"]


def test_a_new_revision_gets_a_new_vector_in_its_transaction(app: Armarius, team: Team) -> None:
    before = app.memory.recall(team.agent, "pizza on Fridays", mode="semantic")["results"]
    assert before[0]["slug"] == "team/lunch"
    app.memory.remember(team.agent, RememberRequest("team/lunch", "Lunch order",
                                                    "Releases go to the pre-production host stage-3 first."))
    with OwnerSQL(app.settings) as sql:
        rows = sql.rows("SELECT e.slug, v.revision, v.seq FROM entry_vectors v JOIN entries e ON e.id = v.entry_id "
                        "ORDER BY v.seq")
    assert [(slug, revision) for slug, revision, _ in rows] == [
        ("ops/preprod-host", 1), ("db/backups", 1), ("ci/runners", 1), ("team/lunch", 2)]
    assert [seq for _, _, seq in rows] == [1, 3, 4, 5]  # numbered in commit order; lunch's first (2) replaced
    pizza = [hit["slug"] for hit in app.memory.recall(team.agent, "pizza on Fridays", mode="semantic")["results"]]
    assert "team/lunch" not in pizza[:1]  # the search by meaning reads the new revision's vector


def test_a_search_that_read_new_vectors_before_another_never_brings_back_older_ones(app: Armarius,
                                                                                   team: Team) -> None:
    """Two searches catch up on a workspace's new vectors at once; the one that read them first takes them in
    last. The process's copy ends as a read from scratch finds it, never with an older revision's vector."""
    index = app.memory.vectors
    assert index is not None
    app.memory.recall(team.agent, QUESTION, mode="semantic")  # the copy holds every vector
    lunch, question = "team/lunch", "pizza on Fridays"
    app.memory.remember(team.agent, RememberRequest(lunch, "Lunch order", "The team orders sushi on Mondays."))
    read, go, answers = threading.Event(), threading.Event(), []

    def older_search() -> None:
        with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
            found = index.nearest_later(tx, question, {ENTRIES: 4})
            tx.flush()  # its read of the new vectors has run (PostgreSQL sends it now)
            read.set()
            go.wait(10)
            answers.append(found()[ENTRIES])

    thread = threading.Thread(target=older_search)
    thread.start()
    assert read.wait(10)
    app.memory.remember(team.agent, RememberRequest(lunch, "Lunch order",
                                                    "Releases go to the pre-production host stage-3 first."))
    app.memory.recall(team.agent, QUESTION, mode="semantic")  # a later search takes in the newest vector
    go.set()
    thread.join(10)
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        from_scratch = VectorIndex(index.embedder).nearest(tx, question, 4)
        kept = index.nearest(tx, question, 4)
    assert lunch_id(app, team) in [entry for entry, _ in from_scratch]
    assert kept == from_scratch
    assert answers == [from_scratch]


def lunch_id(app: Armarius, team: Team) -> int:
    with OwnerSQL(app.settings) as sql:
        return int(sql.rows("SELECT id FROM entries WHERE slug = 'team/lunch'")[0][0])


def test_filters_apply_to_the_search_by_meaning(app: Armarius, team: Team) -> None:
    app.memory.curate(team.human, "db/backups", 1)
    found = app.memory.recall(team.agent, QUESTION, mode="semantic", curated_only=True)
    assert [hit["slug"] for hit in found["results"]] == ["db/backups"]
    app.memory.remember(team.agent, RememberRequest("ops/other-host", "Another staging machine",
                                                    "A second box for staging sits in rack 9.", tags=["hosts"]))
    tagged = app.memory.recall(team.agent, QUESTION, tags=["hosts"])
    assert [hit["slug"] for hit in tagged["results"]] == ["ops/other-host"]


@pytest.mark.anyio
async def test_mode_is_refused_unless_it_is_one_of_three(app: Armarius, team: Team) -> None:
    async with agent_of(app, team.agent) as agent:
        refused = await agent("recall", query=QUESTION, mode="fuzzy")
        assert (refused["error"], refused["details"]["field"]) == ("invalid_input", "mode")
        assert (await agent("recall", query=QUESTION, mode="semantic"))["results"][0]["slug"] == "ops/preprod-host"


def test_with_embeddings_off_recall_is_by_words_and_semantic_is_refused(settings: Settings, team: Team) -> None:
    off = open_app(replace(settings, memory_embeddings="off"))
    try:
        with pytest.raises(InvalidInput) as refused:
            off.memory.recall(team.agent, QUESTION, mode="semantic")
        assert refused.value.details["field"] == "mode"
        hybrid = off.memory.recall(team.agent, "pre-production deploy host")
        assert hybrid["results"][0]["ranked_by"] == ["lexical"]
        off.memory.remember(team.agent, RememberRequest("ops/new", "Written while off", "No vector for me."))
        assert off.memory.vector_counts(team.agent.workspace_id) is None
    finally:
        off.close()


def test_vectors_of_another_model_are_ignored_until_reindexed(app: Armarius, settings: Settings,
                                                               team: Team) -> None:
    with OwnerSQL(settings) as sql:
        sql.execute("INSERT INTO vector_models (name) VALUES ('some-older-model')")
        sql.execute("UPDATE entry_vectors SET model = (SELECT id FROM vector_models WHERE name = 'some-older-model')")
    fresh = open_app(settings)  # a process that starts after the model changed
    try:
        assert fresh.memory.recall(team.agent, QUESTION, mode="semantic")["results"] == []
        assert fresh.memory.vector_counts(team.agent.workspace_id) == {
            "entries": 4, "with_vector": 0, "units": 0, "units_with_vector": 0}
    finally:
        fresh.close()
    result = Cli(settings)("--json", "init")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["embedded"]["alpha"]["embedded"] == 4
    assert app.memory.vector_counts(team.agent.workspace_id) == {"entries": 4, "with_vector": 4, "units": 0,
                                                                 "units_with_vector": 0}
    assert app.memory.recall(team.agent, QUESTION, mode="semantic")["results"][0]["slug"] == "ops/preprod-host"
    again = Cli(settings)("--json", "memory", "reindex")
    assert json.loads(again.stdout)["alpha"] == {"embedded": 0, "entries": 4, "with_vector": 4, "units": 0,
                                                 "units_with_vector": 0}


def test_reindex_never_puts_back_the_vector_of_a_revision_replaced_meanwhile(settings: Settings) -> None:
    """An entry whose first revision has no vector is updated while reindex starts: reindex reads what is missing
    only once it holds the vectors' turn, so it never writes revision 1's vector over revision 2's. On
    PostgreSQL reindex starts while the update's transaction holds the turn and waits for it (seen in
    pg_locks); on SQLite writers take turns anyway."""
    off = open_app(replace(settings, memory_embeddings="off"))
    try:
        team = make_team(off)
        off.memory.remember(team.agent, STAGING)
    finally:
        off.close()
    app = open_app(settings)
    try:
        workspace = team.agent.workspace_id
        update = RememberRequest(STAGING.slug, STAGING.title, "The pre-production machine is now stage-4.",
                                 reason="moved")
        done: list[dict[str, int]] = []
        with OwnerSQL(settings) as owner, app.database.transaction(workspace_id=workspace, write=True) as tx:
            app.memory.remember(team.agent, update, within=tx)
            tx.scalar("SELECT 1")  # what is queued (the turn among it) goes now
            reindex = threading.Thread(target=lambda: done.append(app.memory.reindex(workspace)))
            reindex.start()
            if settings.database_url is not None:
                for _ in range(2000):  # until reindex waits for the turn
                    if owner.rows("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")[0][0]:
                        break
                    reindex.join(0.005)
                else:
                    pytest.fail("reindex never waited for the turn")
        reindex.join(60)
        assert done, "reindex finished"
        # Nothing embedded: revision 2 had its vector when reindex looked (before the fix, reindex wrote revision
        # 1's vector over it and mended that in its next batch, unless it was stopped in between).
        assert done[0] == {"embedded": 0, "entries": 1, "with_vector": 1, "units": 0, "units_with_vector": 0}
        with OwnerSQL(settings) as owner:
            assert owner.rows("SELECT revision FROM entry_vectors") == [(2,)]
    finally:
        app.close()


def test_a_workspace_never_finds_another_workspaces_entries_by_meaning(app: Armarius, team: Team) -> None:
    beta = make_team(app, "beta")
    app.memory.remember(beta.agent, RememberRequest("ops/beta-host", "Staging box location",
                                                    "The staging box lives in rack 9."))
    for mode in ("semantic", "hybrid"):
        assert "ops/beta-host" not in [hit["slug"] for hit in
                                       app.memory.recall(team.agent, QUESTION, mode=mode)["results"]]
    assert [hit["slug"] for hit in app.memory.recall(beta.agent, QUESTION, mode="semantic")["results"]] == [
        "ops/beta-host"]
    if app.settings.database_url is not None:  # the server role itself sees only the workspace set
        with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
            assert tx.scalar("SELECT count(*) FROM entry_vectors") == 4
            assert tx.execute("UPDATE entry_vectors SET seq = 0 WHERE workspace_id = ?",
                              (beta.agent.workspace_id,)) == 0


CHILD = """
import socket, sys
def refuse(*args, **kwargs):
    raise OSError("the network is not available to this process")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
from armarius.memory.embeddings import WordLlamaEmbedder
vector = WordLlamaEmbedder().embed(["where does the staging box live?"])[0]
print(len(vector), round(float(vector @ vector), 3))
"""


def test_the_model_loads_and_embeds_with_no_network(tmp_path: Path) -> None:
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE"))}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120,
                          env={**environ, "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["256", "1.0"]
    assert not any(tmp_path.iterdir())  # nothing cached under the home folder either


def test_reindex_resumes_after_a_kill(settings: Settings, tmp_path: Path) -> None:
    off = open_app(replace(settings, memory_embeddings="off"))
    try:
        team = make_team(off)
        for number in range(1500):
            off.memory.remember(team.agent, RememberRequest(f"bulk/note-{number}", f"Note {number}",
                                                            f"Text number {number} about topic {number % 37}.",
                                                            confirm_distinct=True, reason="bulk"))
    finally:
        off.close()
    environment = {**os.environ, **Cli(settings).env}
    command = [sys.executable, "-m", "armarius", "--data-dir", str(settings.data_dir), "memory", "reindex"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=environment) as child:
        assert child.stderr is not None
        for line in child.stderr:  # the first batches are committed: kill it in the middle
            if line.startswith("Embedding alpha: ") and int(line.split(": ")[1].split("/")[0]) >= 300:
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    app = open_app(settings)
    try:
        partial = app.memory.vector_counts(team.agent.workspace_id)
        assert partial is not None
        assert 300 <= partial["with_vector"] < 1500
        rest: dict[str, Any] = json.loads(Cli(settings)("--json", "memory", "reindex", "--workspace", "alpha").stdout)
        assert rest["alpha"] == {"embedded": 1500 - partial["with_vector"], "entries": 1500, "with_vector": 1500,
                                 "units": 0, "units_with_vector": 0}
        assert app.memory.recall(team.agent, "topic 5", mode="semantic")["results"]
    finally:
        app.close()


def test_entries_created_and_updated_in_one_callers_transaction_get_their_vectors(app: Armarius, team: Team) -> None:
    """Several writes in one transaction of a caller (as a draft's promotion or an import makes): each new entry's
    and each new revision's vector is written with it, whichever round trip made it."""
    with app.database.transaction(workspace_id=team.agent.workspace_id, write=True) as tx:
        for slug, body in (("ops/db-host", "The PostgreSQL primary runs on db-7.internal."),
                           ("ops/mail-host", "Outgoing mail leaves through smtp-2.internal.")):
            app.memory.remember(team.agent, RememberRequest(slug, "Host", body, confirm_distinct=True,
                                                            reason="two hosts"), within=tx)
        app.memory.remember(team.agent, RememberRequest("team/lunch", "Lunch order",
                                                        "The team orders pizza from Luigi on Fridays, at noon."),
                            within=tx)
    with OwnerSQL(app.settings) as sql:
        rows = sql.rows("SELECT e.slug, v.revision FROM entry_vectors v JOIN entries e ON e.id = v.entry_id "
                        "WHERE e.slug IN ('ops/db-host', 'ops/mail-host', 'team/lunch') ORDER BY e.slug")
    assert [(slug, revision) for slug, revision in rows] == [("ops/db-host", 1), ("ops/mail-host", 1),
                                                             ("team/lunch", 2)]
    found = app.memory.recall(team.agent, "which machine sends our email", mode="semantic")["results"]
    assert found[0]["slug"] == "ops/mail-host"


class _BrokenEmbedder:
    model_id = "broken"
    ready = True

    def embed(self, _texts: Any) -> Any:
        raise RuntimeError("the model is broken")


def test_a_creation_asked_for_a_judgment_never_fails_for_its_unused_vector(app: Armarius, team: Team) -> None:
    """On PostgreSQL the new entry's vector is made while the duplicate check travels; when the check asks for a
    judgment nothing is written, and a failure making that vector is not the caller's: its transaction goes on
    (both engines; on SQLite the vector is made only where it is stored)."""
    duplicate = RememberRequest("ops/staging-host", STAGING.title, STAGING.body)
    app.memory.vectors = VectorIndex(_BrokenEmbedder())
    with app.database.transaction(workspace_id=team.agent.workspace_id, write=True) as tx:
        answer = app.memory.remember(team.agent, duplicate, within=tx)
        assert answer["status"] == "judgment_required"
        assert tx.scalar("SELECT count(*) FROM entries") == 4
    with pytest.raises(RuntimeError, match="the model is broken"):  # where the vector is used, it fails
        app.memory.remember(team.agent, RememberRequest("ops/elsewhere", "Elsewhere", "Unrelated text here."))
