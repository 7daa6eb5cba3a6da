"""Unified diffs of texts a person compares, split at line feeds only, at a bounded cost.

**Lines.** A text is split at line feeds only. Every other character that ends a line somewhere (CR, VT, FF,
U+001C to U+001E, U+0085, U+2028, U+2029) stays inside its line, where :func:`armarius.textview.reveal` shows it
as a ``⟦U+XXXX NAME⟧`` marker: it never passes for a plain line break. A text whose last line has no line feed,
when the other's has one, is marked as diff tools mark it, by a line :data:`NO_FINAL_BREAK` after that line, so
a change of the final line break alone shows.

**Cost.** Agents write the texts compared, so a diff's cost is bounded, never left to the texts. Only the lines
between those the two share at the start and at the end are matched; the matching (difflib's, with its junk
heuristic) counts its work as it goes and stops at :data:`WORK_MAX` steps (each look for a longest match pays
first for the lines and the candidate pairs it may visit), and a diff of more than :data:`DIFF_LINES_MAX` lines,
or longer than :data:`DIFF_SHOWN_MAX` characters as shown (each hidden character, or run of one, as its marker),
is not shown line by line either. Then :class:`Diff` says why (``note``), and the person compares the complete texts.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from armarius.textview import reveal

#: The line a diff shows after a last line that has no line feed (as diff tools show it).
NO_FINAL_BREAK = "\\ No line break at the end"
#: The most work the line matching may do for one diff, in steps: a candidate pair it may visit is one, a line
#: it looks at :data:`LINE_COST`, a look for a longest match :data:`CALL_COST`. A few hundredths of a second of
#: CPU; a correction in a few places of a 1 MB unit takes a small part of it.
WORK_MAX = 1_000_000
#: What looking at one line costs besides its candidate pairs, in steps.
LINE_COST = 5
#: What one look for a longest match costs besides its lines, in steps.
CALL_COST = 100
#: The most lines a diff shows; a longer one is not shown line by line.
DIFF_LINES_MAX = 2_000
#: The most characters a diff shows, as :func:`armarius.textview.reveal` shows them (a marker is some twenty-five):
#: a longer one is not shown line by line.
DIFF_SHOWN_MAX = 250_000
#: Lines of context around each change.
CONTEXT = 3


def text_lines(text: str) -> list[str]:
    """The text's lines, split at line feeds only (every other line separator stays in its line); a final line
    feed ends the last line, it does not start an empty one."""
    if not text:
        return []
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


@dataclass(frozen=True)
class Diff:
    """A unified diff of two contents: ``lines`` (without line feeds), or none and a ``note`` saying why it is
    not shown line by line (the two complete contents are to be compared instead). No lines and no note: the
    two are the same."""

    lines: tuple[str, ...]
    note: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def text_diff(old: str, new: str, *, fromfile: str, tofile: str) -> Diff:
    """The diff between two texts, split at line feeds only, at a bounded cost. When only one of them ends with
    a line feed, the last line of the other is followed by :data:`NO_FINAL_BREAK`; when both end alike, that
    is no difference and nothing marks it."""
    if old.endswith("\n") != new.endswith("\n"):
        return unified(lines_with_ends(old), lines_with_ends(new), fromfile=fromfile, tofile=tofile)
    return unified([line + "\n" for line in text_lines(old)], [line + "\n" for line in text_lines(new)],
                   fromfile=fromfile, tofile=tofile)


def unified(old: Sequence[str], new: Sequence[str], *, fromfile: str, tofile: str) -> Diff:
    """A unified diff of two lists of lines, each with its line feed but perhaps the last (as
    :func:`lines_with_ends` makes them), at a bounded cost (see the module's description)."""
    if list(old) == list(new):
        return Diff(())
    # Only what lies between the lines the two share at the start and at the end is matched, with the lines of
    # context around it: a change in one place of a long text costs what that place does.
    shared = min(len(old), len(new))
    start = next((index for index in range(shared) if old[index] != new[index]), shared)
    end = next((index for index in range(shared - start) if old[-1 - index] != new[-1 - index]), shared - start)
    first, cut = max(0, start - CONTEXT), max(0, end - CONTEXT)
    try:
        groups = list(_Bounded(old[first:len(old) - cut], new[first:len(new) - cut]).get_grouped_opcodes(CONTEXT))
    except _TooCostly:
        return Diff((), "Too many lines differ or repeat to compare line by line at a bounded cost (at most "
                        f"{WORK_MAX:,} steps): compare the complete contents.")
    lines = [f"--- {fromfile}", f"+++ {tofile}"]
    shown = sum(map(len, lines))
    for group in groups:
        for line in _hunk(old, new, [(tag, i1 + first, i2 + first, j1 + first, j2 + first)
                                     for tag, i1, i2, j1, j2 in group]):
            lines.append(line)
            shown += len(reveal(line))
            if len(lines) > DIFF_LINES_MAX:
                return Diff((), f"The diff has more than {DIFF_LINES_MAX:,} lines, too many to show line by line: "
                                "compare the complete contents.")
            if shown > DIFF_SHOWN_MAX:
                return Diff((), f"The diff is longer than {DIFF_SHOWN_MAX:,} characters as shown, too long to show "
                                "line by line: compare the complete contents.")
    return Diff(tuple(lines))


def lines_with_ends(text: str) -> list[str]:
    """The text's lines, split at line feeds only, each with its line feed (the last without one when the text
    does not end with one): what :func:`unified` compares."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _hunk(old: Sequence[str], new: Sequence[str], group: list[tuple[str, int, int, int, int]]) -> Iterator[str]:
    """One hunk of a unified diff (as difflib.unified_diff writes it), a last line without its line feed
    followed by :data:`NO_FINAL_BREAK`."""
    first, last = group[0], group[-1]
    yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@"
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            yield from _prefixed(" ", old[i1:i2])
            continue
        if tag in ("replace", "delete"):
            yield from _prefixed("-", old[i1:i2])
        if tag in ("replace", "insert"):
            yield from _prefixed("+", new[j1:j2])


def _prefixed(prefix: str, lines: Sequence[str]) -> Iterator[str]:
    for line in lines:
        if line.endswith("\n"):
            yield prefix + line[:-1]
        else:
            yield prefix + line
            yield NO_FINAL_BREAK


def _range(start: int, stop: int) -> str:
    """A hunk's range as unified diffs write it (difflib's ``_format_range_unified``)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


