"""Source search figures (BENCHMARKS.md, "Source search"): ``source.search`` next to ``git grep -F``.

The corpus is a large real source tree built without network access to source hosts: the unpacked
source distribution of a big PyPI package (default ``django==5.2.19``, about 7,000 files), committed
into a fresh bare repository with a fixed author, committer and date, so the commit hash is the same
on every machine with the same git. It is cached under /tmp/armarius-bench-corpus (``--rebuild``
builds it again).

Literals are chosen deterministically (seeded) from the identifiers of the tree: **rare** ones occur
(as a fixed string) in 1-3 files, **frequent** ones in 100-999 files, **common** ones in 1,000 files
or more (more files than an answer lists: ``max_files``, so the answer is cut, and git grep prints
every line); **prefixed** queries are frequent literals limited to one directory of the tree
(``path_prefix``).

For every literal, ``git grep -n -F -I -e WORD <commit>`` (argument vector, no pager, no system or
global git configuration) and ``ResearchService.query`` (which also writes its capture file) are
run once each to warm the caches, then timed once each, alternately. "Ours" is what a research session
does: ``ResearchService.answer``, then its capture file written into an evidence folder. The table gives
p50/p95 per class and the ratio ours / git grep (target: <= 1.3x, capture writing included).

    .venv/bin/python bench/source_search.py [--rebuild] [--queries 30] [--package django==5.2.19]
                                            [--profile] [--alternatives [--alternative-queries N]]
                                            [--pages [--repeat 3]]

If ``armarius.research.service`` cannot be imported yet, only the git grep baseline is printed.

``--pages`` times single pages instead: the first page and a deep page (``offset`` at 90 % of the
hits, ``limit: 1``) of the very common literals ``" "`` and ``"e"`` and of the first frequent and
rare literal, each case in a fresh process against ``git grep -z -n -F -I`` over the whole tree
(alternately, median of ``--repeat``), with the process's peak RSS while it queries (``VmHWM``,
reset after start-up) and tracemalloc's peak for one query.

``--alternatives`` times, instead of ``source.search``, in-process readers of the same commit against
``git grep -n -F -I`` (also with ``--threads=1``) for the rare, frequent and common literals: pygit2 (libgit2)
and dulwich (the ``bench`` extra), each with a tree walk per query ("cold tree walk") and with the
commit's blob list made once ("tree cached"), every blob read from the object database, binary blobs
(a NUL byte in the first 8,000 bytes) skipped, lines holding the literal bytes counted. Every method
runs once untimed, then each literal once per method, the methods alternately; each count is checked
against git grep's. The in-process readers take the first ``--alternative-queries`` literals of each
class (default: all; fewer when their warm-up shows they would need more than 30 s each). dulwich is
also timed with its in-process object cache emptied before each query (see ``dulwich_variants``).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import os
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A fixed, well-known cache path so that reruns (and research configs) find the corpus.
CORPUS_DIR = Path("/tmp/armarius-bench-corpus")  # noqa: S108
DEFAULT_PACKAGE = "django==5.2.19"
SEED = 20261129
SOURCE_NAME = "corpus"
MAX_HITS = 1000
MAX_FILES = 1000
RARE_FILES = (1, 3)
FREQUENT_FILES = (100, 999)
#: In more files than an answer lists (MAX_FILES): chosen among identifiers in at least half as many files.
COMMON_FILES = (MAX_FILES, 10**9)
#: Prefixed queries: a directory holding at least this share of the tree's files, but not all of it.
PREFIX_FILES = (300, 1500)
TARGET_RATIO = 1.3
CLASSES = ("rare", "frequent", "common", "prefixed")
#: Git's own binary test (``buffer_is_binary``): a NUL byte in the first 8,000 bytes.
BINARY_PROBE = 8000
IDENTIFIER = re.compile(rb"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]{5,40}(?![A-Za-z0-9_])")

COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "Armarius Bench",
    "GIT_AUTHOR_EMAIL": "bench@armarius.invalid",
    "GIT_AUTHOR_DATE": "2026-11-29T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Armarius Bench",
    "GIT_COMMITTER_EMAIL": "bench@armarius.invalid",
    "GIT_COMMITTER_DATE": "2026-11-29T00:00:00+00:00",
}


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "LC_ALL": "C"})
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    return env


GIT_ENV = git_env()


def git(repo: Path, *args: str, env: dict[str, str] | None = None, ok: Sequence[int] = (0,)) -> bytes:
    command = ["git", "--no-pager", "-C", str(repo), *args]
    completed = subprocess.run(command, env=env or GIT_ENV, capture_output=True, check=False)
    if completed.returncode not in ok:
        raise RuntimeError(f"{' '.join(command)}: exit {completed.returncode}: {completed.stderr.decode()[-2000:]}")
    return completed.stdout


# --- corpus ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    package: str
    sdist: str
    repo: Path
    commit: str
    files: int
    blob_bytes: int
    pack_bytes: int

    @classmethod
    def load(cls, directory: Path) -> Corpus | None:
        try:
            meta = json.loads((directory / "meta.json").read_text())
            corpus = cls(package=meta["package"], sdist=meta["sdist"], repo=Path(meta["repo"]), commit=meta["commit"],
                         files=meta["files"], blob_bytes=meta["blob_bytes"], pack_bytes=meta["pack_bytes"])
            git(corpus.repo, "cat-file", "-e", f"{corpus.commit}^{{commit}}")
        except (OSError, KeyError, ValueError, RuntimeError):
            return None
        return corpus

    def save(self, directory: Path) -> None:
        meta = {"package": self.package, "sdist": self.sdist, "repo": str(self.repo), "commit": self.commit,
                "files": self.files, "blob_bytes": self.blob_bytes, "pack_bytes": self.pack_bytes}
        (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def download_sdist(package: str, destination: Path) -> Path:
    """``pip download`` the source distribution (PyPI only; no other host is reached)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--dest", str(destination), package]
    subprocess.run(command, check=True)
    archives = sorted(path for path in destination.iterdir() if path.name.endswith((".tar.gz", ".zip", ".tar.bz2")))
    if len(archives) != 1:
        raise RuntimeError(f"expected one source archive in {destination}, found {[p.name for p in archives]}")
    return archives[0]


