"""JSON Schema checks for requests, with refusals that name the field and never echo a value.

Stricter than plain JSON Schema where it matters here: 1.0 is not an integer (numbers are used
as indexes and limits), text (and a field's name) must be valid Unicode (a lone surrogate cannot be
stored), and a request nests at most MAX_NESTING levels.

A :class:`Schema` checks twice over: a validator compiled to Python code (fastjsonschema, a fifth to a quarter
of the time) answers for the requests it reads exactly as the JSON Schema validator does, and only a
request it refuses, or one it might read otherwise, goes to the JSON Schema validator, whose verdict
and first error make the refusal. Where the two could differ it does not answer (see
:data:`_SAME_MEANING`, :func:`_shape`), so what is accepted is what the JSON Schema validator accepts.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator, ValidationError, validators

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


#: A list this long is given to the validators whatever the schema takes (a few milliseconds at most), so that
#: a short one is refused as they refuse it; only a longer one than any field takes is refused unread.
LIST_SLACK = 1000

#: The longest text a listing's filter takes.
FILTER_MAX = 200


def check_filter(q: Any) -> str | None:
    """A listing's text filter (``q``): None when blank, otherwise the text to find (case-insensitive)."""
    if q is None or (isinstance(q, str) and not q.strip()):
        return None
    if not isinstance(q, str) or len(q) > FILTER_MAX:
        raise InvalidInput(f"q is a text of up to {FILTER_MAX} characters to find.", field="q")
    return check_storable(q, "q").strip()


def ecmascript_ends(pattern: str) -> str:
    """``pattern`` with each ``$`` outside a character class made ``\\Z``: JSON Schema reads a pattern as
    ECMAScript does, where ``$`` (without the multiline flag) is only the end of the text, and Python's
    ``$`` also matches before a final newline (``^[a-z]+$`` took ``"alpha\\n"``)."""
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _pattern_of(pattern: str) -> re.Pattern[str]:
    return re.compile(ecmascript_ends(pattern))


