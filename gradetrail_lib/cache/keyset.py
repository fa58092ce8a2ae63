"""A compact set of request keys: the first 8 bytes of each (a key is a sha256 in hex),
8 bytes a key in an array instead of a Python set's ~140 (the string and its slot). What
a step hands on about a run's keys (the ones Dagster's responses sent, pickled to the
scores step) grows with the run, so it is kept like this. Two keys that share their first
16 hex digits (a chance of about n² / 2⁶⁵ among n keys) would be taken for each other."""

from array import array
from bisect import bisect_left
from collections.abc import Iterable


def _prefix(key: str) -> int:
    return int(key[:16], 16)


class KeySet:
    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._values = array("Q")
        self._sorted = True
        self.add(keys)

    def add(self, keys: Iterable[str]) -> None:
        before = len(self._values)
        self._values.extend(_prefix(k) for k in keys)
        self._sorted = self._sorted and len(self._values) == before

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if not self._sorted:  # once, when first asked (not per batch added)
            self._values = array("Q", sorted(set(self._values)))
            self._sorted = True
        value = _prefix(key)
        at = bisect_left(self._values, value)
        return at < len(self._values) and self._values[at] == value

    def __len__(self) -> int:
        return len(set(self._values)) if not self._sorted else len(self._values)
