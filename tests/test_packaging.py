"""The wheel as a user gets it: built from this checkout, installed into a fresh virtual environment
(dependencies from the package index, through pip's cache), run from another folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
CHECKOUT = Path(__file__).resolve().parent.parent
PACKAGE = CHECKOUT / "src" / "armarius"


@dataclass
class Installed:
    python: Path
    armarius: Path
    home: Path  # a folder outside the checkout to run in

    def run(self, *command: str | Path) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ARMARIUS_", "PYTHON", "VIRTUAL_ENV"))}
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=self.home,
                                env=env)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        return result


def pip(*arguments: str | Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *arguments],
                   check=True, timeout=600, capture_output=True)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("packaging")
    # Built from a copy: no build/ folder left in the checkout, and none of an earlier build's files taken in.
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, source / name)
    shutil.copytree(CHECKOUT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip("wheel", "--no-deps", "--wheel-dir", root / "wheels", source)
    (wheel,) = (root / "wheels").glob("armarius-*.whl")
    # A venv without pip of its own (faster); this interpreter's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    pip("--python", python, "install", wheel)
    home = root / "home"
    home.mkdir()
    return Installed(python=python, armarius=root / "venv" / "bin" / "armarius", home=home)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    where = installed.run(installed.python, "-c", "import armarius; print(armarius.__file__)").stdout.strip()
    assert Path(where).is_relative_to(installed.python.parent.parent)


def test_the_commands_run(installed: Installed) -> None:
    assert "serve" in installed.run(installed.armarius, "--help").stdout
    assert "serve" in installed.run(installed.python, "-m", "armarius", "--help").stdout
    data_dir = installed.home / "data"
    initialized = json.loads(installed.run(installed.armarius, "--json", "--data-dir", data_dir, "init").stdout)
    assert initialized["applied"]
    installed.run(installed.armarius, "--data-dir", data_dir, "doctor")


def test_every_file_of_the_package_is_installed(installed: Installed) -> None:
    """Migrations, the research schemas, the web templates (in subfolders too) and static files, and the code."""
    expected = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*")
                      if path.is_file() and "__pycache__" not in path.parts)
    listing = installed.run(installed.python, "-c", """if True:
        import importlib.resources, json
        def walk(node, prefix=""):
            for child in node.iterdir():
                if child.is_dir():
                    if child.name != "__pycache__":
                        yield from walk(child, f"{prefix}{child.name}/")
                else:
                    yield prefix + child.name
        print(json.dumps(sorted(walk(importlib.resources.files("armarius")))))
    """).stdout
    missing = set(expected) - set(json.loads(listing))
    assert not missing
    assert {"store/migrations/0001_core.sqlite.sql", "research/schemas/project-query-v1.json",
            "web/templates/base.html", "web/templates/sessions/show.html", "web/static/armarius.css",
            "py.typed"} <= set(expected)
