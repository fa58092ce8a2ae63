"""Where a spec comes from: a file, every spec of a folder, or a spec in memory (a
mapping with a spec file's keys, or a `Spec`: a code-first eval); and the model a run of
it names, resolved against the spec's own."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gradetrail_lib.errors import UsageError, input_errors, one_or_all
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.models import is_provider_name, parse_model
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.spec.spec import LoadedSpec, Spec, load_spec

SpecSource = Path | str | Mapping[str, Any] | Spec | LoadedSpec
# The file name a spec in memory is given under its `base_dir` (its relative paths start
# there; the manifest names it).
IN_MEMORY = "<in-memory spec>"


def spec_files(folder: Path) -> list[Path]:
    """The specs of a folder: its `*.yaml` and `*.yml` files, in name order."""
    found = sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and p.is_file() and not p.name.startswith(".")
    )
    if not found:
        raise UsageError(f"{folder}: no spec in this folder (no *.yaml or *.yml file)")
    return found


def as_loaded_spec(spec: SpecSource, base_dir: Path | str | None = None) -> LoadedSpec:
    """A spec file, or a spec in memory (a mapping with a spec file's keys, or a `Spec`)
    whose relative paths (dataset, a Python scorer's `file.py:function`, a judge's
    prompt) are relative to `base_dir` (default: the working directory)."""
    if isinstance(spec, LoadedSpec):
        return spec
    if isinstance(spec, str | Path):
        return load_spec(spec)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    where = base / IN_MEMORY
    if isinstance(spec, Spec):
        return LoadedSpec(spec=spec, path=where)
    try:
        validated = Spec.model_validate(dict(spec), context={"base_dir": base})
    except ValidationError as exc:
        raise one_or_all(input_errors(exc, str(where))) from None
    return LoadedSpec(spec=validated, path=where)


def resolve_model(
    spec: Spec,
    wanted: str | ModelConfig,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
) -> ModelConfig:
    """A model to run the spec with: a `ModelConfig`; the name of one of the spec's models;
    `provider/name` (a model the spec need not list, at `base_url` when given; one the spec
    lists by that provider and name keeps its settings unless `base_url` or `api_key_env`
    is given); or a name the spec's `watch` matches."""
    if isinstance(wanted, ModelConfig):
        return wanted
    overridden = base_url is not None or api_key_env is not None
    for listed in spec.models:
        if not overridden and wanted in (listed.name, f"{listed.provider}/{listed.name}"):
            return listed
    if not is_provider_name(wanted):
        if overridden:
            raise UsageError(f"model {wanted!r}: an endpoint is given for provider/name only")
        return spec.model_named(wanted)  # a name its `watch` matches, or UnknownModel
    model = parse_model(wanted, base_url=base_url, api_key_env=api_key_env)
    refused = registry.get(model.provider).refused(spec.params, model)
    if refused is not None:
        raise UsageError(refused.model_message(wanted, spec.name))
    return model
