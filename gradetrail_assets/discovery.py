"""Finding the specs: every *.yaml in the specs folder; a broken one does not stop the rest."""

import logging
import os
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


def discover(folder: Path) -> Discovered:
    found = Discovered()
    names: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
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
