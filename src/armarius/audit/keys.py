"""The audit key: every event carries an HMAC under a key that is kept outside the database.

A login role of the database can append rows with a valid hash (the hash uses no secret), but
without the key it cannot produce the MAC, so ``armarius audit verify`` finds the forgery.

A keyring holds one or more 256-bit keys. The last one is **active** and signs new events; the
others are retired keys, kept so that older events still verify. The keyring comes from
``ARMARIUS_AUDIT_KEY`` (hex keys separated by commas) or else from the key file (``audit.key`` in
the data folder: one hex key per line, ``#`` comments), never from the database. Each event
stores the id of the key that signed it: the first 16 hex digits of a SHA-256 over a label and
the key, which names the key without revealing it.

:class:`KeyedDatabase` is how the key reaches :func:`armarius.audit.chain.append`: the
composition root wraps the database once, and every transaction it opens is signed with its
keyring.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from armarius.errors import ConfigError
from armarius.store import Database, Tx, utc_now

KEY_BYTES = 32
ENV_VARIABLE = "ARMARIUS_AUDIT_KEY"
KEY_FILE_SETTING = "audit.key_file"
_KEY_ID_LABEL = b"armarius audit key id\x00"
_MAC_LABEL = b"armarius audit event\x00"
_GENERATE = "`armarius audit rotate-key`, or `python3 -c 'import secrets; print(secrets.token_hex(32))'`"


@dataclass(frozen=True)
class AuditKey:
    id: str
    secret: bytes = field(repr=False)

    @classmethod
    def from_secret(cls, secret: bytes) -> AuditKey:
        return cls(hashlib.sha256(_KEY_ID_LABEL + secret).hexdigest()[:16], secret)

    @classmethod
    def generate(cls) -> AuditKey:
        return cls.from_secret(secrets.token_bytes(KEY_BYTES))

    def mac(self, event_hash: str) -> str:
        return hmac.new(self.secret, _MAC_LABEL + event_hash.encode("ascii"), hashlib.sha256).hexdigest()

    def verifies(self, event_hash: str, mac: str) -> bool:
        return hmac.compare_digest(self.mac(event_hash).encode("ascii"), mac.encode("utf-8"))


@dataclass(frozen=True)
class Keyring:
    """The keys events may be signed with; the last one signs new events."""

    keys: tuple[AuditKey, ...]
    #: Where the keys came from, for messages: the variable's name or the key file's path.
    source: str

    @property
    def active(self) -> AuditKey:
        return self.keys[-1]

    def get(self, key_id: str) -> AuditKey | None:
        return next((key for key in self.keys if key.id == key_id), None)


def parse_keys(text: str, *, source: str, setting: str) -> tuple[AuditKey, ...]:
    """Hex keys, one per line or separated by commas; ``#`` starts a comment. Never echoes a key."""
    entries = [entry.strip() for line in text.splitlines() for entry in line.split("#", 1)[0].split(",")]
    keys = []
    for number, entry in enumerate((entry for entry in entries if entry), start=1):
        try:
            secret = bytes.fromhex(entry)
        except ValueError:
            secret = b""
        if len(secret) != KEY_BYTES:
            raise ConfigError(
                f"Audit key {number} in {source} is not {2 * KEY_BYTES} hexadecimal digits (256 bits). "
                f"Generate a key with {_GENERATE}.",
                key=setting,
            )
        keys.append(AuditKey.from_secret(secret))
    if not keys:
        raise ConfigError(f"{source} holds no audit key. Generate one with {_GENERATE}.", key=setting)
    return tuple(keys)


def load_keyring(env_keys: str | None, key_file: Path) -> Keyring | None:
    """The keyring from the variable if it is set, else from the key file; None if neither exists."""
    if env_keys is not None:
        return Keyring(parse_keys(env_keys, source=ENV_VARIABLE, setting=ENV_VARIABLE), ENV_VARIABLE)
    try:
        text = key_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"The audit key file {key_file} cannot be read by this user.",
                          key=KEY_FILE_SETTING) from None
    return Keyring(parse_keys(text, source=str(key_file), setting=KEY_FILE_SETTING), str(key_file))


