"""When this process started, so that a command's wall time includes Python's own
start-up and the imports (what `time gradetrail run` measures), not only its work."""

import os
import time

_IMPORTED = time.time()


def process_started() -> float:
    """The process's start as a `time.time()` instant: from /proc on Linux, else when
    this module was first imported."""
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # starttime, field 22, in clock ticks after boot
        with open("/proc/uptime", "rb") as uptime:
            up = float(uptime.read().split()[0])
        return time.time() - up + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def since_start() -> float:
    return time.time() - process_started()
