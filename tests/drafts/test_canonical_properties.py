"""Canonical JSON and the draft fingerprint, pinned (SPEC §3).

The fingerprint an approval binds is the SHA-256 of the canonical JSON of
``{kind: "create_draft", slug, title, text}``: sorted keys, compact separators, UTF-8 without
escaping, no NaN or Infinity. It must not depend on the order the keys arrived in or on the
formatting of the JSON document they came in; it must change with any change of any field (one
character, its case, an invisible character, a trailing space, Unicode normalization) and with the
action kind; and a proposal is exactly three strings, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import unicodedata
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from armarius.canonical import canonical_json, canonical_sha256
from armarius.drafts.model import DRAFT_KIND, PAYLOAD_KEYS, DraftPayload, approval_fingerprint, parse_payload
from armarius.errors import InvalidInput

PROPERTIES = hypothesis_settings(max_examples=300, deadline=None)
TEXT_MAX_BYTES = 64 * 1024
KEYS = sorted(PAYLOAD_KEYS)
ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]

# Strategies ------------------------------------------------------------------------------------

#: Any character parse_payload accepts: everything but NUL and lone surrogates.
characters = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
slugs = st.lists(st.lists(st.text(ALNUM, min_size=1, max_size=8), min_size=1, max_size=3).map("-".join),
                 min_size=1, max_size=3).map("/".join)
#: A title as a proposal may have it: not blank, no white space at its ends.
titles = st.text(characters, min_size=1, max_size=80).filter(lambda title: title.strip() == title != "")
texts = st.text(characters, max_size=400)
payloads = st.fixed_dictionaries({"slug": slugs, "title": titles, "text": texts})

json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                | st.text(st.characters(exclude_categories=["Cs"])))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
non_strings = (st.integers() | st.none() | st.booleans() | st.floats() | st.binary(max_size=4)
               | st.lists(st.text(max_size=4), max_size=3) | st.dictionaries(st.text(max_size=4), st.text(max_size=4),
                                                                             max_size=3))


def reordered(value: Any, shuffle: random.Random) -> Any:
    """The same JSON value with the insertion order of every dict in it shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        shuffle.shuffle(items)
        return {key: reordered(item, shuffle) for key, item in items}
    if isinstance(value, list):
        return [reordered(item, shuffle) for item in value]
    return value


def planted(value: Any, bad: float, shuffle: random.Random) -> Any:
    """The JSON value with bad added somewhere inside it, at a random depth."""
    if isinstance(value, list) and value and shuffle.random() < 0.7:
        at = shuffle.randrange(len(value))
        return [*value[:at], planted(value[at], bad, shuffle), *value[at + 1:]]
    if isinstance(value, dict) and value and shuffle.random() < 0.7:
        key = shuffle.choice(sorted(value))
        return {**value, key: planted(value[key], bad, shuffle)}
    if isinstance(value, dict):
        return {**value, "\uffff": bad}
    return [value, bad] if shuffle.random() < 0.5 else [bad, value]


def fingerprint(payload: dict[str, str]) -> str:
    return DraftPayload(**payload).fingerprint


