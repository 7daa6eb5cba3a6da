"""Passwords (scrypt) and agent tokens (256 random bits, stored only as SHA-256)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

TOKEN_PREFIX = "arm_"  # noqa: S105 (a prefix, not a secret)
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**15, 8, 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def digests_match(expected: str, presented: str) -> bool:
    """Whether a presented secret or digest is the expected one, in constant time; any text may be presented
    (a value that is not even ASCII simply does not match)."""
    return hmac.compare_digest(expected.encode("utf-8", "surrogatepass"), presented.encode("utf-8", "surrogatepass"))


def new_password() -> str:
    return secrets.token_urlsafe(18)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    derived = _scrypt(password, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${_b64(salt)}${_b64(derived)}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, expected = stored.split("$")
        if scheme != "scrypt":
            return False
        derived = _scrypt(password, base64.b64decode(salt), int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(derived, base64.b64decode(expected))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=32)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
