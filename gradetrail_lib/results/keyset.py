"""A compact set of request keys: the first 8 bytes of each (a key is a sha256 in hex),
8 bytes a key in a sorted array instead of a Python set's ~140 (the string and its slot).
What grows with a run is kept like this: the keys a run sent (its totals tell a record
that shares a request from a call), and those Dagster's responses step sent, pickled to
the scores step. Two keys that share their first 16 hex digits (a chance of about
n² / 2⁶⁵ among n keys) would be taken for each other.

Keys may be added and asked about in turn (a run's totals do, call by call): the newest
wait in a set of their own, merged into the array once they are an eighth of it (at
least `FOLD`), so a key is merged in a few times over a run rather than the array
sorted again for every question; meanwhile they take ~9 bytes a key of the array more."""

import hashlib
from array import array
from bisect import bisect_left
from collections.abc import Container, Iterable
from typing import Any

# The fewest new keys merged into the array at once.
FOLD = 8192


def _prefix(key: str) -> int:
    try:
        return int(key[:16], 16)
    except ValueError:  # not a request key (a record made by hand): its own digest's
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


class KeySet:
    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._values = array("Q")  # sorted (a key added twice may be there twice)
        self._new: set[int] = set()
        self.add(keys)

    def add(self, keys: Iterable[str]) -> None:
        self._new.update(map(_prefix, keys))
        if len(self._new) >= max(FOLD, len(self._values) >> 3):
            self._merge()

    def _merge(self) -> None:
        if self._new:
            # Two sorted runs: Timsort merges them in linear time.
            self._values = array("Q", sorted(self._values + array("Q", sorted(self._new))))
            self._new = set()

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        value = _prefix(key)
        if value in self._new:
            return True
        values = self._values
        at = bisect_left(values, value)
        return at < len(values) and values[at] == value

    def __bool__(self) -> bool:
        return bool(self._values or self._new)

    def __len__(self) -> int:
        self._merge()
        values = self._values
        return sum(1 for i in range(len(values)) if i == 0 or values[i] != values[i - 1])

    def __getstate__(self) -> dict[str, Any]:
        self._merge()  # pickled as the array: 8 bytes a key
        return {"_values": self._values}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # (Pickled before the newest keys were kept apart, the array may be unsorted.)
        self._values, self._new = array("Q", sorted(state["_values"])), set()


class AnyOf:
    """The keys of several sets, as one (none copied): what a run sent in two ways."""

    def __init__(self, *sets: Container[str]) -> None:
        self._sets = sets

    def __contains__(self, key: object) -> bool:
        return any(key in keys for keys in self._sets)

    def __bool__(self) -> bool:
        return any(self._sets)