def require_keyring(env_keys: str | None, key_file: Path) -> Keyring:
    keyring = load_keyring(env_keys, key_file)
    if keyring is None:
        raise ConfigError(
            f"There is no audit key: {key_file} does not exist and {ENV_VARIABLE} is not set. Run "
            "`armarius init` to create the key file, or, on a second server of the same database, copy "
            "audit.key from the first one (docs/security.md).",
            key=KEY_FILE_SETTING,
        )
    return keyring


def _key_lines(key: AuditKey) -> str:
    return f"# added {utc_now()}, key id {key.id}\n{key.secret.hex()}\n"


def _write_private(path: Path, text: str) -> Path:
    """A new file only this user can read, next to ``path``, written and flushed to disk."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return temporary


def create_key_file(key_file: Path) -> bool:
    """Create the key file with one new key unless it exists; True if this call created it.

    The key is written to a private temporary file and linked into place, so that a reader never
    sees half a key file and two processes initialising at once agree on one key.
    """
    key_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    header = ("# Armarius audit keys: the last line signs new audit events; earlier ones are retired\n"
              "# keys that older events were signed with. Keep this file private and backed up apart\n"
              "# from the database. See docs/security.md.\n")
    temporary = _write_private(key_file, header + _key_lines(AuditKey.generate()))
    try:
        os.link(temporary, key_file)
    except FileExistsError:
        return False
    finally:
        temporary.unlink()
    return True


def rotate_key_file(key_file: Path) -> tuple[AuditKey, AuditKey]:
    """Append a new active key to the key file, keeping the old ones; returns (retired, new)."""
    with rotating_key_file(key_file) as keys:
        return keys


@contextmanager
def rotating_key_file(key_file: Path) -> Iterator[tuple[AuditKey, AuditKey]]:
    """Append a new active key to the key file, keeping the old ones, and yield (retired, new) while holding
    the rotation lock (:func:`key_file_lock`): what the caller does with them meanwhile (record the rotation)
    agrees with the file, whoever else rotates."""
    with key_file_lock(key_file):
        keyring = load_keyring(None, key_file)
        if keyring is None:
            raise ConfigError(f"There is no audit key file at {key_file} to rotate; run `armarius init` first.",
                              key=KEY_FILE_SETTING)
        new_key = AuditKey.generate()
        text = key_file.read_text(encoding="utf-8")
        temporary = _write_private(key_file, text + ("" if text.endswith("\n") else "\n") + _key_lines(new_key))
        os.replace(temporary, key_file)
        yield keyring.active, new_key


@contextmanager
def key_file_lock(key_file: Path) -> Iterator[None]:
    """An exclusive lock over rotations of ``key_file``, across processes: ``flock`` on a file next to it
    (``.audit.key.lock``), which is never removed. Not on the key file itself, which a rotation replaces: a
    process that waited on the old file would hold a lock nobody else takes."""
    lock_path = key_file.with_name(f".{key_file.name}.lock")
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


# Signing transactions ---------------------------------------------------------------------------

#: The keyring of each open transaction of a KeyedDatabase (removed when the transaction ends).
_signing: dict[Tx, Keyring] = {}


class KeyedDatabase(Database):
    """A database whose transactions sign their audit events with ``keyring``."""

    def __init__(self, database: Database, keyring: Keyring) -> None:
        self.inner = database
        self.keyring = keyring
        self.dialect = database.dialect

    def transaction(self, *, workspace_id: int | None = None, write: bool = False, snapshot: bool = False
                    ) -> AbstractContextManager[Tx]:
        return self._signed(workspace_id, write, snapshot)

    @contextmanager
    def _signed(self, workspace_id: int | None, write: bool, snapshot: bool) -> Iterator[Tx]:
        with self.inner.transaction(workspace_id=workspace_id, write=write, snapshot=snapshot) as tx:
            _signing[tx] = self.keyring
            try:
                yield tx
            finally:
                del _signing[tx]

    def writes_without_waiting(self) -> AbstractContextManager[bool]:
        return self.inner.writes_without_waiting()

    def close(self) -> None:
        self.inner.close()


def signing_keyring(tx: Tx) -> Keyring:
    keyring = _signing.get(tx)
    if keyring is None:
        raise RuntimeError("audit events are appended in transactions of the application's KeyedDatabase")
    return keyring


def keyring_of(database: Database) -> Keyring:
    if not isinstance(database, KeyedDatabase):
        raise RuntimeError("the audit log is verified through the application's KeyedDatabase")
    return database.keyring
