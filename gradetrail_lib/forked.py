"""A function run in a forked child process, its result pickled back through a pipe.

The child shares the parent's memory as it was at the fork (copy on write), so it needs
no imports and no arguments passed; it must not touch what the parent owns beyond
files of its own. It ignores Ctrl-C (the parent stops it), dies with the parent (Linux:
`PR_SET_PDEATHSIG`) and leaves through `os._exit`, so none of the parent's exit handlers
or buffered output run twice. Any exception in it is a failed child: `result()` is None.
"""

import contextlib
import ctypes
import os
import pickle
import signal
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Forked(Generic[T]):
    """A child process computing one value."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self._fd: int | None = fd
        self._running = True

    @classmethod
    def start(cls, work: Callable[[], T]) -> "Forked[T]":
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            status = 1
            try:
                os.close(read_fd)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _die_with_parent()
                if os.getppid() == parent:  # (not orphaned before the line above)
                    payload = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
                    with os.fdopen(write_fd, "wb") as out:
                        out.write(payload)
                    status = 0
            except BaseException:  # noqa: S110 (the parent does the work itself then)
                pass
            finally:
                os._exit(status)
        os.close(write_fd)
        return cls(pid, read_fd)

    def result(self) -> T | None:
        """Waits for the child: its value, or None when it failed or was killed."""
        assert self._fd is not None, "result() is called once"
        with os.fdopen(self._fd, "rb") as data:
            self._fd = None
            payload = data.read()
        _, status = os.waitpid(self.pid, 0)
        self._running = False
        if os.waitstatus_to_exitcode(status) != 0 or not payload:
            return None
        value: T = pickle.loads(payload)
        return value

    def stop(self) -> None:
        """Kills the child if it still runs (the parent failed, or was interrupted)."""
        if self._running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self._running = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
