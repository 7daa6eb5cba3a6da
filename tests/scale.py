"""How hard the reliability and security suites push, and what they did.

``--reliability-scale ci`` (the default, and what CI runs) keeps every run small enough for the CI
budget; ``--reliability-scale local`` pushes much harder (run it alone: ``pytest -m "reliability or
security" --reliability-scale local``). A test asks :func:`pick` for its numbers and :func:`record`s
what it really did (cases, kills, clients, rounds); the totals are printed at the end of the run.
"""

from __future__ import annotations

from collections import Counter

#: The scale of this run, set once from the command line by tests/conftest.py.
SCALE = {"name": "ci"}
#: What the suites did in this run, by what was counted ("MCP fuzz cases", "SIGKILLs", …).
COUNTS: Counter[str] = Counter()


def pick(*, ci: int, local: int) -> int:
    """The number for this run's scale."""
    return local if SCALE["name"] == "local" else ci


def record(what: str, count: int = 1) -> None:
    COUNTS[what] += count