def unpack(archive: Path, destination: Path) -> Path:
    if archive.name.endswith(".zip"):
        shutil.unpack_archive(archive, destination)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(destination, filter="data")
    entries = list(destination.iterdir())
    # An sdist holds one top folder (name-version/); its contents become the repository root.
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else destination


def build_corpus(package: str, directory: Path) -> Corpus:
    print(f"building the corpus from the sdist of {package} in {directory} ...", flush=True)
    started = time.perf_counter()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="armarius-bench-sdist-") as scratch_name:
        scratch = Path(scratch_name)
        (scratch / "download").mkdir()
        (scratch / "tree").mkdir()
        archive = download_sdist(package, scratch / "download")
        tree = unpack(archive, scratch / "tree")
        repo = directory / "repo"
        env = {**GIT_ENV, **COMMIT_ENV}
        settings = ["-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", "-c", "core.hooksPath=/dev/null",
                    "-c", "core.fileMode=true", "-c", "commit.gpgSign=false", "-c", "gc.auto=0",
                    "-c", "maintenance.auto=false"]
        subprocess.run(["git", *settings, "init", "--quiet", "--bare", str(repo)], env=env, check=True)
        work = ["--git-dir", str(repo), "--work-tree", str(tree)]
        # -f: the sdist's own .gitignore must not drop files that the distribution ships.
        git(repo, *settings, *work, "add", "--all", "--force", ".", env=env)
        git(repo, *settings, *work, "commit", "--quiet", "--no-verify", "-m", f"{archive.name} unpacked", env=env)
        sdist = archive.name
    git(repo, "gc", "--quiet", "--prune=now")
    commit = git(repo, "rev-parse", "HEAD").decode().strip()
    files, blob_bytes = tree_size(repo, commit)
    pack_bytes = sum(path.stat().st_size for path in (repo / "objects").rglob("*") if path.is_file())
    corpus = Corpus(package=package, sdist=sdist, repo=repo, commit=commit, files=files, blob_bytes=blob_bytes,
                    pack_bytes=pack_bytes)
    corpus.save(directory)
    print(f"built in {time.perf_counter() - started:.1f} s", flush=True)
    return corpus


def tree_size(repo: Path, commit: str) -> tuple[int, int]:
    files = blob_bytes = 0
    for line in git(repo, "ls-tree", "-r", "-l", "-z", commit).split(b"\0"):
        if not line:
            continue
        meta, _, _ = line.partition(b"\t")
        _mode, kind, _oid, size = meta.split()
        if kind == b"blob":
            files += 1
            blob_bytes += int(size)
    return files, blob_bytes


def corpus_for(package: str, rebuild: bool) -> Corpus:
    corpus = None if rebuild else Corpus.load(CORPUS_DIR)
    if corpus is not None and corpus.package != package:
        print(f"cached corpus is {corpus.package}, not {package}: rebuilding", flush=True)
        corpus = None
    return corpus or build_corpus(package, CORPUS_DIR)


def text_blobs(repo: Path, commit: str) -> Iterator[tuple[str, bytes]]:
    """(path, content) of every blob of the commit that git grep -I treats as text."""
    entries: list[tuple[str, str]] = []
    for line in git(repo, "ls-tree", "-r", "-z", commit).split(b"\0"):
        if not line:
            continue
        meta, _, raw_path = line.partition(b"\t")
        _mode, kind, oid = meta.split()
        if kind == b"blob":
            entries.append((raw_path.decode("utf-8", "surrogateescape"), oid.decode()))
    request = "".join(f"{oid}\n" for _, oid in entries).encode()
    output = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"], input=request, env=GIT_ENV,
                            capture_output=True, check=True).stdout
    stream = io.BytesIO(output)
    for path, _oid in entries:
        header = stream.readline().split()
        size = int(header[2])
        content = stream.read(size)
        stream.read(1)
        if b"\0" not in content[:BINARY_PROBE]:
            yield path, content


# --- literals -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    kind: str
    text: str
    files: int
    path_prefix: str | None = None


