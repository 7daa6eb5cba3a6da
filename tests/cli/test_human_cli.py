"""The human's memory commands: find (list, search), revert, what the curator sees, and messages
written for a person. In process through click's runner, on both storage engines."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from click.testing import Result

from armarius.app import Armarius
from armarius.audit import chain
from armarius.auth.permissions import Kind, Role
from armarius.cli.context import armarius_command
from armarius.cli.main import cli
from armarius.config import Settings
from armarius.errors import Unauthenticated
from armarius.memory.service import RememberRequest
from tests.cli.test_cli import Cli
from tests.helpers import OwnerSQL, Team, make_team

RLO, ZWSP, CYRILLIC_I = "\u202e", "\u200b", "\u0456"


@pytest.fixture
def team(app: Armarius) -> Team:
    team = make_team(app)
    app.directory.add_principal("alpha-reader", Kind.HUMAN, workspace="alpha", role=Role.READER, by="operator:test",
                                password="reader correct horse")
    return team


def human(settings: Settings, *args: str, password: str | None = None, principal: str = "alpha-human",
          workspace: str = "alpha") -> Result:
    """Run a human command as alpha-human (make_team's password) unless told otherwise."""
    command = Cli(settings)
    command.env = {**command.env, "ARMARIUS_PASSWORD": password or "alpha-correct horse battery"}
    return command(*args, "--workspace", workspace, "--as", principal)


def human_json(settings: Settings, *args: str, **who: str) -> Any:
    result = human(settings, "--json", *args, **who)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def remember(app: Armarius, team: Team, slug: str, title: str, body: str, **more: Any) -> None:
    written = app.memory.remember(team.agent, RememberRequest(slug, title, body, **more))
    assert written["status"] == "written", written


def printed_arguments(line: str) -> list[str]:
    """The arguments of a command the CLI printed, after the program that it names."""
    words = shlex.split(line)
    program = shlex.split(armarius_command())
    assert words[:len(program)] == program, line
    return words[len(program):]


def memory_state(settings: Settings) -> tuple[Any, ...]:
    """Entries, revisions and memory's audit events (human logins may add login events)."""
    with OwnerSQL(settings) as sql:
        return (
            sql.rows("SELECT slug, revision, curated_revision, needs_review, title, body, tags FROM entries "
                     "ORDER BY slug"),
            sql.rows("SELECT entry_id, revision, author, reason FROM entry_revisions ORDER BY entry_id, revision"),
            sql.rows("SELECT seq, action, subject FROM audit_events WHERE action LIKE ? ORDER BY seq", ("memory.%",)),
        )


# Finding entries ---------------------------------------------------------------------------------


def test_list_filters_and_pages_like_the_agents_list(app: Armarius, settings: Settings, team: Team) -> None:
    for index in range(5):
        remember(app, team, f"lst/item-{index}", f"Item number {index}", f"Distinct body {index} " + "word " * index,
                 tags=["even"] if index % 2 == 0 else [], confirm_distinct=True, reason="numbered items")
    remember(app, team, "other/x", "Other", "Elsewhere.")
    app.memory.curate(team.human, "lst/item-1", 1)
    app.memory.curate(team.human, "lst/item-3", 1)
    remember(app, team, "lst/item-3", "Item number 3", "Changed.", override_curated=True, reason="it changed")

    first = human_json(settings, "memory", "list", "--prefix", "lst/", "--limit", "2")
    assert [e["slug"] for e in first["entries"]] == ["lst/item-0", "lst/item-1"]
    second = human_json(settings, "memory", "list", "--prefix", "lst/", "--limit", "2", "--after", first["next_after"])
    assert [e["slug"] for e in second["entries"]] == ["lst/item-2", "lst/item-3"]
    assert [e["slug"] for e in human_json(settings, "memory", "list", "--tag", "even")["entries"]] == [
        "lst/item-0", "lst/item-2", "lst/item-4"]
    assert [e["slug"] for e in human_json(settings, "memory", "list", "--curated")["entries"]] == ["lst/item-1"]
    assert len(human_json(settings, "memory", "list", "--not-curated", "--prefix", "lst/")["entries"]) == 4
    assert [e["slug"] for e in human_json(settings, "memory", "list", "--needs-review")["entries"]] == ["lst/item-3"]
    # The same answer as the agents' list, and a reader may list too.
    assert human_json(settings, "memory", "list", "--prefix", "lst/", "--limit", "2", principal="alpha-reader",
                      password="reader correct horse") == app.memory.list_entries(team.agent, prefix="lst/", limit=2)

    text = human(settings, "memory", "list", "--prefix", "lst/", "--limit", "3")
    assert text.exit_code == 0, text.stderr
    assert text.stdout.splitlines()[0].split() == ["SLUG", "REV", "CURATED", "REVIEW", "TAGS", "TITLE"]
    more = text.stdout.splitlines()[-1]
    assert more.startswith("More entries follow: ")
    # The printed next-page command runs as printed (its password comes from the environment).
    following = Cli(settings)
    following.env = {**following.env, "ARMARIUS_PASSWORD": team.human_password}
    page = following.runner.invoke(cli, printed_arguments(more.removeprefix("More entries follow: ")),
                                   env=following.env, catch_exceptions=False)
    assert page.exit_code == 0, page.stderr
    assert "lst/item-3" in page.stdout
    assert "lst/item-4" in page.stdout
    assert "lst/item-0" not in page.stdout


def test_search_is_the_agents_recall(app: Armarius, settings: Settings, team: Team) -> None:
    remember(app, team, "ops/staging-server", "Staging server", "The staging server runs on host alpha-7.",
             tags=["ops"])
    remember(app, team, "ops/pipeline", "Pipeline", "CI deploys to the staging host.", tags=["ci"])
    remember(app, team, "ops/rack-plan", "Rack plan", "Rack 3 is full; rack 4 is free.")
    app.memory.curate(team.human, "ops/rack-plan", 1)

    found = human_json(settings, "memory", "search", "staging", "host")
    assert found == app.memory.recall(team.agent, "staging host")
    assert {hit["slug"] for hit in found["results"]} == {"ops/staging-server", "ops/pipeline"}
    tagged = human_json(settings, "memory", "search", "staging", "--tag", "ci")
    assert [hit["slug"] for hit in tagged["results"]] == ["ops/pipeline"]
    curated = human_json(settings, "memory", "search", "rack", "staging", "--curated-only")
    assert [(hit["slug"], hit["curated"]) for hit in curated["results"]] == [("ops/rack-plan", True)]
    assert curated["match"] == "any"
    assert len(human_json(settings, "memory", "search", "staging", "--limit", "1")["results"]) == 1
    reader = human_json(settings, "memory", "search", "rack", principal="alpha-reader",
                        password="reader correct horse")
    assert [hit["slug"] for hit in reader["results"]] == ["ops/rack-plan"]

    text = human(settings, "memory", "search", "staging", "host")
    assert text.exit_code == 0, text.stderr
    assert "ops/staging-server  (revision 1, not curated)" in text.stdout
    assert "**staging**" in text.stdout
    nothing = human(settings, "memory", "search", "zeppelin", "--mode", "lexical")
    assert nothing.stdout.strip() == "No entry matches."
    # By meaning, something is always closest: the heading says that no entry holds the words.
    near = human(settings, "memory", "search", "zeppelin")
    assert near.stdout.startswith("No entry holds the words; these are close in meaning:"), near.stdout


# Reverting an agent's override ---------------------------------------------------------------------


def overridden(app: Armarius, team: Team) -> None:
    remember(app, team, "ops/db", "Database host", "db-1 in rack 2", tags=["hosts"])
    app.memory.curate(team.human, "ops/db", 1)
    remember(app, team, "ops/db", "Database host", "db-2 now", override_curated=True, reason="migrated last night")


def test_needs_review_offers_revert_and_revert_restores_the_curated_revision(
    app: Armarius, settings: Settings, team: Team
) -> None:
    overridden(app, team)
    review = human(settings, "memory", "needs-review")
    assert review.exit_code == 0, review.stderr
    lines = review.stdout.splitlines()
    keep = next(line for line in lines if line.strip().startswith("Keep the change:"))
    undo = next(line for line in lines if line.strip().startswith("Undo it:"))
    data_dir = ["--data-dir", str(settings.data_dir)]
    assert printed_arguments(keep.split(":", 1)[1]) == [
        *data_dir, "memory", "curate", "ops/db", "--revision", "2", "--workspace", "alpha", "--as", "alpha-human"]
    undo_arguments = printed_arguments(undo.split(":", 1)[1])
    assert undo_arguments == [*data_dir, "memory", "revert", "ops/db", "--to-curated", "--reason", "WHY",
                              "--workspace", "alpha", "--as", "alpha-human"]

    undo_arguments[undo_arguments.index("WHY")] = "the migration was rolled back"
    reverted = Cli(settings)
    result = reverted.runner.invoke(cli, ["--json", *undo_arguments], catch_exceptions=False,
                                    env={**reverted.env, "ARMARIUS_PASSWORD": team.human_password})
    assert result.exit_code == 0, result.stderr
    assert {k: v for k, v in json.loads(result.stdout).items() if k != "operation"} == {
        "slug": "ops/db", "revision": 3, "reverted_to": 1, "curated": True, "changed": True}
    entry = app.memory.read(team.human, "ops/db")
    assert (entry["body"], entry["tags"], entry["curated"], entry["needs_review"]) == (
        "db-1 in rack 2", ["hosts"], True, False)
    assert human(settings, "memory", "needs-review").stdout.strip() == "Nothing needs review."
    event = [e for e in chain.tail(app.database, team.human.workspace_id, 20) if e.action == "memory.reverted"]
    assert [(e.actor, e.details["reason"]) for e in event] == [("human:alpha-human", "the migration was rolled back")]
    again = human(settings, "memory", "revert", "ops/db", "--to-curated", "--reason", "again")
    assert again.exit_code == 0
    assert "nothing to revert" in again.stdout


REVERT = ("--json", "memory", "revert", "ops/db", "--to-curated", "--reason", "undo it")


@pytest.mark.parametrize(("case", "arguments", "who", "exit_code", "error_code"), [
    ("agent", REVERT, "alpha-agent", 4, "unauthenticated"),
    ("reader", REVERT, "alpha-reader", 4, "not_allowed"),
    ("never_curated", ("--json", "memory", "revert", "ops/fresh", "--to-curated", "--reason", "undo it"),
     "alpha-human", 5, "not_found"),
    ("blank_reason", (*REVERT[:-1], "   "), "alpha-human", 3, "reason_required"),
    ("no_choice", ("memory", "revert", "ops/db", "--reason", "undo it"), "alpha-human", 2, None),
    ("no_reason", ("memory", "revert", "ops/db", "--to-curated"), "alpha-human", 2, None),
])
def test_revert_refusals_write_nothing(app: Armarius, settings: Settings, team: Team, case: str,
                                       arguments: tuple[str, ...], who: str, exit_code: int,
                                       error_code: str | None) -> None:
    overridden(app, team)
    remember(app, team, "ops/fresh", "Fresh", "Never reviewed by anyone.")
    password = {"alpha-agent": team.agent_token, "alpha-reader": "reader correct horse"}.get(who)
    before = memory_state(settings)
    refused = human(settings, *arguments, principal=who, password=password)
    assert refused.exit_code == exit_code, refused.stderr
    if error_code is not None:
        error = json.loads(refused.stderr)["error"]
        assert error["code"] == error_code
        assert team.agent_token not in refused.stdout + refused.stderr
        if case == "reader":
            assert error["details"]["permission"] == "memory.curate"
        if case == "never_curated":
            assert "never curated" in error["message"]
    assert memory_state(settings) == before


# What the curator sees is what they curate -------------------------------------------------------


def test_show_history_needs_review_list_and_search_reveal_hidden_characters(
    app: Armarius, settings: Settings, team: Team
) -> None:
    title = f"Paypal l{CYRILLIC_I}nk"
    remember(app, team, "ops/pay", title, "Pay to account 12345.")
    app.memory.curate(team.human, "ops/pay", 1)
    remember(app, team, "ops/pay", title, f"Pay to account {RLO}54321{ZWSP}.", override_curated=True,
             reason=f"account moved{RLO}")
    outputs = {
        "show": human(settings, "memory", "show", "ops/pay"),
        "history": human(settings, "memory", "history", "ops/pay"),
        "needs-review": human(settings, "memory", "needs-review"),
        "list": human(settings, "memory", "list"),
        "search": human(settings, "memory", "search", "account"),
    }
    for command, shown in outputs.items():
        assert shown.exit_code == 0, (command, shown.stderr)
        assert not {RLO, ZWSP, CYRILLIC_I} & set(shown.stdout), command
        assert "⟦U+XXXX NAME⟧" in shown.stdout, command  # the note that explains the markers
    for command in ("show", "needs-review"):
        assert "⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧54321⟦U+200B ZERO WIDTH SPACE⟧" in outputs[command].stdout
    for command in ("show", "needs-review", "list", "search"):
        assert "⟦U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I⟧" in outputs[command].stdout
    for command in ("history", "needs-review"):
        assert "account moved⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧" in outputs[command].stdout
    # --json stays the service's exact answer, for programs.
    assert human_json(settings, "memory", "show", "ops/pay")["body"] == f"Pay to account {RLO}54321{ZWSP}."
    assert "Pay to account 12345." in human(settings, "memory", "show", "ops/pay", "--revision", "1").stdout


def test_show_of_an_older_revision_says_who_wrote_it_when(app: Armarius, settings: Settings, team: Team) -> None:
    overridden(app, team)
    app.memory.revert_to_curated(team.human, "ops/db", "rolled back")
    history = {r["revision"]: r for r in app.memory.history(team.human, "ops/db")["revisions"]}
    old = human(settings, "memory", "show", "ops/db", "--revision", "2")
    assert old.exit_code == 0, old.stderr
    assert f"written by agent:alpha-agent at {history[2]['at']}" in old.stdout
    assert "the current revision is 3" in old.stdout
    assert "db-2 now" in old.stdout


# Messages for a person -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["memory", "show", "ops/none"], ["memory", "history", "ops/none"], ["memory", "curate", "ops/none", "--revision",
                                                                          "1"],
    ["memory", "uncurate", "ops/none"], ["memory", "revert", "ops/none", "--to-curated", "--reason", "r"],
])
def test_an_unknown_entry_names_the_commands_that_find_one(settings: Settings, team: Team,
                                                          command: list[str]) -> None:
    for as_json in (False, True):
        refused = human(settings, *(["--json"] if as_json else []), *command)
        assert refused.exit_code == 5
        message = json.loads(refused.stderr)["error"]["message"] if as_json else refused.stderr
        assert "There is no entry 'ops/none'" in message
        assert "recall" not in message
        assert "memory list" in message
        assert "memory search" in message


