"""MariaDB rows as the driver decodes them (armarius.research.dbdrivers._decoded_row, in one loop per row) are
PyMySQL's own, value for value, on every column type: lengths around each prefix size, NULL in every column,
bytes that look like prefixes, text in several character sets."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from armarius.research.dbdrivers import _decoded_row, _mariadb_conversions
from tests.research.test_database_identifiers import scratch_database, scratch_driver

COLUMNS = {
    "id": "INT NOT NULL PRIMARY KEY",
    "tiny": "TINYINT", "small": "SMALLINT UNSIGNED", "big": "BIGINT UNSIGNED", "signed_big": "BIGINT",
    "exact": "DECIMAL(30,10)", "single": "FLOAT", "double_": "DOUBLE", "bits": "BIT(10)", "year_": "YEAR",
    "day": "DATE", "moment": "DATETIME(6)", "stamp": "TIMESTAMP NULL", "clock": "TIME(3)",
    "fixed": "CHAR(5)", "short": "VARCHAR(300)", "medium": "MEDIUMTEXT", "mb3": "VARCHAR(40) CHARACTER SET utf8mb3",
    "latin": "VARCHAR(40) CHARACTER SET latin1", "raw": "VARBINARY(300)", "blob_": "MEDIUMBLOB",
    "choice": "ENUM('a','b')", "choices": "SET('x','y')", "doc": "JSON", "uuid_": "UUID",
}
#: Text lengths on each side of the length prefixes' limits (one byte up to 250, two up to 65,535, three up
#: to 16 MiB): a value of 251 bytes is the first with a prefix of 0xfc, of 65,536 the first with 0xfd.
LENGTHS = [0, 1, 250, 251, 252, 300, 65_535, 65_536, 70_000]


def rows() -> list[str]:
    values = []
    for number, length in enumerate(LENGTHS, start=1):
        short = "x" * min(length, 300)
        values.append(
            f"({number}, -{number}, {number * 1000}, 18446744073709551615, -9223372036854775808, "
            f"'12345678901234567890.0123456789', 1.5e{number}, 2.25e-{number}, b'1010101010', 2024, '2024-02-29', "
            f"'2024-01-31 12:30:00.{number:06d}', '2024-01-31 12:30:00', '-838:59:59.{number:03d}', 'ab', "
            f"'{short}', REPEAT('e', {length}), 'Müller', 'café', UNHEX(REPEAT('FB', {min(length, 300)})), "
            f"UNHEX(REPEAT('FCFDFE00FF', {length // 5})), 'b', 'x,y', '{{\"k\": [1, \"é\"]}}', "
            f"'123e4567-e89b-12d3-a456-4266141740{number:02d}')")
    values.append("(100" + ", NULL" * (len(COLUMNS) - 1) + ")")
    values.append("(101, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, '', '', '', '', '', '', '', NULL, "
                  "'', NULL, NULL)")
    return values


@pytest.mark.mariadb
def test_the_drivers_rows_are_pymysqls(tmp_path: Path) -> None:
    table = ", ".join(f"`{name}` {kind}" for name, kind in COLUMNS.items())
    statements = [f"CREATE TABLE kinds ({table}) ENGINE=InnoDB", f"INSERT INTO kinds VALUES {', '.join(rows())}"]
    select = f"SELECT {', '.join(f'`{name}`' for name in COLUMNS)} FROM kinds ORDER BY `id`"
    with scratch_database("mariadb", tmp_path, statements, ["kinds"]) as service:
        driver = scratch_driver(service)
        source = driver.source
        plain = pymysql.connect(conv=_mariadb_conversions(), host=source.host, port=source.port or 3306,
                                user=source.user, password=source.password or "", database=source.database,
                                charset="utf8mb4", autocommit=True)
        try:
            with plain.cursor() as cursor:
                cursor.execute(select)
                expected = list(cursor.fetchall())
        finally:
            plain.close()
        decoded = driver.fetch(select)
    assert len(expected) == len(LENGTHS) + 2
    assert decoded == expected
    by_id = {row[0]: row for row in decoded}
    assert len(by_id[9][COLUMNS_INDEX["medium"]]) == 70_000  # a three-byte prefix, read whole
    assert by_id[100][1:] == (None,) * (len(COLUMNS) - 1)


COLUMNS_INDEX = {name: number for number, name in enumerate(COLUMNS)}


@pytest.mark.parametrize("packet", [b"\x05abc", b"\xfc\x00\x01abc", b"\xfd\x01", b"\xff\x00"],
                         ids=["short value", "short long value", "cut prefix", "no prefix"])
def test_a_row_packet_that_ends_inside_a_value_is_refused(packet: bytes) -> None:
    """A packet no server sends (a value running past its end, a prefix byte no value starts with) is a driver
    error (the query is refused, research_unavailable), never a value cut short."""
    with pytest.raises(pymysql.err.InternalError):
        _decoded_row(packet, [(None, None)])
    assert _decoded_row(b"\x03abc\xfb", [("ascii", None), (None, None), (None, None)]) == ("abc", None)
