"""Fixtures shared by the research tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from armarius.app import Armarius, open_app
from tests.research.repos import Repo, build_repo, source_entry, write_config


@pytest.fixture
def research_app(app: Armarius, tmp_path: Path) -> Iterator[tuple[Armarius, Repo]]:
    repo = build_repo(tmp_path / "repo")
    write_config(app.settings.data_dir / "research.toml", [source_entry(repo)])
    application = open_app(replace(app.settings, research_config=Path("research.toml")))
    yield application, repo
    application.close()
