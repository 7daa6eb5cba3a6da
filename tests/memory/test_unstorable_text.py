"""Text no engine can store (a NUL, PostgreSQL's text cannot hold one; an unpaired surrogate, not Unicode)
is refused as ``invalid_input`` naming the field, wherever a caller's text is written, on both engines,
and nothing changes; so is a title that hides characters. A presented secret or fingerprint that is not
even ASCII simply does not match."""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Iterator
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.audit import chain
from armarius.auth.secrets import digests_match
from armarius.config import Settings
from armarius.errors import InvalidInput
from armarius.memory.service import RememberRequest
from armarius.web.pages.evidence import _TITLE as EVIDENCE_TITLE
from tests.helpers import Team, make_team

UNSTORABLE = ["a\x00b", "a\ud800b"]


@pytest.fixture
def team(app: Armarius) -> Team:
    return make_team(app)


def state(app: Armarius, team: Team) -> tuple[Any, ...]:
    with app.database.transaction(workspace_id=team.agent.workspace_id) as tx:
        entries = tx.all("SELECT slug, revision, title, body FROM entries ORDER BY slug")
        proposals = tx.all("SELECT id, status, decision_note FROM draft_proposals ORDER BY id")
    return entries, proposals, chain.tail(app.database, team.agent.workspace_id, 1)


@pytest.mark.parametrize("text", UNSTORABLE, ids=["nul", "surrogate"])
def test_unstorable_text_is_refused_in_every_written_field(app: Armarius, team: Team, text: str) -> None:
    app.memory.remember(team.agent, RememberRequest("ops/host", "Host", "On alpha-7."))
    proposal = app.drafts.propose(team.agent, {"slug": "notes/one", "title": "One", "text": "x"})["proposal"]
    session = app.sessions.open(team.agent, "Where does staging run?")["session"]
    before = state(app, team)
    attempts = {
        "body": lambda: app.memory.remember(team.agent, RememberRequest("ops/new", "New", text)),
        "reason": lambda: app.memory.remember(team.agent, RememberRequest(
            "ops/host", "Host", "On alpha-8.", reason=text)),
        "note": lambda: app.drafts.reject(team.human, proposal, text),
        "subject": lambda: app.sessions.open(team.agent, text),
    }
    for field, attempt in attempts.items():
        with pytest.raises(InvalidInput) as refused:
            attempt()
        assert refused.value.details["field"] == field
    with pytest.raises(InvalidInput):
        app.sessions.close(team.human, session, text)
    assert state(app, team) == before


#: Characters that show as nothing although Unicode classes them as letters, symbols or marks (the variation
#: selectors but the two that choose how an emoji shows).
BLANK_OR_IGNORED = ["\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u034f", "\u17b4", "\u17b5", "\u180b",
                    "\u180f", "\ufe00", "\ufe0d", "\U000e0100", "\U000e01ef"]


@pytest.mark.parametrize("char", BLANK_OR_IGNORED, ids=lambda char: f"U+{ord(char):04X}")
def test_a_title_that_hides_characters_is_refused_everywhere_a_title_is_written(app: Armarius, team: Team,
                                                                                  char: str) -> None:
    """A title alone, or a word of one, made of characters that show as nothing is refused as an entry's and an
    evidence unit's title, and the web API's published title pattern refuses it too; nothing is written."""
    app.memory.remember(team.agent, RememberRequest("ops/host", "Host", "On alpha-7."))
    before = state(app, team)
    for title in (char * 3, f"Staging{char}host"):
        with pytest.raises(InvalidInput) as refused:
            app.memory.remember(team.agent, RememberRequest("ops/new", title, "A body."))
        assert refused.value.details["field"] == "title"
        with pytest.raises(InvalidInput) as refused:
            app.evidence.create(team.human, "infra/host", title, "A body.\n")
        assert refused.value.details["field"] == "title"
        assert re.search(EVIDENCE_TITLE["not"]["pattern"], title), "the published pattern refuses it too"
    assert state(app, team) == before


def test_an_emoji_s_presentation_selector_is_no_hidden_character(app: Armarius, team: Team) -> None:
    written = app.memory.remember(team.agent, RememberRequest("ops/done", "\u2714\ufe0f Done", "All done."))
    assert written["status"] == "written"
    assert app.memory.read(team.agent, "ops/done")["title"] == "\u2714\ufe0f Done"
    assert not re.search(EVIDENCE_TITLE["not"]["pattern"], "\u2714\ufe0f Done")


