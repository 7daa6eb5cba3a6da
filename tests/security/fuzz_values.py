"""Hostile tool arguments: hypothesis strategies built from the JSON schemas a server publishes, and
mutations of valid calls.

:class:`SchemaFuzz` turns a schema (a tool's ``inputSchema``, the project-query schema) into two
strategies: ``valid`` (what the schema accepts, filled with plausible values named by field, so calls
reach the services) and ``shaped`` (the schema's shape with each leaf, key and length sometimes
hostile: edge and huge numbers, floats for integers, wrong types, deep nesting, long text, fields
missing or extra). :class:`Mutator` takes a valid call and applies one to three mutations: a node
replaced by a hostile value of any type, a field dropped, renamed or added, a value nested thousands
of levels deep, an integer made a float or text, a text normalized, padded with invisible
characters or grown past its limit. Nothing here knows a tool: a new tool, field or query kind is
fuzzed from its schema alone.

Hostile text comes from :data:`PIECES`: combining marks, bidirectional controls, zero-width and
format characters, emoji sequences, NFC/NFD pairs, NUL and other controls, and lone surrogates (a
JSON escape like ``\\ud800`` is legal JSON that decodes to one).
"""

from __future__ import annotations

import unicodedata
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from random import Random
from typing import Any

from hypothesis import strategies as st

#: Pieces of hostile text (several are more than one code point: an emoji sequence, an NFD letter).
PIECES: tuple[str, ...] = (
    # plain characters that mean something to paths, globs, SQL and shells
    "a", "Z", "0", "_", "-", "/", ".", " ", "%", "\\", "'", '"', "*", "?", "[", ":", "~", "$", ";", "..",
    # combining marks
    "\u0301", "\u0308", "\u0336", "\u20dd", "\u0345", "e\u0301\u0301\u0301",
    # right-to-left text and bidirectional controls
    "\u202e", "\u202d", "\u2066", "\u2067", "\u2069", "\u200f", "\u061c", "\u05d0\u05d1", "\u0627\u0644",
    # zero-width and other invisible format characters
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\U000e0041",
    # emoji: single, skin tone, ZWJ family, flag (two regional indicators), keycap
    "\U0001f600", "\U0001f525", "\U0001f44d\U0001f3fd", "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\U0001f1e9\U0001f1ea", "1\ufe0f\u20e3",
    # NFC and NFD spellings of the same text; compatibility characters; case-mapping surprises
    "\u00e9", "e\u0301", "\u00c5", "A\u030a", "\u212b", "\ud55c", "\u1112\u1161\u11ab", "\ufb01", "\u2126",
    "\u0130", "\u1e9e", "\u00df", "\uff0e", "\uff0f", "\u3000", "\u00a0",
    # NUL, controls, line and paragraph separators
    "\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\x85", "\n", "\r", "\t", "\u2028", "\u2029",
    # lone surrogates and noncharacters
    "\ud800", "\udbff", "\udc00", "\udfff", "\udce9", "\ufffd", "\uffff", "\ufffe", "\U0010ffff",
)
#: Integers at the edges of what JSON numbers, int64, int32 and doubles hold.
EDGE_INTEGERS = (0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1,
                 2**64, 2**64 + 1, 10**30, -(10**30), 10**100)
#: Floats where integers are expected, and floats at the edges of a double; NaN and infinity are not
#: JSON, but the SDK's parser takes them (and the in-memory client passes them on).
EDGE_FLOATS = (1.0, 0.5, -0.0, 1.5, -1.5, 1e308, -1e308, 5e-324, 2.0**63, 9.223372036854776e18, 1e21,
               float("nan"), float("inf"), float("-inf"))
#: How deep a value is nested: around what the SDK's JSON parser (about 200 levels) and serializer (254)
#: take, and beyond what Python's recursion (1,000 frames) takes.
DEPTHS = (50, 130, 197, 250, 300, 900, 1100, 3000)
#: Long texts: 100,000 characters of one or two bytes or four, or 1,000,001 bytes.
LONG_TEXTS = (("x", 100_000), ("\u00e9", 100_000), ("\U0001f600", 100_000), ("e\u0301", 50_000),
              ("x", 1_000_001))
