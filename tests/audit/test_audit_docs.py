"""docs/security.md's audit section describes the events the code records, and none as future work."""

from __future__ import annotations

import re
from pathlib import Path

import armarius

ROOT = Path(__file__).parents[2]
SOURCE = Path(armarius.__file__).parent


def audit_section() -> str:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    start = text.index("## The audit log")
    return text[start:text.index("\n## ", start + 1)]


def recorded_families() -> set[str]:
    """The families of every action the code appends (``memory`` of ``memory.created``)."""
    found = set()
    for path in SOURCE.rglob("*.py"):
        found |= set(re.findall(r'action="([a-z_]+)\.[a-z_.]+"', path.read_text(encoding="utf-8")))
    return found


def test_every_family_of_recorded_events_is_described() -> None:
    families = recorded_families()
    assert {"workspace", "principal", "token", "memory", "draft", "approval", "research", "login", "audit"} <= families
    section = audit_section().lower()
    assert [family for family in sorted(families) if family not in section] == []


def test_nothing_recorded_is_announced_for_a_later_release() -> None:
    sentences = [sentence for sentence in re.split(r"(?<=[.!?])\s+", audit_section().replace("\n", " "))
                 if "later release" in sentence]
    for sentence in sentences:
        assert [family for family in recorded_families() if family in sentence.lower()] == [], sentence


def test_every_finding_and_command_is_documented() -> None:
    section = audit_section()
    for text in ("BROKEN LINK", "BAD MAC", "UNKNOWN WORKSPACE", "ANCHOR NOT FOUND", "MALFORMED EVENT",
                 "UNREADABLE ANCHOR", "armarius audit anchor",
                 "--anchors", "--expect", "armarius audit rotate-key", "ARMARIUS_AUDIT_KEY", "login.failed",
                 "login.succeeded", "audit.sealed", "audit.key_rotated"):
        assert text in section, text
