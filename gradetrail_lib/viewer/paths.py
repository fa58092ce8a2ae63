"""Run directory names resolved inside the results root, and nothing else.

A name is one path component of a directory directly under the root: not empty, not
`.` or `..`, no separator, not hidden (gradetrail's own staging and set-aside
directories start with a dot), and the directory and the two files the viewer reads
(manifest.json, results.jsonl) must resolve inside the root, so a symlink out of it
is refused like a name that does not exist: NotFound, a 404 that says no more.
"""

import os
from pathlib import Path

from gradetrail_lib.results.runs import MANIFEST_FILE, RESULTS_FILE


class NotFound(Exception):
    """No such page (or a path the viewer refuses to look at: the same answer)."""


def valid_name(name: str) -> bool:
    return (
        bool(name)
        and name not in (".", "..")
        and not name.startswith(".")
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
        and os.sep not in name
    )


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, every symlink followed, is strictly inside `root` (resolved)."""
    try:
        resolved = path.resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop
        return False
    return resolved != root and resolved.is_relative_to(root)


def run_dir(root: Path, name: str) -> Path:
    """The directory `root/name`, refused (NotFound) unless it and the files in it that
    exist stay inside the root. `root` must be resolved already."""
    if not valid_name(name):
        raise NotFound(name)
    path = root / name
    if not inside(root, path) or not path.is_dir():
        raise NotFound(name)
    for file in (MANIFEST_FILE, RESULTS_FILE):
        if os.path.lexists(path / file) and not inside(root, path / file):
            raise NotFound(name)
    return path
