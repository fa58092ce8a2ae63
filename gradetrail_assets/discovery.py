"""Finding the specs: every *.yaml in each specs folder, or a spec file named itself; a
broken one does not stop the rest."""

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.spec.spec import LoadedSpec, load_spec

log = logging.getLogger("gradetrail_assets")


@dataclass
class Discovered:
    specs: list[LoadedSpec] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def specs_dir() -> Path:
    return Path(os.environ.get("GRADETRAIL_SPECS", "specs"))


def spec_files(folder: Path) -> list[Path]:
    """A folder's specs: its *.yaml, then its *.yml, each in name order."""
    return sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))


def discover(folder: Path) -> Discovered:
    """The specs of one folder (none when it does not exist, as before a project has any)."""
    return _load(spec_files(folder), [])


def discover_paths(paths: Sequence[Path]) -> Discovered:
    """The specs of each path: a folder's *.yaml, or a spec file itself. A path that is
    neither is an error the definitions show (as a broken spec's), the rest load."""
    files: list[Path] = []
    missing: list[str] = []
    for path in paths:
        if path.is_dir():
            files.extend(spec_files(path))
        elif path.is_file():
            files.append(path)
        else:
            missing.append(f"{path}: no such spec file or folder")
    return _load(list(dict.fromkeys(files)), missing)


def _load(files: Sequence[Path], errors: list[str]) -> Discovered:
    found = Discovered(errors=list(errors))
    for message in errors:
        log.error("spec not loaded: %s", message)
    names: dict[str, Path] = {}
    for path in files:
        try:
            loaded = load_spec(path)
        except (InputError, InputErrors) as exc:
            found.errors.append(str(exc))
            log.error("spec not loaded: %s", exc)
            continue
        name = loaded.spec.name
        if name in names:
            message = f"{path}: name: {name!r} is already used by {names[name]}"
            found.errors.append(message)
            log.error("spec not loaded: %s", message)
            continue
        names[name] = path
        found.specs.append(loaded)
    return found