# Exact bytes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ({"b": 1, "a": [1, 2.5, None, True, False], "é": "ü"}, '{"a":[1,2.5,null,true,false],"b":1,"é":"ü"}'),
    ({"s": "🙂 zero\u200bwidth"}, '{"s":"🙂 zero\u200bwidth"}'),
    ({"t": 'a"b\\c\n\t\x01\x7f\u2028/'}, '{"t":"a\\"b\\\\c\\n\\t\\u0001\x7f\u2028/"}'),
    # Keys sort by code point (not by UTF-16 unit: U+FF61 before U+1F600).
    ({"b": 1, "B": 2, "é": 3, "z": 4, "\uff61": 5, "\U0001f600": 6}, '{"B":2,"b":1,"z":4,"é":3,"\uff61":5,"😀":6}'),
    ({"n": [1.0, -0.0, 1e100, 10**30, 0.1]}, '{"n":[1.0,-0.0,1e+100,1000000000000000000000000000000,0.1]}'),
    ({"nested": {"y": {}, "x": []}}, '{"nested":{"x":[],"y":{}}}'),
])
def test_canonical_json_exact_form(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected
    assert canonical_sha256(value) == hashlib.sha256(expected.encode("utf-8")).hexdigest()


def test_exact_bytes_of_a_draft_fingerprint() -> None:
    payload = DraftPayload(slug="deploy/staging", title="Staging 🙂", text="Grüße\nline two")
    exact = (b'{"kind":"create_draft","slug":"deploy/staging","text":"Gr\xc3\xbc\xc3\x9fe\\nline two",'
             b'"title":"Staging \xf0\x9f\x99\x82"}')
    assert canonical_json({"kind": DRAFT_KIND, **payload.to_dict()}).encode("utf-8") == exact
    assert payload.fingerprint == hashlib.sha256(exact).hexdigest()
    # Pinned: a change of canonical form would silently void every approval issued before it.
    assert payload.fingerprint == "8c8d89a8c072526dbbf4dc5ea9f27c7b7dcdae94c8dac42bd45be9fc523dbd93"


@given(payloads)
@PROPERTIES
def test_fingerprint_is_sha256_of_the_canonical_form(payload: dict[str, str]) -> None:
    document = canonical_json({"kind": DRAFT_KIND, **payload})
    assert json.loads(document) == {"kind": DRAFT_KIND, **payload}
    assert "\n" not in document.replace("\\n", "")
    assert list(json.loads(document)) == ["kind", "slug", "text", "title"]
    assert fingerprint(payload) == approval_fingerprint(DRAFT_KIND, payload) == hashlib.sha256(
        document.encode("utf-8")).hexdigest()
    # Unescaped: a non-ASCII character is its own UTF-8 bytes, never a \u escape.
    for char in set(payload["title"] + payload["text"]):
        if ord(char) >= 0x80:
            assert char in document


# Stable under key order and formatting ----------------------------------------------------------


@given(payloads, st.permutations(KEYS), st.permutations(KEYS))
@PROPERTIES
def test_fingerprint_ignores_key_order(payload: dict[str, str], first: list[str], second: list[str]) -> None:
    one, other = {key: payload[key] for key in first}, {key: payload[key] for key in second}
    expected = fingerprint(payload)
    assert approval_fingerprint(DRAFT_KIND, one) == approval_fingerprint(DRAFT_KIND, other) == expected
    assert parse_payload(one, text_max_bytes=TEXT_MAX_BYTES).fingerprint == expected
    assert canonical_json(one) == canonical_json(other)


@given(json_values, st.randoms(use_true_random=False))
@PROPERTIES
def test_canonical_json_ignores_key_order_at_every_depth(value: Any, shuffle: random.Random) -> None:
    again = reordered(value, shuffle)
    assert canonical_json(again) == canonical_json(value)
    assert canonical_sha256(again) == canonical_sha256(value)


@given(json_values)
@PROPERTIES
def test_canonical_json_round_trips(value: Any) -> None:
    document = canonical_json(value)
    assert canonical_json(json.loads(document)) == document


@given(payloads, st.permutations(KEYS), st.sampled_from([None, 0, 1, 2, "\t", "\n"]),
       st.sampled_from([None, (",", ":"), (", ", ": "), (" ,\n", " :\t")]), st.booleans(),
       st.sampled_from(["", " ", "\n", "\r\n\t "]))
@PROPERTIES
def test_fingerprint_ignores_the_formatting_of_the_json_it_came_in(
        payload: dict[str, str], order: list[str], indent: int | str | None, separators: tuple[str, str] | None,
        ensure_ascii: bool, padding: str) -> None:
    document = json.dumps({key: payload[key] for key in order}, indent=indent, separators=separators,
                          ensure_ascii=ensure_ascii)
    received = json.loads(padding + document + padding)
    assert parse_payload(received, text_max_bytes=TEXT_MAX_BYTES).fingerprint == fingerprint(payload)
    assert canonical_json(received) == canonical_json(payload)


@given(payloads)
@PROPERTIES
def test_parse_payload_keeps_the_strings_as_given(payload: dict[str, str]) -> None:
    parsed = parse_payload(payload, text_max_bytes=TEXT_MAX_BYTES)
    assert parsed.to_dict() == payload
    assert parsed.fingerprint == fingerprint(payload)


# Any change is another payload ------------------------------------------------------------------


@st.composite
def changed(draw: st.DrawFn, original: str) -> str:
    """original with one character replaced, appended, removed, case-swapped, or a zero-width one inserted."""
    how = draw(st.sampled_from(["replace", "append", "remove", "case", "zero-width"]))
    cased = [index for index, char in enumerate(original) if char.swapcase() != char]
    if (how in ("replace", "remove") and not original) or (how == "case" and not cased):
        how = "append"
    if how == "append":
        result = original + draw(characters)
    elif how == "zero-width":
        at = draw(st.integers(0, len(original)))
        result = original[:at] + draw(st.sampled_from(ZERO_WIDTH)) + original[at:]
    elif how == "case":
        at = draw(st.sampled_from(cased))
        result = original[:at] + original[at].swapcase() + original[at + 1:]
    else:
        at = draw(st.integers(0, len(original) - 1))
        other = "" if how == "remove" else draw(characters.filter(lambda char: char != original[at]))
        result = original[:at] + other + original[at + 1:]
    return result


@given(payloads, st.sampled_from(KEYS), st.data())
@PROPERTIES
def test_any_change_of_any_field_changes_the_fingerprint(payload: dict[str, str], key: str,
                                                         data: st.DataObject) -> None:
    mutated = {**payload, key: data.draw(changed(payload[key]), label="changed")}
    assert mutated[key] != payload[key]
    assert fingerprint(mutated) != fingerprint(payload)
    assert approval_fingerprint(DRAFT_KIND, mutated) != approval_fingerprint(DRAFT_KIND, payload)


@pytest.mark.parametrize(("key", "before", "after"), [
    ("slug", "deploy/staging", "deploy/stagin"),
    ("slug", "deploy/staging", "deploy/staging-"),
    ("title", "Staging server", "Staging Server"),
    ("title", "Staging server", "Staging server "),
    ("title", "Staging server", "Staging \u200bserver"),
    ("text", "line one\nline two\n", "line one\nline 2\n"),
    ("text", "line one\nline two\n", "line one\nline two"),
    ("text", "line one\nline two\n", "line one\r\nline two\n"),
    ("text", "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")),
    ("text", "rm -rf ./build", "rm -rf \u202e./build"),
    ("text", "paypal", "p\u0430ypal"),  # Cyrillic a
])
def test_known_small_changes_change_the_fingerprint(key: str, before: str, after: str) -> None:
    base = {"slug": "deploy/staging", "title": "Staging server", "text": "line one\nline two\n"}
    one, other = {**base, key: before}, {**base, key: after}
    assert fingerprint(one) != fingerprint(other)


