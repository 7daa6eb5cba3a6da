"""What every command shares: settings, the opened application, output and error mapping."""

from __future__ import annotations

import getpass
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from armarius.app import Armarius, open_app
from armarius.config import SQLITE_FILE_NAME, Settings, load_settings
from armarius.errors import ConfigError
from armarius.validation import INT64_MAX

#: A revision, proposal or token number: what the database can hold, no more.
NUMBER = click.IntRange(1, INT64_MAX)


@dataclass
class CliContext:
    data_dir: Path | None
    as_json: bool
    _settings: Settings | None = field(default=None, init=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.data_dir)
        return self._settings

    @contextmanager
    def app(self, *, research: bool = True) -> Iterator[Armarius]:
        """The application on the existing store, closed afterwards; without the research sources unless
        ``research``. Every command but `init` and `demo` (which make the store) opens it here."""
        application = self.open_app(self.settings if research else replace(self.settings, research_config=None))
        try:
            yield application
        finally:
            application.close()

    def open_app(self, settings: Settings) -> Armarius:
        """:func:`open_app` on a store that exists: where there is no SQLite database, the refusal says how to
        name the data folder or make one, and nothing is created (SQLite would make an empty file)."""
        if settings.database_url is None:
            self._require_sqlite_store(settings)
        return open_app(settings)

    def _require_sqlite_store(self, settings: Settings) -> None:
        folder = settings.data_dir.absolute()
        name = ("Pass --data-dir (or set ARMARIUS_DATA_DIR; see docs/configuration.md) to use an existing data "
                "folder")
        init = self.command_line("init")
        if not folder.is_dir():
            raise ConfigError(f"There is no Armarius data folder at {folder}. {name}, or run `{init}` to make one "
                              "there.", key="data_dir", data_dir=str(folder))
        if not settings.sqlite_path.is_file():
            raise ConfigError(f"The data folder {folder} holds no Armarius database ({SQLITE_FILE_NAME}). {name}, "
                              f"or run `{init}` to make the database there.", key="data_dir", data_dir=str(folder))

    def command_line(self, *arguments: str, with_data_dir: bool = False) -> str:
        """A command a person can paste into the shell it was printed in, and it runs as printed
        (``with_data_dir``: from any folder, naming the data folder even when it was the default)."""
        named = with_data_dir or self.data_dir is not None
        data_dir = ["--data-dir", str(self.settings.data_dir)] if named else []
        return " ".join([armarius_command(), *map(shlex.quote, [*data_dir, *arguments])])

    @property
    def operator(self) -> str:
        """Operator commands act with direct access to the data; the audit log names the OS user."""
        return f"operator:{getpass.getuser()}"

    def emit(self, data: Any, *, table: Sequence[Sequence[Any]] | None = None, text: str | None = None) -> None:
        """JSON with --json; otherwise a table (first row is the header) or a line of text."""
        if self.as_json:
            click.echo(json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True))
        elif table is not None:
            click.echo(format_table(table))
        elif text is not None:
            click.echo(text)


pass_cli = click.make_pass_decorator(CliContext)


def armarius_command() -> str:
    """How to run this installation from a shell: `armarius` when that name on the PATH is this
    installation, else the full path of its script (a fresh venv is not on the PATH)."""
    script = Path(sys.executable).parent / "armarius"
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m armarius"
    on_path = shutil.which("armarius")
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "armarius"
    return shlex.quote(str(script))


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for 1: ``counted(1, "line")`` is "1 line", ``counted(2, "entry",
    "entries")`` "2 entries"."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def format_table(rows: Sequence[Sequence[Any]]) -> str:
    cells = [["" if value is None else str(value) for value in row] for row in rows]
    if len(cells) == 1:
        cells.append(["(none)"] + [""] * (len(cells[0]) - 1))
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def read_secret_from_stdin() -> str:
    value = sys.stdin.readline().rstrip("\n")
    if not value:
        raise click.UsageError("expected the secret on standard input")
    return value


def user_config_folder() -> Path:
    """Where desktop applications keep their per-user configuration on this platform."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    if os.name == "nt":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal; plain lines (every tenth) when standard error is not one."""
    if sys.stderr.isatty():
        with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
            yield bar.update
        return
    done, every = 0, max(total // 10, 1)

    def step(count: int) -> None:
        nonlocal done
        done += count
        if done // every != (done - count) // every or done == total:
            click.echo(f"{label}: {done}/{total}", err=True)

    yield step
