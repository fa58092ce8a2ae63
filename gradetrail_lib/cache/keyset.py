"""Where `KeySet` was: Dagster outputs pickled then (the responses step's sent keys) name
this module. It lives in `gradetrail_lib.results.keyset`, which a run's totals can import."""

from gradetrail_lib.results.keyset import KeySet

__all__ = ["KeySet"]
