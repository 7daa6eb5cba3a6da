"""Hostile content in the evidence folder: links and deeply nested JSON put there by anyone who can write
to it. Armarius reaches every file below the evidence folder one component at a time without following a
symbolic link: a reader takes a link for no file (it never shows what the link points to), a writer refuses
it (conflict, naming the path below the evidence folder) and writes nothing anywhere. A unit file nested
deeper than the JSON parser goes is an invalid file, not an internal error."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from armarius.errors import Conflict, InvalidInput
from armarius.evidence.model import fingerprint
from armarius.evidence.service import UNIT_FILE_READ_MAX
from tests.evidence.conftest import Lab, changes_nothing

NAME = "deploy/staging-host"
BODY = "Staging runs on the host zeppelin.\n"
SECRET = b"password=hunter2\n"


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    return outside


def test_a_link_to_a_folder_outside_is_never_written_through(lab: Lab, tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    lab.active(NAME, "Where staging runs", BODY)
    (lab.units_folder / "evil").symlink_to(outside, target_is_directory=True)
    with changes_nothing(lab.app, Conflict) as caught:
        lab.app.evidence.create(lab.team.human, "evil/x", "A unit", "Body.\n")
    assert caught[0].details["path"] == "alpha/units/evil"
    assert "alpha/units/evil" in caught[0].message
    assert list(outside.iterdir()) == []


def test_a_link_in_place_of_a_units_folder_is_no_file_and_is_never_written_through(lab: Lab,
                                                                                  tmp_path: Path) -> None:
    """``deploy/`` replaced by a link to a folder holding a file of the same name: not read, not written."""
    outside = _outside(tmp_path)
    lab.active(NAME, "Where staging runs", BODY)
    original = lab.path(NAME).read_bytes()
    (outside / "staging-host.md").write_bytes(original)
    lab.path(NAME).unlink()
    (lab.units_folder / "deploy").rmdir()
    (lab.units_folder / "deploy").symlink_to(outside, target_is_directory=True)
    evidence, human = lab.app.evidence, lab.team.human
    assert evidence.show(human, NAME)["file"] == {"state": "missing", "fingerprint": None}
    assert evidence.file_fingerprint(human, NAME) is None
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.restore(human, NAME)
    assert caught[0].details["path"] == "alpha/units/deploy"
    with changes_nothing(lab.app, Conflict):
        evidence.edit(human, NAME, 1, body="Staging moved.\n")
    assert (outside / "staging-host.md").read_bytes() == original
    assert sorted(path.name for path in outside.iterdir()) == ["staging-host.md"]


def test_a_unit_file_replaced_by_a_link_to_a_secret_is_never_read_nor_written_through(lab: Lab,
                                                                                       tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    lab.active(NAME, "Where staging runs", BODY)
    path = lab.path(NAME)
    path.unlink()
    path.symlink_to(secret)
    evidence, human = lab.app.evidence, lab.team.human
    shown = evidence.show(human, NAME)
    assert shown["file"] == {"state": "missing", "fingerprint": None}  # not the secret's fingerprint
    assert evidence.file_fingerprint(human, NAME) is None
    assert fingerprint(SECRET) not in repr(shown)
    assert evidence.snapshot_problems(lab.admin) == [f"{NAME}: the file {path} is missing (active revision 1)"]
    with changes_nothing(lab.app, InvalidInput):  # the file to take an edit from is not there
        evidence.edit(human, NAME, 1)
    with changes_nothing(lab.app, Conflict) as caught:
        evidence.restore(human, NAME)
    assert caught[0].details["path"] == f"alpha/units/{NAME}.md"
    with changes_nothing(lab.app, Conflict):
        evidence.edit(human, NAME, 1, body="Staging moved.\n")
    assert secret.read_bytes() == SECRET
    assert path.is_symlink()


def test_a_unit_file_nested_deeper_than_the_parser_goes_is_an_invalid_file(lab: Lab) -> None:
    lab.active(NAME, "Where staging runs", BODY)
    path = lab.path(NAME)
    lines = path.read_bytes().split(b"\n")
    lines[4] = b"provenance: " + b"[" * 200_000 + b"]" * 200_000  # an editor's (or anyone's) outside edit
    path.write_bytes(b"\n".join(lines))
    with changes_nothing(lab.app, InvalidInput) as caught:
        lab.app.evidence.edit(lab.team.human, NAME, 1)
    assert caught[0].details["field"] == "file"
    assert "the value of 'provenance' is not JSON" in caught[0].message


def test_a_sparse_unit_file_of_gigabytes_is_read_no_further_than_any_unit_file_goes(lab: Lab) -> None:
    """A file truncated to 2 GiB costs no disk, and every look at the unit read it whole into memory (2 GiB at
    each show, review, activation or snapshot check); it is read no further than UNIT_FILE_READ_MAX and a byte,
    and differs from every revision."""
    lab.active(NAME, "Where staging runs", BODY)
    with lab.path(NAME).open("r+b") as handle:
        handle.truncate(2 * 1024**3)
    evidence, human = lab.app.evidence, lab.team.human
    tracemalloc.start()
    try:
        assert evidence.show(human, NAME)["file"]["state"] == "differs"
        assert len(evidence.snapshot_problems(human)) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * UNIT_FILE_READ_MAX
