"""Storage: engines, transactions, migrations and workspace scoping."""

from armarius.store.engine import (
    TSQUERY,
    Database,
    Later,
    Row,
    Tx,
    UniqueViolation,
    every_page,
    iso_utc,
    open_database,
    utc_now,
)

__all__ = [
    "TSQUERY", "Database", "Later", "Row", "Tx", "UniqueViolation", "every_page", "iso_utc", "open_database", "utc_now",
]
