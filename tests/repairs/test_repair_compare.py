"""How an alternative is compared with its target's current content (armarius.repairs.compare), which the repair
page, ``repair-show`` and the pages' diff filter show.

* Lines are split at line feeds only: every other line separator stays inside its line.
* The diff says everything: patched onto the current content, it gives exactly the resulting content, the
  final line break included when only one of them has it (the last line without one is followed by
  ``\\ No line break at the end``), for any two texts made of letters, line feeds, CRLF and every other line
  separator.
* Its cost is bounded: inputs crafted against difflib (lines repeated just under its junk threshold, or
  interleaved so that each match splits off little) stop at WORK_MAX steps and say so; a diff of more than
  DIFF_LINES_MAX lines is not shown line by line either. A change in one place of a long text (a 1 MB unit)
  is still shown line by line. Nor is a diff longer than DIFF_SHOWN_MAX characters as shown (a hidden character
  counting as its marker).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armarius import textdiff
from armarius.repairs import compare
from tests.repairs.conftest import SEPARATORS

HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def content(body: str) -> dict[str, Any]:
    return {"title": "T", "body": body}


def patch(old: str, lines: tuple[str, ...]) -> str:
    """The text a unified diff (as compare writes it) makes of ``old``."""
    source, made, done = textdiff.lines_with_ends(old), [], 0
    index = 2  # after the file names
    while index < len(lines):
        found = HUNK.fullmatch(lines[index])
        assert found, lines[index]
        start, length = int(found.group(1)), int(found.group(2) or 1)
        first = start - 1 if length else start
        made += source[done:first]
        done = first
        index += 1
        steps: list[list[str]] = []
        while index < len(lines) and not lines[index].startswith("@@"):
            line = lines[index]
            if line == textdiff.NO_FINAL_BREAK:
                assert steps[-1][1].endswith("\n")
                steps[-1][1] = steps[-1][1][:-1]
            else:
                steps.append([line[0], line[1:] + "\n"])
            index += 1
        for sign, text in steps:
            assert sign in " -+"
            if sign in " -":
                assert source[done] == text
                done += 1
            if sign in " +":
                made.append(text)
    return "".join(made + source[done:])


def test_lines_are_split_at_line_feeds_only() -> None:
    text = "".join(f"a{char}b\n" for char in SEPARATORS) + "c\r\nd"
    assert textdiff.text_lines(text) == [f"a{char}b" for char in SEPARATORS] + ["c\r", "d"]
    assert textdiff.text_lines("one\n") == ["one"]
    assert textdiff.text_lines("one\n\n") == ["one", ""]
    assert textdiff.text_lines("") == []
    assert compare.content_lines({"title": "T", "tags": [], "body": "x\u2028y"}) == ["# T", "tags: -", "", "x\u2028y"]


#: Texts of letters, line feeds, CRLF and every other line separator.
TEXTS = st.lists(st.sampled_from(["a", "b", "\n", "\r\n", *SEPARATORS]), max_size=30).map("".join)


@settings(max_examples=400, deadline=None, database=None)
@given(old=TEXTS, new=TEXTS)
def test_the_diff_patched_onto_the_current_content_gives_exactly_the_result(old: str, new: str) -> None:
    diff = compare.diff(content(old), content(new), fromfile="old", tofile="new")
    assert diff.note is None
    if old == new:
        assert diff.lines == ()
        return
    assert diff.lines[:2] == ("--- old", "+++ new")
    assert not [line for line in diff.lines if "\n" in line]
    before, after = compare.content_text(content(old)), compare.content_text(content(new))
    if before.endswith("\n") == after.endswith("\n"):  # no difference: nothing says how they end
        assert textdiff.NO_FINAL_BREAK not in diff.lines
        before, after = (text if text.endswith("\n") else text + "\n" for text in (before, after))
    assert patch(before, diff.lines) == after


def test_only_the_final_line_break_differs() -> None:
    diff = compare.diff(content("Pay 1234."), content("Pay 1234.\n"), fromfile="old", tofile="new")
    assert diff.lines == ("--- old", "+++ new", "@@ -1,3 +1,3 @@", " # T", " ", "-Pay 1234.", textdiff.NO_FINAL_BREAK,
                          "+Pay 1234.")
    diff = compare.diff(content("a\nb\n"), content("a\nb"), fromfile="old", tofile="new")
    assert diff.lines[-3:] == ("-b", "+b", textdiff.NO_FINAL_BREAK)
    diff = compare.diff(content("a\nb"), content("a\nc"), fromfile="old", tofile="new")
    assert diff.lines[-2:] == ("-b", "+c"), "both end alike: nothing to mark"
    assert (compare.ending(content("Pay 1234.")), compare.ending(content("Pay 1234.\n"))) == (
        "no line break at the end", "ends with a line break")


def costly_inputs() -> dict[str, tuple[list[str], list[str]]]:
    """Pairs of line lists crafted against difflib: each costs it far more than WORK_MAX."""
    chosen = random.Random(7)
    count = 21_000
    made = {}
    for kinds in (count // 100 - 5, count // 211):  # each line repeated just under (or at) the junk threshold
        made[f"{kinds} kinds"] = ([f"{index % kinds:x}\n" for index in range(count)],
                                  [f"{chosen.randrange(kinds):x}\n" for _ in range(count)])
    size = 5_000  # each match of one line splits off one line only
    made["interleaved"] = ([f"x{index}\n" for index in range(size)],
                           [f"x{size - 1 - index if index % 2 else index}\n" for index in range(size)])
    return made


@pytest.mark.parametrize("name", list(costly_inputs()))
def test_a_comparison_crafted_to_be_costly_stops_at_its_bound(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    old, new = costly_inputs()[name]
    spent = [0]
    look = textdiff._Bounded.find_longest_match

    def counted(matcher: Any, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None) -> Any:
        end = matcher.size if ahi is None else ahi
        spent[0] += matcher.pairs[end] - matcher.pairs[alo] + textdiff.CALL_COST  # what the look pays
        return look(matcher, alo, ahi, blo, bhi)

    monkeypatch.setattr(textdiff._Bounded, "find_longest_match", counted)
    diff = textdiff.unified(old, new, fromfile="old", tofile="new")
    assert (diff.lines, diff.note) == ((), "Too many lines differ or repeat to compare line by line at a bounded "
                                           "cost (at most 1,000,000 steps): compare the complete contents.")
    in_new = Counter(new)
    pairs = sum(count * in_new[line] for line, count in Counter(old).items()) + textdiff.LINE_COST * len(old)
    assert spent[0] > textdiff.WORK_MAX, "stopped by the bound"
    assert spent[0] - textdiff.WORK_MAX <= pairs + textdiff.CALL_COST, "and at the first look past it"


def test_a_diff_longer_than_its_bound_is_not_shown_line_by_line() -> None:
    old = "".join(f"line {index}\n" for index in range(textdiff.DIFF_LINES_MAX // 2))
    new = "".join(f"line {index} changed\n" for index in range(textdiff.DIFF_LINES_MAX // 2 + 1))
    diff = compare.diff(content(old), content(new), fromfile="old", tofile="new")
    assert diff.lines == ()
    assert diff.note == ("The diff has more than 2,000 lines, too many to show line by line: compare the complete "
                         "contents.")


def test_a_diff_longer_than_its_bound_as_shown_is_not_shown_line_by_line() -> None:
    """Counted as shown: each hidden character as its marker (here 6,000 hidden characters a line, zero-width spaces
    and non-joiners in turn, each shown as the 25 or 30 characters of ⟦U+200B ZERO WIDTH SPACE⟧ or
    ⟦U+200C ZERO WIDTH NON-JOINER⟧: a run of one of them would be one marker)."""
    diff = compare.diff(content("\u200b\u200c" * 3_000), content("\u200b\u200c" * 3_000 + "\u200b"), fromfile="old",
                        tofile="new")
    assert diff.lines == ()
    assert diff.note == ("The diff is longer than 250,000 characters as shown, too long to show line by line: "
                         "compare the complete contents.")
    assert compare.diff(content("\u200b\u200c" * 2_000), content("\u200b\u200c" * 2_000 + "\u200b"), fromfile="old",
                        tofile="new").lines


def test_changes_in_two_places_of_a_1_mb_unit_are_shown_line_by_line() -> None:
    chosen = random.Random(3)
    lines = ["" if chosen.random() < 0.3 else f"Line {index}: some words of the incident's account." for index in
             range(20_000)]
    old = "\n".join(lines) + "\n"
    assert len(old.encode()) > 700_000
    lines[10], lines[15_000] = "The first correction.", "The second correction."
    new = "\n".join(lines) + "\n"
    diff = compare.diff(content(old), content(new), fromfile="old", tofile="new")
    assert diff.note is None
    assert [line for line in diff.lines if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))] == [
        f"-{compare.content_lines(content(old))[12]}", "+The first correction.",
        f"-{compare.content_lines(content(old))[15_002]}", "+The second correction."]
    assert patch(compare.content_text(content(old)), diff.lines) == compare.content_text(content(new))
