"""The example configurations in ``examples/`` parse with the real parser and enrich real databases.

* ``world-enrichment.toml`` (a game world on MariaDB with the server's source): loaded whole, with
  only its source's placeholder path and commit pointed at a test repository; then its
  ``[enrichment]`` section runs in a session over the test world on SQLite (the example's database
  entry, same name and allowlist, as a SQLite file).
* ``chinook-enrichment.toml`` (the Chinook music store on SQLite): loaded exactly as written, next to a
  small Chinook database built here, and run in a session.

Both end with facts whose pointers resolve in their captures: the same code serves two unrelated
schemas, named only by configuration.
"""

from __future__ import annotations

import re
import sqlite3
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius, open_app
from armarius.config import Settings
from armarius.research.config import load_research_config
from armarius.research.model import DEFAULT_IGNORED
from tests.helpers import make_team
from tests.research.repos import build_repo, source_entry, write_config
from tests.research.world import QUESTS, SCRIPT_NAMES, build_sqlite_world
from tests.sessions.test_enrichment import (
    assert_facts_resolve,
    coverage,
    facts,
    looked_up,
    relations,
    stored_captures,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORLD_EXAMPLE = EXAMPLES / "world-enrichment.toml"
CHINOOK_EXAMPLE = EXAMPLES / "chinook-enrichment.toml"


def enrichment_part(text: str) -> str:
    """The example from its ``[enrichment]`` line on: the section alone, as the example writes it."""
    start = re.search(r"(?m)^\[enrichment\]$", text)
    assert start is not None
    part = text[start.start():]
    assert set(tomllib.loads(part)) == {"enrichment"}
    assert tomllib.loads(part)["enrichment"] == tomllib.loads(text)["enrichment"]
    return part


@pytest.fixture
def opened(settings: Settings) -> Iterator[list[Armarius]]:
    apps: list[Armarius] = []
    yield apps
    for app in apps:
        app.close()


def open_with(settings: Settings, config: Path, apps: list[Armarius]) -> Armarius:
    app = open_app(replace(settings, research_config=config))
    apps.append(app)
    return app


# --- the game world ----------------------------------------------------------------------------------


def test_the_world_example_parses_and_enriches_the_test_world(settings: Settings, tmp_path: Path,
                                                               opened: list[Armarius]) -> None:
    text = WORLD_EXAMPLE.read_text(encoding="utf-8")
    example = tomllib.loads(text)
    repo = build_repo(tmp_path / "repo")

    # The whole example, its source's placeholders pointed at a real repository.
    pointed = re.sub(r'(?m)^repository = "[^"]*"', f"repository = {str(repo.path)!r}".replace("'", '"'), text)
    pointed = re.sub(r'(?m)^commit = "[0-9a-f]{40}"', f'commit = "{repo.pin}"', pointed)
    assert pointed.count(str(repo.path)) == 1
    assert pointed.count(repo.pin) == 1
    whole = tmp_path / "example" / "research.toml"
    whole.parent.mkdir()
    whole.write_text(pointed, encoding="utf-8")
    config = load_research_config(whole, {example["databases"][0]["password_env"]: "not used to parse"})
    assert config.enrichment is not None
    assert set(config.enrichment.entities) == {"creature", "quest", "item"}
    assert [link.relation for link in config.enrichment.relationships] == [
        "rewards_item", "rewarded_by", "runs_script", "smart_action_on"]
    assert config.databases["world"].dialect == "mariadb"
    assert all(link.ignore_values == DEFAULT_IGNORED for link in config.enrichment.relationships)

    # Its enrichment over the test world: the example's database entry as a SQLite file, same allowlist.
    world = build_sqlite_world(tmp_path / "world.sqlite")
    database = example["databases"][0]
    entry = {key: database[key] for key in ("name", "snapshot", "tables", "columns") if key in database}
    path = write_config(settings.data_dir / "research.toml", [source_entry(repo, name=example["sources"][0]["name"])],
                        databases=[{**entry, "dialect": "sqlite", "path": str(world.path)}])
    path.write_text(path.read_text(encoding="utf-8") + enrichment_part(text), encoding="utf-8")
    app = open_with(settings, Path("research.toml"), opened)
    team = make_team(app)
    shown = app.sessions.open(team.agent, "What are quest 1 and creature 1?",
                              inputs=[{"entity_type": "quest", "id": 1}, {"entity_type": "creature", "id": 1}])
    session = shown["session"]
    found = facts(app, team.agent, session)
    assert assert_facts_resolve(found, stored_captures(settings),
                                app.sessions.session_folder(team.agent.workspace, session)) > 20
    entities = shown["facts"]["entities"]
    assert entities["quest:1"]["values"]["title"] == QUESTS[0]["title"]
    assert entities["creature:1"]["values"]["script_name"] == SCRIPT_NAMES[1]
    assert relations(found, "rewards_item") == [("quest:1", "item:1")]
    assert relations(found, "runs_script") == [("creature:1", f"symbol:{SCRIPT_NAMES[1]}")]
    assert relations(found, "smart_action_on") == [("creature:1", f"item:{number}") for number in (1, 2, 3, 4)]
    assert ("item:1", "quest:1") in relations(found, "rewarded_by")
    assert max(looked_up(found).values()) == 1
    assert {fact["subject"] for fact in coverage(found, "max_depth")} == {"quest:2", "quest:3", "quest:4"}
    assert {description["subject"] for description in shown["facts"]["descriptions"]} == {
        "quest:1", "item:1", "item:2", "item:3", "quest:2", "quest:3", "quest:4"}


# --- Chinook -----------------------------------------------------------------------------------------

CHINOOK_DDL = """
CREATE TABLE Artist (ArtistId INTEGER PRIMARY KEY NOT NULL, Name NVARCHAR(120));
CREATE TABLE Album (AlbumId INTEGER PRIMARY KEY NOT NULL, Title NVARCHAR(160) NOT NULL,
    ArtistId INTEGER NOT NULL REFERENCES Artist (ArtistId));
CREATE TABLE Genre (GenreId INTEGER PRIMARY KEY NOT NULL, Name NVARCHAR(120));
CREATE TABLE MediaType (MediaTypeId INTEGER PRIMARY KEY NOT NULL, Name NVARCHAR(120));
CREATE TABLE Track (TrackId INTEGER PRIMARY KEY NOT NULL, Name NVARCHAR(200) NOT NULL,
    AlbumId INTEGER REFERENCES Album (AlbumId), MediaTypeId INTEGER NOT NULL REFERENCES MediaType (MediaTypeId),
    GenreId INTEGER REFERENCES Genre (GenreId), Composer NVARCHAR(220), Milliseconds INTEGER NOT NULL,
    Bytes INTEGER, UnitPrice NUMERIC(10,2) NOT NULL);
CREATE TABLE Employee (EmployeeId INTEGER PRIMARY KEY NOT NULL, LastName NVARCHAR(20) NOT NULL,
    FirstName NVARCHAR(20) NOT NULL, Title NVARCHAR(30), ReportsTo INTEGER REFERENCES Employee (EmployeeId),
    BirthDate DATETIME, HireDate DATETIME, Address NVARCHAR(70), Email NVARCHAR(60));
CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY NOT NULL, FirstName NVARCHAR(40) NOT NULL,
    LastName NVARCHAR(20) NOT NULL, Company NVARCHAR(80), Address NVARCHAR(70), Country NVARCHAR(40),
    Email NVARCHAR(60) NOT NULL, SupportRepId INTEGER REFERENCES Employee (EmployeeId));
CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY NOT NULL,
    CustomerId INTEGER NOT NULL REFERENCES Customer (CustomerId), InvoiceDate DATETIME NOT NULL,
    BillingCountry NVARCHAR(40), Total NUMERIC(10,2) NOT NULL);
CREATE TABLE InvoiceLine (InvoiceLineId INTEGER PRIMARY KEY NOT NULL,
    InvoiceId INTEGER NOT NULL REFERENCES Invoice (InvoiceId), TrackId INTEGER NOT NULL REFERENCES Track (TrackId),
    UnitPrice NUMERIC(10,2) NOT NULL, Quantity INTEGER NOT NULL);
"""
#: A few rows of the real Chinook data (employees 1 -> 2 -> 3 report up a chain).
CHINOOK_ROWS: dict[str, list[tuple[Any, ...]]] = {
    "Artist": [(1, "AC/DC"), (2, "Accept")],
    "Album": [(1, "For Those About To Rock We Salute You", 1), (2, "Balls to the Wall", 2),
              (3, "Restless and Wild", 2)],
    "Genre": [(1, "Rock")],
    "MediaType": [(1, "MPEG audio file"), (2, "Protected AAC audio file")],
    "Track": [(1, "For Those About To Rock (We Salute You)", 1, 1, 1, "Angus Young, Malcolm Young, Brian Johnson",
               343719, 11170334, 0.99),
              (2, "Balls to the Wall", 2, 2, 1, None, 342562, 5510424, 0.99),
              (3, "Fast As a Shark", 3, 2, 1, "F. Baltes, S. Kaufman, U. Dirkscneider & W. Hoffman", 230619, 3990994,
               0.99)],
    "Employee": [(1, "Adams", "Andrew", "General Manager", None, "1962-02-18 00:00:00", "2002-08-14 00:00:00",
                  "11120 Jasper Ave NW", "andrew@chinookcorp.com"),
                 (2, "Edwards", "Nancy", "Sales Manager", 1, "1958-12-08 00:00:00", "2002-05-01 00:00:00",
                  "825 8 Ave SW", "nancy@chinookcorp.com"),
                 (3, "Peacock", "Jane", "Sales Support Agent", 2, "1973-08-29 00:00:00", "2002-04-01 00:00:00",
                  "1111 6 Ave SW", "jane@chinookcorp.com")],
    "Customer": [(1, "Luís", "Gonçalves", "Embraer - Empresa Brasileira de Aeronáutica S.A.",
                  "Av. Brigadeiro Faria Lima, 2170", "Brazil", "luisg@embraer.com.br", 3),
                 (2, "Leonie", "Köhler", None, "Theodor-Heuss-Straße 34", "Germany", "leonekohler@surfeu.de", 3)],
    "Invoice": [(1, 2, "2009-01-01 00:00:00", "Germany", 1.98)],
    "InvoiceLine": [(1, 1, 2, 0.99, 1), (2, 1, 3, 0.99, 1)],
}


def build_chinook(path: Path) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.executescript(CHINOOK_DDL)
        for table, rows in CHINOOK_ROWS.items():
            marks = ", ".join("?" * len(rows[0]))
            connection.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        connection.commit()
    finally:
        connection.close()


def test_the_chinook_example_parses_as_written_and_enriches_a_chinook_database(settings: Settings, tmp_path: Path,
                                                                              opened: list[Armarius]) -> None:
    text = CHINOOK_EXAMPLE.read_text(encoding="utf-8")
    example = tomllib.loads(text)
    assert "sources" not in example
    enrichment_part(text)
    # The example as written, next to the database file it names.
    folder = settings.data_dir / "chinook"
    folder.mkdir()
    build_chinook(folder / example["databases"][0]["path"])
    (folder / "research.toml").write_text(text, encoding="utf-8")
    config = load_research_config(folder / "research.toml")
    assert config.enrichment is not None
    assert set(config.enrichment.entities) == {"artist", "album", "track", "genre", "media_type", "invoice",
                                               "invoice_line", "customer", "employee"}

    app = open_with(settings, Path("chinook/research.toml"), opened)
    team = make_team(app)
    inputs = [{"entity_type": "invoice_line", "id": 1}, {"entity_type": "employee", "id": 3},
              {"entity_type": "track", "id": 1}]
    shown = app.sessions.open(team.agent, "What did invoice line 1 sell, and who is employee 3?", inputs=inputs)
    session = shown["session"]
    found = facts(app, team.agent, session)
    assert assert_facts_resolve(found, stored_captures(settings),
                                app.sessions.session_folder(team.agent.workspace, session)) > 40

    entities = shown["facts"]["entities"]
    assert entities["invoice_line:1"] == {"type": "invoice_line", "standing": "input", "values": {
        "InvoiceId": 1, "TrackId": 2, "Quantity": 1}}
    assert entities["track:2"]["values"]["Name"] == "Balls to the Wall"
    assert entities["artist:2"] == {"type": "artist", "standing": "referenced by album:2", "values": {"Name": "Accept"}}
    assert entities["customer:2"]["values"]["Country"] == "Germany"
    assert "Email" not in entities["customer:2"]["values"]
    triples = shown["facts"]["relationships"]
    for triple in (["invoice_line:1", "sells_track", "track:2"], ["invoice_line:1", "on_invoice", "invoice:1"],
                   ["track:2", "on_album", "album:2"], ["album:2", "by_artist", "artist:2"],
                   ["track:2", "in_genre", "genre:1"], ["track:2", "encoded_as", "media_type:2"],
                   ["invoice:1", "billed_to", "customer:2"], ["customer:2", "supported_by", "employee:3"],
                   ["employee:3", "reports_to", "employee:2"], ["employee:2", "reports_to", "employee:1"],
                   ["employee:2", "manages", "employee:3"], ["employee:1", "manages", "employee:2"]):
        assert triple in triples
    # The self reference is a cycle: every employee once; the top's NULL manager is not followed.
    assert looked_up(found) == dict.fromkeys(
        ["invoice_line:1", "employee:3", "track:1", "track:2", "invoice:1", "employee:2", "album:1", "genre:1",
         "media_type:1", "album:2", "media_type:2", "customer:2", "employee:1", "artist:1", "artist:2"], 1)
    assert [(fact["subject"], fact["object"]) for fact in coverage(found, "ignored_value")] == [
        ("employee:1", {"what": "reports_to", "reason": "ignored_value", "value": None})]
    # The composer is a text; a NULL composer gives none.
    text_fact = next(fact["seq"] for fact in found if fact["kind"] == "project_description")
    assert shown["facts"]["descriptions"] == [
        {"fact": text_fact, "subject": "track:1", "role": "composer credit", "column": "Composer",
         "origin": "chinook.Track.Composer", "text": CHINOOK_ROWS["Track"][0][5]}]
    assert entities["track:1"]["values"]["Composer"] == {"see_fact": text_fact}
    assert entities["track:2"]["values"]["Composer"] is None
