"""Execution backends: where the cache-missing requests are sent from."""

from gradetrail_lib.backends.base import Backend, ResultCallback
from gradetrail_lib.errors import UsageError
from gradetrail_lib.settings import DEFAULT_MAX_CONCURRENCY, DEFAULT_WORKERS

BACKENDS = ("local", "ray")


def parse_concurrency(text: str | int) -> int | str:
    """A concurrency setting: a count of at least 1, or "auto" (adaptive)."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"concurrency must be a whole number or auto, not {text!r}") from None
    if value < 1:
        raise UsageError("concurrency must be at least 1")
    return value


def build_backend(
    kind: str,
    *,
    concurrency: int | str,
    workers: int | None = None,
    address: str | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
) -> Backend:
    """The backend the CLI flags or the Dagster resource describe; bad settings raise.
    `concurrency` "auto" adapts it per endpoint up to `max_concurrency` (local only)."""
    concurrency = parse_concurrency(concurrency)
    if max_concurrency < 1:
        raise UsageError("max concurrency must be at least 1")
    if concurrency == "auto" and kind != "local":
        raise UsageError("concurrency auto needs the local backend")
    if kind == "local":
        for name, value in (("workers", workers), ("ray address", address)):
            if value is not None:
                raise UsageError(f"{name} needs the ray backend")
        from gradetrail_lib.backends.local import LocalBackend

        if concurrency == "auto":
            return LocalBackend(concurrency=max_concurrency, adaptive=True)
        return LocalBackend(concurrency=int(concurrency))
    if kind == "ray":
        workers = DEFAULT_WORKERS if workers is None else workers
        if workers < 1:
            raise UsageError("workers must be at least 1")
        # Imported here: ray itself (imported when a run starts) takes seconds, and
        # nothing else should pay for it.
        from gradetrail_lib.backends.ray_backend import RayBackend

        return RayBackend(workers=workers, concurrency=int(concurrency), address=address)
    raise UsageError(f"unknown backend {kind!r} (one of {', '.join(BACKENDS)})")


__all__ = [
    "BACKENDS",
    "Backend",
    "ResultCallback",
    "build_backend",
    "parse_concurrency",
]