@given(payloads)
@example({"slug": "a", "title": "same", "text": "same"})
@PROPERTIES
def test_moving_content_between_fields_changes_the_fingerprint(payload: dict[str, str]) -> None:
    swapped = {**payload, "title": payload["text"], "text": payload["title"]}
    assert (fingerprint(swapped) == fingerprint(payload)) is (payload["title"] == payload["text"])


@given(payloads, st.text(max_size=20).filter(lambda kind: kind != DRAFT_KIND))
@example({"slug": "a", "title": "t", "text": ""}, "other_kind")
@example({"slug": "a", "title": "t", "text": ""}, "Create_draft")
@example({"slug": "a", "title": "t", "text": ""}, "create_draft ")
@PROPERTIES
def test_the_action_kind_is_bound(payload: dict[str, str], kind: str) -> None:
    assert approval_fingerprint(kind, payload) != approval_fingerprint(DRAFT_KIND, payload) == fingerprint(payload)


@given(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=4),
       st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=4))
@PROPERTIES
def test_canonical_json_is_equal_exactly_for_equal_string_maps(one: dict[str, str], other: dict[str, str]) -> None:
    assert (canonical_json(one) == canonical_json(other)) is (one == other)
    assert (canonical_sha256(one) == canonical_sha256(other)) is (one == other)


