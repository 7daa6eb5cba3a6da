"""The error registry: every code documented, every code exercised by the suite."""

from __future__ import annotations

import re
from pathlib import Path

from armarius.errors import ERROR_CODES, ArmariusError, InternalError

DOC = Path(__file__).parents[1] / "docs" / "errors.md"


def documented_codes() -> dict[str, tuple[int, int]]:
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d+) \| (\d+) \|", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    return {code: (int(status), int(exit_code)) for code, status, exit_code in rows}


def test_every_code_is_documented_with_its_status_and_exit_code() -> None:
    registry = {code: (entry.http_status, entry.exit_code) for code, entry in ERROR_CODES.items()}
    assert documented_codes() == registry


def test_exit_codes_are_distinct_from_success_findings_and_usage() -> None:
    assert all(entry.exit_code not in (0, 1, 2) for entry in ERROR_CODES.values())


def test_the_internal_error_says_nothing_of_its_cause() -> None:
    error = InternalError()
    assert error.to_dict() == {"code": "internal", "message": error.message, "details": {}}
    assert isinstance(error, ArmariusError)