#: Field names nobody declares.
EXTRA_KEYS = ("extra", "", "__proto__", "constructor", "$ref", "kind", "sql", "path", "\x00", "\ud800", "\u202ekey",
              "e\u0301", "\u00e9", "K" * 300, "arguments", "_meta", "session", "workspace", "principal", "role")


class Live(Enum):
    """A value only known while fuzzing (a session may be closed by a fuzzed call and opened again):
    the prober puts the current one in when it sends a call."""

    SESSION = "session"
    PROPOSAL = "proposal"
    REPAIR = "repair"


def nest(value: Any, depth: int, as_object: bool) -> Any:
    """``value`` inside ``depth`` lists (or objects ``{"a": …}``), built without recursion."""
    for _ in range(depth):
        value = {"a": value} if as_object else [value]
    return value


def hostile_text(extra: Sequence[str] = ()) -> st.SearchStrategy[str]:
    """Short texts of hostile pieces and any characters, long texts, and the world's ``extra`` texts."""
    pieces = st.sampled_from(PIECES) | st.characters(codec=None)
    built = st.lists(pieces, max_size=12).map("".join)
    long = st.sampled_from(LONG_TEXTS).map(lambda pair: pair[0] * pair[1])
    options: list[st.SearchStrategy[str]] = [built, long]
    if extra:
        options.append(st.sampled_from(tuple(extra)))
    return st.one_of(options)


def _edge_integers(node: Mapping[str, Any]) -> st.SearchStrategy[int]:
    """The schema's bounds and one past each, and the general edges."""
    edges = set(EDGE_INTEGERS)
    for key, step in (("minimum", -1), ("maximum", 1)):
        if isinstance(node.get(key), int):
            edges.update({node[key], node[key] + step})
    return st.sampled_from(sorted(edges))


