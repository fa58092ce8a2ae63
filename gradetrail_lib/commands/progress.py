"""A progress bar on stderr, drawn only when stderr is a terminal."""

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, label: str, stream: TextIO = sys.stderr) -> None:
        self.label = label
        self.stream = stream
        self.enabled = stream.isatty()
        self._last_draw = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (done < total and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
