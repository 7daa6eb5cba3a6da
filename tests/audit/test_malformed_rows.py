"""Whatever a writer of the database stores in the audit tables, verify lists it as findings and never fails.

`armarius audit verify` must walk every chain and report every finding: a crash lists none, and so hides
every other tampering. The writer holds no audit key: the table owner (a plain sqlite3 connection to the
file; psycopg as the owner on PostgreSQL), and on PostgreSQL also the server's own login role, which may
insert audit events under any workspace id it names. SQLite stores any value in any column; PostgreSQL
types its columns, so there a junk row is junk text (details that are not JSON) or an odd id.

Also here: `audit anchor` writes only heads `verify --anchors` reads, and a bad anchor line is a finding of
its own; `audit tail` and the web page list an undecodable event and mark a MAC that does not check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from armarius.app import Armarius
from armarius.audit import chain as audit
from armarius.audit import keys
from armarius.audit.anchors import anchor_line, parse_anchor_lines, parse_head
from armarius.audit.keys import load_keyring, rotate_key_file
from armarius.audit.listing import events_page
from armarius.auth.permissions import Role
from armarius.canonical import canonical_json
from armarius.config import Settings
from armarius.errors import InvalidInput
from armarius.memory.service import RememberRequest
from tests.audit.tamper import COLUMNS, append_forged, chain_rows, forged_event, guessed_mac, rewrite_chain, set_head
from tests.audit.test_audit_cli import Cli
from tests.audit.test_tamper_classes import (
    EVENTS_IN_A,
    Log,
    app_role_appends,
    fill,
    kinds,
    pg_log,  # noqa: F401  (a fixture)
)
from tests.helpers import OwnerSQL, make_team
from tests.web.conftest import base_url, visitors  # noqa: F401  (fixtures)
from tests.web.people import Visitors

ODD_CHAIN = 77
SQLITE_ONLY = pytest.mark.parametrize("settings", ["sqlite"], indirect=True)


@pytest.fixture
def log(app: Armarius, settings: Settings) -> Log:
    return fill(app, settings)


def cli(log: Log) -> Cli:
    return Cli(log.settings)


def insert(owner: OwnerSQL, values: dict[str, Any]) -> None:
    """One row as given, past Armarius: whatever each column is handed (SQLite keeps it as it is)."""
    row = {"at": "2026-01-01T00:00:00.000000Z", "actor": "human:mallory", "action": "memory.created",
           "subject": "", "details": "{}", "prev_hash": audit.GENESIS_HASH, "hash": "a" * 64, "key_id": None,
           "mac": None, **values}
    owner.execute(f"INSERT INTO audit_events ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                  tuple(row[column] for column in COLUMNS))


def verify_cli(log: Log, *args: str) -> tuple[int, dict[str, Any]]:
    code, report = cli(log).verify(*args)
    assert code in (0, 1), report
    return code, report


# A seal whose details are not JSON (the server role on PostgreSQL) ---------------------------------


def forge_sealed_chain(log: Log, owner: OwnerSQL, chain: int = ODD_CHAIN) -> None:
    """Event 1 unsigned, event 2 an audit.sealed with details that are not JSON, both with valid hashes."""
    rewrite_chain(owner, chain, [forged_event(), {**guessed_mac(log.key_id), "action": "audit.sealed",
                                                  "details": "{not json"}])


def test_a_seal_whose_details_are_not_json_is_a_finding(log: Log) -> None:
    with log.owner() as owner:
        forge_sealed_chain(log, owner)
    report = log.report()
    assert {(problem.kind, problem.workspace_id) for problem in report.problems} >= {
        (audit.MALFORMED_EVENT, ODD_CHAIN), (audit.UNKNOWN_WORKSPACE, ODD_CHAIN), (audit.BAD_MAC, ODD_CHAIN)}
    [malformed] = report.of_kind(audit.MALFORMED_EVENT)
    assert malformed.seq == 2
    assert "not a JSON object" in malformed.problem
    code, printed = verify_cli(log)
    assert code == 1
    assert [item["chain"] for item in printed["malformed_events"]] == [ODD_CHAIN]
    assert "MALFORMED EVENT: chain (no such workspace) [77] at event 2" in cli(log)("audit", "verify").stdout


@pytest.mark.postgres
def test_the_server_role_cannot_make_verify_fail(pg_log: Log) -> None:  # noqa: F811
    """The role may insert events for any workspace id: a seal with non-JSON details under an unused one."""
    app_role_appends(pg_log, ODD_CHAIN, forged_event())
    app_role_appends(pg_log, ODD_CHAIN, {**guessed_mac(pg_log.key_id), "action": "audit.sealed",
                                         "details": "{not json"})
    report = pg_log.report()
    assert kinds(report) == {audit.MALFORMED_EVENT, audit.UNKNOWN_WORKSPACE, audit.BAD_MAC}
    assert {problem.workspace_id for problem in report.problems} == {ODD_CHAIN}
    assert verify_cli(pg_log)[0] == 1


# Values SQLite keeps whatever the column -------------------------------------------------------------


def text_workspace_id(log: Log, owner: OwnerSQL) -> None:
    insert(owner, {"workspace_id": "x", "seq": 1})


def real_workspace_id(log: Log, owner: OwnerSQL) -> None:
    """A forged chain under 1.5: read as chain 1 it would never be walked (the rows are not chain 1's)."""
    for seq in (1, 2, 3):
        insert(owner, {"workspace_id": 1.5, "seq": seq})


def blob_workspace_id(log: Log, owner: OwnerSQL) -> None:
    insert(owner, {"workspace_id": b"\xff\x00", "seq": 1})


def text_seq(log: Log, owner: OwnerSQL) -> None:
    insert(owner, {"workspace_id": log.a, "seq": "zz"})


def blob_actor(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_events SET actor = CAST('human:ada' AS BLOB) WHERE workspace_id = ? AND seq = 3",
                  (log.a,))


def subject_not_utf8(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_events SET subject = CAST(x'ff' AS TEXT) WHERE workspace_id = ? AND seq = 3",
                  (log.a,))


def hash_not_utf8(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_events SET hash = CAST(x'c3' AS TEXT) WHERE workspace_id = ? AND seq = ?",
                  (log.a, EVENTS_IN_A))


def head_seq_text(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_heads SET seq = 'zz' WHERE workspace_id = ?", (log.a,))


def head_hash_blob(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_heads SET hash = x'00' WHERE workspace_id = ?", (log.a,))


def head_hash_not_utf8(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_heads SET hash = CAST(x'ff' AS TEXT) WHERE workspace_id = ?", (log.a,))


def details_blob(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_events SET details = CAST(details AS BLOB) WHERE workspace_id = ? AND seq = 2",
                  (log.a,))


#: Each tampering and the kind of finding that shows it.
ODD_VALUES = [
    (text_workspace_id, audit.MALFORMED_EVENT),
    (real_workspace_id, audit.MALFORMED_EVENT),
    (blob_workspace_id, audit.MALFORMED_EVENT),
    (text_seq, audit.BROKEN_LINK),
    (blob_actor, audit.MALFORMED_EVENT),
    (subject_not_utf8, audit.MALFORMED_EVENT),
    (hash_not_utf8, audit.MALFORMED_EVENT),
    (head_seq_text, audit.BROKEN_LINK),
    (head_hash_blob, audit.BROKEN_LINK),
    (head_hash_not_utf8, audit.BROKEN_LINK),
    (details_blob, audit.MALFORMED_EVENT),
]


@SQLITE_ONLY
@pytest.mark.parametrize(("tamper", "finding"), ODD_VALUES, ids=[tamper.__name__ for tamper, _ in ODD_VALUES])
def test_a_value_of_the_wrong_type_is_a_finding(log: Log, tamper: Any, finding: str) -> None:
    with log.owner() as owner:
        tamper(log, owner)
    report = log.report()
    assert kinds(report) == {finding}, report.problems
    code, printed = verify_cli(log)
    assert code == 1
    assert printed[{audit.MALFORMED_EVENT: "malformed_events", audit.BROKEN_LINK: "broken_links"}[finding]]
    command = cli(log)
    for args in (("audit", "verify"), ("audit", "anchor", "-"), ("audit", "tail", "--workspace", "alpha"),
                 ("--json", "audit", "tail", "--workspace", "alpha", "--limit", "100")):
        result = command(*args)
        assert result.exit_code == (1 if args[1] == "verify" else 0), (args, result.stderr)
    assert all(item["workspace_id"] == log.a
               for item in events_page(log.app.database, log.a, limit=100)["items"])


def head_seq_not_whole(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_heads SET seq = 2.5 WHERE workspace_id = ?", (log.a,))


def head_seq_negative(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_heads SET seq = -1 WHERE workspace_id = ?", (log.a,))


def head_hash_junk(log: Log, owner: OwnerSQL) -> None:
    owner.execute("UPDATE audit_heads SET hash = 'zz' WHERE workspace_id = ?", (log.a,))


#: Heads no append wrote: PostgreSQL's typed columns leave only a hash of the wrong form and a negative seq.
DAMAGED_HEADS = [pytest.param("sqlite", tamper, id=f"sqlite-{tamper.__name__}") for tamper in (
    head_seq_text, head_hash_blob, head_hash_not_utf8, head_seq_not_whole)] + [
    pytest.param(engine, tamper, id=f"{engine}-{tamper.__name__}", marks=marks)
    for engine, marks in (("sqlite", ()), ("postgresql", pytest.mark.postgres))
    for tamper in (head_seq_negative, head_hash_junk)]


@pytest.mark.parametrize(("settings", "tamper"), DAMAGED_HEADS, indirect=["settings"])
def test_nothing_is_appended_after_a_damaged_head(log: Log, tamper: Any) -> None:
    """An audited write refuses a head of a form no append writes, rather than guess where the chain goes on
    (a seq of 2.5 read as 2 appended event 3 again, which failed as if the write had raced another) or fail
    reading it; nothing of the write lands, the other workspaces write on, and verify shows the head."""
    team = make_team(log.app, "gamma")
    with log.owner() as owner:
        before = owner.rows("SELECT workspace_id, seq, hash FROM audit_events ORDER BY workspace_id, seq")
        tamper(log, owner)
    with (pytest.raises(audit.DamagedHead, match=f"The head of audit chain {log.a} is damaged"),
          log.app.database.transaction(workspace_id=log.a, write=True) as tx):
        audit.append(tx, actor="human:ada", action="test.event", subject="after")
    with log.app.database.transaction(workspace_id=log.a, write=True) as tx:  # the way sessions append
        audit.prepare(tx)
        with pytest.raises(audit.DamagedHead):
            audit.append(tx, actor="human:ada", action="test.event", subject="after")
    with log.owner() as owner:
        assert owner.rows("SELECT workspace_id, seq, hash FROM audit_events ORDER BY workspace_id, seq") == before
    log.app.memory.remember(team.agent, RememberRequest(slug="still", title="Still", body="Other chains go on."))
    assert log.report().of_kind(audit.BROKEN_LINK)


@SQLITE_ONLY
def test_a_chain_under_a_workspace_id_that_is_not_whole_is_not_hidden(log: Log) -> None:
    with log.owner() as owner:
        real_workspace_id(log, owner)
    [problem] = log.report().problems
    assert (problem.kind, problem.workspace_id) == (audit.MALFORMED_EVENT, None)
    assert "3 events stored under the workspace id 1.5" in problem.problem
    assert "MALFORMED EVENT: 3 events stored under the workspace id 1.5" in cli(log)("audit", "verify").stdout


@SQLITE_ONLY
def test_every_chain_is_walked_past_a_malformed_one(log: Log) -> None:
    """A junk row in one chain hides nothing of the others: an edit of beta is found alongside."""
    with log.owner() as owner:
        blob_actor(log, owner)
        text_workspace_id(log, owner)
        owner.execute("UPDATE audit_events SET subject = 'edited' WHERE workspace_id = ? AND seq = 2", (log.b,))
    found = {(problem.kind, problem.workspace_id) for problem in log.report().problems}
    assert found == {(audit.MALFORMED_EVENT, log.a), (audit.MALFORMED_EVENT, None), (audit.BROKEN_LINK, log.b)}


# Anchors --------------------------------------------------------------------------------------------


def junk_rows(log: Log, owner: OwnerSQL) -> None:
    """Rows under ids and numbers an anchor parser might refuse, and a newest alpha event with a junk hash."""
    insert(owner, {"workspace_id": -1, "seq": 1})
    insert(owner, {"workspace_id": 2**62, "seq": 1})
    insert(owner, {"workspace_id": 7, "seq": 0})
    insert(owner, {"workspace_id": 8, "seq": -5})
    insert(owner, {"workspace_id": log.a, "seq": EVENTS_IN_A + 1, "hash": "h"})


def test_anchor_writes_only_heads_verify_reads(log: Log, tmp_path: Path) -> None:
    anchors = tmp_path / "anchors.txt"
    command = cli(log)
    assert command("audit", "anchor", str(anchors)).exit_code == 0
    with log.owner() as owner:
        junk_rows(log, owner)
    assert command("audit", "anchor", str(anchors)).exit_code == 0
    second = anchors.read_text(encoding="utf-8").splitlines()[1].split()[1:]
    assert f"-1:1:{'a' * 64}" in second
    assert f"{2**62}:1:{'a' * 64}" in second
    assert not [head for head in second if head.startswith(("7:", "8:"))], "no event from 1: nothing to anchor"
    assert [head for head in second if head.startswith(f"{log.a}:")] == [f"{log.a}:{EVENTS_IN_A}:"
                                                                          + chain_rows_hash(log, EVENTS_IN_A)]
    code, report = verify_cli(log, "--anchors", str(anchors))
    assert (code, report["anchors_unreadable"], report["anchors_not_found"]) == (1, [], [])
    assert report["anchors_checked"] == 3 + len(second)
    with log.owner() as owner:  # then the chain is truncated: both lines' alpha heads are gone
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq > 4", (log.a,))
        set_head(owner, log.a, 4, chain_rows(owner, log.a)[-1]["hash"])
    code, report = verify_cli(log, "--anchors", str(anchors))
    assert code == 1
    assert [(item["chain"], item["seq"]) for item in report["anchors_not_found"]] == [(log.a, EVENTS_IN_A)] * 2


def chain_rows_hash(log: Log, seq: int) -> str:
    with log.owner() as owner:
        return str(next(row["hash"] for row in chain_rows(owner, log.a) if row["seq"] == seq))


@pytest.mark.postgres
def test_anchors_of_a_chain_the_server_role_forged_are_read_back(pg_log: Log) -> None:  # noqa: F811
    app_role_appends(pg_log, -1, forged_event())
    heads = audit.last_events(pg_log.app.database)
    assert -1 in {chain for chain, _seq, _hash in heads}
    anchors, problems = parse_anchor_lines([anchor_line(heads, at="2026-12-01T00:00:00.000000Z")], source="file")
    assert problems == []
    report = pg_log.report(anchors)
    assert report.anchors_checked == len(heads)
    assert kinds(report) == {audit.UNKNOWN_WORKSPACE, audit.BAD_MAC}


def test_a_bad_anchor_line_is_a_finding_and_the_other_lines_are_checked(log: Log, tmp_path: Path) -> None:
    anchors = tmp_path / "anchors.txt"
    command = cli(log)
    assert command("audit", "anchor", str(anchors)).exit_code == 0
    good = anchors.read_bytes()
    anchors.write_bytes(b"not-a-time 0:1:" + b"a" * 64 + b"\n"
                        + b"2026-12-01T00:00:00Z 0:0:" + b"a" * 64 + b" " + str(2**63).encode() + b":1:" + b"a" * 64
                        + b" 0:1:" + b"A" * 64 + b"\n"
                        + b"2026-12-01T00:00:00Z \xff\xfe:1:" + b"a" * 64 + b"\n" + good)
    code, report = verify_cli(log, "--anchors", str(anchors))
    assert code == 1
    lines = [item["problem"].split(": ")[0] for item in report["anchors_unreadable"]]
    assert lines == [f"{anchors}:1", f"{anchors}:2", f"{anchors}:2", f"{anchors}:2", f"{anchors}:3"]
    assert report["anchors_checked"] == 1 + len(good.split()) - 1
    assert [item["seq"] for item in report["anchors_not_found"]] == [1]  # line 1's head, read without its time
    assert "UNREADABLE ANCHOR: " in command("audit", "verify", "--anchors", str(anchors)).stdout
    with log.owner() as owner:  # the good line still finds a truncation
        owner.execute("DELETE FROM audit_events WHERE workspace_id = ? AND seq > 4", (log.a,))
        set_head(owner, log.a, 4, chain_rows(owner, log.a)[-1]["hash"])
    assert log.a in [item["chain"] for item in verify_cli(log, "--anchors", str(anchors))[1]["anchors_not_found"]]


def test_heads_take_every_signed_64_bit_chain_id() -> None:
    digest = "b" * 64
    for chain in (-(2**63), -1, 0, 2**62, 2**63 - 1):
        assert parse_head(f"{chain}:1:{digest}", source="test").chain == chain
    assert parse_head(f"1:{2**63 - 1}:{digest}", source="test").seq == 2**63 - 1
    for head in (f"{2**63}:1:{digest}", f"{-(2**63) - 1}:1:{digest}", f"1:{2**63}:{digest}", f"1:0:{digest}",
                 f"1:-1:{digest}", f"\u0661:1:{digest}"):
        with pytest.raises(InvalidInput):
            parse_head(head, source="test")


# Listings: undecodable events, MACs that do not check -----------------------------------------------


def test_an_event_whose_details_are_not_json_is_listed_as_undecodable(log: Log) -> None:
    with log.owner() as owner:
        append_forged(owner, log.a, {**forged_event(), "details": "{"})
    with log.app.database.transaction(workspace_id=log.a, write=True) as tx:  # Armarius appends after it
        audit.append(tx, actor="human:ada", action="test.after")
    listed = audit.tail(log.app.database, log.a, 2)
    assert [(event.seq, event.details, event.malformed is not None) for event in listed] == [
        (EVENTS_IN_A + 1, {}, True), (EVENTS_IN_A + 2, {}, False)]
    assert "details '{' are not a JSON object" in str(listed[0].malformed)
    page = events_page(log.app.database, log.a, limit=3)
    assert [item["malformed"] is not None for item in page["items"]] == [False, True, False]
    report = log.report()
    assert kinds(report) == {audit.MALFORMED_EVENT, audit.BAD_MAC}
    assert report.events_checked == (EVENTS_IN_A + 2) + 3 + 2  # alpha, beta, the system chain: every event
    command = cli(log)
    shown = command("audit", "tail", "--workspace", "alpha", "--limit", "2")
    assert shown.exit_code == 0, shown.stderr
    assert "BAD MAC MALFORMED" in shown.stdout.splitlines()[1]
    assert command("--json", "audit", "tail", "--workspace", "alpha", "--limit", "2").exit_code == 0


@pytest.mark.postgres
def test_the_server_role_cannot_take_the_listing_down(pg_log: Log) -> None:  # noqa: F811
    app_role_appends(pg_log, pg_log.a, {**forged_event(), "details": "{"})
    [item] = events_page(pg_log.app.database, pg_log.a, limit=1)["items"]
    assert (item["seq"], item["details"]) == (EVENTS_IN_A + 1, {})
    assert item["malformed"]


def test_the_audit_page_shows_an_undecodable_event(app: Armarius, settings: Settings, visitors: Visitors  # noqa: F811
                                                   ) -> None:
    team = make_team(app, human_role=Role.ADMIN)
    with OwnerSQL(settings) as owner:
        append_forged(owner, team.human.workspace_id, {**forged_event(), "details": '{"a": NaN}'})
    person = visitors.log_in_team(team)
    page = person.http.get("/audit")
    assert page.status_code == 200, page.text
    assert "undecodable" in page.text
    assert "The chain FAILED verification." in page.text
    twin = person.http.get("/api/audit").json()
    assert [item["details"] for item in twin["items"] if item["malformed"]] == [{}]  # the login comes after it
    assert {problem["kind"] for problem in twin["chain"]["problems"]} == {audit.MALFORMED_EVENT, audit.BAD_MAC}


def test_tail_marks_a_mac_that_does_not_check(log: Log) -> None:
    with log.owner() as owner:
        append_forged(owner, log.a, guessed_mac(log.key_id))  # a real key's id, a MAC guessed at random
        append_forged(owner, log.a, guessed_mac("0123456789abcdef"))
        append_forged(owner, log.a, forged_event())
    command = cli(log)
    table = command("audit", "tail", "--workspace", "alpha", "--limit", "4").stdout.splitlines()
    assert table[0].split()[-2:] == ["KEY", "MAC"]
    # The key each names, and whether its MAC checks.
    assert [line.split()[-3:] for line in table[1:]] == [
        [table[1].split()[-3], log.key_id, "ok"], [log.key_id, "BAD", "MAC"], ["0123456789abcdef", "UNKNOWN", "KEY"],
        ["(none)", "BAD", "MAC"]]
    listed = command.json("audit", "tail", "--workspace", "alpha", "--limit", "4")
    assert [item["mac_check"] for item in listed] == [audit.SIGNED, audit.MAC_MISMATCH, audit.UNKNOWN_KEY,
                                                      audit.MAC_MISMATCH]


def test_an_unsigned_event_is_legacy_only_before_every_signed_one(log: Log) -> None:
    with log.owner() as owner:
        owner.execute("UPDATE audit_events SET key_id = NULL, mac = NULL WHERE workspace_id = ? AND seq <= 2",
                      (log.a,))
        append_forged(owner, log.a, forged_event())
    events = audit.tail(log.app.database, log.a, 100)
    assert audit.mac_checks(log.app.database, events) == [audit.UNSIGNED] * 2 + [audit.SIGNED] * (
        EVENTS_IN_A - 2) + [audit.MAC_MISMATCH]
    assert audit.mac_checks(log.app.database, events[-1:]) == [audit.MAC_MISMATCH], "a signed event before it"
    assert audit.mac_checks(log.app.database, events[:1]) == [audit.UNSIGNED]


# Rotating the key twice at once -----------------------------------------------------------------------


def test_rotations_at_the_same_time_take_turns(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rotation reads, extends and replaces the key file: slowed down, two at once would both extend the
    same file and one key would be lost."""
    path = settings.audit_key_path
    write = keys._write_private

    def slowly(*args: Any) -> Path:
        time.sleep(0.3)
        return write(*args)

    monkeypatch.setattr(keys, "_write_private", slowly)
    added: list[str] = []
    threads = [threading.Thread(target=lambda: added.append(rotate_key_file(path)[1].id)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keyring = load_keyring(None, path)
    assert keyring is not None
    assert len(keyring.keys) == 3
    assert sorted(added) == sorted(key.id for key in keyring.keys[1:])


def test_a_rotation_records_itself_before_another_may_rotate(settings: Settings, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """`audit rotate-key` holds the rotation lock until its record is written: a rotation started meanwhile waits,
    so the record names the key the file ended with, and that key signs it."""
    path = settings.audit_key_path
    record = audit.record_key_rotation
    other = threading.Thread(target=rotate_key_file, args=(path,))
    waited: list[bool] = []

    def record_while_another_rotates(*args: Any, **kwargs: Any) -> audit.AuditEvent:
        other.start()
        other.join(timeout=1)
        waited.append(other.is_alive())
        return record(*args, **kwargs)

    monkeypatch.setattr(audit, "record_key_rotation", record_while_another_rotates)
    command = Cli(settings)
    rotated = command.json("audit", "rotate-key")
    other.join()
    assert waited == [True], "the other rotation ran while the record was written"
    keyring = load_keyring(None, path)
    assert keyring is not None
    assert [key.id for key in keyring.keys[1:2]] == [rotated["key_id"]]
    [event] = [item for item in command.json("audit", "tail", "--limit", "5") if item["action"] == "audit.key_rotated"]
    assert (event["key_id"], event["details"]) == (
        rotated["key_id"], {"retired_key_id": keyring.keys[0].id, "key_id": rotated["key_id"]})


def test_rotations_from_two_processes_record_what_the_file_holds(settings: Settings) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ARMARIUS_")}
    if settings.database_url is not None:
        env |= {"ARMARIUS_DATABASE_URL": settings.database_url,
                "ARMARIUS_DATABASE_MIGRATE_URL": settings.database_migrate_url or ""}
    command = [sys.executable, "-m", "armarius", "--json", "--data-dir", str(settings.data_dir), "audit"]
    for _round in range(2):
        runs = [subprocess.Popen([*command, "rotate-key"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(2)]
        for run in runs:
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err
            assert json.loads(out)["key_id"]
    keyring = load_keyring(None, settings.audit_key_path)
    assert keyring is not None
    tail = subprocess.run([*command, "tail", "--limit", "100"], env=env, capture_output=True, text=True, check=True)
    rotations = [item["details"] for item in json.loads(tail.stdout) if item["action"] == "audit.key_rotated"]
    # The records, in the order they were written, step through the file's keys one at a time.
    assert [(record["retired_key_id"], record["key_id"]) for record in rotations] == [
        (older.id, newer.id) for older, newer in zip(keyring.keys, keyring.keys[1:], strict=False)]
    assert [item["key_id"] for item in json.loads(tail.stdout) if item["action"] == "audit.key_rotated"] == [
        key.id for key in keyring.keys[1:]]


def test_canonical_details_parse_as_an_object() -> None:
    """The one form Armarius writes reads back; anything else is malformed (not an exception)."""
    assert audit.details_object(canonical_json({"a": ["\\ud800 as text", 1]})) == {"a": ["\\ud800 as text", 1]}
    for text in ("{", "[]", "1", '{"a": NaN}', '{"a": Infinity}', '{"a": "\\ud800"}', "[" * 100_000, b"{}", None):
        assert audit.details_object(text) is None, text
