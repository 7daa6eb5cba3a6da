"""Real git repositories for the research tests, built with the git command line.

:func:`build_repo` makes a repository whose first commit (the pin) holds ordinary source files and
everything awkward a tree can hold: symlinks (one into the tree, one out of it), a submodule
entry, a binary file, a 5,000-character line, Latin-1 bytes, a bare carriage return, names with
spaces and Unicode, names that look like git options or pathspec magic, a name with a newline and a
name that is not UTF-8. :meth:`Repo.move_on` then commits changes and deletions, moves and switches
branches and dirties the index and the working tree: answers about the pin must not change.

``PINNED`` is the pinned tree's content as the tests expect it, so expected hits are computed from
it (see :func:`expected_lines`) rather than copied from an answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armarius.research.config import ResearchConfig, load_research_config
from armarius.research.service import ResearchService

GIT = shutil.which("git") or "git"
_ENV = {
    "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-02T03:04:05+00:00",
    "GIT_COMMITTER_NAME": "Test Committer", "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_COMMITTER_DATE": "2024-01-02T03:04:05+00:00",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": os.devnull, "LC_ALL": "C",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
}
_CONFIG = ("-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false",
           "-c", "core.symlinks=true", "-c", "user.useConfigOnly=false")

GITLINK = "1234567890abcdef1234567890abcdef12345678"
OUTSIDE_TARGET = "/etc/passwd"

APP_PY = '''"""The demo application."""

from registry import register


def handle_order(order_id):
    """Handle one order."""
    return order_id


def handle_order_line(line):
    return line


register("handler")
register("handle_order")
'''
REGISTRY_PY = '''HANDLERS = {}


def register(name):
    HANDLERS[name] = True
    return name
'''
SCHEMA_SQL = '''CREATE TABLE orders (
    id integer PRIMARY KEY,
    handle_order text NOT NULL
);
CREATE INDEX orders_handle ON orders (handle_order);
'''
NOTES_MD = "# Notes\n\nThe table comes from CREATE TABLE orders in db/schema.sql.\n"
OPTIONS_MD = (
    "Never run git grep --output=evil.txt or -Oevil.txt here.\n"
    "Glob characters stay literal: src/*.py and a?b and [abc] and :(top) and :!src and ../../etc/passwd\n"
)
LONG_LINE = "long_marker " + "x" * 4988
LONG_TXT = f"short first line\n{LONG_LINE}\nlast line long_marker\n"
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR handle_order \x00" + bytes(range(256))
LATIN1 = "prix = 'caf\xe9'  # latin_marker\nplain latin_marker line\n".encode("latin-1")
CR_TXT = b"one\rtwo cr_marker\nthree cr_marker\n"
SPACED_NAME = "docs/with space \u00fcn\u00efcode \u2603.md"
NEWLINE_NAME = "odd\nname.txt"
NOT_UTF8_NAME = b"caf\xe9 name.txt"
NOT_UTF8_SHOWN = NOT_UTF8_NAME.decode("utf-8", "replace")

#: The pinned tree's regular files, path -> bytes (the non-UTF-8 name is in NOT_UTF8_NAME).
PINNED: dict[str, bytes] = {
    "src/app.py": APP_PY.encode(),
    "src/registry.py": REGISTRY_PY.encode(),
    "src/cr.txt": CR_TXT,
    "db/schema.sql": SCHEMA_SQL.encode(),
    "docs/notes.md": NOTES_MD.encode(),
    "docs/options.md": OPTIONS_MD.encode(),
    SPACED_NAME: b"unicode_marker in a file with an awkward name\n",
    "data/long.txt": LONG_TXT.encode(),
    "data/logo.bin": BINARY,
    "legacy/latin1.txt": LATIN1,
    "-O": b"dash_marker capital O\n",
    "--output=x": b"dash_marker output\n",
    ":(top)": b"top_marker in a file named like pathspec magic\n",
    "glob[1]*.txt": b"glob_marker\n",
    NEWLINE_NAME: b"odd_marker in a file whose name has a newline\n",
}
NOT_UTF8_CONTENT = b"odd_marker in a file whose name is not UTF-8\n"
SYMLINKS = {"link.py": "src/app.py", "outside": OUTSIDE_TARGET}
TEXT_FILES = {path: content for path, content in PINNED.items() if b"\0" not in content}


def git(repo: Path, *args: str | bytes, stdin: bytes | None = None) -> bytes:
    completed = subprocess.run([GIT, *_CONFIG, *args], cwd=repo, env=_ENV, input=stdin, capture_output=True,
                               check=False)
    assert completed.returncode == 0, (args, completed.stderr.decode("utf-8", "replace"))
    return completed.stdout


def walk(folder: Path, *, skip: set[Path] | frozenset[Path] = frozenset()) -> list[Path]:
    """Every file, link and folder under ``folder`` (sorted), not descending into ``skip``."""
    found = []
    for root, folders, names in os.walk(folder):
        here = Path(root)
        folders[:] = sorted(name for name in folders if here / name not in skip)
        found += [here / name for name in sorted(names)]
        found += [here / name for name in folders]
    return sorted(found)


def expected_lines(text: str, *, whole_word: bool = False, suffix: str = "") -> list[tuple[str, int, str]]:
    """(path, line, text) of every line of the pinned text files that contains ``text`` (git's line split)."""
    pattern = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(text.encode()) + rb"(?![A-Za-z0-9_])")
    found = []
    for path in sorted(TEXT_FILES):
        if not path.endswith(suffix):
            continue
        for number, raw in enumerate(TEXT_FILES[path].split(b"\n")[:-1], start=1):
            if (pattern.search(raw) if whole_word else text.encode() in raw):
                found.append((path, number, raw.decode("utf-8", "replace")))
    return found