def test_a_draft_rejection_note_is_bounded(app: Armarius, team: Team) -> None:
    proposal = app.drafts.propose(team.agent, {"slug": "notes/one", "title": "One", "text": "x"})["proposal"]
    before = state(app, team)
    with pytest.raises(InvalidInput) as refused:
        app.drafts.reject(team.human, proposal, "n" * 2001)
    assert refused.value.details["field"] == "note"
    assert state(app, team) == before
    assert app.drafts.reject(team.human, proposal, "  Not needed.  ")["status"] == "rejected"


def test_a_presented_value_that_is_not_ascii_does_not_match() -> None:
    assert digests_match("abc", "abc")
    assert not digests_match("abc", "äbc")
    assert not digests_match("abc", "a\ud800c")


def test_a_nul_in_a_lookup_is_refused_alike_on_both_engines(app: Armarius, team: Team) -> None:
    """Where a name is only looked up (a login, a workspace), PostgreSQL's driver cannot even send a NUL: the
    store refuses it as invalid input on both engines, never as a server failure."""
    with pytest.raises(InvalidInput):
        app.directory.authenticate_password("alpha-human\x00", "x", workspace="alpha")
    with pytest.raises(InvalidInput):
        app.directory.workspace("alpha\x00")


@pytest.mark.parametrize("text", UNSTORABLE, ids=["nul", "surrogate"])
@pytest.mark.parametrize("field", ["prefix", "tag", "after"])
def test_a_listing_filter_no_store_can_hold_is_refused_for_its_field(app: Armarius, team: Team, field: str,
                                                                     text: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        app.memory.list_entries(team.agent, **{field: text})
    assert refused.value.details["field"] == field


@pytest.mark.parametrize("limit", [True, 1.5, "5"])
def test_a_listing_limit_is_a_whole_number(app: Armarius, team: Team, limit: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        app.memory.list_entries(team.agent, limit=limit)
    assert refused.value.details["field"] == "limit"


def distinct_words(count: int, letters: int = 8) -> list[str]:
    """``count`` different words of ``letters`` lowercase latin letters."""
    return ["".join(string.ascii_lowercase[number // 26**place % 26] for place in range(letters))
            for number in range(count)]


@pytest.fixture
def roomy_app(settings: Settings) -> Iterator[Armarius]:
    """The app with memory.body_max_bytes at 2 MiB (configuration.md allows up to 16 MiB)."""
    application = open_app(dataclasses.replace(settings, memory_body_max_bytes=2 * 1024 * 1024))
    yield application
    application.close()


def test_a_body_whose_words_postgresql_cannot_index_is_refused_there(roomy_app: Armarius, settings: Settings) -> None:
    """A search vector (tsvector) holds at most 1 MiB, which about 630 KB of distinct words fill. On PostgreSQL a
    body of more distinct words than that is refused up front as ``invalid_input`` naming the body, and nothing
    is written; it used to be ``storage_unavailable``, whose "try again" would never succeed (the store's side:
    test_storage_contract). A word repeated any number of times costs little (it is indexed 255 times at most).
    SQLite indexes them all, as before."""
    app = roomy_app
    team = make_team(app)
    distinct = " ".join(distinct_words(115_000))  # 1 MiB
    repeated = "zz " * 300_000 + "end"

    def remember(slug: str, body: str) -> str:
        return str(app.memory.remember(team.agent, RememberRequest(slug, "Big", body, confirm_distinct=True,
                                                                   reason="a big body"))["status"])

    if settings.database_url is None:
        assert [remember("big/distinct", distinct), remember("big/repeated", repeated)] == ["written"] * 2
        return
    before = state(app, team)
    with pytest.raises(InvalidInput) as too_many:
        remember("big/distinct", distinct)
    assert too_many.value.details["field"] == "body"
    assert "split it into several entries" in too_many.value.message
    assert state(app, team) == before
    assert remember("big/repeated", repeated) == "written"
    assert remember("big/distinct", " ".join(distinct_words(60_000))) == "written"  # 540 KB: indexed