class _TooCostly(Exception):
    """The line matching reached :data:`WORK_MAX`."""


class _Bounded(difflib.SequenceMatcher[str]):
    """difflib's matcher (with its junk heuristic) that stops at :data:`WORK_MAX`: each look for a longest match
    first pays for its lines and every candidate pair it may visit, the occurrences in the other side of each of
    its lines (an upper bound of its work), and :data:`CALL_COST`."""

    def __init__(self, old: Sequence[str], new: Sequence[str]) -> None:
        super().__init__(None, old, new)
        self.size = len(old)
        self.left = WORK_MAX
        # b2j: where each line of ``new`` is, junk and popular lines left out (difflib's own, not in typeshed).
        where: dict[str, list[int]] = self.b2j  # type: ignore[attr-defined]
        #: What the lines of ``old`` before each one cost a look (their candidate pairs and LINE_COST each), summed.
        self.pairs = list(itertools.accumulate((len(where.get(line, ())) + LINE_COST for line in old), initial=0))

    def find_longest_match(self, alo: int = 0, ahi: int | None = None, blo: int = 0,
                           bhi: int | None = None) -> difflib.Match:
        end = self.size if ahi is None else ahi
        self.left -= self.pairs[end] - self.pairs[alo] + CALL_COST
        if self.left < 0:
            raise _TooCostly
        return super().find_longest_match(alo, end, blo, bhi)