@dataclass
class Repo:
    path: Path
    pin: str
    later: str | None = None

    def git(self, *args: str | bytes) -> bytes:
        return git(self.path, *args)

    def blob(self, path: str, commit: str | None = None) -> str:
        """The blob id at ``path`` (as answers show it: the name that is not UTF-8 with U+FFFD)."""
        raw = NOT_UTF8_NAME if path == NOT_UTF8_SHOWN else path.encode()
        return self.git("rev-parse", (commit or self.pin).encode() + b":" + raw).decode().strip()

    def blob_sha256(self, path: str) -> str:
        return hashlib.sha256(self.git("cat-file", "blob", self.blob(path))).hexdigest()

    def tree_paths(self) -> set[str]:
        output = self.git("ls-tree", "-r", "-z", "--name-only", "--full-tree", self.pin)
        return {name.decode("utf-8", "replace") for name in output.split(b"\0") if name}

    def state(self) -> str:
        """A fingerprint of the working tree, the index, every ref, HEAD and the repository's config."""
        digest = hashlib.sha256()
        git_dir = self.path / ".git"
        files = walk(self.path, skip={git_dir})
        files += [git_dir / name for name in ("config", "HEAD", "index", "packed-refs") if (git_dir / name).exists()]
        files += walk(git_dir / "refs")
        for file in files:
            digest.update(bytes(file.relative_to(self.path)) + b"\0")
            if file.is_symlink():
                digest.update(b"link:" + os.fsencode(os.readlink(file)))
            elif file.is_file():
                digest.update(file.read_bytes())
        return digest.hexdigest()

    def move_on(self) -> None:
        """A later commit that changes and deletes files, branches moved and switched, a dirty tree."""
        root = self.path
        (root / "src/app.py").write_text(APP_PY.replace("handle_order", "process_order") + "# later\n")
        (root / "src/new.py").write_text("handle_order = 'added later'\nlong_marker later\n")
        (root / "data/long.txt").write_text("rewritten\n")
        (root / "db/schema.sql").unlink()
        (root / "link.py").unlink()
        (root / "link.py").symlink_to("src/new.py")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "later")
        self.later = self.git("rev-parse", "HEAD").decode().strip()
        self.git("branch", "-f", "pinned-looking-branch", self.later)
        self.git("tag", "v1", self.later)
        self.git("checkout", "-q", "-b", "feature")
        (root / "src/registry.py").write_text("staged change handle_order\n")
        self.git("add", "src/registry.py")
        (root / "src/app.py").write_text("dirty working tree handle_order\n")
        (root / "untracked.py").write_text("handle_order untracked\n")


