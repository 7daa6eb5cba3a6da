"""Handing an approval token to the agent that proposed the draft, and to no one else.

When an agent files a proposal it receives a private *collection key* (X25519) that Armarius
never stores; the proposal keeps only the public half. An approval for that proposal seals its
token to the public key (ephemeral X25519, HKDF-SHA256, AES-256-GCM). Only the holder of the
collection key can open it, once: the sealed token is deleted when collected. The database never
holds a usable token, only its SHA-256 digest and this sealed copy.
"""

from __future__ import annotations

import base64
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from armarius.errors import InvalidInput

_INFO = b"armarius approval token handoff v1"


def new_collection_key() -> tuple[str, str]:
    """(private collection key for the agent, public key to store), both base64url."""
    private = X25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return _b64(private.private_bytes_raw()), _b64(public)


def seal(token: str, public_key: str, context: str) -> str:
    ephemeral = X25519PrivateKey.generate()
    key = _derive(ephemeral.exchange(X25519PublicKey.from_public_bytes(_unb64(public_key))), context)
    nonce = secrets.token_bytes(12)
    sealed = AESGCM(key).encrypt(nonce, token.encode("ascii"), context.encode("utf-8"))
    ephemeral_public = ephemeral.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return _b64(ephemeral_public + nonce + sealed)


def open_sealed(sealed: str, collection_key: str, context: str) -> str:
    refusal = InvalidInput("This collection key does not open the approval of this proposal.",
                           field="collection_key")
    try:
        raw = _unb64(sealed)
        private = X25519PrivateKey.from_private_bytes(_unb64(collection_key))
        key = _derive(private.exchange(X25519PublicKey.from_public_bytes(raw[:32])), context)
        return AESGCM(key).decrypt(raw[32:44], raw[44:], context.encode("utf-8")).decode("ascii")
    except (InvalidTag, ValueError):
        raise refusal from None


def _derive(shared: bytes, context: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO + context.encode("utf-8")).derive(shared)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
