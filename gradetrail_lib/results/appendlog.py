"""Append-only JSON Lines files shared by concurrent processes (the run history, the
human labels): each entry is one `write` of one line to a descriptor opened with
O_APPEND, under an exclusive `flock` (readers take a shared one), so two processes
appending together never interleave half lines."""

import fcntl
import os
from pathlib import Path


def append_lines(path: Path, data: bytes) -> None:
    """Appends `data` (whole lines, each ending in a newline) in one write under an
    exclusive lock, creating the file and its directory when needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = os.fstat(fd).st_size  # under the lock: where these lines begin
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write (a full disk, a signal): finish it
                written += os.write(fd, data[written:])
        except OSError:
            # A full disk took part of a line (Linux writes what fits in the file's last
            # page): cut it off, or every later entry would follow half a line and the
            # file would no longer parse.
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)  # releases the lock


def read_locked(path: Path) -> bytes | None:
    """The whole file read under a shared lock (no half-appended line), None when there
    is no such file."""
    try:
        with open(path, "rb") as lines:
            fcntl.flock(lines.fileno(), fcntl.LOCK_SH)
            return lines.read()
    except FileNotFoundError:
        return None
