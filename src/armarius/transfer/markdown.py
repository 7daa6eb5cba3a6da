"""A folder of Markdown notes with YAML front matter (Obsidian, basic-memory, Armarius's own export).

A note's slug is its front matter's ``slug`` or ``permalink`` when that is a valid slug, else its
path without ``.md``, each folder a slug segment. Its title is the front matter's ``title``, else
its first ``# heading``, else its file name; its tags are the front matter's ``tags``. Wikilinks
(``[[Note]]``, ``[[folder/Note|shown text]]``, ``[[Note#Heading]]``) become ``[[slug]]`` links to the
note they name (by path, file name, title or slug); a link to no note in the folder keeps a link
to the slug its name would have, and is noted. The body is kept byte for byte otherwise.

Hidden files and folders (``.obsidian``, ``.trash``, ``.git``) are left out. An Armarius export
folder (it holds ``armarius-export.json``) is read from its ``entries`` folder.
"""

from __future__ import annotations

import os
import re
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from armarius.errors import InvalidInput, echo
from armarius.files import open_folder, read_regular
from armarius.memory.model import SLUG_PATTERN
from armarius.transfer.model import (
    Note,
    Plan,
    Problems,
    SlugBook,
    clean_tags,
    clean_title,
    digest_of,
    shown_name,
    slug_segment,
    slugify,
)

MANIFEST = "armarius-export.json"
#: A file larger than this is refused before it is read (an entry's body holds far less).
FILE_MAX_BYTES = 16 * 1024 * 1024
_FENCES = ("---", "...")
#: PyYAML's safe loader and dumper, in C when PyYAML was built with libyaml.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]|#\n]*)(#[^\[\]|\n]*)?(?:\|([^\[\]\n]*))?\]\]")
_HEADING = re.compile(r"^# +(.+?)\s*#*\s*$", re.MULTILINE)
#: What a tag in a list of front matter tags may be (YAML reads 2024 as a number, true as a boolean).
_SCALARS = (str, int, float, date)


class _Read:
    """One note file as read, before its links are resolved."""

    def __init__(self, where: str, key: str, meta: dict[str, Any], body: str) -> None:
        self.where, self.key, self.meta, self.body = where, key, meta, body


def read_folder(root: Path, *, prefix: str = "") -> Plan:
    folder = root / "entries" if (root / MANIFEST).is_file() else root
    problems, links = Problems(), list[str]()
    if folder is not root and folder.is_symlink():  # an export folder's entries: never read elsewhere
        files, links = [], ["entries"]
    else:
        files = _files(folder, problems, links)
    contents = _contents(root, folder, files, problems)
    source = shown_name(root.name or str(root))
    notes = [note for path, content in contents
             if (note := _read_note(path.relative_to(folder).as_posix(), content, problems)) is not None]
    problems.raise_if_any(source)
    plan = Plan(kind="markdown", source=source, digest=digest_of(
        *(part for path, content in contents for part in (path.relative_to(folder).as_posix().encode(), content))))
    plan.notices += [f"{link}: a symbolic link, not followed (left out)" for link in links]

    book, slugs = SlugBook(prefix), {}
    for note in notes:
        wanted = note.meta.get("slug", note.meta.get("permalink"))
        slug = book.assign(wanted if isinstance(wanted, str) and SLUG_PATTERN.fullmatch(wanted)
                           else slugify(note.key, separator="/"))
        slugs[note.where] = slug
        if slug != note.key:
            plan.renamed.append({"origin": note.where, "name": note.key, "slug": slug})
    names = _link_names(notes, slugs)
    for note in notes:
        slug = slugs[note.where]
        title = note.meta.get("title")
        heading = _HEADING.search(note.body)
        fallback = note.key.rsplit("/", 1)[-1]
        title_text = title if title else heading.group(1) if heading else fallback
        body = _WIKILINK.sub(partial(_link, names=names, prefix=prefix, where=note.where, plan=plan), note.body)
        tags = note.meta.get("tags") or []
        tag_list = re.split(r"[,\s]+", tags) if isinstance(tags, str) else [tag for tag in tags if tag is not None]
        plan.notes.append(Note(slug=slug, title=clean_title(title_text, slug), body=body,
                               tags=clean_tags(tag_list, note.where, plan), origin=note.where))
    return plan


def _contents(root: Path, folder: Path, files: list[Path], problems: Problems) -> list[tuple[Path, bytes]]:
    """Each note file with its bytes; a file that is no longer a regular file when it is read is a problem."""
    contents = []
    for path in files:
        content = _content(root, folder, path)
        if content is None:
            problems.add(shown_name(path.relative_to(folder).as_posix()),
                         "a symbolic link or not a regular file when it was read (it was replaced after the folder "
                         "was listed): links are never followed; see who changes the folder, then import again")
        else:
            contents.append((path, content))
    return contents


def _content(root: Path, folder: Path, path: Path) -> bytes | None:
    """The bytes of the note file ``path`` (below ``folder``, itself ``root`` or below it), read without
    following a link at any component below ``root`` and without waiting on a FIFO; None when it is no longer a
    regular file (a link or a FIFO put in its place since the folder was listed). A file over FILE_MAX_BYTES is
    refused before more of it is read."""
    with open_folder(root, path.parent) as descriptor:
        found = None if descriptor is None else read_regular(descriptor, path.name, limit=FILE_MAX_BYTES + 1)
    if found is not None and max(found.size, len(found.content)) > FILE_MAX_BYTES:
        raise InvalidInput(f"{echo(shown_name(path.relative_to(folder).as_posix()))} is larger than {FILE_MAX_BYTES} "
                           "bytes, far more than an entry holds; nothing was imported.", field="source")
    return None if found is None else found.content


