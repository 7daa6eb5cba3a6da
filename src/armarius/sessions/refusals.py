"""The refusals sessions give, worded once (each says what to do next)."""

from __future__ import annotations

from armarius.errors import BudgetExhausted, NotFound, SessionBlocked, SessionClosed
from armarius.store import Row


def not_found(session_id: int) -> NotFound:
    return NotFound(f"You have no session {session_id} in this workspace.", agent_hint="sessions lists yours.",
                    session=session_id)


def taken_from(session_id: int, owner: str) -> NotFound:
    return NotFound(f"Session {session_id} was taken over by {owner}: it is theirs now, and no longer yours to see "
                    "or query.", agent_hint="Open a new session with session_open if you still need one.",
                    session=session_id, taken_over_by=owner)


def closed(session_id: int) -> SessionClosed:
    return SessionClosed(f"Session {session_id} is closed: its evidence stays readable, it takes no more queries.",
                         agent_hint="Open a new session with session_open for a new question.", session=session_id)


def blocked(row: Row) -> SessionBlocked:
    retry = row["retry_not_before"]
    return SessionBlocked(
        f"Session {row['id']} is blocked ({row['reason']}): a human must resume it"
        f"{', not before ' + retry if retry else ''}.",
        agent_hint="Tell the user; agents cannot resume a session.",
        session=row["id"], reason=row["reason"], retry_not_before=retry,
    )


def exhausted(row: Row, running: int) -> BudgetExhausted:
    return BudgetExhausted(
        f"Session {row['id']} has used its budget of {row['budget']} actions"
        f"{f' ({running} running)' if running else ''}. Ask a human to raise it, or close the session.",
        agent_hint="Summarize what you found so far for the user.",
        session=row["id"], budget=row["budget"], used=row["used"], running=running,
    )
