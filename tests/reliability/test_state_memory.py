"""Memory as a state machine, on both engines: an agent remembers (through its MCP tools), a human
curates, uncurates and reverts (through the service), and after every step the store must equal a
small model of each entry: its revisions, which of them overrode a curation, the curated revision,
the revision a review is against, and whether it needs review.

What the model pins down (SPEC §2): a curated entry never changes without ``override_curated`` and a
reason; an override drops the curated mark and puts the entry under needs review until a human
curates again; curation marks exactly the revision the human read; a revert writes the curated
content as a new, curated revision; the history keeps every revision; recall finds a unique word of
an entry's current content, and never one only its older revisions hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant

from armarius.app import Armarius
from armarius.errors import Conflict, NotFound
from tests.helpers import Team
from tests.reliability.machines import CountedMachine, SyncAgent, fresh_team, machine_settings, run_machine, step

pytestmark = pytest.mark.reliability

SLUGS = ("notes/alpha", "ops/gamma")
TITLES = ("Deploy notes", "Staging host", "Rollback steps")
SENTENCE = "The staging host runs the deploy behind the office network"
OBSERVED = "I just observed the opposite"
#: Tags as an agent sends them (None: keep the entry's tags); stored sorted and without repeats.
TAGS: tuple[list[str] | None, ...] = (None, [], ["ops"], ["infra", "ops", "ops"])


@dataclass(frozen=True)
class Content:
    title: str
    body: str
    tags: tuple[str, ...]


@dataclass
class EntryModel:
    """One entry as the model sees it: revision n is ``history[n - 1]``."""

    history: list[Content]
    overrode: list[bool]
    curated_revision: int | None = None
    #: The revision a review and a revert are against: the last one a human curated (kept by uncurate).
    review_base: int | None = None
    needs_review: bool = False

    @property
    def revision(self) -> int:
        return len(self.history)

    @property
    def curated(self) -> bool:
        return self.curated_revision == self.revision

    def write(self, content: Content, *, overrode: bool) -> None:
        self.history.append(content)
        self.overrode.append(overrode)


def marker(number: int) -> str:
    """A word of letters only, unique to one written body (no other body and no title holds it)."""
    letters = ""
    while True:
        number, digit = divmod(number, 26)
        letters += chr(ord("a") + digit)
        if not number:
            return "zq" + letters


@dataclass
class Memory:
    entries: dict[str, EntryModel] = field(default_factory=dict)
    #: Every marker written so far.
    markers: list[str] = field(default_factory=list)

    def holders(self, word: str) -> set[str]:
        """The entries whose current content holds ``word``: what recall must find."""
        return {slug for slug, entry in self.entries.items() if word in entry.history[-1].body.split()}


class MemoryMachine(CountedMachine):
    app: Armarius

    def __init__(self) -> None:
        super().__init__()
        self.team: Team = fresh_team(self.app, "mem")
        self.agent = SyncAgent(self.app, self.team.agent, self.resources)
        self.model = Memory()

    # Agent steps (MCP tools) -------------------------------------------------------------------

    @step(slug=st.sampled_from(SLUGS), title=st.sampled_from(TITLES), tags=st.sampled_from(TAGS),
          same=st.booleans(), expected=st.sampled_from(["none", "none", "current", "stale"]))
    def remember(self, slug: str, title: str, tags: list[str] | None, same: bool, expected: str) -> None:
        self.write(slug, title, tags, same=same, expected=expected, override=False, reason="noted")

    @step(slug=st.sampled_from(SLUGS), title=st.sampled_from(TITLES), tags=st.sampled_from(TAGS),
          same=st.booleans(), reason=st.sampled_from([OBSERVED, OBSERVED, OBSERVED, None, "   "]))
    def override(self, slug: str, title: str, tags: list[str] | None, same: bool, reason: str | None) -> None:
        """remember with override_curated: true (and a reason, or none: refused whatever the entry)."""
        self.write(slug, title, tags, same=same, expected="none", override=True, reason=reason)

    def write(self, slug: str, title: str, tags: list[str] | None, *, same: bool, expected: str, override: bool,
              reason: str | None) -> None:
        entry = self.model.entries.get(slug)
        current = 0 if entry is None else entry.revision
        if same and entry is not None:  # exactly the current content again
            content = entry.history[-1]
            arguments: dict[str, Any] = {"title": content.title, "body": content.body, "tags": list(content.tags)}
        else:
            word = marker(len(self.model.markers))
            self.model.markers.append(word)
            kept = () if entry is None else entry.history[-1].tags
            content = Content(title, f"{SENTENCE} {word}", kept if tags is None else tuple(sorted(set(tags))))
            arguments = {"title": title, "body": content.body, **({} if tags is None else {"tags": tags})}
        if expected != "none":
            arguments["expected_revision"] = current if expected == "current" else current + 1
        if reason is not None:
            arguments["reason"] = reason
        answer = self.agent("remember", slug=slug, override_curated=override, confirm_distinct=entry is None,
                            **arguments)

        if not (reason or "").strip():
            assert answer["error"] == "reason_required", answer
        elif expected == "stale":
            assert answer["error"] == "conflict", answer
            assert answer["details"]["current_revision"] == current
        elif entry is None:
            assert (answer["status"], answer["revision"], answer["created"]) == ("written", 1, True), answer
            self.model.entries[slug] = EntryModel([content], [False])
        elif entry.curated and not override:
            assert (answer["status"], answer["code"], answer["written"]) == ("judgment_required", "curated_entry",
                                                                             False), answer
        elif content == entry.history[-1]:
            assert (answer["status"], answer["revision"]) == ("unchanged", current), answer
        else:
            assert (answer["status"], answer["revision"]) == ("written", current + 1), answer
            overriding = entry.curated
            entry.write(content, overrode=overriding)
            entry.needs_review = entry.needs_review or overriding
            assert answer.get("needs_review", False) is entry.needs_review

    @step(number=st.integers(min_value=0))
    def recall(self, number: int) -> None:
        """A unique word of a body written earlier: found by words exactly in the entries whose current content
        holds it (recall by meaning may add others)."""
        if not self.model.markers:
            return
        word = self.model.markers[number % len(self.model.markers)]
        answer = self.agent("recall", query=word, limit=50)
        by_words = {result["slug"] for result in answer["results"] if "lexical" in result["ranked_by"]}
        assert by_words == self.model.holders(word), (word, answer)
        for result in answer["results"]:
            entry = self.model.entries[result["slug"]]
            assert (result["revision"], result["curated"]) == (entry.revision, entry.curated), result

    @step(slug=st.sampled_from(SLUGS), number=st.integers(min_value=1))
    def read_a_revision(self, slug: str, number: int) -> None:
        entry = self.model.entries.get(slug)
        if entry is None:
            assert self.agent("read", slug=slug)["error"] == "not_found"
            return
        revision = 1 + (number - 1) % entry.revision
        answer = self.agent("read", slug=slug, revision=revision)
        old = entry.history[revision - 1]
        assert (answer["title"], answer["body"], tuple(answer["tags"])) == (old.title, old.body, old.tags)
        assert (answer["revision"], answer["current_revision"]) == (revision, entry.revision)
        assert answer["curated"] is (entry.curated_revision == revision)

    # Human steps (the service, as the CLI and the web pages call it) ---------------------------

    @step(slug=st.sampled_from(SLUGS), stale=st.sampled_from([False, False, True]))
    def curate(self, slug: str, stale: bool) -> None:
        entry = self.model.entries.get(slug)
        if entry is None:
            with pytest.raises(NotFound):
                self.app.memory.curate(self.team.human, slug, 1)
            return
        if stale and entry.revision > 1:  # what the human read is not the current revision any more
            with pytest.raises(Conflict):
                self.app.memory.curate(self.team.human, slug, entry.revision - 1)
            return
        answer = self.app.memory.curate(self.team.human, slug, entry.revision)
        assert answer["changed"] is not entry.curated
        entry.curated_revision = entry.review_base = entry.revision
        entry.needs_review = False

    @step(slug=st.sampled_from(SLUGS))
    def uncurate(self, slug: str) -> None:
        entry = self.model.entries.get(slug)
        if entry is None:
            with pytest.raises(NotFound):
                self.app.memory.uncurate(self.team.human, slug)
            return
        answer = self.app.memory.uncurate(self.team.human, slug)
        assert answer["changed"] is (entry.curated_revision is not None)
        entry.curated_revision = None

    @step(slug=st.sampled_from(SLUGS))
    def revert_to_curated(self, slug: str) -> None:
        entry = self.model.entries.get(slug)
        if entry is None or entry.review_base is None:
            with pytest.raises(NotFound):
                self.app.memory.revert_to_curated(self.team.human, slug, "back to what was reviewed")
            return
        answer = self.app.memory.revert_to_curated(self.team.human, slug, "back to what was reviewed")
        if entry.curated:
            assert (answer["changed"], answer["revision"]) == (False, entry.revision)
            return
        assert (answer["changed"], answer["revision"], answer["reverted_to"]) == (
            True, entry.revision + 1, entry.review_base)
        entry.write(entry.history[entry.review_base - 1], overrode=False)
        entry.curated_revision = entry.review_base = entry.revision
        entry.needs_review = False

    # After every step ----------------------------------------------------------------------------

    @invariant()
    def every_entry_is_as_the_model_says(self) -> None:
        human, memory = self.team.human, self.app.memory
        for slug, entry in self.model.entries.items():
            stored = memory.read(human, slug)
            content = entry.history[-1]
            assert (stored["title"], stored["body"], tuple(stored["tags"])) == (
                content.title, content.body, content.tags), slug
            assert (stored["revision"], stored["curated"], stored["curated_revision"], stored["needs_review"]) == (
                entry.revision, entry.curated, entry.curated_revision, entry.needs_review), slug
            history = memory.history(human, slug)
            assert [item["revision"] for item in history["revisions"]] == list(range(1, entry.revision + 1))
            # A revision written over a curation is exactly one that overrode it: never a silent change.
            assert [item["overrode_curated"] for item in history["revisions"]] == entry.overrode, slug
        listed = memory.list_entries(human, limit=50)["entries"]
        assert sorted(item["slug"] for item in listed) == sorted(self.model.entries)
        review = {item["slug"] for item in memory.list_entries(human, needs_review=True)["entries"]}
        assert review == {slug for slug, entry in self.model.entries.items() if entry.needs_review}

    @invariant()
    def the_curated_revision_keeps_the_content_curated(self) -> None:
        """What a human curated is still in the history, unchanged, at its revision."""
        for slug, entry in self.model.entries.items():
            if entry.curated_revision is not None:
                stored = self.app.memory.read(self.team.human, slug, revision=entry.curated_revision)
                curated = entry.history[entry.curated_revision - 1]
                assert (stored["title"], stored["body"], tuple(stored["tags"])) == (
                    curated.title, curated.body, curated.tags), slug


def test_memory_state_machine(app: Armarius) -> None:
    run_machine(MemoryMachine, machine_settings(examples=(10, 200), steps=(40, 80)), app=app)