def _types(node: Mapping[str, Any]) -> list[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [str(kind) for kind in declared]
    if "properties" in node:
        return ["object"]
    if "enum" in node or "const" in node:
        return []
    return ["any"]


class SchemaFuzz:
    """Strategies from JSON schemas (``$ref`` already inlined), for one world.

    ``samples`` maps a field name to plausible values for it (a list of JSON values, possibly
    :class:`Live` placeholders); ``hostile`` holds this world's hostile texts (paths to planted
    secrets, hidden table names…), mixed into every hostile text.
    """

    def __init__(self, samples: Mapping[str, Sequence[Any]], hostile: Sequence[str]) -> None:
        self.samples = samples
        self.text = hostile_text(hostile)
        self.short_text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join) | st.sampled_from(
            tuple(hostile) or ("x",))
        leaves = st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTEGERS), st.sampled_from(EDGE_FLOATS),
                           st.floats(allow_nan=False, allow_infinity=False), self.text)
        keys = st.sampled_from(EXTRA_KEYS) | self.text
        #: Any JSON value: the wrong type for almost every field.
        self.anything = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                                     | st.dictionaries(keys, inner, max_size=4), max_leaves=8)
        self.keys = keys
        self.deep = st.tuples(st.sampled_from(DEPTHS), st.booleans(), leaves).map(
            lambda drawn: nest(drawn[2], drawn[0], drawn[1]))

    # -- valid values ------------------------------------------------------------------------------

    def valid(self, node: Mapping[str, Any], field: str = "", *, taint: bool = False) -> st.SearchStrategy[Any]:
        """Values the schema accepts (plausible ones where ``samples`` names the field). With ``taint``,
        texts are hostile (within the schema's lengths) and integers sit at the schema's bounds: calls
        that pass validation and carry hostile content into the services."""
        if field in self.samples:
            samples = st.sampled_from(tuple(self.samples[field]))
            if taint and all(isinstance(sample, str) for sample in self.samples[field]):
                return samples | self._tainted_text(node)
            return samples
        branches = self._branches(node)
        if branches:
            return st.one_of([self.valid(branch, field, taint=taint) for branch in branches])
        if "const" in node:
            return st.just(node["const"])
        if "enum" in node:
            return st.sampled_from(tuple(node["enum"]))
        kinds = [kind for kind in _types(node) if kind not in ("any", "null")] or ["null"]
        return st.one_of([self._valid_of(kind, node, field, taint) for kind in kinds])

    def _valid_of(self, kind: str, node: Mapping[str, Any], field: str, taint: bool) -> st.SearchStrategy[Any]:
        if kind == "object":
            properties = node.get("properties", {})
            required = set(node.get("required", ()))
            return st.fixed_dictionaries(
                {name: self.valid(schema, name, taint=taint) for name, schema in properties.items()
                 if name in required},
                optional={name: self.valid(schema, name, taint=taint) for name, schema in properties.items()
                          if name not in required})
        if kind == "array":
            low = int(node.get("minItems", 0))
            high = min(int(node.get("maxItems", 3)), low + 3)
            return st.lists(self.valid(node.get("items", {}), field, taint=taint), min_size=low, max_size=high,
                            unique_by=repr if node.get("uniqueItems") else None)
        if kind == "integer":
            low = max(int(node.get("minimum", -5)), -(2**63))
            high = int(node.get("maximum", low + 100))
            in_range = st.integers(low, min(high, low + 100))
            return in_range | st.sampled_from((low, high)) if taint else in_range
        if kind == "string":
            low, most = int(node.get("minLength", 0)), int(node.get("maxLength", 40))
            plain = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=max(low, 1),
                            max_size=max(min(most, 40), low, 1))
            return self._tainted_text(node) if taint else plain
        simple = {"number": st.floats(-1e6, 1e6, allow_nan=False), "boolean": st.booleans()}
        return simple.get(kind, st.none())

    def _tainted_text(self, node: Mapping[str, Any]) -> st.SearchStrategy[str]:
        """Hostile text cut to the schema's maxLength (and at least its minLength)."""
        low, high = int(node.get("minLength", 0)), node.get("maxLength")
        return self.short_text.map(lambda text: (text[:high] if isinstance(high, int) else text).ljust(low, "x"))

    @staticmethod
    def _branches(node: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The alternatives of a ``oneOf``/``anyOf`` whose branches are whole schemas (not bare ``required`` lists)."""
        for key in ("oneOf", "anyOf"):
            branches = node.get(key)
            if isinstance(branches, list) and all(isinstance(b, Mapping) and ("properties" in b or "type" in b)
                                                  for b in branches):
                rest = {name: value for name, value in node.items() if name not in (key, "properties", "required")}
                return [{**rest, **branch} for branch in branches]
        return []

    # -- hostile values ------------------------------------------------------------------------------

    def hostile_leaf(self, node: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        """A value of the declared type at or past its limits, or a value of another type."""
        kinds = _types(node)
        options: list[st.SearchStrategy[Any]] = [self.anything]
        if "integer" in kinds or "number" in kinds:
            options += [_edge_integers(node), st.sampled_from(EDGE_FLOATS)]
        if "string" in kinds or "enum" in node or "const" in node or "any" in kinds:
            options += [self.text, self.text, self._around_length(node)]
        if "array" in kinds:
            options.append(st.lists(self.anything, max_size=3))
            if isinstance(node.get("maxItems"), int):
                options.append(st.just([1] * (node["maxItems"] + 1)))
        options.append(self.deep)
        return st.one_of(options)

    def _around_length(self, node: Mapping[str, Any]) -> st.SearchStrategy[str]:
        lengths = {0, 1}
        if isinstance(node.get("maxLength"), int):
            lengths.update({node["maxLength"], node["maxLength"] + 1})
        filler = st.sampled_from(("x", "\u00e9", "\U0001f600", "\u200b"))
        return st.tuples(st.sampled_from(sorted(lengths)), filler).map(lambda pair: pair[1] * pair[0])

    def shaped(self, node: Mapping[str, Any], field: str = "") -> st.SearchStrategy[Any]:
        """The schema's shape, each leaf hostile about one time in three, fields sometimes missing or extra."""
        branches = self._branches(node)
        if branches:
            return st.one_of([self.shaped(branch, field) for branch in branches])
        kinds = _types(node)
        if "object" in kinds and "properties" in node:
            return self._shaped_object(node)
        if "array" in kinds and "items" in node and field not in self.samples:
            high = min(int(node.get("maxItems", 4)), 4)
            return st.lists(self.shaped(node["items"], field), max_size=high) | self.hostile_leaf(node)
        return st.one_of(self.valid(node, field), self.valid(node, field, taint=True), self.hostile_leaf(node))

    def _shaped_object(self, node: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        properties: Mapping[str, Any] = node["properties"]
        required = set(node.get("required", ()))
        fields = {name: self.shaped(schema, name) for name, schema in properties.items()}

        @st.composite
        def build(draw: st.DrawFn) -> dict[str, Any]:
            value: dict[str, Any] = {}
            for name, strategy in fields.items():
                keep = draw(st.integers(0, 9)) > (0 if name in required else 5)
                if keep:
                    value[name] = draw(strategy)
            if draw(st.integers(0, 9)) == 0:
                value[draw(self.keys)] = draw(self.anything)
            return value

        return build()


class Mutator:
    """Mutations of valid values, in plain Python driven by a ``random.Random`` that hypothesis hands
    over (``st.randoms``): one draw buys many mutated calls, where drawing each mutation from
    hypothesis would cost more than the call it makes."""

    def __init__(self, hostile: Sequence[str]) -> None:
        self.hostile = tuple(hostile)
        self.long = tuple(piece * count for piece, count in LONG_TEXTS)

    def mutate(self, value: dict[str, Any], rnd: Random) -> dict[str, Any]:
        """``value`` after one to three mutations, each at a node chosen from the whole value."""
        for _ in range(rnd.choice((1, 1, 1, 2, 2, 3))):
            paths = _paths(value)
            if not paths or rnd.randrange(8) == 0:  # a field of the call itself
                value = _add_field(self, rnd, value)
                continue
            path = rnd.choice(paths)
            value = _replace(value, path, rnd.choice(_MUTATIONS)(self, rnd, _get(value, path)))
        return value

    def text(self, rnd: Random) -> str:
        choice = rnd.randrange(10)
        if choice < 5:
            return "".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 12)))
        if choice < 8:
            return rnd.choice(self.hostile)
        if choice < 9:
            return "".join(chr(rnd.randrange(0x110000)) for _ in range(rnd.randint(1, 6)))
        return rnd.choice(self.long)

    def key(self, rnd: Random) -> str:
        return rnd.choice(EXTRA_KEYS) if rnd.randrange(2) else self.text(rnd)

    def anything(self, rnd: Random, room: int = 3) -> Any:
        """Any JSON value (the wrong type for almost every field), at most ``room`` levels deep."""
        makers: list[Callable[[], Any]] = [
            lambda: rnd.choice((None, True, False)), lambda: rnd.choice(EDGE_INTEGERS),
            lambda: rnd.choice(EDGE_FLOATS), lambda: rnd.uniform(-1e12, 1e12), lambda: self.text(rnd),
            lambda: self.text(rnd)]
        if room > 0:
            makers += [lambda: [self.anything(rnd, room - 1) for _ in range(rnd.randint(0, 3))],
                       lambda: {self.key(rnd): self.anything(rnd, room - 1) for _ in range(rnd.randint(0, 3))},
                       lambda: nest(self.anything(rnd, 0), rnd.choice(DEPTHS), rnd.randrange(2) == 0)]
        return rnd.choice(makers)()


