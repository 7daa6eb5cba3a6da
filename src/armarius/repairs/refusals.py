"""The refusals repairs give, worded once (each says what to do next)."""

from __future__ import annotations

from typing import Any

from armarius.errors import Conflict, InvalidInput, NotFound, echo


def not_found(repair_id: int) -> NotFound:
    return NotFound(f"There is no repair {repair_id} that you may see in this workspace (a repair's id is the "
                    "one its proposal returned).", repair=repair_id)


def not_proposed(repair_id: int, status: str) -> Conflict:
    """A decision on a repair that is no longer waiting for one."""
    return Conflict(f"Repair {repair_id} is {status}, not proposed: it has been decided already "
                    "(repair-show shows how).", repair=repair_id, status=status)


def unknown_option(repair_id: int, option: Any, options: list[str]) -> InvalidInput:
    return InvalidInput(f"Repair {repair_id} has no option {echo(option)}; its options are {', '.join(options)}.",
                        field="option", repair=repair_id, options=options)


def target_moved(where: str, name: str, current: int, prepared: int) -> Conflict:
    return Conflict(f"{where}: {echo(name)} is at revision {current}, not {prepared}. Read its current content "
                    "(repair_target) and prepare the alternative against that.",
                    name=name, current_revision=current, prepared_revision=prepared)


def files_changed(problems: list[str]) -> Conflict:
    """Evidence files that differ from what was activated (or from the proposal's snapshot): a decision must
    never publish edits nobody reviewed."""
    return Conflict("Evidence files differ from their active revisions: " + "; ".join(problems) + ". Review and "
                    "activate those edits (armarius evidence) or restore the files, then try again.",
                    files=problems)