def choose_queries(corpus: Corpus, count: int) -> list[Query]:
    """Seeded choice of rare / frequent / prefixed / common literals, checked as fixed strings over the text
    blobs (common last, so that the other classes are the literals earlier runs chose)."""
    blobs = list(text_blobs(corpus.repo, corpus.commit))
    document_frequency: Counter[bytes] = Counter()
    for _path, content in blobs:
        document_frequency.update(set(IDENTIFIER.findall(content)))
    rng = random.Random(SEED)

    def files_with(word: bytes, prefix: str = "") -> int:
        return sum(1 for path, content in blobs if path.startswith(prefix) and word in content)

    def pick(candidates: list[bytes], bounds: tuple[int, int], prefix: str = "") -> list[tuple[bytes, int]]:
        chosen: list[tuple[bytes, int]] = []
        rng.shuffle(candidates)
        for word in candidates:
            # Token counts are a lower bound: the fixed string also matches inside longer identifiers.
            files = files_with(word, prefix)
            if bounds[0] <= files <= bounds[1]:
                chosen.append((word, files))
                if len(chosen) == count:
                    break
        return chosen

    by_frequency = sorted(document_frequency.items())
    rare = pick([word for word, df in by_frequency if RARE_FILES[0] <= df <= RARE_FILES[1] and len(word) >= 8],
                RARE_FILES)
    frequent = pick([word for word, df in by_frequency if FREQUENT_FILES[0] <= df <= FREQUENT_FILES[1]],
                    FREQUENT_FILES)
    prefix = choose_prefix([path for path, _ in blobs])
    in_prefix: Counter[bytes] = Counter()
    for path, content in blobs:
        if path.startswith(prefix):
            in_prefix.update(set(IDENTIFIER.findall(content)))
    prefixed = pick([word for word, df in sorted(in_prefix.items()) if df >= 20], (20, 10**9), prefix)
    common = pick([word for word, df in by_frequency if df >= COMMON_FILES[0] // 2], COMMON_FILES)
    queries = [Query("rare", word.decode(), files) for word, files in rare]
    queries += [Query("frequent", word.decode(), files) for word, files in frequent]
    queries += [Query("common", word.decode(), files) for word, files in common]
    queries += [Query("prefixed", word.decode(), files, prefix) for word, files in prefixed]
    return queries


def choose_prefix(paths: list[str]) -> str:
    """The deepest-first largest directory with a few hundred to ~1,500 text files (deterministic)."""
    directories: Counter[str] = Counter()
    for path in paths:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directories["/".join(parts[:depth]) + "/"] += 1
    fitting = [(files, name) for name, files in directories.items() if PREFIX_FILES[0] <= files <= PREFIX_FILES[1]]
    if not fitting:
        return ""
    return max(fitting, key=lambda item: (item[0], item[1]))[1]


# --- timing ---------------------------------------------------------------------------------------


@dataclass
class Sample:
    query: Query
    grep_seconds: float
    grep_lines: int
    #: The first call for this literal: page cache warm (git grep ran), blob-hash memo cleared.
    first_seconds: float | None = None
    #: The second call, same literal, into a second evidence folder (so the capture is written again).
    repeat_seconds: float | None = None
    ours_hits: int | None = None
    ours_truncated: bool | None = None


def grep_command(corpus: Corpus, query: Query) -> list[str]:
    command = ["git", "--no-pager", "-C", str(corpus.repo), "grep", "-n", "-F", "-I", "-e", query.text, corpus.commit]
    if query.path_prefix:
        command += ["--", query.path_prefix]
    return command


def run_grep(command: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    completed = subprocess.run(command, env=GIT_ENV, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"{command}: exit {completed.returncode}: {completed.stderr.decode()[-2000:]}")
    return elapsed, completed.stdout.count(b"\n")


class RecordingSearch:
    """``source.search`` as a research session records it: the service's answer (it writes nothing
    itself), its capture file written into the evidence folder, and the view the caller is shown."""

    def __init__(self, service: Any, evidence_dir: Path, write_capture: Callable[[Path, Any], Path]) -> None:
        self.service, self.evidence_dir, self.write_capture = service, evidence_dir, write_capture

    def query(self, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = self.service.answer(arguments)
        self.write_capture(self.evidence_dir, answer.capture)
        view: dict[str, Any] = answer.view()
        return view


def research_interface() -> tuple[Callable[[Path], Any], Callable[..., RecordingSearch]] | str:
    """(load_research_config, a maker of RecordingSearch from a config and an evidence folder), or why they
    cannot be imported."""
    try:
        from armarius.research.captures import write_capture
        from armarius.research.config import load_research_config
        from armarius.research.service import ResearchService
    except ImportError as error:
        return f"{type(error).__name__}: {error}"

    def recording(config: Any, *, evidence_dir: Path) -> RecordingSearch:
        return RecordingSearch(ResearchService(config), evidence_dir, write_capture)

    return load_research_config, recording


def clear_blob_memo(config: Any) -> bool:
    """Forget the blob-hash memo of every configured repository, so a first call starts cold."""
    for source in config.sources.values():
        source.repository._sha256.clear()  # measurement only: the memo is private to the repository
    return True


def write_config(corpus: Corpus, folder: Path) -> Path:
    path = folder / "research.toml"
    path.write_text(
        "[[sources]]\n"
        f"name = {json.dumps(SOURCE_NAME)}\n"
        f"repository = {json.dumps(str(corpus.repo))}\n"
        f"url = {json.dumps('https://example.invalid/' + corpus.package.split('=')[0] + '.git')}\n"
        f"commit = {json.dumps(corpus.commit)}\n"
        f"max_hits = {MAX_HITS}\n"
        f"max_files = {MAX_FILES}\n"
    )
    return path


def count_hits(result: Any) -> tuple[int | None, bool | None]:
    """Hit count and 'something was cut' of a source.search result (None when the shape is unknown)."""
    if not isinstance(result, dict):
        return None, None
    complete = result.get("complete")
    cut = None if complete is None else not complete
    hits = result.get("hits")
    return (len(hits) if isinstance(hits, list) else None), cut


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    ours_error: str | None = None
    memo_cleared: bool = False
    evidence_files: int = 0
    evidence_bytes: int = 0
    profiles: dict[str, cProfile.Profile] = field(default_factory=dict)


class Timer:
    """Times one callable, under a profiler when one is given."""

    def __init__(self, profiler: cProfile.Profile | None) -> None:
        self.profiler = profiler

    def __call__(self, call: Callable[[], Any]) -> tuple[float, Any]:
        if self.profiler is not None:
            self.profiler.enable()
        started = time.perf_counter()
        value = call()
        elapsed = time.perf_counter() - started
        if self.profiler is not None:
            self.profiler.disable()
        return elapsed, value


def measure(corpus: Corpus, queries: list[Query], profile: bool) -> Run:
    run = Run()
    interface = research_interface()
    if isinstance(interface, str):
        run.ours_error = interface
        for query in queries:
            command = grep_command(corpus, query)
            run_grep(command)
            seconds, lines = run_grep(command)
            run.samples.append(Sample(query, seconds, lines))
        return run
    load_research_config, service_class = interface
    with tempfile.TemporaryDirectory(prefix="armarius-bench-research-") as scratch_name:
        scratch = Path(scratch_name)
        config = load_research_config(write_config(corpus, scratch))
        # Two evidence folders: the repeat call's capture is new there, so every timed call writes a file.
        first_service = service_class(config, evidence_dir=scratch / "evidence-first")
        repeat_service = service_class(config, evidence_dir=scratch / "evidence-repeat")
        first_service.query({"kind": "source.search", "source": SOURCE_NAME, "text": "import"})  # loads the tree
        if profile:
            run.profiles = {"first": cProfile.Profile(), "repeat": cProfile.Profile()}
        time_first, time_repeat = Timer(run.profiles.get("first")), Timer(run.profiles.get("repeat"))
        for query in queries:
            command = grep_command(corpus, query)
            arguments: dict[str, Any] = {"kind": "source.search", "source": SOURCE_NAME, "text": query.text}
            if query.path_prefix:
                arguments["path_prefix"] = query.path_prefix
            run_grep(command)  # warm-up: the page cache for this literal's blobs
            run.memo_cleared = clear_blob_memo(config)
            first_seconds, _ = time_first(functools.partial(first_service.query, dict(arguments)))
            grep_seconds, lines = run_grep(command)
            repeat_seconds, answer = time_repeat(functools.partial(repeat_service.query, dict(arguments)))
            hits, cut = count_hits(answer.get("result") if isinstance(answer, dict) else None)
            run.samples.append(Sample(query, grep_seconds, lines, first_seconds, repeat_seconds, hits, cut))
        stored = [path for path in (scratch / "evidence-repeat").rglob("*") if path.is_file()]
        run.evidence_files = len(stored)
        run.evidence_bytes = sum(path.stat().st_size for path in stored)
    return run


# --- alternatives (--alternatives) ----------------------------------------------------------------

#: Classes timed by --alternatives (the in-process readers search the whole tree; no path prefix).
ALTERNATIVE_CLASSES = ("rare", "frequent", "common")
#: Timed seconds allowed per in-process variant (estimated from its warm-up); fewer literals if needed.
ALTERNATIVE_BUDGET = 30.0
REGULAR_FILE_MODES = (0o100644, 0o100755)


def matching_lines(data: bytes, needle: bytes) -> int:
    """Lines of ``data`` that contain ``needle`` (no newline in it), each counted once, as ``git grep -n``."""
    count = 0
    at = data.find(needle)
    while at >= 0:
        count += 1
        end = data.find(b"\n", at + len(needle))
        if end < 0:
            break
        at = data.find(needle, end + 1)
    return count


def count_in_blobs(contents: Iterator[bytes], needle: bytes) -> int:
    """Matching lines over the text blobs (git's binary test: no NUL byte in the first 8,000 bytes)."""
    return sum(matching_lines(data, needle) for data in contents if b"\0" not in data[:BINARY_PROBE])


@dataclass
class Variant:
    """One way to count the matching lines of a literal over the commit's regular files."""

    name: str
    count: Callable[[bytes], int]
    close: Callable[[], None] = lambda: None
    #: Literals per class actually timed (set after the warm-up).
    per_class: int = 0


def pygit2_variants(corpus: Corpus) -> list[Variant]:
    """libgit2 through pygit2: no system, XDG or global configuration; objects read raw from the odb."""
    import pygit2
    from pygit2.enums import ConfigLevel

    for level in (ConfigLevel.PROGRAMDATA, ConfigLevel.SYSTEM, ConfigLevel.XDG, ConfigLevel.GLOBAL):
        pygit2.settings.search_path[level] = os.devnull  # a file, not a folder: no configuration is found there

    def blob_ids(repo: Any) -> list[Any]:
        ids: list[Any] = []
        trees = [repo[corpus.commit].peel(pygit2.Tree)]
        while trees:
            for entry in trees.pop():
                if isinstance(entry, pygit2.Tree):
                    trees.append(entry)
                elif entry.filemode in REGULAR_FILE_MODES:  # git grep over a tree: regular files only
                    ids.append(entry.id)
        return ids

    def read(repo: Any, ids: list[Any]) -> Iterator[bytes]:
        odb_read = repo.odb.read
        return (odb_read(oid)[1] for oid in ids)

    def cold(needle: bytes) -> int:
        repo = pygit2.Repository(str(corpus.repo))
        try:
            return count_in_blobs(read(repo, blob_ids(repo)), needle)
        finally:
            repo.free()

    cached_repo = pygit2.Repository(str(corpus.repo))
    cached_ids = blob_ids(cached_repo)
    return [Variant("pygit2, cold tree walk", cold),
            Variant("pygit2, tree cached", lambda needle: count_in_blobs(read(cached_repo, cached_ids), needle),
                    cached_repo.free)]


def dulwich_variants(corpus: Corpus) -> list[Variant]:
    """dulwich's object store: objects read raw (``get_raw``); replace refs and filters are never applied.

    dulwich keeps every delta it resolves in a per-pack cache (96 MB by default) for the life of the
    ``Repo``; "tree cached" keeps that behaviour, "tree cached, no obj cache" empties it before each query
    so that every blob is read from the pack again, as the other methods do.
    """
    from dulwich.repo import Repo

    def blob_ids(store: Any) -> list[bytes]:
        tree = store[corpus.commit.encode()].tree
        # git grep over a tree: regular files only (no symlinks, no submodules).
        return [entry.sha for entry in store.iter_tree_contents(tree) if entry.mode in REGULAR_FILE_MODES]

    def read(store: Any, ids: list[bytes]) -> Iterator[bytes]:
        get_raw = store.get_raw
        return (get_raw(sha)[1] for sha in ids)

    def cold(needle: bytes) -> int:
        with Repo(str(corpus.repo)) as repo:
            return count_in_blobs(read(repo.object_store, blob_ids(repo.object_store)), needle)

    def cached(repo: Any, ids: list[bytes], *, forget: bool) -> Callable[[bytes], int]:
        def count(needle: bytes) -> int:
            if forget:
                for pack in repo.object_store.packs:
                    pack.data._offset_cache.clear()  # measurement only: dulwich's resolved-delta cache is private
            return count_in_blobs(read(repo.object_store, ids), needle)

        return count

    variants = [Variant("dulwich, cold tree walk", cold)]
    for name, forget in (("dulwich, tree cached", False), ("dulwich, tree cached, no obj cache", True)):
        repo = Repo(str(corpus.repo))  # one Repo each: the variants must not share dulwich's object cache
        variants.append(Variant(name, cached(repo, blob_ids(repo.object_store), forget=forget), repo.close))
    return variants


def git_grep_variant(corpus: Corpus, threads: int | None = None) -> Variant:
    def count(needle: bytes) -> int:
        command = grep_command(corpus, Query("", needle.decode(), 0))
        if threads is not None:
            command.insert(command.index("grep") + 1, f"--threads={threads}")
        return run_grep(command)[1]

    return Variant("git grep" if threads is None else f"git grep --threads={threads}", count)


@dataclass
class AlternativesRun:
    variants: list[Variant]
    queries: list[Query]
    #: seconds[variant name][literal] and lines[variant name][literal], for the literals timed.
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    lines: dict[str, dict[str, int]] = field(default_factory=dict)
    setup: dict[str, float] = field(default_factory=dict)
    warmup: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def measure_alternatives(corpus: Corpus, queries: list[Query], per_class: int) -> AlternativesRun:
    """Warm every variant once, then time each literal once per variant, the variants alternately."""
    queries = [query for query in queries if query.kind in ALTERNATIVE_CLASSES]
    variants = [git_grep_variant(corpus), git_grep_variant(corpus, threads=1)]
    for variant in variants:
        variant.per_class = len(queries)
    run = AlternativesRun(variants, queries)
    if not queries:
        return run
    for name, build in (("pygit2", pygit2_variants), ("dulwich", dulwich_variants)):
        started = time.perf_counter()
        try:
            built = build(corpus)
        except ImportError as error:
            run.missing.append(f"{name}: {type(error).__name__}: {error}")
            continue
        run.setup[name] = time.perf_counter() - started
        variants += built
    for variant in variants:
        started = time.perf_counter()
        variant.count(queries[0].text.encode())  # warm-up: page cache, pack indexes, mmaps
        run.warmup[variant.name] = cost = time.perf_counter() - started
        if not variant.name.startswith("git grep"):
            affordable = int(ALTERNATIVE_BUDGET / (cost * len(ALTERNATIVE_CLASSES)))
            variant.per_class = min(per_class, max(3, affordable))
        run.seconds[variant.name], run.lines[variant.name] = {}, {}
    rank = Counter[str]()
    for query in queries:
        rank[query.kind] += 1
        for variant in variants:
            if rank[query.kind] > variant.per_class:
                continue
            started = time.perf_counter()
            lines = variant.count(query.text.encode())
            run.seconds[variant.name][query.text] = time.perf_counter() - started
            run.lines[variant.name][query.text] = lines
    for variant in variants:
        variant.close()
    return run


def report_alternatives(corpus: Corpus, queries: list[Query], run: AlternativesRun,
                        options: argparse.Namespace) -> None:
    report_header(corpus, queries, options)
    for missing in run.missing:
        print(f"not measured ({missing}); pip install the 'bench' extra")
    baseline = run.variants[0].name
    print(f"{baseline} -n -F -I against in-process readers of the same commit, warm, ms (ratio: p50 / {baseline} p50 "
          "over the same literals; lines ok: literals whose matching-line count equals git grep's)")
    print(f"{'method':<36}{'class':<10}{'n':>4}{'lines':>7}{'p50':>8}{'p95':>8}{'ratio':>8}{'lines ok':>10}")
    for variant in run.variants:
        timed = run.seconds[variant.name]
        for kind in ALTERNATIVE_CLASSES:
            texts = [query.text for query in run.queries if query.kind == kind and query.text in timed]
            if not texts:
                print(f"{variant.name:<36}{kind:<10}{0:>4}  (no literal)")
                continue
            seconds = [timed[text] for text in texts]
            base50 = percentile([run.seconds[baseline][text] for text in texts], 0.5)
            lines = statistics.median(run.lines[variant.name][text] for text in texts)
            same = sum(1 for text in texts if run.lines[variant.name][text] == run.lines[baseline][text])
            print(f"{variant.name:<36}{kind:<10}{len(texts):>4}{lines:>7.0f}{spread(seconds)}"
                  f"{percentile(seconds, 0.5) / base50:>7.2f}x{f'{same}/{len(texts)}':>10}")
    print()
    mismatches = [(variant.name, text, count, run.lines[baseline][text])
                  for variant in run.variants for text, count in run.lines[variant.name].items()
                  if count != run.lines[baseline][text]]
    for name, text, count, expected in mismatches:
        print(f"MISMATCH {name}: {text!r}: {count} lines, git grep {expected}")
    if not mismatches:
        checked = sum(len(lines) for lines in run.lines.values()) - len(run.lines[baseline])
        print(f"matching lines: all {checked} counts of the other methods equal git grep's")
    reduced = [variant for variant in run.variants if variant.per_class < options.queries]
    if reduced:
        print("fewer literals for these in-process readers (the first of each class, to keep the run short: "
              f"--alternative-queries {options.alternative_queries}, <= {ALTERNATIVE_BUDGET:.0f} s timed each): "
              + ", ".join(f"{variant.name} {variant.per_class}/class" for variant in reduced))
    print("warm-up (first literal, untimed): " + ", ".join(f"{name} {ms(seconds)} ms"
                                                           for name, seconds in run.warmup.items()))
    print("setup (import, open, tree listed once for 'tree cached'): "
          + ", ".join(f"{name} {ms(seconds)} ms" for name, seconds in run.setup.items()))
    print("rules kept by all: objects of the pinned commit only (no work tree or index), literal bytes, regular "
          "files only, binary = a NUL byte in the first 8,000 bytes, no text conversion or filters; git runs "
          "without system or global configuration, pygit2 with empty system/XDG/global search paths, and neither "
          "pygit2 nor dulwich applies replace refs, attributes or filters to a raw object read")
    print(f"pygit2 and dulwich run in this one Python thread; git grep uses its default threads ({os.cpu_count()} "
          "CPUs here) and starts a process per query")
    print(f"versions: git {git_version()}, pygit2 {package_version('pygit2')} (libgit2 {libgit2_version()}), "
          f"dulwich {package_version('dulwich')}, Python {sys.version.split()[0]}")


def libgit2_version() -> str:
    try:
        import pygit2
    except ImportError:
        return "-"
    return str(pygit2.LIBGIT2_VERSION)


def package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


# --- pages (--pages) ------------------------------------------------------------------------------

#: The issue's very common literals, then the first frequent and the first rare literal chosen.
COMMON_LITERALS = (" ", "e")
#: A deep page starts this far into a literal's hits (as a share of git grep's line count).
DEEP_SHARE = 0.9


@dataclass(frozen=True)
class PageCase:
    label: str
    text: str
    offset: int
    limit: int | None


def page_cases(corpus: Corpus, queries: list[Query]) -> list[PageCase]:
    """First page and a deep page (one hit at 90 % of the hits) of the common, a frequent and a rare literal."""
    literals = [("common", text) for text in COMMON_LITERALS]
    literals += [(kind, next(query.text for query in queries if query.kind == kind))
                 for kind in ("frequent", "rare") if any(query.kind == kind for query in queries)]
    cases = []
    for kind, text in literals:
        lines = run_grep(grep_command(corpus, Query(kind, text, 0)))[1]
        cases.append(PageCase(f"{kind} {text!r}, first page", text, 0, None))
        if lines > 1:
            cases.append(PageCase(f"{kind} {text!r}, offset {int(lines * DEEP_SHARE):,}", text,
                                  int(lines * DEEP_SHARE), 1))
    return cases


def run_grep_streamed(command: list[str]) -> float:
    """Seconds for git grep with its output read through a pipe and dropped (so this process's memory
    does not hold it)."""
    started = time.perf_counter()
    with subprocess.Popen(command, env=GIT_ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as process:
        assert process.stdout is not None
        while process.stdout.read(1 << 20):
            pass
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{command}: exit {process.returncode}")
    return time.perf_counter() - started


def resident_kb(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in kB. Unlike ``ru_maxrss``, which a child
    inherits from the process it was forked from, these belong to this program's own memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Start the peak (``VmHWM``) again from the current RSS (Linux ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def page_child(argument: str) -> int:
    """In a fresh process: time one page against git grep, alternately, then its memory. Prints JSON."""
    import tracemalloc

    case, repeat = json.loads(argument)
    corpus = Corpus.load(CORPUS_DIR)
    interface = research_interface()
    if corpus is None or isinstance(interface, str):
        raise SystemExit(f"no corpus or no armarius: {interface}")
    load_research_config, service_class = interface
    arguments: dict[str, Any] = {"kind": "source.search", "source": SOURCE_NAME, "text": case["text"]}
    if case["offset"]:
        arguments["offset"] = case["offset"]
    if case["limit"] is not None:
        arguments["limit"] = case["limit"]
    command = [*grep_command(corpus, Query("", case["text"], 0)), "--"]
    command.insert(command.index("grep") + 1, "-z")
    with tempfile.TemporaryDirectory(prefix="armarius-bench-pages-") as scratch_name:
        scratch = Path(scratch_name)
        service = service_class(load_research_config(write_config(corpus, scratch)), evidence_dir=scratch / "ev")
        # Loads and indexes the tree, as any earlier query of a running server has.
        service.query({"kind": "source.search", "source": SOURCE_NAME, "text": "armarius warm-up"})
        reset_peak()
        before = resident_kb("VmRSS")
        grep_seconds, ours_seconds, answer = [], [], {}
        for _ in range(repeat):
            grep_seconds.append(run_grep_streamed(command))
            started = time.perf_counter()
            answer = service.query(dict(arguments))["result"]
            ours_seconds.append(time.perf_counter() - started)
        peak_rss = resident_kb("VmHWM")
        tracemalloc.start()
        service.query(dict(arguments))
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(json.dumps({
        "grep": statistics.median(grep_seconds), "ours": statistics.median(ours_seconds),
        "rss_before_kb": before, "rss_peak_kb": peak_rss, "traced_peak": traced, "hits": len(answer["hits"]),
        "total_hits": answer.get("total_hits"), "total_hits_at_least": answer.get("total_hits_at_least"),
        "complete": answer.get("complete"),
    }))
    return 0


def measure_pages(corpus: Corpus, queries: list[Query], repeat: int) -> None:
    cases = page_cases(corpus, queries)
    print(f"source.search pages vs git grep -z -n -F -I over the whole tree (its output read through a pipe); "
          f"median of {repeat} alternate runs each, every case in a fresh process (max_hits {MAX_HITS}, "
          f"max_files {MAX_FILES}); memory: that process's RSS before the first query (tree loaded) -> its peak RSS "
          "during the timed queries (VmRSS, VmHWM), and tracemalloc's peak for one more query")
    print(f"{'case':<52}{'git s':>7}{'ours s':>8}{'ratio':>7}{'rss MB':>14}{'traced MB':>11}{'hits':>6}"
          f"{'total_hits':>12}{'at least':>10}")
    for case in cases:
        completed = subprocess.run([sys.executable, __file__, "--page-child",
                                    json.dumps([case.__dict__, repeat])], capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            print(f"{case.label:<52} failed: {completed.stderr.strip()[-300:]}")
            continue
        figures = json.loads(completed.stdout.strip().splitlines()[-1])
        rss = f"{figures['rss_before_kb'] / 1024:.0f} -> {figures['rss_peak_kb'] / 1024:.0f}"
        total = "-" if figures["total_hits"] is None else f"{figures['total_hits']:,}"
        least = "-" if figures["total_hits_at_least"] is None else f"{figures['total_hits_at_least']:,}"
        ratio = figures["ours"] / figures["grep"]
        print(f"{case.label:<52}{figures['grep']:>7.2f}{figures['ours']:>8.2f}{ratio:>6.2f}x{rss:>14}"
              f"{figures['traced_peak'] / 1e6:>11.1f}{figures['hits']:>6}{total:>12}{least:>10}", flush=True)
    print("target: every page <= 1.5x git grep, memory <= 100 MB")


# --- report ---------------------------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[round(fraction * 100) - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def verdict(ratio: float) -> str:
    return "met" if ratio <= TARGET_RATIO else "MISSED"


def report_header(corpus: Corpus, queries: list[Query], options: argparse.Namespace) -> None:
    print()
    print(f"corpus: {corpus.sdist} ({corpus.package}) in {corpus.repo} (bare), commit {corpus.commit}")
    print(f"        {corpus.files:,} files, {corpus.blob_bytes:,} bytes of blobs ({corpus.blob_bytes / 1e6:.1f} MB), "
          f"{corpus.pack_bytes:,} bytes in objects/; git {git_version()}, {os.cpu_count()} CPUs")
    prefix = next((query.path_prefix for query in queries if query.path_prefix), None)
    print(f"literals (seed {SEED}): rare = in {RARE_FILES[0]}-{RARE_FILES[1]} files, frequent = in "
          f"{FREQUENT_FILES[0]}-{FREQUENT_FILES[1]} files, common = in >= {COMMON_FILES[0]:,} files, prefixed = in "
          f">= 20 files under path_prefix {prefix!r}; up to {options.queries} per class")
    print()


def spread(seconds: Sequence[float]) -> str:
    """p50 and p95 in ms, as two table cells."""
    return f"{ms(percentile(seconds, 0.5)):>8}{ms(percentile(seconds, 0.95)):>8}"


def table_row(label: str, samples: list[Sample], have_ours: bool, judge: bool = True
              ) -> tuple[str, tuple[float, float]]:
    """One row of the table and its p50 ratios (first, repeat) to git grep."""
    grep = [sample.grep_seconds for sample in samples]
    files = statistics.median(sample.query.files for sample in samples)
    lines = statistics.median(sample.grep_lines for sample in samples)
    row = f"{label:<10}{len(samples):>4}{files:>7.0f}{lines:>7.0f}{spread(grep)}"
    if not have_ours:
        return row, (0.0, 0.0)
    grep50 = percentile(grep, 0.5)
    first = [sample.first_seconds or 0.0 for sample in samples]
    repeat = [sample.repeat_seconds or 0.0 for sample in samples]
    ratios = (percentile(first, 0.5) / grep50, percentile(repeat, 0.5) / grep50)
    row += f"{spread(first)}{ratios[0]:>7.2f}x{spread(repeat)}{ratios[1]:>7.2f}x"
    if judge:
        row += f"{verdict(max(ratios)):>8}"
    return row, ratios


def report_table(run: Run) -> dict[str, tuple[float, float]]:
    """Print the table; the p50 ratios (first, repeat) per class."""
    have_ours = run.ours_error is None
    print("source.search vs git grep -n -F -I, ms (files, lines: median per literal; ratio: ours p50 / git grep p50)")
    print(f"{'':<10}{'':>4}{'':>7}{'':>7}{'git grep':>16}" + (f"{'ours, first call':>24}{'ours, repeat':>24}"
                                                               if have_ours else ""))
    header = f"{'class':<10}{'n':>4}{'files':>7}{'lines':>7}{'p50':>8}{'p95':>8}"
    if have_ours:
        header += f"{'p50':>8}{'p95':>8}{'ratio':>8}{'p50':>8}{'p95':>8}{'ratio':>8}{'target':>8}"
    print(header)
    ratios: dict[str, tuple[float, float]] = {}
    for kind in CLASSES:
        samples = [sample for sample in run.samples if sample.query.kind == kind]
        if not samples:
            print(f"{kind:<10}{0:>4}  (no literal found)")
            continue
        row, ratios[kind] = table_row(kind, samples, have_ours)
        print(row)
    print(table_row("all", run.samples, have_ours, judge=False)[0])  # a mix: no verdict
    print()
    return ratios


def report(corpus: Corpus, queries: list[Query], run: Run, options: argparse.Namespace) -> None:
    report_header(corpus, queries, options)
    ratios = report_table(run)
    if run.ours_error is not None:
        print(f"armarius.research.service is not importable ({run.ours_error}): git grep baseline only.")
        return
    memo = "cleared before each first call" if run.memo_cleared else "not found, so not cleared"
    print("per literal: git grep once untimed (warm-up), ours 'first' (timed; the page cache is warm, the in-process "
          f"blob-hash memo {memo}; the tree listing is cached), git grep timed, ours 'repeat' (timed; memo warm)")
    print(f"every timed call writes its capture: {run.evidence_files:,} files, {run.evidence_bytes:,} bytes in the "
          f"repeat evidence folder (max_hits {MAX_HITS}, max_files {MAX_FILES})")
    counted = [sample for sample in run.samples if sample.ours_hits is not None]
    if counted:
        differ = [s for s in counted if s.ours_hits != min(s.grep_lines, MAX_HITS)]
        cut = sum(1 for s in counted if s.ours_truncated)
        example = (f", e.g. {differ[0].query.text!r}: ours {differ[0].ours_hits}, git grep {differ[0].grep_lines}"
                   if differ else "")
        print(f"hits: {len(counted)} answers, {cut} not complete, {len(differ)} differ from min(git grep lines, "
              f"max_hits){example}")
    else:
        print("hits: the result shape was not recognised; hit counts not compared")
    print(f"target (source.search p50 <= {TARGET_RATIO}x git grep p50, capture writing included):")
    for kind, (first, repeat) in ratios.items():
        print(f"  {kind:<9} first call {first:.2f}x {verdict(first)}, repeat {repeat:.2f}x {verdict(repeat)}")
    print("anchor (BENCHMARKS.md): git grep -n -F 0.16-0.19 s on 4,800 files / 48 MB, 0.30-0.35 s on 13,000 files / "
          "106 MB; with a path prefix 0.01-0.06 s")
    for name, profiler in run.profiles.items():
        print()
        print(f"cProfile of the timed '{name}' ResearchService.query calls (own time, top 25)")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(25)
        print(f"cProfile of the timed '{name}' calls (cumulative, top 25)")
        stats.sort_stats("cumulative").print_stats(25)


def git_version() -> str:
    return subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="build the cached corpus again")
    parser.add_argument("--queries", type=int, default=30, help="literals per class (default 30)")
    parser.add_argument("--package", default=DEFAULT_PACKAGE, help=f"PyPI sdist to commit (default {DEFAULT_PACKAGE})")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed ResearchService.query calls")
    parser.add_argument("--alternatives", action="store_true",
                        help="time pygit2 and dulwich readers against git grep instead of source.search")
    parser.add_argument("--alternative-queries", type=int, default=None,
                        help="with --alternatives: literals per class for pygit2 and dulwich (default: --queries)")
    parser.add_argument("--pages", action="store_true",
                        help="time first and deep pages of common, frequent and rare literals, with their memory")
    parser.add_argument("--repeat", type=int, default=3, help="with --pages: timed runs per case (default 3)")
    parser.add_argument("--page-child", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.page_child:
        return page_child(options.page_child)
    if options.alternative_queries is None:
        options.alternative_queries = options.queries
    if options.queries < 1 or options.alternative_queries < 1:
        parser.error("--queries and --alternative-queries must be at least 1")
    started = time.perf_counter()
    corpus = corpus_for(options.package, options.rebuild)
    queries = choose_queries(corpus, options.queries)
    print(f"chose {len(queries)} literals in {time.perf_counter() - started:.1f} s", flush=True)
    if options.pages:
        report_header(corpus, queries, options)
        measure_pages(corpus, queries, options.repeat)
    elif options.alternatives:
        alternatives = measure_alternatives(corpus, queries, min(options.alternative_queries, options.queries))
        report_alternatives(corpus, queries, alternatives, options)
    else:
        run = measure(corpus, queries, options.profile)
        report(corpus, queries, run, options)
    print(f"\nwhole run {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