def _paths(value: Any, limit: int = 200) -> list[tuple[Any, ...]]:
    """Paths to the nodes of ``value`` below the root (breadth first, shallow nodes only)."""
    found: list[tuple[Any, ...]] = []
    queue: deque[tuple[tuple[Any, ...], Any]] = deque([((), value)])
    while queue and len(found) < limit:
        path, node = queue.popleft()
        if path:
            found.append(path)
        if len(path) >= 8:
            continue
        if isinstance(node, dict):
            queue.extend(((*path, key), child) for key, child in node.items())
        elif isinstance(node, list):
            queue.extend(((*path, index), child) for index, child in enumerate(node))
    return found


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


_DROP = object()


class _Renamed:
    def __init__(self, key: str, value: Any) -> None:
        self.key, self.value = key, value


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with the node at ``path`` replaced (``_DROP``: removed; ``_Renamed``: moved
    to another key)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    replaced = _replace(value[head], rest, new)
    if isinstance(value, dict):
        copy = dict(value)
        if replaced is _DROP or isinstance(replaced, _Renamed):
            del copy[head]
        if isinstance(replaced, _Renamed):
            copy[replaced.key] = replaced.value
        elif replaced is not _DROP:
            copy[head] = replaced
        return copy
    items = list(value)
    if replaced is _DROP:
        del items[head]
    else:
        items[head] = replaced.value if isinstance(replaced, _Renamed) else replaced
    return items


