"""A real uvicorn server in a thread (configured as `armarius serve` configures it), and a real
headless Chromium (Debian's `chromium`, driven by Playwright) for the browser tests.

The browser is never downloaded: scripts/test installs Debian's package when `chromium` is not on
PATH, and Playwright launches it through ``executable_path``. Without it the browser tests skip
(fail under ARMARIUS_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from armarius.app import Armarius
from armarius.web.app import server_config
from tests.conftest import service_missing
from tests.e2e.servers import free_port
from tests.helpers import Team, make_team
from tests.web.people import Visitors

#: Where the browser tests leave the screenshots the docs and the README show.
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def docs_screenshot(page: Any, app: Armarius, name: str, **options: Any) -> None:
    """``docs/images/<name>.png`` of the page at laptop width, taken on the SQLite run only (one picture)."""
    if app.settings.database_url is None:
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.screenshot(path=str(IMAGES / f"{name}.png"), full_page=True, **options)


@contextmanager
def serving(app: Armarius) -> Iterator[str]:
    """A real uvicorn server for ``app`` in a thread; its base URL while the block runs."""
    port = free_port()
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture
def base_url(app: Armarius) -> Iterator[str]:
    with serving(app) as url:
        yield url


@pytest.fixture
def visitors(base_url: str) -> Iterator[Visitors]:
    """HTTP clients of the test's server (closed at the end): ``visitors.log_in_team(team)`` and the like."""
    people = Visitors(base_url)
    yield people
    people.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium per test module: Debian's, never a downloaded build. (Playwright's sync API
    runs an event loop in this thread while it is open, which anyio tests of other modules must not meet.)"""
    executable = shutil.which("chromium")
    if executable is None:
        service_missing("Debian's chromium (scripts/test installs it: apt-get install chromium)",
                        FileNotFoundError("chromium is not on PATH"))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        service_missing("Playwright (pip install -e '.[test]')", error)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        yield browser
        browser.close()


@dataclass
class BrowserSession:
    """A page in a fresh browser context, logged in as the team's human."""

    page: Any
    team: Team
    base_url: str


@pytest.fixture
def browser_page(chromium: Any, app: Armarius, base_url: str) -> Iterator[BrowserSession]:
    """A Chromium page logged in through the login form as ``alpha-human`` (an editor of ``alpha``)."""
    team = make_team(app)
    context = chromium.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        log_in_with_the_form(page, team.workspace, f"{team.workspace}-human", team.human_password)
        page.wait_for_url(f"{base_url}/")
        yield BrowserSession(page=page, team=team, base_url=base_url)
    finally:
        context.close()


def log_in_with_the_form(page: Any, workspace: str, name: str, password: str) -> None:
    page.goto("/login")
    page.get_by_label("Workspace").fill(workspace)
    page.get_by_label("Name").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
