"""Canonical JSON: the one byte form that hashes and fingerprints are computed over.

Sorted keys, compact separators, UTF-8 without escaping, and no NaN or Infinity.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