Mutation = Callable[[Mutator, Random, Any], Any]


def _to_hostile(mutator: Mutator, rnd: Random, _old: Any) -> Any:
    return mutator.anything(rnd)


def _drop(_mutator: Mutator, _rnd: Random, _old: Any) -> Any:
    return _DROP


def _rename(mutator: Mutator, rnd: Random, old: Any) -> Any:
    """The field under another name (a misspelling, an invisible character, a surrogate)."""
    return _Renamed(mutator.key(rnd), old)


def _add_field(mutator: Mutator, rnd: Random, old: Any) -> Any:
    if isinstance(old, dict):
        return {**old, mutator.key(rnd): mutator.anything(rnd)}
    if isinstance(old, list):
        return [*old, mutator.anything(rnd)]
    return [old]


def _deepen(mutator: Mutator, rnd: Random, old: Any) -> Any:
    return nest(old, rnd.choice(DEPTHS), rnd.randrange(2) == 0)


def _retype(mutator: Mutator, rnd: Random, old: Any) -> Any:
    """The same value in another type: an integer as a float or text, text as a list, a list as its item."""
    if isinstance(old, bool):
        return rnd.choice(("true", 1, 0, None, [old]))
    if isinstance(old, int):
        return rnd.choice((float(old), old + 0.5, str(old), -old, [old], old * 10**20, old - 2**63 - 1))
    if isinstance(old, str):
        return rnd.choice(([old], {"value": old}, len(old), old.encode("utf-8", "surrogatepass").hex()))
    if isinstance(old, list):
        return old[0] if old else {}
    if isinstance(old, dict):
        return list(old.values())
    return mutator.anything(rnd)


def _retext(mutator: Mutator, rnd: Random, old: Any) -> Any:
    """Text normalized (NFC, NFD, NFKC, NFKD), with a hostile piece put in, or repeated past any limit."""
    if not isinstance(old, str):
        return mutator.text(rnd)
    choice = rnd.randrange(5)
    if choice == 0:
        return unicodedata.normalize(rnd.choice(("NFC", "NFD", "NFKC", "NFKD")), old)
    if choice == 4:  # repeated up to a length: twice, past most limits, or far past them
        length = rnd.choice((2 * len(old), 300, 100_000))
        return (old or "x") * (length // max(len(old), 1) + 1)
    piece = rnd.choice(PIECES)
    at = rnd.randint(0, len(old))
    return old[:at] + piece + old[at:] if choice < 3 else piece + old + piece


#: Text mutations often keep a call valid, so they reach the services: they come up most.
_MUTATIONS: tuple[Mutation, ...] = (_to_hostile, _to_hostile, _drop, _rename, _add_field, _deepen, _retype, _retype,
                                    _retext, _retext, _retext, _retext)


def fill_live(value: Any, live: Callable[[Live], Any]) -> Any:
    """``value`` with every :class:`Live` placeholder (as a value, not a key) replaced; iterative, so a
    value nested 30,000 deep is no problem."""
    if isinstance(value, Live):
        return live(value)
    if not isinstance(value, dict | list):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, node = stack.pop()
        if isinstance(node, Live):
            parent[key] = live(node)
        elif isinstance(node, dict):
            copy: dict[Any, Any] = dict.fromkeys(node)  # the fields keep their order
            parent[key] = copy
            stack += [(copy, name, child) for name, child in node.items()]
        elif isinstance(node, list):
            items: list[Any] = [None] * len(node)
            parent[key] = items
            stack += [(items, index, child) for index, child in enumerate(node)]
        else:
            parent[key] = node
    return root[0]
