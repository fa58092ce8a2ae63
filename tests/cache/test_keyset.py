"""KeySet: request keys by their first 8 bytes, for what a step hands on about a run."""

import hashlib
import pickle

from gradetrail_lib.cache.keyset import KeySet


def key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def test_holds_what_was_added_and_nothing_else() -> None:
    keys = KeySet(key(i) for i in range(0, 1000, 2))
    assert all(key(i) in keys for i in range(0, 1000, 2))
    assert not any(key(i) in keys for i in range(1, 1000, 2))
    assert len(keys) == 500
    keys.add([key(1), key(0)])  # after a lookup: sorted in again; a repeat counts once
    assert key(1) in keys and key(3) not in keys and len(keys) == 501
    assert 5 not in keys


def test_pickles_compactly() -> None:
    keys = KeySet(key(i) for i in range(100_000))
    data = pickle.dumps(keys)
    assert len(data) < 100_000 * 9  # 8 bytes a key, not ~70 for the hex string
    again = pickle.loads(data)
    assert key(99_999) in again and key(100_000) not in again
