"""`armarius audit verify|anchor|rotate-key` and audited logins, through the real CLI, on both engines."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from armarius.audit import chain as audit
from armarius.audit.keys import load_keyring
from armarius.cli.main import cli
from armarius.config import Settings
from tests.audit.tamper import append_forged, chain_rows, forged_event, rewrite_chain, set_head
from tests.helpers import OwnerSQL

PASSWORD = "ada: correct horse battery staple"
HEAD = re.compile(r"\d+:\d+:[0-9a-f]{64}")


class Cli:
    def __init__(self, settings: Settings, **env: str) -> None:
        self.settings = settings
        self.env = env
        if settings.database_url is not None:
            self.env |= {"ARMARIUS_DATABASE_URL": settings.database_url,
                         "ARMARIUS_DATABASE_MIGRATE_URL": settings.database_migrate_url or ""}
        self.runner = CliRunner()

    def __call__(self, *args: str, stdin: str | None = None, **env: str) -> Result:
        return self.runner.invoke(cli, ["--data-dir", str(self.settings.data_dir), *args], input=stdin,
                                  env=self.env | env, catch_exceptions=False)

    def json(self, *args: str, **env: str) -> Any:
        result = self("--json", *args, **env)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def verify(self, *args: str) -> tuple[int, dict[str, Any]]:
        result = self("--json", "audit", "verify", *args)
        return result.exit_code, json.loads(result.stdout)

    def owner(self) -> OwnerSQL:
        return OwnerSQL(self.settings)


@pytest.fixture
def run(settings: Settings) -> Cli:
    command = Cli(settings)
    assert command("workspace", "add", "alpha").exit_code == 0
    assert command("principal", "add", "ada", "--kind", "human", "--workspace", "alpha", "--role", "editor",
                   "--password-stdin", stdin=PASSWORD + "\n").exit_code == 0
    return command


def alpha(run: Cli) -> int:
    return int(next(space["id"] for space in run.json("workspace", "list") if space["name"] == "alpha"))


def test_an_intact_log_verifies(run: Cli) -> None:
    code, report = run.verify()
    assert code == 0
    assert report == {"events_checked": report["events_checked"], "chains_checked": 2, "legacy_events": 0,
                      "anchors_checked": 0, "intact": True, "broken_links": [], "bad_macs": [],
                      "unknown_workspaces": [], "anchors_not_found": [], "malformed_events": [],
                      "anchors_unreadable": []}
    assert report["events_checked"] >= 3
    assert run("audit", "verify").stdout.strip().endswith("The audit log is intact.")


def test_a_wiped_log_is_not_intact(run: Cli) -> None:
    """Issue 10 item 12: `DELETE FROM audit_events; DELETE FROM audit_heads;` once read as intact."""
    with run.owner() as owner:
        owner.execute("DELETE FROM audit_events")
        owner.execute("DELETE FROM audit_heads")
    result = run("audit", "verify")
    assert result.exit_code == 1
    assert "BROKEN LINK: chain (system) [0] at event 1: the system chain is empty although 1 workspaces exist" \
        in result.stdout
    assert "FAILED" in result.stdout


def test_a_chain_of_a_workspace_that_does_not_exist_is_verified_and_reported(run: Cli) -> None:
    """Issue 10 item 11: an event forged under an unknown workspace id was never checked."""
    with run.owner() as owner:
        rewrite_chain(owner, 4242, [forged_event()])
    code, report = run.verify()
    assert code == 1
    assert [(item["chain"], item["workspace"]) for item in report["unknown_workspaces"]] == [(4242, None)]
    assert [(item["chain"], item["seq"]) for item in report["bad_macs"]] == [(4242, 1)]
    text = run("audit", "verify").stdout
    assert "UNKNOWN WORKSPACE: chain (no such workspace) [4242]: chain 4242 belongs to no workspace" in text
    assert "BAD MAC: chain (no such workspace) [4242] at event 1" in text


def test_a_forged_append_is_a_bad_mac(run: Cli) -> None:
    with run.owner() as owner:
        append_forged(owner, audit.SYSTEM_CHAIN, forged_event())
    code, report = run.verify()
    assert code == 1
    assert [item["problem"].split(":")[0] for item in report["bad_macs"]] == [
        f"event {report['events_checked']} carries no MAC although earlier events do"]
    assert report["broken_links"] == []
    assert "BAD MAC: chain (system) [0]" in run("audit", "verify").stdout


def test_anchors_find_a_truncation_that_hashes_cannot(run: Cli, tmp_path: Path) -> None:
    anchors = tmp_path / "elsewhere" / "heads.txt"
    anchors.parent.mkdir()
    first = run.json("audit", "anchor", str(anchors))
    assert [head["chain"] for head in first["heads"]] == [0]
    run("workspace", "add", "beta")
    second = run("audit", "anchor", str(anchors))
    assert second.exit_code == 0
    lines = anchors.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    stamp, *heads = lines[1].split()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", stamp)
    assert all(HEAD.fullmatch(head) for head in heads)
    assert HEAD.search(second.stdout)
    code, report = run.verify("--anchors", str(anchors))
    assert (code, report["anchors_checked"]) == (0, 2)
    with run.owner() as owner:  # remove the newest system event and move the head back onto the one before
        rows = chain_rows(owner, audit.SYSTEM_CHAIN)
        owner.execute("DELETE FROM audit_events WHERE workspace_id = 0 AND seq = ?", (rows[-1]["seq"],))
        set_head(owner, audit.SYSTEM_CHAIN, rows[-2]["seq"], rows[-2]["hash"])
    assert run.verify()[0] == 0, "hashes alone cannot see a truncation"
    code, report = run.verify("--anchors", str(anchors))
    assert code == 1
    [missing] = report["anchors_not_found"]
    assert missing["seq"] == rows[-1]["seq"]
    assert f"{anchors}:2" in missing["problem"]
    assert "ANCHOR NOT FOUND: chain (system) [0]" in run("audit", "verify", "--anchors", str(anchors)).stdout


def test_anchor_to_standard_output_and_expected_heads(run: Cli) -> None:
    printed = run("audit", "anchor", "-")
    assert printed.exit_code == 0
    [line] = printed.stdout.splitlines()
    head = line.split()[1]
    assert run.verify("--expect", head)[0] == 0
    chain, seq, event_hash = head.split(":")
    forged = f"{chain}:{seq}:{'0' * 64}"
    code, report = run.verify("--expect", head, "--expect", forged)
    assert code == 1
    assert [item["seq"] for item in report["anchors_not_found"]] == [int(seq)]
    assert "--expect" in report["anchors_not_found"][0]["problem"]
    beyond = f"{chain}:{int(seq) + 50}:{event_hash}"
    assert "no longer exists" in run.verify("--expect", beyond)[1]["anchors_not_found"][0]["problem"]


@pytest.mark.parametrize("head", ["0:1", "0:0:" + "a" * 64, "x:1:" + "a" * 64, "0:1:" + "A" * 64, "0:1:abc"])
def test_a_malformed_head_is_refused(run: Cli, head: str) -> None:
    result = run("audit", "verify", "--expect", head)
    assert result.exit_code == 3
    assert "error [invalid_input]" in result.stderr
    assert "CHAIN:SEQ:HASH" in result.stderr


def test_a_malformed_anchor_line_is_a_finding_and_the_rest_is_checked(run: Cli, tmp_path: Path) -> None:
    anchors = tmp_path / "heads.txt"
    [line] = run("audit", "anchor", "-").stdout.splitlines()
    anchors.write_text("# heads\n\nyesterday 0:1:" + "a" * 64 + "\n" + line + "\n", encoding="utf-8")
    code, report = run.verify("--anchors", str(anchors))
    assert code == 1
    assert [item["problem"].split(": ")[0] for item in report["anchors_unreadable"]] == [f"{anchors}:3"]
    assert report["anchors_checked"] == 1 + len(line.split()) - 1  # the bad line's head is checked too
    assert [item["problem"].split(" (")[1].split(")")[0] for item in report["anchors_not_found"]] == [f"{anchors}:3"]


def test_rotate_key_keeps_old_events_verifiable(run: Cli) -> None:
    path = run.settings.audit_key_path
    old = load_keyring(None, path)
    assert old is not None
    rotated = run.json("audit", "rotate-key")
    new = load_keyring(None, path)
    assert new is not None
    assert [key.id for key in new.keys] == [old.active.id, rotated["key_id"]]
    assert rotated["retired_key_id"] == old.active.id
    event = run.json("audit", "tail", "--limit", "1")[0]
    assert (event["action"], event["key_id"], event["details"]) == (
        "audit.key_rotated", rotated["key_id"], {"retired_key_id": old.active.id, "key_id": rotated["key_id"]})
    run("workspace", "add", "beta")
    assert run.json("audit", "tail", "--limit", "1")[0]["key_id"] == rotated["key_id"]
    assert run.verify()[0] == 0
    path.write_text(new.keys[-1].secret.hex() + "\n", encoding="utf-8")  # the retired key lost
    code, report = run.verify()
    assert code == 1
    assert "not in the audit keyring" in report["bad_macs"][0]["problem"]


def test_rotate_key_refuses_keys_from_the_environment_and_changes_nothing(run: Cli) -> None:
    key = run.settings.audit_key_path.read_text(encoding="utf-8")
    secret = load_keyring(None, run.settings.audit_key_path)
    assert secret is not None
    env_key = secret.active.secret.hex()
    before = run.json("audit", "tail", "--limit", "100")
    result = run("audit", "rotate-key", ARMARIUS_AUDIT_KEY=env_key)
    assert result.exit_code == 7
    assert "ARMARIUS_AUDIT_KEY" in result.stderr
    assert env_key not in result.stdout + result.stderr
    assert run.settings.audit_key_path.read_text(encoding="utf-8") == key
    assert run.json("audit", "tail", "--limit", "100") == before


def test_human_logins_through_the_cli_are_audited(run: Cli) -> None:
    workspace = alpha(run)
    wrong = run("memory", "needs-review", "--workspace", "alpha", "--as", "ada", ARMARIUS_PASSWORD="guess")
    assert wrong.exit_code == 4
    right = run("memory", "needs-review", "--workspace", "alpha", "--as", "ada", ARMARIUS_PASSWORD=PASSWORD)
    assert right.exit_code == 0, right.stderr
    events = run.json("audit", "tail", "--workspace", "alpha", "--limit", "2")
    assert [(e["workspace_id"], e["actor"], e["action"], e["subject"], e["details"]) for e in events] == [
        (workspace, "unauthenticated", "login.failed", "ada", {"reason": "wrong_password"}),
        (workspace, "human:ada", "login.succeeded", "ada", {"role": "editor"}),
    ]
    assert "guess" not in json.dumps(events)
    assert PASSWORD not in json.dumps(events)
    assert run.verify()[0] == 0


def test_the_key_is_never_printed(run: Cli) -> None:
    keyring = load_keyring(None, run.settings.audit_key_path)
    assert keyring is not None
    secret = keyring.active.secret.hex()
    outputs = [run("audit", "tail", "--limit", "100"), run("--json", "audit", "tail", "--limit", "100"),
               run("audit", "verify"), run("audit", "anchor", "-"), run("--json", "audit", "rotate-key")]
    assert all(secret not in result.stdout + result.stderr for result in outputs)
    if run.settings.database_url is None:
        with sqlite3.connect(run.settings.sqlite_path) as connection:
            assert secret not in repr(connection.execute("SELECT * FROM audit_events").fetchall())
        connection.close()
