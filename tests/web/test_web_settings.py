"""The web settings: login session lifetimes, from the file or the environment, within bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from armarius.config import load_settings
from armarius.errors import ConfigError


def test_defaults_and_sources(tmp_path: Path) -> None:
    defaults = load_settings(tmp_path, environ={})
    (tmp_path / "armarius.toml").write_text("[web]\nsession_idle_minutes = 15\nsession_max_hours = 8\n",
                                            encoding="utf-8")
    from_file = load_settings(tmp_path, environ={})
    from_env = load_settings(tmp_path, environ={"ARMARIUS_WEB_SESSION_IDLE_MINUTES": "5",
                                                "ARMARIUS_WEB_SESSION_MAX_HOURS": "1"})
    assert (defaults.web_session_idle_minutes, defaults.web_session_max_hours) == (60, 12)
    assert (from_file.web_session_idle_minutes, from_file.web_session_max_hours) == (15, 8)
    assert (from_env.web_session_idle_minutes, from_env.web_session_max_hours) == (5, 1)


@pytest.mark.parametrize(("variable", "value"), [
    ("ARMARIUS_WEB_SESSION_IDLE_MINUTES", "0"), ("ARMARIUS_WEB_SESSION_IDLE_MINUTES", "10081"),
    ("ARMARIUS_WEB_SESSION_MAX_HOURS", "0"), ("ARMARIUS_WEB_SESSION_MAX_HOURS", "721"),
    ("ARMARIUS_WEB_SESSION_MAX_HOURS", "twelve"),
])
def test_values_out_of_bounds_are_refused(tmp_path: Path, variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path, environ={variable: value})
    assert variable in refused.value.message
