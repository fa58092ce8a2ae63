"""`GradetrailComponent`: gradetrail's evals in any `dg` project, configured in a
`defs.yaml` (docs/dagster.md).

    dg scaffold defs gradetrail_assets.GradetrailComponent evals
    dg check defs && dg dev

builds, for each spec, the same asset graph, checks, job, nightly schedule and sensors as
`gradetrail_assets.definitions` (both call `gradetrail_assets.build.build_definitions`).
Every attribute is optional: an unset one keeps what the environment says (GRADETRAIL_*,
RAY_ADDRESS), as `dagster dev` over `workspace.yaml` does. Relative paths in the
attributes are relative to the folder of the `defs.yaml`. A URL's password never goes in
the file (it is refused there): PGPASSWORD, ~/.pgpass, or the URL in GRADETRAIL_CACHE
(which Dagster then reads by name, as an EnvVar).

Registered for `dg` by the package's `dagster_dg_cli.registry_modules` entry point, so
`dg list components` shows it once gradetrail is installed. One instance per code
location: the `gradetrail` resource and the sensors have fixed names.
"""

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from pydantic import BaseModel, Field

from gradetrail_assets.build import FROM_ENVIRONMENT, build_definitions
from gradetrail_assets.executors import EXECUTORS, build_executor
from gradetrail_assets.resources import settings_from_environment
from gradetrail_lib.cache.location import LOCAL_STORE, parse_location, store_location
from gradetrail_lib.cache.urls import password_of, redact
from gradetrail_lib.settings import DEFAULTS, ENVIRONMENT

# An example spec the scaffolder writes when no spec is named: answered in-process by the
# scripted provider (no network, no model), so the new defs materialize at once.
EXAMPLE_SPEC = """\
# An example spec written by `dg scaffold defs`: the scripted provider answers each
# sample with its `answer` field, so it runs offline. Replace `models:` with real ones
# (e.g. {provider: openai, name: gpt-4o-mini}) and `dataset:` with your data.
name: example
description: Sums, answered by the scripted provider (a check of the wiring, not a model).
dataset: {path: data/example.jsonl}
prompt: "What is {{ a }} + {{ b }}? Answer with the number only."
models:
  - {provider: scripted, name: oracle, answer_field: answer}
params: {temperature: 0, max_tokens: 16}
scorers:
  - {name: sum, type: numeric}
"""


def _example_rows() -> str:
    rows = [
        f'{{"id": "s{i}", "a": {i}, "b": {2 * i + 1}, "answer": "{3 * i + 1}"}}' for i in range(5)
    ]
    return "\n".join(rows) + "\n"


class ScaffoldParams(BaseModel):
    spec: str | None = Field(
        default=None,
        description="A spec file or folder of specs for the new defs (relative to the "
        "defs.yaml's folder, absolute, or templated: '{{ context.project_root }}/specs'); "
        "unset: an offline example spec is written there.",
    )


class GradetrailScaffolder(dg.Scaffolder[ScaffoldParams]):
    """Writes a defs.yaml that loads and runs as written: the spec named, or an example."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[ScaffoldParams]) -> None:
        folder = request.target_path
        folder.mkdir(parents=True, exist_ok=True)
        spec = request.params.spec if request.params else None
        if spec is None:
            (folder / "specs" / "data").mkdir(parents=True, exist_ok=True)
            (folder / "specs" / "example.yaml").write_text(EXAMPLE_SPEC)
            (folder / "specs" / "data" / "example.jsonl").write_text(_example_rows())
            spec = "specs"
        text = f"""\
            type: {request.type_name}

            attributes:
              # Spec files or folders of specs, relative to this file.
              specs:
                - {json.dumps(spec)}
              # The response cache: a DuckDB file or postgresql://user@host/db (no password
              # here: PGPASSWORD or ~/.pgpass). Unset: GRADETRAIL_CACHE, else
              # .gradetrail/gradetrail.duckdb in the working directory.
              # cache: postgresql://evals@db.internal/gradetrail
              # How a run's steps execute: default, in_process, multiprocess or ray.
              # executor: multiprocess
              nightly_schedule: true
              release_sensor: true
            """
        (folder / "defs.yaml").write_text(textwrap.dedent(text))


def _text(context: dg.ResolutionContext, value: Any) -> str | None:
    """A templated text attribute's value (`{{ env.NAME }}` and the like rendered)."""
    if value is None:
        return None
    rendered = context.resolve_value(value)
    if not isinstance(rendered, str):
        raise ValueError(f"expected text, got {rendered!r}")
    return rendered


def _relative(context: dg.ResolutionContext, value: str) -> str:
    """A path relative to the defs.yaml's folder, made absolute."""
    return str(context.resolve_source_relative_path(value))


def _resolve_specs(context: dg.ResolutionContext, value: Any) -> list[str] | None:
    if value is None:
        return None
    listed = [value] if isinstance(value, str) else context.resolve_value(value)
    paths = []
    for item in listed:
        path = _relative(context, _text(context, item) or "")
        if not Path(path).exists():
            raise ValueError(f"{item!r}: no such spec file or folder ({path})")
        paths.append(path)
    return paths


def _no_password(name: str, url: str) -> None:
    if password_of(url):
        raise ValueError(
            f"{redact(url)!r} holds a password; keep it out of this file: set PGPASSWORD "
            f"(or ~/.pgpass), or leave {name} unset and put the URL in "
            f"{ENVIRONMENT['database' if name == 'cache' else name]}"
        )


def _resolve_cache(context: dg.ResolutionContext, value: Any) -> str | None:
    text = _text(context, value)
    if text is None:
        return None
    location = parse_location(text)  # an unknown scheme is refused here, naming the schemes
    if location.path is None:
        _no_password("cache", text)
        return text
    return _relative(context, text)


