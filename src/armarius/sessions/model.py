"""A research session's states, limits and checks (SPEC §4, §4.3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from armarius.errors import ConfigError, InvalidInput
from armarius.validation import check_storable

#: The longest subject (the question a session investigates), in characters.
SUBJECT_MAX = 2000
#: How long past a query's own time limit a reservation is kept for it before it counts as interrupted.
LEASE_MARGIN = timedelta(seconds=30)


class Status(StrEnum):
    OPEN = "open"
    BLOCKED = "blocked"
    CLOSED = "closed"


class Reason(StrEnum):
    RESEARCH_UNAVAILABLE = "research_unavailable"
    INVALID_REQUESTS = "invalid_requests"


class Event(StrEnum):
    """What a checkpoint records."""

    OPENED = "opened"
    BLOCKED = "blocked"
    RESUMED = "resumed"
    TAKEN_OVER = "taken_over"
    BUDGET_RAISED = "budget_raised"
    ENRICHED = "enriched"
    CLOSED = "closed"


class Reservation(StrEnum):
    RESERVED = "reserved"  # taken for a query that is running
    HELD = "held"  # kept for the query that a failed source interrupted, until the session is resumed
    CONSUMED = "consumed"  # spent: its evidence record was committed with it
    RELEASED = "released"  # given back: the query was refused, interrupted, or the session closed


@dataclass(frozen=True)
class SessionLimits:
    default_budget: int = 50
    max_budget: int = 500
    #: The most a human may raise a session's budget to.
    ceiling: int = 1_000_000
    retry_after: timedelta = timedelta(seconds=60)
    invalid_request_limit: int = 5

    def __post_init__(self) -> None:
        if self.default_budget > self.max_budget:
            raise ConfigError(
                f"sessions.default_budget ({self.default_budget}) is above sessions.max_budget ({self.max_budget}).",
                key="sessions.default_budget",
            )

    def opening_budget(self, requested: int | None) -> int:
        """The budget an agent gets when it opens a session asking for ``requested`` (or nothing)."""
        if requested is None:
            return self.default_budget
        if isinstance(requested, bool) or not isinstance(requested, int) or not 1 <= requested <= self.max_budget:
            raise InvalidInput(f"A session's budget is 1 to {self.max_budget} actions; a human may raise it later.",
                               field="budget", limit=self.max_budget)
        return requested


def check_subject(value: Any) -> str:
    """The question a session investigates: 1 to SUBJECT_MAX characters, no NUL or lone surrogate."""
    return _text(value, "subject", f"A session's subject is the question it investigates: 1 to {SUBJECT_MAX} "
                 "characters.")


def check_note(value: Any) -> str | None:
    """A human's optional note on a resume or close: up to SUBJECT_MAX characters."""
    if value is None:
        return None
    return _text(value, "note", f"A note is 1 to {SUBJECT_MAX} characters.")


def _text(value: Any, field: str, form: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > SUBJECT_MAX:
        raise InvalidInput(form, field=field)
    return check_storable(value, field)
