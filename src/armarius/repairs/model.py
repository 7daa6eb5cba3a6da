"""An archive repair's states, events and the checks of a proposal's form (SPEC §5, §8)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from armarius.errors import InvalidInput
from armarius.evidence.model import BODY_MAX_BYTES
from armarius.evidence.model import check_body as check_unit_body
from armarius.memory.model import MemoryLimits, check_body, check_slug, check_tags, check_title
from armarius.validation import check_storable

#: A proposal offers one to this many alternatives.
ALTERNATIVES_MAX = 5
#: The largest evidence unit body an alternative may carry, in bytes of UTF-8 (1 MB).
EVIDENCE_BODY_MAX = BODY_MAX_BYTES
#: The longest conflict description, rationale or human comment, in characters.
TEXT_MAX = 2000
#: A NUL or an unpaired surrogate: text no store or file keeps as given.
#: The keys an alternative may have.
_ALTERNATIVE_KEYS = {"target", "title", "body", "tags", "rationale"}


class Status(StrEnum):
    PROPOSED = "proposed"  # waiting for a human choice; nothing saved
    REJECTED = "rejected"  # all alternatives declined; reformulation required
    APPLYING = "applying"  # choice recorded; file write or recovery still required
    PENDING_ACTIVATION = "pending_activation"  # content saved; index activation incomplete
    ACTIVE = "active"  # the saved correction is the currently active revision
    SUPERSEDED = "superseded"  # the target was removed or changed after preparation or the saved correction


class Event(StrEnum):
    """What a repair event records; each is also the audit event ``repair.<event>``."""

    PROPOSED = "proposed"
    REJECTED = "rejected"
    REFORMULATION_REQUESTED = "reformulation_requested"
    APPLYING = "applying"
    APPLIED = "applied"
    PENDING_ACTIVATION = "pending_activation"
    ACTIVATED = "activated"
    ACTIVATION_DEFERRED = "activation_deferred"
    RETRIED = "retried"
    SUPERSEDED = "superseded"


class TargetKind(StrEnum):
    ENTRY = "entry"
    EVIDENCE = "evidence"


class Operation(StrEnum):
    """Follow-up work kept in ``pending_operations`` until it is done."""

    MIRROR_RECEIPT = "mirror_receipt"


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    name: str
    revision: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "name": self.name, "revision": self.revision}


@dataclass(frozen=True)
class Alternative:
    """One alternative as the agent gave it, its form checked (the target is checked against the store
    by the service). ``tags`` None: the entry keeps its tags."""

    target: Target
    title: str
    body: str
    tags: tuple[str, ...] | None
    rationale: str


def option_id(index: int) -> str:
    """The option id of the alternative at ``index`` (0-based): opt-1 … opt-5."""
    return f"opt-{index + 1}"


def check_text(value: Any, field: str, what: str, *, required: bool = True) -> str | None:
    """A conflict, rationale or comment: 1 to TEXT_MAX characters, no NUL or lone surrogate."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > TEXT_MAX:
        raise InvalidInput(f"{what} is 1 to {TEXT_MAX} characters.", field=field)
    return check_storable(value, field)


def check_alternatives(value: Any, limits: MemoryLimits) -> list[Alternative]:
    """One to ALTERNATIVES_MAX alternatives of the required form; bodies within their target's limit."""
    if not isinstance(value, list) or not 1 <= len(value) <= ALTERNATIVES_MAX:
        raise InvalidInput(f"A repair offers 1 to {ALTERNATIVES_MAX} alternatives, each a complete resulting "
                           "content for one entry or evidence unit.", field="alternatives",
                           limit=ALTERNATIVES_MAX)
    return [_alternative(item, index, limits) for index, item in enumerate(value)]


def _alternative(item: Any, index: int, limits: MemoryLimits) -> Alternative:
    where = f"alternatives[{index}]"
    if not isinstance(item, dict) or not {"target", "title", "body", "rationale"} <= set(item) \
            or not set(item) <= _ALTERNATIVE_KEYS:
        raise InvalidInput(f"{where} is {{target, title, body, tags (entries only, optional), rationale}}.",
                           field=where)
    target = _target(item["target"], where)
    try:
        title = check_title(item["title"])
        text = _text_body(item["body"])
        body = check_body(text, limits) if target.kind is TargetKind.ENTRY else check_unit_body(text)
        if item.get("tags") is not None and target.kind is TargetKind.EVIDENCE:
            raise InvalidInput("An evidence unit has no tags: leave them out.", field="tags")
        tags = None if item.get("tags") is None else check_tags(item["tags"])
    except InvalidInput as refusal:
        refusal.details["field"] = f"{where}.{refusal.details.get('field', 'value')}"
        raise
    rationale = check_text(item["rationale"], f"{where}.rationale", "A rationale says why this content is right: it")
    assert rationale is not None
    return Alternative(target, title, body, tags, rationale)


def _target(value: Any, where: str) -> Target:
    form = (f"{where}.target is {{kind: 'entry' or 'evidence', name: the entry's slug or the unit's name, "
            "revision: the revision you read}.")
    if not isinstance(value, dict) or set(value) != {"kind", "name", "revision"}:
        raise InvalidInput(form, field=f"{where}.target")
    revision = value["revision"]
    if value["kind"] not in set(TargetKind) or isinstance(revision, bool) or not isinstance(revision, int) \
            or not 1 <= revision < 2**63:
        raise InvalidInput(form, field=f"{where}.target")
    return Target(TargetKind(value["kind"]), check_slug(value["name"], f"{where}.target.name"), revision)


def _text_body(body: Any) -> str:
    """Text a file and both stores keep as given: no NUL, no unpaired surrogate."""
    if not isinstance(body, str):
        raise InvalidInput("The body is Markdown text.", field="body")
    return check_storable(body, "body")
