"""Template filters: text revealed as the CLI reveals it, relative times, diffs.

Every filter escapes what it is given and returns :class:`markupsafe.Markup`, so a template never
needs ``|safe``:

- ``{{ text | reveal }}``: the text with invisible, control, bidirectional and look-alike
  characters shown as ``⟦U+XXXX NAME⟧`` markers, a run of four or more of one of them as one
  ``⟦U+XXXX NAME ×COUNT⟧`` (:func:`armarius.textview.reveal`, the CLI's reveal), each marker in a
  ``<mark class="reveal">``. A marker typed literally into the text stays plain text, so content
  cannot fake a highlighted marker. Put it in an element with class ``revealed``
  (``white-space: pre-wrap``) to keep line breaks.
- ``{{ timestamp | ago }}``: ``<time>`` with the exact UTC time as its title: "5 minutes ago",
  "in 2 hours".
- ``{{ unified_diff_text | diff }}`` or ``{{ old_text | diff(new_text) }}``: a ``<pre class="diff">``
  whose lines are revealed and classed ``add``, ``del``, ``hunk`` or ``meta`` (the ``+``/``-``
  prefixes stay, so the diff does not depend on colour). Lines are split at line feeds only: a
  carriage return, U+2028 or any other line separator stays in its line and shows as its marker,
  never as a line break (as the draft page shows it). ``diff(new_text)`` is bounded in cost and
  length as a repair's diff is (:mod:`armarius.textdiff`).
- ``{{ fingerprint | short_fingerprint }}``: the first 64 bits in groups of four.
"""  # noqa: RUF002 (the multiplication sign of a run's marker)

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape

from armarius import textdiff
from armarius.textview import reveal_pieces, short_fingerprint


def reveal_html(text: object) -> Markup:
    """The reveal of ``text`` as HTML: escaped, each marker of a real character (or of a run of one) highlighted."""
    original = "" if text is None else str(text)
    # reveal_pieces() tells the markers from the text's own stretches: a marker typed into the text stays plain.
    return Markup("").join(Markup('<mark class="reveal">{}</mark>').format(shown) if marker else escape(shown)
                           for shown, marker in reveal_pieces(original))


def ago(timestamp: object, now: datetime | None = None) -> Markup:
    """A stored ISO 8601 time as a relative phrase in a ``<time>`` element."""
    if not timestamp:
        return Markup("")
    text = str(timestamp)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return escape(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(text, _relative(seconds))


def age_seconds(timestamp: str | None, now: datetime | None = None) -> float | None:
    """How many seconds ago a stored ISO 8601 time was (None for none)."""
    if not timestamp:
        return None
    moment = datetime.fromisoformat(timestamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - moment).total_seconds()


def _relative(seconds: float) -> str:
    future, span = seconds < 0, abs(seconds)
    if span < 60:
        return "just now" if not future else "in less than a minute"
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if span >= size:
            count = int(span // size)
            phrase = f"{count} {unit}{'' if count == 1 else 's'}"
            return f"in {phrase}" if future else f"{phrase} ago"
    raise AssertionError("unreachable")


def diff_html(value: object, new: object = None) -> Markup:
    """A unified diff as revealed, classed lines: of ``value`` itself, or between ``value`` and ``new``. Lines
    are split at line feeds only, so that every other line separator reaches reveal()."""
    old_text = "" if value is None else str(value)
    if new is None:
        lines = textdiff.text_lines(old_text)
    else:
        compared = textdiff.text_diff(old_text, str(new), fromfile="before", tofile="after")
        lines = list(compared.lines) or ([compared.note] if compared.note else [])
    # Each line is a block of its own: no line break between them, or a <pre> shows every line twice as tall.
    rows = [Markup('<span class="{}">{}</span>').format(_line_class(line), reveal_html(line)) for line in lines]
    return Markup('<pre class="diff">{}</pre>').format(Markup("").join(rows))


def _line_class(line: str) -> str:
    if line.startswith(("+++", "---", textdiff.NO_FINAL_BREAK)):
        return "meta"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "same"


FILTERS = {"reveal": reveal_html, "ago": ago, "diff": diff_html, "short_fingerprint": short_fingerprint}
