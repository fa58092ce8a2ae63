"""Execution backends: where the cache-missing requests are sent from."""

from gradetrail_lib.backends.base import Backend, ResultCallback
from gradetrail_lib.backends.local import LocalBackend

__all__ = ["Backend", "LocalBackend", "ResultCallback"]
