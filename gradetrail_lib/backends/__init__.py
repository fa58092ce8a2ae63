"""Execution backends: where the cache-missing requests are sent from."""

from gradetrail_lib.backends.base import Backend, ResultCallback
from gradetrail_lib.errors import UsageError

BACKENDS = ("local", "ray")


def build_backend(
    kind: str, *, concurrency: int, workers: int | None = None, address: str | None = None
) -> Backend:
    """The backend the CLI flags or the Dagster resource describe; bad settings raise."""
    if concurrency < 1:
        raise UsageError("concurrency must be at least 1")
    if kind == "local":
        for name, value in (("workers", workers), ("ray address", address)):
            if value is not None:
                raise UsageError(f"{name} needs the ray backend")
        from gradetrail_lib.backends.local import LocalBackend

        return LocalBackend(concurrency=concurrency)
    if kind == "ray":
        workers = 2 if workers is None else workers
        if workers < 1:
            raise UsageError("workers must be at least 1")
        # Imported here: ray itself (imported when a run starts) takes seconds, and
        # nothing else should pay for it.
        from gradetrail_lib.backends.ray_backend import RayBackend

        return RayBackend(workers=workers, concurrency=concurrency, address=address)
    raise UsageError(f"unknown backend {kind!r} (one of {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Backend", "ResultCallback", "build_backend"]
