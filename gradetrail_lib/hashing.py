"""Canonical JSON and the sha256 digests built on it.

Canonical JSON (used by every hash in gradetrail, the request key included): UTF-8,
keys sorted, no insignificant whitespace (separators "," and ":"), non-ASCII characters
kept as they are (not \\u-escaped), no NaN or Infinity. Integers and floats are written
as Python's json module writes them, so 0 and 0.0 differ: callers normalise types first
(pydantic fields typed float make 0 into 0.0).
"""

import hashlib
import json
from typing import Any

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def hash_json(value: Any) -> str:
    return sha256_hex(canonical_json(value))
