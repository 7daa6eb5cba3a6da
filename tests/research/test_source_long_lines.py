"""A very long line costs work in proportion to its length and memory for its start only.

git writes a matching line whole, and ``source.read`` gets a blob whole, in chunks of a mebibyte; a
line of hundreds of mebibytes (minified code, a data dump) must neither be rebuilt for every chunk
nor held: only its first ``LINE_BYTES`` bytes are kept, with whether the whole line is UTF-8, which
is all an answer shows (``max_line_length`` characters, ``truncated``, ``not_utf8``). The tests check
what is kept, not how long it takes: tracemalloc's peak stays far below the line's length.
"""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from armarius.research.config import _LIMIT_RANGES, SourceLimits
from armarius.research.git import LINE_BYTES, GrepRun, LineStart, _grep_runs
from armarius.research.service import ResearchService
from armarius.research.source import _LineReader, _text
from tests.research.repos import build_tree_repo, open_config

MIB = 1 << 20
#: The long lines' length: far more than the memory the tests allow (so holding a line fails them).
LONG = 24 * MIB
#: Memory a long line may cost: a few chunks of git's output and copies of the kept start of the line.
BOUND = 6 * LINE_BYTES
#: The same through the service, which also hashes the blob and writes the answer.
SERVICE_BOUND = 12 * LINE_BYTES
PREFIX = b"c0ffee:"


def peak(work: Callable[[], Any]) -> tuple[Any, int]:
    """What ``work`` returns and the most memory Python held while it ran."""
    tracemalloc.start()
    try:
        return work(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def long_line(end: bytes = b"") -> Iterator[bytes]:
    """``LONG`` bytes of one line in chunks of a mebibyte (the same chunk again: the input holds no
    memory): ``needle``, a two-byte character cut by every chunk edge, and ``end``."""
    chunk = b"\xa9" + b"\xc3\xa9" * (MIB // 2 - 1) + b"\xc3"
    yield b"needle " + b"\xc3\xa9" * ((MIB - 8) // 2) + b"\xc3"
    for _ in range(LONG // MIB - 2):
        yield chunk
    yield b"\xa9" + b"y" * (MIB - 1 - len(end)) + end


def expected_text(end: bytes, limit: int = 500) -> tuple[str, bool, bool]:
    return ("needle " + "\u00e9" * (limit - 7)), True, bool(end)  # an end that is not UTF-8


def test_the_start_kept_of_a_line_shows_as_much_as_any_limit_allows() -> None:
    most = int(_LIMIT_RANGES["max_line_length"][1])
    assert 4 * most + 4 <= LINE_BYTES  # four UTF-8 bytes a character at the largest max_line_length


@pytest.mark.parametrize("end", [b"", b"\xff", b"\xc3", b"\xe2\x82"])
def test_a_long_matching_line_is_read_from_git_in_bounded_memory(end: bytes) -> None:
    chunks = [PREFIX + b"big.js\x001\x00", *long_line(end), b"\n" + PREFIX + b"small.py\x003\x00needle\r\n"]

    def parse() -> list[tuple[str, int, tuple[str, bool, bool], int]]:
        return [(line.path, line.line, _text(line.text, 500), run.count)
                for run in _grep_runs(iter(chunks), PREFIX) for line in run.lines()]

    runs, most = peak(parse)
    assert runs == [("big.js", 1, expected_text(end), 1), ("small.py", 3, ("needle", False, False), 1)]
    assert most < BOUND


@pytest.mark.parametrize("end", [b"", b"\xff", b"\xc3"])
def test_a_long_line_is_read_from_a_blob_in_bounded_memory(end: bytes) -> None:
    chunks = [b"first\n", *long_line(end), b"\nthird\n"]

    def read() -> tuple[list[dict[str, Any]], int, str]:
        reader = _LineReader(SourceLimits(), 2, 3)
        for chunk in chunks:
            reader.feed(chunk)
        return reader.lines, reader.finish(), reader.sha256.hexdigest()

    (lines, total, digest), most = peak(read)
    assert digest == hashlib.sha256(b"".join(chunks)).hexdigest()
    text, _cut, not_utf8 = expected_text(end)
    assert lines == [{"line": 2, "text": text, "truncated": True, **({"not_utf8": True} if not_utf8 else {})},
                     {"line": 3, "text": "third"}]
    assert total == 3
    assert most < BOUND


# --- the same answers as from the whole line, however the line is cut ------------------------------------------

SMALL_LINE_BYTES = 32
LIMIT = (SMALL_LINE_BYTES - 4) // 4  # the most characters a start of SMALL_LINE_BYTES bytes answers for
PIECES = st.lists(st.sampled_from([b"a", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xe9", b"\xc3",
                                   b"\r", b"\0", b"long " * 5]), max_size=40).map(b"".join)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=4), st.lists(st.integers(1, 40), max_size=10))
def test_a_line_kept_by_its_start_answers_as_the_whole_line(lines: list[bytes], cuts: list[int]) -> None:
    """With a start of 32 bytes, lines of any length, cut into any chunks, by search and by read."""
    output = b"".join(PREFIX + b"f\0" + str(number).encode() + b"\0" + line + b"\n"
                      for number, line in enumerate(lines, start=1))
    chunks, position = [], 0
    for size in cuts:
        chunks.append(output[position:position + size])
        position += size
    chunks.append(output[position:])
    with patch("armarius.research.git.LINE_BYTES", SMALL_LINE_BYTES):
        runs: list[GrepRun] = list(_grep_runs(iter(chunks), PREFIX))
        found = [(line.line, _text(line.text, LIMIT)) for run in runs for line in run.lines()]
        starts = []
        for line in lines:
            start, rest = LineStart(), line
            for size in cuts:
                start.add(rest[:size])
                rest = rest[size:]
            start.add(rest)
            start.end()
            starts.append(_text(start, LIMIT))
    expected = [_text(line, LIMIT) for line in lines]
    assert found == list(enumerate(expected, start=1))
    assert starts == expected


# --- through the service, from a real repository -----------------------------------------------------------------


def test_long_lines_of_a_repository_are_searched_and_read_in_bounded_memory(tmp_path: Path) -> None:
    valid, invalid = b"".join(long_line()), b"".join(long_line(b"\xff"))
    content = b"first\n" + valid + b"\n" + invalid + b"\nneedle at the end\n"
    repo = build_tree_repo(tmp_path / "repo", {b"min.js": content})
    service = ResearchService(open_config(tmp_path, repo))
    text = expected_text(b"")[0]
    answer, most = peak(lambda: service.query({"kind": "source.search", "text": "needle"})["result"])
    assert [(hit["line"], hit["text"], hit.get("truncated"), hit.get("not_utf8")) for hit in answer["hits"]] == [
        (2, text, True, None), (3, text, True, True), (4, "needle at the end", None, None)]
    assert (answer["truncated_lines"], answer["total_hits"], answer["complete"]) == (2, 3, False)
    assert most < SERVICE_BOUND
    read, most = peak(lambda: service.query({"kind": "source.read", "path": "min.js", "start_line": 1,
                                             "end_line": 4})["result"])
    assert read["lines"] == [{"line": 1, "text": "first"}, {"line": 2, "text": text, "truncated": True},
                             {"line": 3, "text": text, "truncated": True, "not_utf8": True},
                             {"line": 4, "text": "needle at the end"}]
    assert (read["total_lines"], read["blob_sha256"]) == (4, hashlib.sha256(content).hexdigest())
    assert most < SERVICE_BOUND