def _pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    """JSON Schema's ``pattern``, its ``$`` read as JSON Schema (ECMAScript) reads it."""
    if validator.is_type(instance, "string") and not _pattern_of(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: JSON Schema 2020-12 as a published schema means it: the web API's bodies.
PublishedValidator = validators.extend(Draft202012Validator, validators={"pattern": _pattern})

#: The tools' requests: also, 1.0 is not an integer.
StrictValidator = validators.extend(
    PublishedValidator,
    type_checker=PublishedValidator.TYPE_CHECKER.redefine(
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


#: The keywords the schemas here use that mean the same to the compiled validator (drafts 4 to 7) as to
#: the JSON Schema validator (2020-12), for the values :func:`_shape` lets through. A schema with any other
#: keyword is checked by the JSON Schema validator alone.
_SAME_MEANING = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "uniqueItems",
    "minLength", "maxLength", "minimum", "maximum", "oneOf", "anyOf", "allOf", "not", "enum", "const",
    "description", "title", "examples", "$comment",
})


class Schema:
    """A request schema, its validators built once (``compiled=False``: the JSON Schema validator alone)."""

    def __init__(self, schema: Mapping[str, Any], *, compiled: bool = True) -> None:
        self.schema = dict(schema)
        self.strict = StrictValidator(self.schema)
        self._fast = (fastjsonschema.compile(self.schema, use_default=False, use_formats=False)
                      if compiled and _compilable(self.schema) else None)
        #: The most items any list of a valid request holds (None: some list of the schema is unbounded).
        self.longest_list = _longest_list(self.schema)

    @property
    def compiled(self) -> bool:
        """Whether the compiled validator answers for plain requests (see :data:`_SAME_MEANING`)."""
        return self._fast is not None

    def surely_valid(self, value: Mapping[str, Any]) -> bool:
        """True when the compiled validator accepts ``value`` (which :func:`_shape` found plain)."""
        if self._fast is None:
            return False
        try:
            self._fast(value)
        except fastjsonschema.JsonSchemaException:
            return False
        return True


def _compilable(node: Any) -> bool:
    """Whether every keyword of the schema is one of :data:`_SAME_MEANING`, with text for enum and const
    (the compiled validator takes True for 1 there) and a schema for items."""
    if isinstance(node, list):
        return all(_compilable(item) for item in node)
    if not isinstance(node, Mapping):
        return True
    return all(key in _SAME_MEANING and _compilable_value(key, item) for key, item in node.items())


def _compilable_value(key: str, item: Any) -> bool:
    if key == "items":  # a list of schemas means another thing in 2020-12
        return isinstance(item, Mapping) and _compilable(item)
    if key in ("enum", "const"):
        return all(isinstance(option, str) for option in (item if key == "enum" else [item]))
    if key == "properties":
        return all(_compilable(subschema) for subschema in item.values())
    return key in ("required", "description", "title", "examples", "$comment") or _compilable(item)


def check(schema: Schema, value: Mapping[str, Any], *, what: str) -> dict[str, Any]:
    """The value as a dict if it satisfies the schema; otherwise ``invalid_input``. What no field could take
    (nesting past MAX_NESTING; a list longer than any of the schema's, and than LIST_SLACK) is refused before
    a validator reads it, in time that does not grow with the list: validating a list item by item costs
    some 20 µs an item. A shorter list gets the validators' own refusal (its field's type, say)."""
    longest = None if schema.longest_list is None else max(schema.longest_list, LIST_SLACK)
    (field, rule), plain = _shape(value, longest)
    if rule == "nesting":
        raise InvalidInput(
            f"{field!r} of {what} nests objects and lists more than {MAX_NESTING} levels deep, which no field "
            "takes. Check the schema and call again.",
            field=field, rule=rule,
        )
    if rule == "maxItems":
        raise InvalidInput(
            f"{field!r} of {what} is a list longer than any field of {what} takes (at most {schema.longest_list} "
            "items). Check the schema and call again.",
            field=field, rule=rule,
        )
    if not (plain and schema.surely_valid(value)):
        _refuse_if_invalid(schema.strict, value, what)
    bad = _non_unicode_field(value)
    if bad is not None:
        raise InvalidInput(f"{bad!r} of {what} is not valid Unicode text (it holds a lone surrogate).",
                           field=bad, rule="unicode")
    return dict(value)


def _refuse_if_invalid(validator: Any, value: Mapping[str, Any], what: str) -> None:
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


def _refuse_unknown_field(error: Any, field: str, what: str) -> None:
    known = sorted(error.schema.get("properties", {}))
    unknown = sorted(key for key in error.instance if key not in known)[0]
    where = "" if field == "arguments" else f" in {field!r}"
    raise InvalidInput(
        f"{echo(unknown)} is not a field{where} of {what}; the fields are: {', '.join(known)}. "
        "Check the spelling and call again.",
        field=field, rule="additionalProperties", unknown=echo(unknown),
    )


def _longest_list(schema: Any) -> int | None:
    """The largest ``maxItems`` of the lists a value of ``schema`` may hold; None where a list of any length
    could be valid (an array without ``maxItems``, or a place that takes any value). With a ``type``, a
    schema's own keywords bound it (its ``oneOf``/``anyOf``/``allOf`` can only narrow that); without one,
    its branches do."""
    if not isinstance(schema, Mapping):
        return None if schema is True else 0  # the schemas true (anything) and false (nothing)
    kinds = schema.get("type")
    if {"enum", "const"} & schema.keys():
        return 0  # the values listed: a list among them is bounded, and no schema here lists one
    branches = [sub for key in ("oneOf", "anyOf", "allOf") for sub in schema.get(key, ())]
    if kinds is None and branches:
        found = [_longest_list(sub) for sub in branches]
        return None if None in found else max((bound for bound in found if bound is not None), default=0)
    kinds = [kinds] if isinstance(kinds, str) else kinds or ["array", "object"]  # no type: any kind
    parts: list[int | None] = []
    if "array" in kinds:
        if not isinstance(schema.get("maxItems"), int) or "items" not in schema:
            return None  # a list of any length, or of anything
        parts += [schema["maxItems"], _longest_list(schema["items"])]
    if "object" in kinds:
        if "additionalProperties" not in schema:
            return None  # any further field, holding anything
        parts += [_longest_list(schema["additionalProperties"]),
                  *(_longest_list(sub) for sub in schema.get("properties", {}).values())]
    return None if None in parts else max((part for part in parts if part is not None), default=0)


def _shape(value: Mapping[str, Any], longest: int | None = None) -> tuple[tuple[str | None, str | None], bool]:
    """(field, rule) of what no field could take, found without recursion and before any list is walked
    item by item, or (None, None): a value nested deeper than MAX_NESTING (the request is level 1, rule
    ``nesting``), a list longer than ``longest`` (rule ``maxItems``); and whether the value is plain:
    nothing the compiled validator reads otherwise than the JSON Schema validator (a float with an
    integral value, which it takes for an integer; a tuple, which it takes for an array; a mapping that is
    not a dict)."""
    plain = type(value) is dict
    stack: list[tuple[Any, int, str]] = [(item, 2, _field_name(key)) for key, item in value.items()]
    while stack:
        node, depth, field = stack.pop()
        if isinstance(node, Mapping | list):
            if depth > MAX_NESTING:
                return (field, "nesting"), False
            if longest is not None and isinstance(node, list) and len(node) > longest:
                return (field, "maxItems"), False
            plain = plain and type(node) in (dict, list)
            children = node.values() if isinstance(node, Mapping) else node
            stack += [(child, depth + 1, field) for child in children]
        elif isinstance(node, float | tuple):
            plain = plain and not (isinstance(node, tuple) or node.is_integer())
    return (None, None), plain


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