def build_repo(root: Path) -> Repo:
    """The test repository at ``root``; its first commit is the pin."""
    root.mkdir(parents=True)
    git(root, "init", "-q", ".")
    for path, content in PINNED.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    (root / os.fsdecode(NOT_UTF8_NAME)).write_bytes(NOT_UTF8_CONTENT)
    for name, target_path in SYMLINKS.items():
        (root / name).symlink_to(target_path)
    git(root, "add", "-A")
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{GITLINK},vendor/lib")
    git(root, "commit", "-q", "-m", "pinned")
    return Repo(root, git(root, "rev-parse", "HEAD").decode().strip())


BULK_FILES, BULK_LINES, EMOJI_LINES, WIDE_LINES = 30, 20, 50, 5
EMOJI_LINE = "bulk_marker {} " + "\U0001f600" * 100
WIDE_LINE = "wide_marker {} " + "w" * 1500


def build_bulk_repo(root: Path) -> Repo:
    """Many hits for the limit tests: ``bulk_marker`` on every line of 30 files of 20 lines (``pkg/``) and
    on 50 lines of four-byte characters (``uni/emoji.txt``); ``wide_marker`` on five 1,500-character lines."""
    root.mkdir(parents=True)
    git(root, "init", "-q", ".")
    (root / "pkg").mkdir()
    for number in range(BULK_FILES):
        (root / f"pkg/mod_{number:02}.py").write_text(
            "".join(f"value_{line} = 'bulk_marker {number}-{line}'\n" for line in range(BULK_LINES)))
    (root / "uni").mkdir()
    (root / "uni/emoji.txt").write_text("".join(EMOJI_LINE.format(line) + "\n" for line in range(EMOJI_LINES)))
    (root / "wide").mkdir()
    (root / "wide/long.txt").write_text("".join(WIDE_LINE.format(line) + "\n" for line in range(WIDE_LINES)))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "bulk")
    return Repo(root, git(root, "rev-parse", "HEAD").decode().strip())


