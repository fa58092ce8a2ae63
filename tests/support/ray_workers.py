"""What a RayBackend's run holds, for the tests that kill its actors or check they end."""

from typing import Any

from gradetrail_lib.backends.ray_backend import RayBackend


def worker_handles(backend: RayBackend) -> list[Any]:
    """The live actors of the backend's current run ([] between runs)."""
    return [slot.handle for slot in backend._slots if slot.alive]
