"""JSON Schema checks for requests, with refusals that name the field and never echo a value.

Stricter than plain JSON Schema where it matters here: 1.0 is not an integer (numbers are used
as indexes and limits), text (and a field's name) must be valid Unicode (a lone surrogate cannot be
stored), and a request nests at most MAX_NESTING levels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator, validators

from armarius.errors import InvalidInput, echo

#: The largest integer a request may carry: what SQLite, PostgreSQL's BIGINT and the database
#: drivers all hold. Every integer in a request schema has a maximum of at most this.
INT64_MAX = 2**63 - 1

#: How deeply a request may nest objects and lists (the request itself is level 1). The schemas need
#: a handful of levels; a deeper value is refused before a validator repeats it in a message, which
#: for a value a thousand levels deep recurses past the interpreter's limit.
MAX_NESTING = 64

#: What no stored text may hold: NUL (PostgreSQL's text cannot) and unpaired surrogates (not Unicode).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_storable(value: str, field: str) -> str:
    """``value`` if the store can hold it on every engine; otherwise ``invalid_input`` naming the field."""
    if _UNSTORABLE.search(value):
        raise InvalidInput(f"The {field} contains a NUL character or an unpaired surrogate, which cannot be stored.",
                           field=field)
    return value


#: The longest text a listing's filter takes.
FILTER_MAX = 200


def check_filter(q: Any) -> str | None:
    """A listing's text filter (``q``): None when blank, otherwise the text to find (case-insensitive)."""
    if q is None or (isinstance(q, str) and not q.strip()):
        return None
    if not isinstance(q, str) or len(q) > FILTER_MAX:
        raise InvalidInput(f"q is a text of up to {FILTER_MAX} characters to find.", field="q")
    return check_storable(q, "q").strip()


StrictValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


def inline_refs(node: Any, definitions: Mapping[str, Any]) -> Any:
    """``node`` with every local ``{"$ref": "#/$defs/name"}`` replaced by that definition (merged with
    the keywords beside it). Same meaning, and about twice as fast to validate against; the schemas
    here are not recursive."""
    if isinstance(node, list):
        return [inline_refs(item, definitions) for item in node]
    if not isinstance(node, Mapping):
        return node
    merged: dict[str, Any] = {}
    if "$ref" in node:
        merged.update(inline_refs(definitions[node["$ref"].removeprefix("#/$defs/")], definitions))
    merged.update({key: inline_refs(value, definitions) for key, value in node.items() if key != "$ref"})
    return merged


def check(validator: Any, value: Mapping[str, Any], *, what: str) -> dict[str, Any]:
    """The value as a dict if it satisfies the validator's schema; otherwise ``invalid_input``."""
    deep = _too_deep(value)
    if deep is not None:
        raise InvalidInput(
            f"{deep!r} of {what} nests objects and lists more than {MAX_NESTING} levels deep, which no field "
            "takes. Check the schema and call again.",
            field=deep, rule="nesting",
        )
    # The first error in path order; at one path an unknown field first (a misspelled required field
    # is both unknown and missing, and its spelling is the thing to fix).
    error = min(validator.iter_errors(value),
                key=lambda e: (list(e.absolute_path), e.validator != "additionalProperties"), default=None)
    if error is not None:
        field = ".".join(str(part) for part in error.absolute_path) or "arguments"
        if error.validator == "additionalProperties":
            _refuse_unknown_field(error, field, what)
        raise InvalidInput(
            f"{field!r} of {what} is invalid ({_explain(error.validator, error.validator_value)}). "
            "Check the schema and call again.",
            field=field, rule=str(error.validator),
        )
    bad = _non_unicode_field(value)
    if bad is not None:
        raise InvalidInput(f"{bad!r} of {what} is not valid Unicode text (it holds a lone surrogate).",
                           field=bad, rule="unicode")
    return dict(value)


def _refuse_unknown_field(error: Any, field: str, what: str) -> None:
    known = sorted(error.schema.get("properties", {}))
    unknown = sorted(key for key in error.instance if key not in known)[0]
    where = "" if field == "arguments" else f" in {field!r}"
    raise InvalidInput(
        f"{echo(unknown)} is not a field{where} of {what}; the fields are: {', '.join(known)}. "
        "Check the spelling and call again.",
        field=field, rule="additionalProperties", unknown=echo(unknown),
    )


def _too_deep(value: Mapping[str, Any]) -> str | None:
    """The field whose value nests deeper than MAX_NESTING (the request is level 1), found without
    recursion; None if none does."""
    stack: list[tuple[Any, int, str]] = [(item, 2, _field_name(key)) for key, item in value.items()]
    while stack:
        node, depth, field = stack.pop()
        if isinstance(node, Mapping | list):
            if depth > MAX_NESTING:
                return field
            children = node.values() if isinstance(node, Mapping) else node
            stack += [(child, depth + 1, field) for child in children]
    return None


def _field_name(key: Any) -> str:
    """A field's name as a refusal names it: a lone surrogate escaped (``\\ud800``), so that the
    answer can be written as JSON."""
    return str(key).encode("utf-8", "backslashreplace").decode("utf-8")


def _non_unicode_field(value: Any, path: str = "") -> str | None:
    """The first field (by its path) whose name or text holds a lone surrogate; None if none does."""
    if isinstance(value, str):
        return None if _is_unicode(value) else path or "arguments"
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)  # type: ignore[assignment]
    else:
        return None
    for key, item in items:
        field = f"{path}.{_field_name(key)}" if path else _field_name(key)
        if isinstance(key, str) and not _is_unicode(key):
            return field
        found = _non_unicode_field(item, field)
        if found is not None:
            return found
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _explain(rule: Any, expected: Any) -> str:
    if rule == "required":
        return f"required: {', '.join(expected)}"
    if rule in ("type", "enum", "const", "pattern", "minLength", "maxLength", "minimum", "maximum", "maxItems"):
        return f"{rule} {expected!r}"
    if rule == "oneOf" and all(set(option) == {"required"} and len(option["required"]) == 1 for option in expected):
        return f"give exactly one of: {', '.join(option['required'][0] for option in expected)}"
    return f"fails {rule}"
