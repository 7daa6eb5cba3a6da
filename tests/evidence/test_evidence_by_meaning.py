"""Active evidence units are found by meaning too: each activation writes the vector of the revision it
activates, in its transaction; recall fuses the units' rankings by words and by meaning as it does the
entries'; `armarius memory reindex` (and `armarius init`) embeds units activated without one. On both
engines."""

from __future__ import annotations

from dataclasses import replace

from armarius.app import open_app
from tests.evidence.conftest import Lab, add_admin
from tests.helpers import OwnerSQL, make_team

NAME = "infra/database-host"
BODY = "The PostgreSQL primary runs on db-7.internal and replicates to db-8.internal every minute.\n"
QUESTION = "which server holds our data store"


def vectors_of(lab: Lab) -> list[tuple[str, int]]:
    with OwnerSQL(lab.app.settings) as sql:
        return [(str(name), int(revision)) for name, revision in sql.rows(
            "SELECT u.name, v.revision FROM unit_vectors v JOIN evidence_units u ON u.id = v.unit_id ORDER BY u.name")]


def test_an_active_unit_is_found_by_meaning_where_its_words_miss(lab: Lab) -> None:
    memory, agent = lab.app.memory, lab.team.agent
    lab.active(NAME, "Where the database lives", BODY)
    lab.app.evidence.create(lab.team.human, "infra/draft-host", "A draft", BODY)  # edited only: never found
    assert memory.recall(agent, QUESTION, mode="lexical")["evidence"] == []
    for mode in ("hybrid", "semantic"):
        found = memory.recall(agent, QUESTION, mode=mode)["evidence"]
        assert [(unit["unit"], unit["revision"], unit["ranked_by"]) for unit in found] == [(NAME, 1, ["semantic"])]
        assert found[0]["snippet"].startswith("The PostgreSQL primary runs on")
    both = memory.recall(agent, "PostgreSQL primary server")["evidence"]
    assert [(unit["unit"], unit["ranked_by"]) for unit in both] == [(NAME, ["lexical", "semantic"])]
    assert vectors_of(lab) == [(NAME, 1)]


def test_a_new_active_revision_replaces_the_vector_in_its_activation(lab: Lab) -> None:
    evidence, memory, agent = lab.app.evidence, lab.app.memory, lab.team.agent
    lab.active(NAME, "Where the database lives", BODY)
    evidence.edit(lab.team.human, NAME, 1, title="Lunch", body="The team orders pizza from Luigi on Fridays.\n",
                  reason="rewritten")
    assert vectors_of(lab) == [(NAME, 1)]  # until a human activates revision 2, revision 1 is what is searched
    assert [unit["revision"] for unit in memory.recall(agent, QUESTION, mode="semantic")["evidence"]] == [1]
    evidence.review(lab.team.human, NAME, 2)
    evidence.activate(lab.admin, NAME, 2)
    assert vectors_of(lab) == [(NAME, 2)]
    assert memory.recall(agent, QUESTION, mode="semantic")["evidence"] == []
    assert [unit["revision"] for unit in memory.recall(agent, "lunch on Friday", mode="semantic")["evidence"]] == [2]


def test_units_activated_without_vectors_are_embedded_by_reindex(lab: Lab) -> None:
    settings = lab.app.settings
    off = open_app(replace(settings, memory_embeddings="off"))
    try:
        team = make_team(off, "beta")
        admin = add_admin(off, "beta")
        off.evidence.create(team.human, NAME, "Where the database lives", BODY)
        off.evidence.review(team.human, NAME, 1)
        off.evidence.activate(admin, NAME, 1)
    finally:
        off.close()
    memory = lab.app.memory
    assert vectors_of(lab) == []
    assert memory.recall(team.agent, QUESTION, mode="semantic")["evidence"] == []  # found by its words alone
    assert memory.vector_counts(team.agent.workspace_id) == {"entries": 0, "with_vector": 0, "units": 1,
                                                             "units_with_vector": 0}
    assert memory.reindex(team.agent.workspace_id) == {"embedded": 1, "entries": 0, "with_vector": 0, "units": 1,
                                                       "units_with_vector": 1}
    assert memory.reindex(team.agent.workspace_id)["embedded"] == 0
    assert [unit["unit"] for unit in memory.recall(team.agent, QUESTION, mode="semantic")["evidence"]] == [NAME]
