"""The page framework's template helpers, as page authors use them: filters, macros, paging."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from markupsafe import Markup

from armarius.store import iso_utc
from armarius.textview import reveal
from armarius.web.pages.filters import ago, diff_html, reveal_html
from armarius.web.pages.gate import TEMPLATES, Form, csrf_field, paginate, safe_next


def test_reveal_marks_real_characters_and_escapes_the_rest() -> None:
    shown = reveal_html("<i>a\u202eb</i> ⟦U+0041 TYPED⟧\nnext\tline")
    assert shown == Markup('&lt;i&gt;a<mark class="reveal">⟦U+202E RIGHT-TO-LEFT OVERRIDE⟧</mark>b&lt;/i&gt; '
                           '⟦U+0041 TYPED⟧\nnext<mark class="reveal">⟦U+0009 CHARACTER TABULATION⟧</mark>line')
    cyrillic_word, mixed_word = "\u0440\u0430\u0443\u0440\u0430", "p\u0430ypal"
    assert reveal_html(cyrillic_word).count('<mark class="reveal">') == 0, "a word wholly in another script"
    assert reveal_html(mixed_word).count('<mark class="reveal">') == 1, "one Cyrillic letter in a Latin word"


def test_reveal_marks_letters_that_show_as_blank_space() -> None:
    """The Hangul fillers and the blank braille pattern are letters and symbols to Unicode, yet show as
    nothing: a reviewer sees each as a marker, also where no Latin word is around them."""
    blank = "\u115f\u1160\u3164\uffa0\u2800"
    assert reveal(f"Ask ops. {blank} Done.") == (
        "Ask ops. ⟦U+115F HANGUL CHOSEONG FILLER⟧⟦U+1160 HANGUL JUNGSEONG FILLER⟧⟦U+3164 HANGUL FILLER⟧"
        "⟦U+FFA0 HALFWIDTH HANGUL FILLER⟧⟦U+2800 BRAILLE PATTERN BLANK⟧ Done.")
    assert reveal("한국어 ⠁") == "한국어 ⠁", "Hangul syllables and braille that shows stay as they are"


def test_diff_between_two_texts_and_of_a_diff_text() -> None:
    between = diff_html("one\ntwo\n", "one\n<b>2</b>\u200b\n")
    assert between.startswith('<pre class="diff"><span class="meta">--- before</span>')
    assert '<span class="del">-two</span>' in between
    marker = '<mark class="reveal">⟦U+200B ZERO WIDTH SPACE⟧</mark>'
    assert f'<span class="add">+&lt;b&gt;2&lt;/b&gt;{marker}</span>' in between
    assert '<span class="hunk">@@' in diff_html("@@ -1 +1 @@\n-a\n+b")


def test_ago_reads_both_ways_and_keeps_the_exact_time() -> None:
    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    before, after = iso_utc(now - timedelta(hours=3, minutes=5)), iso_utc(now + timedelta(minutes=2, seconds=5))
    assert str(ago(before, now)) == f'<time datetime="{before}" title="{before}">3 hours ago</time>'
    assert "in 2 minutes" in ago(after, now)
    assert "just now" in ago(iso_utc(now), now)
    assert ago(None) == Markup("")
    assert ago("<not a time>") == Markup("&lt;not a time&gt;")


def test_the_post_button_macro_carries_the_csrf_field_and_its_fields() -> None:
    template = TEMPLATES.from_string(
        '{% from "macros.html" import post_button with context %}'
        '{{ post_button("/drafts/proposals/7/reject", "Reject", {"note": "<x>"}, kind="danger", '
        'confirm_label="I read it all") }}')
    html = template.render(csrf_field=csrf_field("tok\"en"))
    assert '<form method="post" action="/drafts/proposals/7/reject" class="inline-form">' in html
    assert '<input type="hidden" name="csrf" value="tok&#34;en">' in html
    assert '<input type="hidden" name="note" value="&lt;x&gt;">' in html
    assert '<input type="checkbox" name="confirm" value="yes" required> I read it all' in html
    assert '<button type="submit" class="danger">Reject</button>' in html


def test_paging_and_the_pager() -> None:
    items = list(range(120))
    assert paginate(items, 1).items == list(range(50))
    assert (paginate(items, 3).items, paginate(items, 3).pages) == (list(range(100, 120)), 3)
    assert paginate(items, 9).page == 3
    assert paginate([], 1).pages == 1
    template = TEMPLATES.from_string('{% from "macros.html" import pager with context %}{{ pager(2, 3) }}')
    html = template.render(query_url=lambda **changes: f"/?page={changes['page']}")
    assert 'href="/?page=1" rel="prev"' in html
    assert "Page 2 of 3" in html
    assert 'href="/?page=3" rel="next"' in html


def test_a_form_and_where_a_login_may_lead() -> None:
    form = Form([("tag", "a"), ("note", ""), ("tag", "b")])
    assert (form.get("tag"), form.getlist("tag"), form.get("note", "x"), form.get("gone")) == ("a", ["a", "b"], "", "")
    assert "note" in form
    assert [safe_next(target) for target in ("/drafts?x=1", "//evil", "https://evil", "/\\evil", "", None)] == [
        "/drafts?x=1", "/", "/", "/", "/", "/"]


@given(st.text(max_size=200))
def test_the_html_reveal_reads_exactly_as_the_cli_reveal(text: str) -> None:
    shown = str(reveal_html(text))
    assert "<" not in re.sub(r'</?mark( class="reveal")?>', "", shown), "no markup but the markers'"
    assert html.unescape(re.sub(r'</?mark( class="reveal")?>', "", shown)) == reveal(text)