def _read_note(relative: str, content: bytes, problems: Problems) -> _Read | None:
    """The note at the path ``relative`` (below the folder read) holding ``content``; None after naming a problem."""
    where = shown_name(relative)
    try:
        text = content.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = content[:error.start].count(b"\n") + 1
        problems.add(f"{where} line {line}", f"not UTF-8 text (byte {error.start + 1} of the file); save it as UTF-8")
        return None
    meta, body = split_front_matter(text, where, problems)
    if meta is None:
        return None
    wrong = [f"its {key} is not text" for key in ("title", "slug", "permalink")
             if meta.get(key) is not None and not isinstance(meta[key], str)]
    tags = meta.get("tags")
    if tags is not None and not isinstance(tags, str) and not (
            isinstance(tags, list) and all(tag is None or isinstance(tag, _SCALARS) for tag in tags)):
        wrong.append("its tags are neither a text nor a list of texts")
    if wrong:
        problems.add(f"{where} line 2", f"front matter: {'; '.join(wrong)}")
        return None
    return _Read(where, relative.removesuffix(".md"), meta, body)


def _files(folder: Path, problems: Problems, links: list[str]) -> list[Path]:
    """Every Markdown file below the folder but hidden ones, in order. A symbolic link (to a note or a
    folder) is never followed, so that nothing outside the folder is read: each is named in ``links``.
    A name that is not UTF-8 is a problem."""
    found = []
    for top, folders, names in os.walk(folder):  # a linked folder is listed here, never entered
        here = Path(top)
        folders[:] = [name for name in folders if not name.startswith(".")]
        links += [shown_name((here / name).relative_to(folder).as_posix())
                  for name in folders if (here / name).is_symlink()]
        for name in names:
            path = here / name
            relative = path.relative_to(folder).as_posix()
            if name.startswith(".") or not name.endswith(".md"):
                continue
            if path.is_symlink():
                links.append(shown_name(relative))
                continue
            if not path.is_file():
                continue
            try:
                relative.encode("utf-8")
            except UnicodeEncodeError:
                problems.add(shown_name(relative), "the file name is not UTF-8; rename the file")
                continue
            found.append(path)
    return sorted(found)


def split_front_matter(text: str, where: str, problems: Problems) -> tuple[dict[str, Any] | None, str]:
    """The front matter (empty when there is none) and the body after it (one blank line after the
    closing fence dropped); None after naming a problem."""
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "---":
        return {}, text
    end = next((number for number, line in enumerate(lines[1:], 1) if line.rstrip("\r") in _FENCES), None)
    if end is None:
        problems.add(f"{where} line 1", "front matter opened with '---' is never closed by a line '---'")
        return None, ""
    front = "\n".join(lines[1:end])
    try:
        shared = next((event for event in yaml.parse(front, Loader=_LOADER)
                       if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None), None)
        if shared is not None:
            problems.add(f"{where} line {2 + (shared.start_mark.line if shared.start_mark else 0)}",
                         "front matter with YAML anchors or aliases ('&name', '*name') is not read; write the "
                         "values out")
            return None, ""
        meta = yaml.load(front, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = min(2 + (mark.line if mark is not None else 0), end)  # an error at its end: its last line
        problems.add(f"{where} line {line}", f"front matter is not valid YAML ({getattr(error, 'problem', error)})")
        return None, ""
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        problems.add(f"{where} line 2", "front matter must be keys with values (a YAML mapping)")
        return None, ""
    rest = lines[end + 1:]
    if rest and not rest[0].strip():
        rest = rest[1:]
    return meta, "\n".join(rest)


def _link_names(notes: list[_Read], slugs: dict[str, str]) -> dict[str, str]:
    """Every name a wikilink may use for a note, lowercased: its path, slug, title, file name (when unique)."""
    names: dict[str, str] = {}
    stems: dict[str, list[str]] = {}
    for note in notes:
        slug = slugs[note.where]
        stems.setdefault(note.key.rsplit("/", 1)[-1].lower(), []).append(slug)
        for name in (note.key, slug, note.meta.get("title"), note.meta.get("permalink")):
            if isinstance(name, str) and name:
                names.setdefault(name.lower(), slug)
    for stem, found in stems.items():
        if len(found) == 1:
            names.setdefault(stem, found[0])
    return names


def _link(match: re.Match[str], *, names: dict[str, str], prefix: str, where: str, plan: Plan) -> str:
    embed, target, _, shown = match.groups()
    name = target.strip().removesuffix(".md")
    if embed or ("." in name.rsplit("/", 1)[-1] and name.lower() not in names):
        return match.group(0)  # an embedded file or a link to an attachment stays as written
    slug = names.get(name.lower())
    if slug is None:
        slug = prefix + slugify(name, separator="/") if any(map(slug_segment, name.split("/"))) else None
        plan.notices.append(f"{where}: [[{name}]] names no note in the folder"
                            + (f"; kept as a link to {slug}" if slug else "; kept as text"))
        if slug is None:
            return match.group(0)
    link = f"[[{slug}]]"
    return f"{shown.strip()} ({link})" if shown and shown.strip() else link


def render_note(meta: dict[str, Any], body: str) -> str:
    """A note with front matter, as the folder reader reads it back."""
    front = yaml.dump(meta, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000)
    return f"---\n{front}---\n\n{body}"
