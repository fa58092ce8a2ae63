"""KeySet: request keys by their first 8 bytes, for what grows with a run (its sent keys)."""

import hashlib
import pickle
from array import array

from gradetrail_lib.results.keyset import FOLD, AnyOf, KeySet


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


def test_keys_added_one_at_a_time_and_asked_about_in_turn() -> None:
    """As a run's totals use it: each key asked about, then added; across many folds."""
    keys = KeySet()
    n = 3 * FOLD + 17
    for i in range(n):
        assert key(i) not in keys
        keys.add((key(i),))
        assert key(i) in keys and key(i // 2) in keys
    keys.add(key(i) for i in range(0, n, 3))  # again: no key counts twice
    assert len(keys) == n and not any(key(i) in keys for i in range(n, n + 500))
    assert len(pickle.loads(pickle.dumps(keys))) == n


def test_reads_a_set_pickled_before_the_newest_keys_were_kept_apart() -> None:
    old = KeySet.__new__(KeySet)  # then: one array, sorted when first asked
    old.__setstate__({"_values": array("Q", [5, 3, 5, 1]), "_sorted": False})
    assert len(old) == 3 and format(3, "016x") + "ff" in old and format(2, "016x") not in old


def test_a_key_not_in_hex_is_held_by_its_digest() -> None:
    keys = KeySet(["k-target-a"])
    assert "k-target-a" in keys and "k-target-b" not in keys


def test_any_of_holds_what_either_holds_and_is_empty_when_both_are() -> None:
    one, two = KeySet(), KeySet()
    assert not AnyOf(one, two, frozenset())
    two.add([key(1)])
    either = AnyOf(one, two)
    assert either and key(1) in either and key(2) not in either
