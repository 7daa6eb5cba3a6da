"""What the repair page shows of what an agent wrote, over real HTTP, on both engines.

* **Line separators.** Every character that ``str.splitlines`` takes for a line break besides the line feed
  (CR, VT, FF, U+001C to U+001E, U+0085, U+2028, U+2029) is shown as its ``⟦U+XXXX NAME⟧`` marker in the diff
  and in both complete contents, never as a line break, as the draft page shows it; the page holds none of
  them raw. The needs-review diff (the same ``diff`` filter) marks them too.
* **The final line break.** An alternative that only adds the body's final line feed shows a change: the
  diff marks the line without one (``\\ No line break at the end``), and each complete content says how it ends.
* **A diff's cost.** An entry of ~21,000 short lines, each repeated just under difflib's junk threshold, with
  five alternatives of the same lines shuffled: the page is not the 6.5 MB it was (every view ~6 s of CPU), but
  about the size of the contents it must show in full. It says why it shows no line-by-line diff, and still
  shows each alternative's complete current and resulting content. A change in one place of that entry is
  still shown line by line. A diff of long lines of hidden characters (each shown as a marker) is not shown
  beside the two complete contents either.
"""

from __future__ import annotations

import re

import pytest
from markupsafe import escape

from armarius.app import Armarius
from armarius.memory.service import RememberRequest
from armarius.repairs import compare
from armarius.web.pages.filters import diff_html, reveal_html
from tests.repairs.conftest import (
    ADMINS,
    ENTRY,
    ENTRY_BODY,
    ENTRY_TITLE,
    MARKERS,
    SEPARATORS,
    Desk,
    costly_repair,
    make_desk,
)
from tests.web.people import Person, Visitors


@pytest.fixture
def desk(app: Armarius) -> Desk:
    return make_desk(app)


def mark(char: str) -> str:
    return f'<mark class="reveal">{MARKERS[char]}</mark>'


def admin(visitors: Visitors) -> Person:
    return visitors.log_in("alpha-admin", ADMINS["alpha-admin"], "alpha")


def article(page: str, option: str) -> str:
    found = re.search(f'<article class="alternative[^"]*"[^>]*id="{option}">(.*?)</article>', page, re.DOTALL)
    assert found, page
    return found.group(1)


def test_the_separators_are_the_ones_splitlines_breaks_at() -> None:
    breaking = [char for char in map(chr, range(0x110000)) if char != "\n" and len(f"a{char}b".splitlines()) == 2]
    assert breaking == SEPARATORS


def test_every_line_separator_is_marked_in_the_diff_and_both_contents(desk: Desk, visitors: Visitors) -> None:
    slug = "ops/wire-instructions"
    current = "".join(f"Pay account 1234.{char}Pay account 6666.\n" for char in SEPARATORS) + "Windows: a\r\nb"
    desk.app.memory.remember(desk.agent, RememberRequest(slug, "Wire instructions", current, tags=[]))
    result = "".join(f"Pay account 1234.{char}Pay account 7777.\n" for char in SEPARATORS) + "Windows: a\r\nb"
    session = desk.open_session()
    repair = desk.prepare(session, desk.alternative(result, name=slug, title="Wire instructions"))["repair"]
    page = admin(visitors).http.get(f"/repairs/{repair}").text
    assert not [char for char in SEPARATORS if char in page], "none is left raw to break a line"
    shown = article(page, "opt-1")
    for char in SEPARATORS:  # inside its line: in the diff's lines and in both complete contents
        assert f'<span class="del">-Pay account 1234.{mark(char)}Pay account 6666.</span>' in shown, repr(char)
        assert f'<span class="add">+Pay account 1234.{mark(char)}Pay account 7777.</span>' in shown, repr(char)
        assert shown.count(f"Pay account 1234.{mark(char)}Pay account 6666.\n") == 1, repr(char)
        assert shown.count(f"Pay account 1234.{mark(char)}Pay account 7777.\n") == 1, repr(char)
    assert f"Windows: a{mark(chr(13))}\nb</pre>" in shown
    assert shown.count(f"Windows: a{mark(chr(13))}") == 3, "the diff's context line and both contents"
    body = re.search(r'<pre class="revealed result">(.*?)</pre>', shown, re.DOTALL)
    assert body
    assert len(body.group(1).split("\n")) == 3 + len(SEPARATORS) + 2, "a line per line feed, no more"
    twin = admin(visitors).http.get(f"/api/repairs/{repair}").json()
    assert twin["alternatives"][0]["result"]["body"] == result, "the JSON twin keeps the exact text"


def test_an_alternative_that_only_adds_the_final_line_break_shows_a_change(desk: Desk, visitors: Visitors) -> None:
    session = desk.open_session()
    repair = desk.prepare(session, desk.alternative(ENTRY_BODY + "\n"))["repair"]
    shown = article(admin(visitors).http.get(f"/repairs/{repair}").text, "opt-1")
    body = str(escape(ENTRY_BODY))
    assert (f'<span class="del">-{body}</span><span class="meta">\\ No line break at the end</span>'
            f'<span class="add">+{body}</span></pre>') in shown
    assert "<h4>Current content (revision 1; no line break at the end)</h4>" in shown
    assert "<h4>Resulting content, complete (ends with a line break)</h4>" in shown
    removed = desk.prepare(desk.open_session(), desk.alternative(ENTRY_BODY + "\n"))  # and back again
    desk.app.repairs.apply(desk.admin, removed["repair"], "opt-1", take_over=True)
    back = desk.prepare(desk.open_session(), desk.alternative(ENTRY_BODY))["repair"]
    shown = article(admin(visitors).http.get(f"/repairs/{back}").text, "opt-1")
    assert (f'<span class="del">-{body}</span><span class="add">+{body}</span>'
            '<span class="meta">\\ No line break at the end</span></pre>') in shown
    assert "<h4>Current content (revision 2; ends with a line break)</h4>" in shown