def test_a_mistyped_workspace_says_so_and_is_not_a_wrong_password(app: Armarius, settings: Settings,
                                                                 team: Team) -> None:
    for password in (team.human_password, "wrong"):
        refused = human(settings, "--json", "memory", "list", workspace="alhpa", password=password)
        assert refused.exit_code == 5, refused.stderr
        error = json.loads(refused.stderr)["error"]
        assert (error["code"], error["details"]) == ("not_found", {"workspace": "alhpa"})
        assert "There is no workspace named 'alhpa'" in error["message"]
        assert "workspace list" in error["message"]
    wrong = human(settings, "--json", "memory", "list", password="wrong")
    assert json.loads(wrong.stderr)["error"]["code"] == "unauthenticated"


def test_the_network_login_keeps_an_unknown_workspace_and_a_wrong_password_alike(app: Armarius,
                                                                                 team: Team) -> None:
    refusals = []
    for workspace, password in (("alhpa", team.human_password), ("alpha", "wrong"), ("alhpa", "wrong")):
        with pytest.raises(Unauthenticated) as refused:
            app.directory.authenticate_password("alpha-human", password, workspace=workspace)
        refusals.append(refused.value.to_dict())
    assert refusals[0] == refusals[1] == refusals[2]
    assert "alhpa" not in json.dumps(refusals)