# Refused -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("wrap", [
    lambda bad: bad, lambda bad: [1, bad], lambda bad: {"a": bad}, lambda bad: {"a": [{"b": [bad]}]},
])
def test_canonical_json_rejects_nan_and_infinity(bad: float, wrap: Any) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        canonical_json(wrap(bad))
    with pytest.raises(ValueError, match="JSON compliant"):
        canonical_sha256(wrap(bad))


@given(json_values, st.sampled_from([math.nan, -math.nan, math.inf, -math.inf]), st.randoms(use_true_random=False))
@PROPERTIES
def test_nan_or_infinity_anywhere_is_rejected(value: Any, bad: float, shuffle: random.Random) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        canonical_json(planted(value, bad, shuffle))
    with pytest.raises(ValueError, match="JSON compliant"):
        approval_fingerprint(DRAFT_KIND, {"slug": "a", "title": "t", "text": bad})  # type: ignore[dict-item]


@given(payloads, st.sampled_from(KEYS), non_strings)
@PROPERTIES
def test_parse_payload_rejects_non_string_values(payload: dict[str, str], key: str, bad: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_payload({**payload, key: bad}, text_max_bytes=TEXT_MAX_BYTES)
    assert refused.value.details["field"] == key


@given(payloads, st.text(max_size=10).filter(lambda key: key not in PAYLOAD_KEYS), json_values)
@example({"slug": "a", "title": "t", "text": ""}, "kind", DRAFT_KIND)
@PROPERTIES
def test_parse_payload_rejects_extra_keys(payload: dict[str, str], extra: str, value: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_payload({**payload, extra: value}, text_max_bytes=TEXT_MAX_BYTES)
    assert refused.value.details["field"] == "proposal"


@given(payloads, st.sets(st.sampled_from(KEYS), min_size=1))
@PROPERTIES
def test_parse_payload_rejects_missing_keys(payload: dict[str, str], missing: set[str]) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_payload({key: value for key, value in payload.items() if key not in missing},
                      text_max_bytes=TEXT_MAX_BYTES)
    assert refused.value.details["field"] == "proposal"


@pytest.mark.parametrize("proposal", [None, "slug", 1, 1.5, True, [], [("slug", "a")], ("a", "t", "x"), b"{}"])
def test_parse_payload_rejects_what_is_not_a_mapping(proposal: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_payload(proposal, text_max_bytes=TEXT_MAX_BYTES)
    assert refused.value.details["field"] == "proposal"


@given(payloads, st.integers() | st.none() | st.booleans() | st.floats(allow_nan=False) | st.tuples(st.integers()),
       st.text(max_size=4))
@example({"slug": "a", "title": "t", "text": ""}, 1, "x")
@example({"slug": "a", "title": "t", "text": ""}, None, "x")
@PROPERTIES
def test_parse_payload_rejects_keys_that_are_not_strings(payload: dict[str, str], extra: Any, value: str) -> None:
    # Only a Python caller can send these (JSON keys are strings); they are refused all the same.
    for proposal in ({**payload, extra: value}, {extra: value}):
        with pytest.raises(InvalidInput) as refused:
            parse_payload(proposal, text_max_bytes=TEXT_MAX_BYTES)
        assert refused.value.details["field"] == "proposal"


@given(payloads, st.sampled_from(["title", "text"]), st.integers(0xD800, 0xDFFF), st.data())
@PROPERTIES
def test_lone_surrogates_are_refused(payload: dict[str, str], key: str, code: int, data: st.DataObject) -> None:
    # Not UTF-8: canonical bytes cannot exist for them, so they never get as far as a fingerprint.
    at = data.draw(st.integers(0, len(payload[key])))
    bad = {**payload, key: payload[key][:at] + chr(code) + payload[key][at:]}
    with pytest.raises(InvalidInput):
        parse_payload(bad, text_max_bytes=TEXT_MAX_BYTES)
    with pytest.raises(ValueError, match="surrogates not allowed"):
        canonical_sha256(bad)
