"""Storage: engines, transactions, migrations and workspace scoping."""

from armarius.store.engine import Database, Row, Tx, UniqueViolation, iso_utc, open_database, utc_now

__all__ = ["Database", "Row", "Tx", "UniqueViolation", "iso_utc", "open_database", "utc_now"]
