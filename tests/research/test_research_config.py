"""The research configuration: a pin is a full commit hash that exists, paths resolve against the file's
folder, and anything unknown or malformed is refused naming the key. Also the published query schema."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from armarius.app import open_app
from armarius.config import Settings
from armarius.errors import ArmariusError, ConfigError
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService, query_schema
from tests.research.repos import Repo, build_repo, git, source_entry, write_config


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    repository = build_repo(tmp_path / "repo")
    repository.move_on()  # branches, a tag and a later commit exist
    return repository


def refused(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_research_config(path)
    assert caught.value.code == "config_invalid"
    return caught.value


def config_with(tmp_path: Path, repo: Repo, **changes: Any) -> Path:
    entry = {key: value for key, value in {**source_entry(repo), **changes}.items() if value is not None}
    return write_config(tmp_path / "research.toml", [entry])


@pytest.mark.parametrize("pin", ["main", "feature", "HEAD", "v1", "pinned-looking-branch", "HEAD~1", "@",
                                 "short", "upper", "refs/heads/main", "", "later^{commit}"])
def test_a_pin_must_be_a_full_lowercase_commit_hash(tmp_path: Path, repo: Repo, pin: str) -> None:
    value = {"short": repo.pin[:7], "upper": repo.pin.upper()}.get(pin, pin)
    error = refused(config_with(tmp_path, repo, commit=value))
    assert error.details == {"key": "commit"}
    assert "commit must be a full lowercase commit hash" in error.message
    assert "not a branch, tag or short hash" in error.message


@pytest.mark.parametrize("what", ["tree", "blob", "tag-object"])
def test_a_pin_must_name_a_commit(tmp_path: Path, repo: Repo, what: str) -> None:
    """A mistake of the file, refused; a pin the repository does not have (yet) is an outage instead
    (test_source_outage.py)."""
    if what == "tag-object":
        repo.git("tag", "-a", "-m", "annotated", "v2", repo.pin)
    value = {"tree": repo.git("rev-parse", f"{repo.pin}^{{tree}}").decode().strip(),
             "blob": repo.blob("src/app.py"),
             "tag-object": repo.git("rev-parse", "v2").decode().strip() if what == "tag-object" else ""}[what]
    error = refused(config_with(tmp_path, repo, commit=value))
    assert error.details == {"key": "commit"}
    assert f"commit {value} is a {what.removesuffix('-object')} in {str(repo.path)!r}, not a commit" in error.message


def test_a_good_pin_loads_and_later_commits_do_not_move_it(tmp_path: Path, repo: Repo) -> None:
    config = load_research_config(config_with(tmp_path, repo))
    assert config.sources["app"].commit == repo.pin
    assert config.sources["app"].limits.max_hits == 500
    assert load_research_config(config_with(tmp_path, repo, commit=repo.later)).sources["app"].commit == repo.later


def test_a_relative_repository_resolves_against_the_files_folder(tmp_path: Path, repo: Repo,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path / "conf" / "deeper" / "research.toml",
                        [{**source_entry(repo), "repository": "../../repo"}])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_research_config(path)
    assert config.sources["app"].repository.path == repo.path.resolve()
    service = ResearchService(config)
    assert service.query({"kind": "source.files", "substring": "src/app.py"})["result"]["total"] == 1
    # The same relative path from the working folder would not exist: the file's folder is what counts.
    assert not (elsewhere / "../../repo").resolve().joinpath(".git").exists()


def test_a_bare_repository_is_a_source(tmp_path: Path, repo: Repo) -> None:
    git(tmp_path, "clone", "-q", "--bare", str(repo.path), str(tmp_path / "bare.git"))
    config = load_research_config(config_with(tmp_path, repo, repository="bare.git"))
    service = ResearchService(config)
    hits = service.query({"kind": "source.symbol", "symbol": "handle_order"})["result"]["hits"]
    assert {hit["path"] for hit in hits} == {"src/app.py", "db/schema.sql"}


def test_a_folder_inside_a_repository_is_not_a_source(tmp_path: Path, repo: Repo) -> None:
    """git would search only that folder and name paths relative to it."""
    error = refused(config_with(tmp_path, repo, repository=str(repo.path / "src")))
    assert error.details == {"key": "repository"}
    assert "'src/'" in error.message


@pytest.mark.parametrize(("key", "value"), [
    ("branch", "main"), ("path", "/"), ("shell", "sh"), ("max_rows", 5), ("Commit", "x"), ("password", "secret")])
def test_unknown_keys_in_a_source_are_refused(tmp_path: Path, repo: Repo, key: str, value: Any) -> None:
    error = refused(config_with(tmp_path, repo, **{key: value}))
    assert error.details == {"key": key}
    assert f"unknown key {key!r}" in error.message


def test_unknown_top_level_keys_are_refused(tmp_path: Path, repo: Repo) -> None:
    path = write_config(tmp_path / "research.toml", [source_entry(repo)], source="typo")
    error = refused(path)
    assert "Unknown key 'source'" in error.message
    assert error.details == {"file": str(path)}


@pytest.mark.parametrize(("key", "value"), [
    ("max_files", 0), ("max_files", 100_001), ("max_hits", True), ("max_hits", "5"), ("max_bytes", 1000),
    ("max_line_length", 8), ("max_read_lines", -1), ("timeout_seconds", 0.05), ("timeout_seconds", 601),
    ("timeout_seconds", "10")])
def test_limits_out_of_range_are_refused(tmp_path: Path, repo: Repo, key: str, value: Any) -> None:
    error = refused(config_with(tmp_path, repo, **{key: value}))
    assert error.details == {"key": key}
    assert key in error.message


@pytest.mark.parametrize(("key", "value"), [
    ("name", "App"), ("name", "../app"), ("name", ""), ("name", "a" * 65), ("name", 5), ("url", ""), ("url", "  "),
    ("url", 3), ("repository", ""), ("repository", 7), ("commit", 12345)])
def test_malformed_values_are_refused_naming_the_key(tmp_path: Path, repo: Repo, key: str, value: Any) -> None:
    error = refused(config_with(tmp_path, repo, **{key: value}))
    assert error.details == {"key": key}


@pytest.mark.parametrize("key", ["name", "url", "repository", "commit"])
def test_required_keys_are_required(tmp_path: Path, repo: Repo, key: str) -> None:
    entry = source_entry(repo)
    del entry[key]
    assert refused(write_config(tmp_path / "research.toml", [entry])).details == {"key": key}


@pytest.mark.parametrize(("value", "found"), [(None, ""), ("", "; it is blank here"), ("  ", "; it is blank here"),
                                               (3, "; here it is not a string")])
def test_the_url_is_required(tmp_path: Path, repo: Repo, value: Any, found: str) -> None:
    entry = source_entry(repo)
    if value is None:
        del entry["url"]
    else:
        entry["url"] = value
    error = refused(write_config(tmp_path / "research.toml", [entry]))
    assert error.details == {"key": "url"}
    assert error.message == (f"sources[0] in {tmp_path / 'research.toml'}: url is required: the repository's "
                             'address, such as "https://git.example.com/app.git", shown in captures as the '
                             f"origin{found}")


def test_whole_file_problems_are_refused(tmp_path: Path, repo: Repo) -> None:
    assert "cannot be read" in refused(tmp_path / "absent.toml").message
    bad = tmp_path / "bad.toml"
    bad.write_text("[[sources]\nname = ")
    assert "not valid TOML" in refused(bad).message
    bad.write_bytes(b"\xff\xfe")
    assert "not valid TOML" in refused(bad).message
    bad.write_text("")
    assert "names no [[sources]]" in refused(bad).message
    bad.write_text('sources = "app"\n')
    assert "names no [[sources]]" in refused(bad).message
    twice = write_config(tmp_path / "twice.toml", [source_entry(repo), source_entry(repo)])
    assert "Two sources are named 'app'" in refused(twice).message
    two = write_config(tmp_path / "two.toml", [source_entry(repo), source_entry(repo, "other")])
    assert sorted(load_research_config(two).sources) == ["app", "other"]


def test_with_two_sources_a_query_names_one(tmp_path: Path, repo: Repo) -> None:
    two = write_config(tmp_path / "two.toml", [source_entry(repo), {**source_entry(repo, "later"),
                                                                     "commit": repo.later}])
    service = ResearchService(load_research_config(two))
    query = {"kind": "source.symbol", "symbol": "process_order"}
    with pytest.raises(ArmariusError) as caught:
        service.query(query)
    assert caught.value.code == "invalid_input"
    assert caught.value.details == {"field": "source"}
    with pytest.raises(ArmariusError) as unknown:
        service.query({**query, "source": "nope"})
    assert unknown.value.code == "not_found"
    assert service.query({**query, "source": "app"})["result"]["hits"] == []
    later = service.query({**query, "source": "later"})
    assert later["origin"]["commit"] == repo.later
    assert later["result"]["hits"]


def test_open_app_refuses_a_bad_research_configuration(settings: Settings, tmp_path: Path, repo: Repo) -> None:
    config_with(settings.data_dir, repo, commit="main")
    with pytest.raises(ConfigError) as caught:
        open_app(replace(settings, research_config=Path("research.toml")))
    assert caught.value.details == {"key": "commit"}
    write_config(settings.data_dir / "research.toml", [source_entry(repo)])
    application = open_app(replace(settings, research_config=settings.data_dir / "research.toml"))
    try:
        assert application.research is not None
        assert application.research.config.sources["app"].commit == repo.pin
    finally:
        application.close()


# --- the published schema -------------------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys: {sorted({k for k in keys if keys.count(k) > 1})}"
    return dict(pairs)


def test_the_published_schema_is_well_formed_and_accepts_every_kind() -> None:
    from importlib import resources

    text = resources.files("armarius.research.schemas").joinpath("project-query-v1.json").read_text()
    json.loads(text, object_pairs_hook=_no_duplicates)
    schema = query_schema()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    for query in ({"kind": "source.files", "substring": "x"}, {"kind": "source.search", "text": "x"},
                  {"kind": "source.symbol", "symbol": "x"}, {"kind": "source.registration", "symbol": "x"},
                  {"kind": "source.schema", "text": "x"},
                  {"kind": "source.read", "path": "a", "start_line": 1, "end_line": 2},
                  {"kind": "database.tables"}, {"kind": "database.schema", "table": "t"},
                  {"kind": "database.rows", "table": "t", "columns": ["a"], "filters": [
                      {"column": "a", "op": "in", "value": [1, "x"]}, {"column": "b", "op": "eq", "value": None},
                      {"column": "c", "op": "eq", "value": {"base64": "AA=="}}],
                   "order_by": [{"column": "a", "direction": "desc"}], "offset": 1, "limit": 5},
                  {"kind": "database.count", "table": "t", "filters": []}):
        assert validator.is_valid(query), query
        assert not validator.is_valid({**query, "unknown": 1})
