"""storage.sqlite_synchronous reaches every connection the server opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from armarius.app import initialize, open_app
from armarius.config import load_settings

#: SQLite's numbers for PRAGMA synchronous.
_LEVELS = {"normal": 1, "full": 2}


@pytest.mark.parametrize("setting", ["normal", "full"])
def test_the_setting_is_the_pragma_in_force(tmp_path: Path, setting: str) -> None:
    environ = {} if setting == "normal" else {"ARMARIUS_SQLITE_SYNCHRONOUS": setting}
    settings = load_settings(tmp_path / "data", environ=environ)
    initialize(settings)
    app = open_app(settings)
    try:
        with app.database.transaction() as tx:
            assert tx.scalar("PRAGMA synchronous") == _LEVELS[setting]
    finally:
        app.close()
