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

import re
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from armarius.errors import InvalidInput
from armarius.memory.model import SLUG_PATTERN
from armarius.transfer.model import (
    Note,
    Plan,
    Problems,
    SlugBook,
    clean_tags,
    clean_title,
    digest_of,
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


class _Read:
    """One note file as read, before its links are resolved."""

    def __init__(self, where: str, key: str, meta: dict[str, Any], body: str) -> None:
        self.where, self.key, self.meta, self.body = where, key, meta, body


def read_folder(root: Path, *, prefix: str = "") -> Plan:
    folder = root / "entries" if (root / MANIFEST).is_file() else root
    files = sorted(path for path in folder.rglob("*.md")
                   if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts))
    too_large = [path for path in files if path.stat().st_size > FILE_MAX_BYTES]
    if too_large:
        raise InvalidInput(f"{too_large[0].relative_to(folder)} is larger than {FILE_MAX_BYTES} bytes, far more than "
                           "an entry holds; nothing was imported.", field="source")
    contents = [path.read_bytes() for path in files]
    plan, problems = Plan(kind="markdown", source=root.name or str(root), digest=digest_of(
        *(part for path, content in zip(files, contents, strict=True)
          for part in (path.relative_to(folder).as_posix().encode(), content)))), Problems()
    notes = [note for path, content in zip(files, contents, strict=True)
             if (note := _read_note(path.relative_to(folder).as_posix(), content, problems)) is not None]
    problems.raise_if_any(plan.source)

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
        title_text = str(title) if title not in (None, "") else heading.group(1) if heading else fallback
        body = _WIKILINK.sub(partial(_link, names=names, prefix=prefix, where=note.where, plan=plan), note.body)
        tags = note.meta.get("tags") or []
        tag_list = re.split(r"[,\s]+", tags) if isinstance(tags, str) else tags if isinstance(tags, list) else [tags]
        plan.notes.append(Note(slug=slug, title=clean_title(title_text, slug), body=body,
                               tags=clean_tags(tag_list, note.where, plan), origin=note.where))
    return plan


def _read_note(where: str, content: bytes, problems: Problems) -> _Read | None:
    try:
        text = content.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = content[:error.start].count(b"\n") + 1
        problems.add(f"{where} line {line}", f"not UTF-8 text (byte {error.start + 1} of the file); save it as UTF-8")
        return None
    meta, body = split_front_matter(text, where, problems)
    if meta is None:
        return None
    return _Read(where, where.removesuffix(".md"), meta, body)


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
    try:
        meta = yaml.load("\n".join(lines[1:end]), Loader=_LOADER)  # noqa: S506 - a safe loader
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