def bulk_hits() -> list[tuple[str, int]]:
    """(path, line) of every ``bulk_marker`` line of the bulk repository, in git's order."""
    return ([(f"pkg/mod_{number:02}.py", line + 1) for number in range(BULK_FILES) for line in range(BULK_LINES)]
            + [("uni/emoji.txt", line + 1) for line in range(EMOJI_LINES)])


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(inner)}" for key, inner in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(inner) for inner in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def write_config(path: Path, sources: Sequence[dict[str, Any]] = (), *, databases: Sequence[dict[str, Any]] = (),
                 **top: Any) -> Path:
    """A research TOML file with these [[sources]] and [[databases]] tables (values written as given,
    unchecked)."""
    lines = [f"{key} = {_toml(value)}" for key, value in top.items()]
    for table, entries in (("sources", sources), ("databases", databases)):
        for entry in entries:
            lines.append(f"[[{table}]]")
            lines += [f"{key} = {_toml(value)}" for key, value in entry.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def source_entry(repo: Repo, name: str = "app", **limits: Any) -> dict[str, Any]:
    return {"name": name, "repository": str(repo.path), "url": f"https://git.example.invalid/{name}.git",
            "commit": repo.pin, **limits}


def open_config(folder: Path, repo: Repo, **limits: Any) -> ResearchConfig:
    return load_research_config(write_config(folder / "research.toml", [source_entry(repo, **limits)]))


def open_service(folder: Path, repo: Repo, **limits: Any) -> ResearchService:
    """A service over one source ``app``, reached through a session; captures go under ``folder/evidence``."""
    from tests.research.session_path import SessionPath

    return SessionPath(ResearchService(open_config(folder, repo, **limits)), folder)  # type: ignore[return-value]


#: Real names a tree can hold (each a file whose content is ``NAMED_CONTENT.format(index)``): both
#: Unicode normalizations, fullwidth and compatibility characters, controls, bidirectional and
#: zero-width characters, unusual spaces, backslashes, percent signs and dots that are only names.
UNUSUAL_NAMES = [
    "caf\u00e9.txt",                        # NFC
    "cafe\u0301.txt",                       # NFD (as macOS commits it): another file
    "re\u0301sume\u0301/notes.txt",         # in an NFD folder
    "\u30c7\u30fc\u30bf\uff11.txt",         # データ１.txt: a fullwidth digit
    "\uff21\uff22\uff23.txt",               # fullwidth letters A, B, C
    "half\uff0ffull.txt",                   # a fullwidth solidus is a character, not a folder
    "\uff0e\uff0e.txt",                     # fullwidth dots
    "ligature \ufb01le.txt",                # ﬁ
    "ohm \u2126.txt",                       # OHM SIGN (NFC makes it Ω)
    "dotless \u0131 and I\u0307.txt",
    "emoji \U0001f600.txt",
    "new\nline.txt",
    "tab\tname.txt",
    "cr\rname.txt",
    "esc\x1b[31mred.txt",
    "del\x7f.txt",
    "bell\x07.txt",
    "bidi \u202etxt.exe",                   # RIGHT-TO-LEFT OVERRIDE
    "isolate \u2067x\u2069.txt",
    "zero\u200bwidth.txt",
    "\ufeffbom.txt",
    "line\u2028separator.txt",
    "tag \U000e0041.txt",                   # a tag character (format, invisible)
    "nbsp\u00a0name.txt",
    "ideographic\u3000space.txt",
    " leading space.txt",
    "trailing space .txt",
    "back\\slash.txt",
    "..\\escape.txt",
    "C:\\windows.txt",
    "%2e%2e%2fpasswd.txt",
    "100%.txt",
    "...",
    ".hidden.txt",
    "a.git/inside.txt",
    ".github/ci.yml",
    "-n.txt",
    "~.txt",
    "dir.with.dots/inner.txt",
]
UNUSUAL_NOT_UTF8 = [b"caf\xe9 latin1.txt", b"\xff\xfe.txt"]
NAMED_CONTENT = "named_marker {}\n"
UNUSUAL_LINKS = {"link.txt": "caf\u00e9.txt"}
UNUSUAL_SUBMODULE = "vendor.mod/lib"


def _hash_object(root: Path, content: bytes) -> str:
    return git(root, "hash-object", "-w", "--stdin", stdin=content).decode().strip()


def build_tree_repo(root: Path, files: dict[bytes, bytes], *, links: dict[bytes, bytes] | None = None,
                    submodules: Sequence[bytes] = ()) -> Repo:
    """A repository whose one commit holds exactly these names (raw bytes), written straight into
    the index, so that no file system or checkout rule changes them."""
    root.mkdir(parents=True)
    git(root, "init", "-q", ".")
    records = [b"100644 " + _hash_object(root, content).encode() + b"\t" + name + b"\0"
               for name, content in files.items()]
    records += [b"120000 " + _hash_object(root, target).encode() + b"\t" + name + b"\0"
                for name, target in (links or {}).items()]
    records += [b"160000 " + GITLINK.encode() + b"\t" + name + b"\0" for name in submodules]
    git(root, "-c", "core.protectNTFS=false", "-c", "core.protectHFS=false", "update-index", "--add", "-z",
        "--index-info", stdin=b"".join(records))
    tree = git(root, "write-tree").decode().strip()
    commit = git(root, "commit-tree", "-m", "names", tree).decode().strip()
    git(root, "update-ref", "refs/heads/main", commit)
    return Repo(root, commit)


def build_names_repo(root: Path) -> Repo:
    """:data:`UNUSUAL_NAMES` and :data:`UNUSUAL_NOT_UTF8` (file ``i`` holds ``NAMED_CONTENT.format(i)``),
    a symlink and a submodule."""
    names = [name.encode() for name in UNUSUAL_NAMES] + UNUSUAL_NOT_UTF8
    files = {name: NAMED_CONTENT.format(index).encode() for index, name in enumerate(names)}
    links = {name.encode(): target.encode() for name, target in UNUSUAL_LINKS.items()}
    return build_tree_repo(root, files, links=links, submodules=[UNUSUAL_SUBMODULE.encode()])


def build_many_hits_repo(root: Path, files: int, lines: int) -> Repo:
    """``files`` files (``many/f_0000.txt`` …) of ``lines`` lines, each holding ``many_marker``."""
    content = {f"many/f_{number:04}.txt".encode(): "".join(f"many_marker {number}-{line}\n"
                                                          for line in range(lines)).encode()
               for number in range(files)}
    return build_tree_repo(root, content)
