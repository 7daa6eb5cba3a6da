"""The audit key at start: ``armarius init`` creates it, every server process requires it."""

from __future__ import annotations

from pathlib import Path

from armarius.audit.chain import seal_legacy_chains, signed_events_exist
from armarius.audit.keys import (
    KEY_FILE_SETTING,
    KeyedDatabase,
    Keyring,
    create_key_file,
    load_keyring,
    require_keyring,
)
from armarius.errors import ConfigError
from armarius.store import Database
from armarius.store.schema import current_version

#: The migration that gave audit events their key id and MAC.
AUTHENTICATED_SINCE = 8


def initialize_audit(database: Database, *, env_keys: str | None, key_file: Path, seal_legacy: bool) -> Keyring:
    """Create the key file if there is no key yet; with ``seal_legacy`` (only in the run that applied
    migration 8), seal the chains that end in legacy events. A later run never seals: the table that
    says how far the legacy events go is not authenticated, and someone who can write the database
    without the key could otherwise have a forged, unsigned chain signed by the next `armarius init`.

    A new key is never made for a log that is signed already: it could not verify the existing
    events, and a second server of the same database would sign with a key the first lacks.
    """
    # A database migrated only part of the way (by a test, or an older release) has no MACs yet.
    authenticated = current_version(database) >= AUTHENTICATED_SINCE
    keyring = load_keyring(env_keys, key_file)
    if keyring is None:
        if authenticated and signed_events_exist(database):
            raise ConfigError(
                f"The audit log in this database is signed with a key that this server does not have: "
                f"{key_file} is missing. Copy audit.key from the server that created the log (or set "
                "ARMARIUS_AUDIT_KEY) and run `armarius init` again (docs/security.md).",
                key=KEY_FILE_SETTING,
            )
        create_key_file(key_file)
        keyring = require_keyring(None, key_file)
    if authenticated and seal_legacy:
        seal_legacy_chains(KeyedDatabase(database, keyring))
    return keyring


def open_keyed(database: Database, *, env_keys: str | None, key_file: Path) -> KeyedDatabase:
    """The database whose transactions sign audit events; refuses to open without a key."""
    return KeyedDatabase(database, require_keyring(env_keys, key_file))
