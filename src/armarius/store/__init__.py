"""Storage: engines, transactions, migrations and workspace scoping."""

from armarius.store.engine import (
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

__all__ = ["Database", "Later", "Row", "Tx", "UniqueViolation", "every_page", "iso_utc", "open_database", "utc_now"]