def _resolve_store(context: dg.ResolutionContext, value: Any) -> str | None:
    text = _text(context, value)
    if text is None or text.strip() == LOCAL_STORE:
        return text
    _no_password("store", text)
    store_location(text, DEFAULTS.database)  # refuses a path, or an unknown scheme
    return text


def _resolve_results(context: dg.ResolutionContext, value: Any) -> str | None:
    text = _text(context, value)
    return None if text is None else _relative(context, text)


def _one_of(choices: tuple[str, ...]) -> Callable[[dg.ResolutionContext, Any], str | None]:
    def resolve(context: dg.ResolutionContext, value: Any) -> str | None:
        text = _text(context, value)
        if text is not None and text not in choices:
            raise ValueError(f"{text!r}: unknown; use one of {', '.join(choices)}")
        return text

    return resolve


def _resolve_flag(context: dg.ResolutionContext, value: Any) -> bool:
    rendered = context.resolve_value(value) if isinstance(value, str) else value
    if isinstance(rendered, bool):
        return rendered
    words = {"true": True, "false": False}
    if isinstance(rendered, str) and rendered.strip().lower() in words:
        return words[rendered.strip().lower()]
    raise ValueError(f"{rendered!r}: expected true or false")


BACKENDS = ("local", "ray")
EXECUTOR_NAMES = ("default", *EXECUTORS)


@dg.scaffold_with(GradetrailScaffolder)
class GradetrailComponent(dg.Component, dg.Model, dg.Resolvable):
    """LLM evaluations from gradetrail specs: per spec, the dataset → responses → scores
    → stats → report assets partitioned by model, the leaderboard, asset checks on the
    scores, a nightly schedule and the sensors that register models and evaluate new
    releases."""

    # Each attribute's value is checked by its resolver, so a bad one is reported with
    # the defs.yaml's file and line (`dg check defs`), not by pydantic without them.
    specs: Annotated[
        list[str] | None,
        dg.Resolver(
            _resolve_specs,
            model_field_type=list[str] | None,
            description="Spec files or folders of specs (*.yaml), relative to this "
            "defs.yaml's folder. Unset: GRADETRAIL_SPECS, else specs/ in the working directory.",
        ),
    ] = None
    cache: Annotated[
        str | None,
        dg.Resolver(
            _resolve_cache,
            model_field_type=str | None,
            description="The response cache: a DuckDB file (relative to this folder) or a "
            "postgresql://user@host/db URL without a password. Unset: GRADETRAIL_CACHE, "
            "else .gradetrail/gradetrail.duckdb in the working directory.",
        ),
    ] = None
    store: Annotated[
        str | None,
        dg.Resolver(
            _resolve_store,
            model_field_type=str | None,
            description="Where the run history and the scores/stats tables are: a "
            "postgresql:// URL, or 'local'. Unset: GRADETRAIL_STORE, else the cache's "
            "database when the cache is a URL.",
        ),
    ] = None
    results: Annotated[
        str | None,
        dg.Resolver(
            _resolve_results,
            model_field_type=str | None,
            description="The folder of run directories (relative to this folder). Unset: "
            "GRADETRAIL_RESULTS, else results/ in the working directory.",
        ),
    ] = None
    backend: Annotated[
        str | None,
        dg.Resolver(
            _one_of(BACKENDS),
            model_field_type=str | None,
            description="Where requests are sent from: local (this process) or ray (Ray "
            "actors). Unset: GRADETRAIL_BACKEND, else local.",
        ),
    ] = None
    ray_address: Annotated[
        str | None,
        dg.Resolver(
            _text,
            model_field_type=str | None,
            description="The Ray cluster of the ray backend (e.g. ray://head:10001). Unset: "
            "RAY_ADDRESS, else a local Ray.",
        ),
    ] = None
    executor: Annotated[
        str | None,
        dg.Resolver(
            _one_of(EXECUTOR_NAMES),
            model_field_type=str | None,
            description="How a run's steps execute: default (Dagster's), in_process, "
            "multiprocess, or ray (each step a Ray job; the extra dagster-ray). Unset: "
            "GRADETRAIL_DAGSTER_EXECUTOR, else Dagster's default.",
        ),
    ] = None
    nightly_schedule: Annotated[
        bool,
        dg.Resolver(
            _resolve_flag,
            model_field_type=bool,
            description="A schedule per spec that evaluates every model nightly.",
        ),
    ] = True
    release_sensor: Annotated[
        bool,
        dg.Resolver(
            _resolve_flag,
            model_field_type=bool,
            description="The sensor that polls the model listings of specs that `watch` a "
            "provider and evaluates new models.",
        ),
    ] = True

    def settings(self) -> dict[str, Any]:
        """The engine's settings these attributes set (by `Settings` field)."""
        given: dict[str, Any] = {
            "database": self.cache,
            "store": self.store,
            "results": None if self.results is None else Path(self.results),
            "backend": self.backend,
            "ray_address": self.ray_address,
        }
        return {name: value for name, value in given.items() if value is not None}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        where = str(context.path / "defs.yaml")
        specs = None if self.specs is None else [Path(spec) for spec in self.specs]
        executor: dg.ExecutorDefinition | None | str = FROM_ENVIRONMENT
        if self.executor == "default":
            executor = None
        elif self.executor is not None:
            executor = build_executor(self.executor, named_by=f"{where}: executor")
        return build_definitions(
            specs,
            settings_from_environment(self.settings(), where=where),
            executor=executor,
            nightly_schedule=self.nightly_schedule,
            release_sensor=self.release_sensor,
        )