def test_the_needs_review_diff_marks_every_line_separator(desk: Desk) -> None:
    """The diff filter the needs-review and entry pages use splits a diff at line feeds only."""
    desk.app.memory.curate(desk.human, ENTRY, 1)
    changed = "".join(f"Staging runs on host stage-01{char}stage-66.\n" for char in SEPARATORS)
    desk.app.memory.remember(desk.agent, RememberRequest(ENTRY, ENTRY_TITLE, changed, tags=["ops", "staging"],
                                                         override_curated=True, reason="moved"))
    (item,) = desk.app.memory.needs_review(desk.human)
    shown = str(diff_html(item["diff"]))
    assert not [char for char in SEPARATORS if char in shown]
    for char in SEPARATORS:
        assert f"stage-01{mark(char)}" in shown, repr(char)
    assert not shown.endswith('<span class="same"></span></pre>'), "a diff's final line feed ends its last line"


def test_a_diff_crafted_to_be_costly_is_not_shown_line_by_line_and_the_page_stays_small(desk: Desk,
                                                                                       visitors: Visitors) -> None:
    _, repair = costly_repair(desk)
    person = admin(visitors)
    answer = person.http.get(f"/repairs/{repair}")
    assert answer.status_code == 200
    page = answer.text
    alternatives = desk.app.repairs.show(desk.admin, repair)["alternatives"]
    texts = [compare.content_text(item[side]) for item in alternatives for side in ("current", "result")]
    assert len(answer.content) < 1.1 * sum(map(len, texts)) + 40_000, "the contents, once each, and little more"
    assert page.count('<pre class="diff">') == 0
    for item in alternatives:
        shown = article(page, item["option"])
        assert "Too many lines differ or repeat to compare line by line" in shown
        current, result = (str(escape(compare.content_text(item[side]))) for side in ("current", "result"))
        assert f'<pre class="revealed">{current}</pre>' in shown, "the complete current content"
        assert f'<pre class="revealed result">{result}</pre>' in shown, "the complete resulting content"
        assert f"Choose and apply {item['option']}" in shown or f"Take over and apply {item['option']}" in shown


def test_a_diff_of_hidden_characters_is_not_shown_beside_both_contents(desk: Desk, visitors: Visitors) -> None:
    """Each hidden character is shown as its marker (~50 bytes of HTML): a diff of long lines of them would show
    every character a third time; past DIFF_SHOWN_MAX characters as shown the page shows both contents only. (Two
    hidden characters in turn: a run of one is one marker, tests/web/test_hidden_runs.py.)"""
    blank = "\u200b\u200c" * 4_000
    desk.app.memory.remember(desk.agent, RememberRequest("ops/blank", "Blank", blank, tags=[]))
    repair = desk.prepare(desk.open_session(), *[desk.alternative(blank + "\u200b" * (1 + index), name="ops/blank",
                                                                  title="Blank") for index in range(5)])["repair"]
    answer = admin(visitors).http.get(f"/repairs/{repair}")
    alternatives = desk.app.repairs.show(desk.admin, repair)["alternatives"]
    shown = [str(reveal_html(compare.content_text(item[side]))) for item in alternatives
             for side in ("current", "result")]
    assert len(answer.content) < 1.1 * sum(len(text.encode()) for text in shown) + 40_000
    assert answer.text.count("The diff is longer than 250,000 characters as shown") == 5
    for item, (current, result) in zip(alternatives, zip(shown[::2], shown[1::2], strict=True), strict=True):
        page = article(answer.text, item["option"])
        assert f'<pre class="revealed">{current}</pre>' in page
        assert f'<pre class="revealed result">{result}</pre>' in page


def test_a_change_in_one_place_of_that_entry_is_still_shown_line_by_line(desk: Desk, visitors: Visitors) -> None:
    current, _ = costly_repair(desk)
    lines = current.split("\n")
    lines[10_500] = "changed"
    repair = desk.prepare(desk.open_session(), desk.alternative("\n".join(lines), name="ops/many-lines",
                                                                title="Big"))["repair"]
    shown = article(admin(visitors).http.get(f"/repairs/{repair}").text, "opt-1")
    diff = re.search(r'<pre class="diff">(.*?)</pre>', shown, re.DOTALL)
    assert diff
    rows = re.findall(r'<span class="(\w+)">(.*?)</span>', diff.group(1))
    assert [row for row in rows if row[0] in ("del", "add")] == [("del", f"-{10_500 % (21_000 // 100 - 5):x}"),
                                                                   ("add", "+changed")]
    assert len(rows) == 2 + 1 + 3 + 2 + 3, "the file names, the hunk, the change in three lines of context"
