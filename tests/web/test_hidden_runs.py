"""A run of one hidden character on the repair page, over real HTTP: shown as one marker with its exact count.

An agent proposed a repair of an entry of ~21,000 zero-width spaces, with five alternatives of as many. Every
hidden character was shown as a marker of its own (~55 bytes of HTML): the page was 12 MB and a second of CPU
per view. A run of one hidden character is now one marker naming the character and how many there are, so the
page is small (15 kB) and the reviewer still sees exactly what is there.
"""

# ruff: noqa: RUF001 (the multiplication sign of a run's marker)

from __future__ import annotations

import re

import pytest

from armarius.app import Armarius
from armarius.memory.service import RememberRequest
from armarius.repairs import compare
from tests.repairs.conftest import ADMINS, Desk, make_desk
from tests.web.people import Visitors

#: How many zero-width spaces the entry holds (its alternatives one to five more).
RUN = 21_000


@pytest.fixture
def desk(app: Armarius) -> Desk:
    return make_desk(app)


def test_a_repair_of_long_runs_of_one_hidden_character_is_a_small_page_that_names_the_counts(
        desk: Desk, visitors: Visitors) -> None:
    desk.app.memory.remember(desk.agent, RememberRequest("ops/blank", "Blank", "Looks empty:" + "\u200b" * RUN + "\n",
                                                         tags=[]))
    repair = desk.prepare(desk.open_session(), *[
        desk.alternative("Looks empty:" + "\u200b" * (RUN + index) + "\nend\n", name="ops/blank", title="Blank")
        for index in range(1, 6)])["repair"]
    answer = visitors.log_in("alpha-admin", ADMINS["alpha-admin"], "alpha").http.get(f"/repairs/{repair}")
    assert answer.status_code == 200
    page = answer.text
    assert len(answer.content) < 100_000, f"{len(answer.content):,} bytes"
    alternatives = desk.app.repairs.show(desk.admin, repair)["alternatives"]
    was = f'<mark class="reveal">⟦U+200B ZERO WIDTH SPACE ×{RUN}⟧</mark>'
    for index, item in enumerate(alternatives, start=1):
        assert compare.content_text(item["result"]).count("\u200b") == RUN + index, "stored as proposed"
        marker = f'<mark class="reveal">⟦U+200B ZERO WIDTH SPACE ×{RUN + index}⟧</mark>'
        shown = re.search(f'<article class="alternative[^"]*"[^>]*id="{item["option"]}">(.*?)</article>', page,
                          re.DOTALL)
        assert shown, page
        # In the diff and in both complete contents: the exact count, never one marker a character.
        assert shown.group(1).count(marker) == 2, item["option"]
        assert shown.group(1).count(was) == 2, item["option"]
        assert f'<span class="del">-Looks empty:{was}</span>' in shown.group(1)
        assert f'<span class="add">+Looks empty:{marker}</span>' in shown.group(1)
        assert f"Looks empty:{was}\n</pre>" in shown.group(1), "the complete current content"
        assert f"Looks empty:{marker}\nend\n</pre>" in shown.group(1), "the complete resulting content"
        assert "\u200b" not in shown.group(1), "no hidden character reaches the page raw"
