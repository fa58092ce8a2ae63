"""The documentation is held to the code it describes.

* docs/spec.md has a table per spec model (the spec, its dataset, models, params, tools,
  watch, and every scorer type with its judge's grade): each field of each model has a
  row, no row names a field that does not exist, each row's default is the model's, and
  each list of allowed values is the model's. The models are walked from `Spec`, so a new
  nested model or scorer type must be given a section too.
* docs/cli.md has a table of options per command, checked against the argument parser.
* docs/providers.md has a section per provider; every engine setting's variable is named;
  docs/python-api.md names every name of `gradetrail_lib.__all__`.
* docs/architecture.md lists the layers as `.importlinter` does, highest first, and
  names every provider module.
* The README keeps its two set-up commands (CI runs the test command verbatim), stays
  short, and links only to pages that exist; mkdocs.yml's nav lists every page.

A failure says which page, which section and what to add or remove.
"""

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from gradetrail_lib.cli import build_parser
from gradetrail_lib.config import Params, PromptCache, Thinking
from gradetrail_lib.datasets.registry import DatasetRef
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.registry import ModelConfig, Watch
from gradetrail_lib.scorers.judge import Grade
from gradetrail_lib.scorers.registry import ScorerConfig, config_types
from gradetrail_lib.settings import ENVIRONMENT
from gradetrail_lib.spec.spec import FewShotConfig, MessageTemplate, Spec
from gradetrail_lib.spec.tools import ToolConfig

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
SPEC_DOC = REPO / "docs/spec.md"

# The section of docs/spec.md that documents each model (a scorer type's is `type: NAME`).
SECTIONS: dict[type[BaseModel], str] = {
    Spec: "Top level",
    DatasetRef: "dataset",
    MessageTemplate: "messages",
    ModelConfig: "models and model",
    Params: "params",
    Thinking: "thinking",
    PromptCache: "cache",
    ToolConfig: "tools",
    Watch: "watch",
    ScorerConfig: "scorers and scorer",
    Grade: "grade",
    FewShotConfig: "fewshot",
}

# Documented ahead of the code, for changes being made on other branches: a documented
# field or value listed here may be missing from the models. Remove an entry once its
# branch is merged (then the check holds both ways for it).
PENDING_FIELDS: set[tuple[str, str]] = set()
PENDING_VALUES: dict[tuple[str, str], set[str]] = {}
PENDING_PROVIDERS: set[str] = set()

CODE = re.compile(r"`([^`]+)`")


# ---------------------------------------------------------------------------------------
# Markdown: sections by heading, and the rows of their tables.


def split_row(line: str) -> list[str]:
    """A table row's cells; a `|` inside a code span does not split."""
    cells, cell, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    cells.append(cell.strip())
    return cells


def sections(path: Path) -> dict[str, list[list[str]]]:
    """Heading text (without #s) -> the table rows under it, header rows left out."""
    found: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            title = heading.group(1)
            assert title not in found, f"{path.name}: two sections named {title!r}"
            current = found[title] = []
            continue
        if current is not None and line.startswith("|"):
            cells = split_row(line)
            if set("".join(cells)) <= set("-: ") or cells[0] in ("key", "option", "setting"):
                continue  # the separator or the header
            current.append(cells)
    return found


def first_code(cell: str) -> str | None:
    found = CODE.search(cell)
    return found.group(1) if found else None


# ---------------------------------------------------------------------------------------
# The models.


def models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if get_origin(annotation) is None and isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            yield annotation
        return
    for arg in get_args(annotation):
        if not isinstance(arg, FieldInfo):
            yield from models_in(arg)


def literal_values(annotation: Any) -> set[str]:
    if get_origin(annotation) is Literal:
        return {str(v) for v in get_args(annotation)}
    values: set[str] = set()
    for arg in get_args(annotation):
        values |= literal_values(arg)
    return values


def all_models() -> list[type[BaseModel]]:
    """Every model a spec is made of, walked from `Spec` (and the roots the spec's
    reference names, in case one stops being reachable)."""
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [
        Spec, *config_types(), ModelConfig, Params, DatasetRef, ToolConfig,
    ]  # fmt: skip
    while todo:
        model = todo.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo.extend(models_in(field.annotation))
    return seen


def scorer_type(model: type[BaseModel]) -> str:
    return next(iter(literal_values(model.model_fields["type"].annotation)))


def section_of(model: type[BaseModel]) -> str:
    if issubclass(model, ScorerConfig) and model is not ScorerConfig:
        return f"type: {scorer_type(model)}"
    if model not in SECTIONS:
        raise AssertionError(
            f"{model.__module__}.{model.__name__} is part of the spec but has no section in "
            "docs/spec.md: add a section with a table of its keys, and name it in "
            "tests/test_docs.py SECTIONS"
        )
    return SECTIONS[model]


def documented_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The keys a user writes (aliases where set) that the model's section documents: a
    scorer type's own keys; `name` and `type` are documented once for every scorer."""
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    if issubclass(model, ScorerConfig) and model is not ScorerConfig:
        common = set(ScorerConfig.model_fields) | {"type"}
        fields = {k: f for k, f in fields.items() if k not in common}
    return fields


def spec_cases() -> list[tuple[type[BaseModel], str]]:
    return [(m, section_of(m)) for m in all_models()]


def case_id(value: Any) -> str:
    return value if isinstance(value, str) else value.__name__


@pytest.fixture(scope="module")
def spec_doc() -> dict[str, list[list[str]]]:
    return sections(SPEC_DOC)


def rows_of(doc: dict[str, list[list[str]]], section: str) -> dict[str, list[str]]:
    assert section in doc, f"docs/spec.md has no section '{section}': add it, with a table"
    rows: dict[str, list[str]] = {}
    for cells in doc[section]:
        key = first_code(cells[0])
        assert key is not None, f"docs/spec.md, '{section}': a row without a `key`: {cells}"
        assert key not in rows, f"docs/spec.md, '{section}': `{key}` has two rows"
        assert len(cells) == 4, f"docs/spec.md, '{section}': `{key}` needs 4 cells: {cells}"
        rows[key] = cells
    return rows


def test_every_spec_model_has_a_section() -> None:
    for model in all_models():
        section_of(model)  # raises, naming the model, when it has none


@pytest.mark.parametrize(("model", "section"), spec_cases(), ids=case_id)
def test_spec_reference_documents_every_field(
    spec_doc: dict[str, list[list[str]]], model: type[BaseModel], section: str
) -> None:
    rows = rows_of(spec_doc, section)
    expected = documented_fields(model)
    if model is ScorerConfig:
        expected = {**expected, "type": FieldInfo(annotation=str)}
    missing = [k for k in expected if k not in rows]
    unknown = [k for k in rows if k not in expected and (section, k) not in PENDING_FIELDS]
    problems = []
    if missing:
        problems.append(
            "has no row for "
            + ", ".join(f"`{k}`" for k in missing)
            + f" of {model.__module__}.{model.__name__}: add a row for each with its type, "
            "default and what it is"
        )
    if unknown:
        problems.append(
            "documents "
            + ", ".join(f"`{k}`" for k in unknown)
            + f", which {model.__module__}.{model.__name__} does not have: remove or rename"
        )
    assert not problems, f"docs/spec.md, section '{section}', " + "; and ".join(problems)


@pytest.mark.parametrize(("model", "section"), spec_cases(), ids=case_id)
def test_spec_reference_defaults_and_values(
    spec_doc: dict[str, list[list[str]]], model: type[BaseModel], section: str
) -> None:
    rows = rows_of(spec_doc, section)
    for key, field in documented_fields(model).items():
        if key not in rows:
            continue  # reported by the test above
        _, type_cell, default_cell, _ = rows[key]
        where = f"docs/spec.md, section '{section}', `{key}`"
        check_default(where, field, default_cell)
        values = literal_values(field.annotation)
        if values:
            written = set(CODE.findall(type_cell))
            pending = PENDING_VALUES.get((section, key), set())
            assert values <= written, f"{where}: add the allowed values {sorted(values - written)}"
            extra = written - values - pending
            assert not extra, f"{where}: {sorted(extra)} are not allowed values (remove them)"


def check_default(where: str, field: FieldInfo, cell: str) -> None:
    if field.is_required():
        assert cell.startswith("required"), f"{where}: the default cell must say `required`"
        return
    assert not cell.startswith("required"), f"{where}: not required; give its default"
    default = field.get_default(call_default_factory=True)
    written = first_code(cell)
    if written is None:
        assert cell.startswith("—"), f"{where}: write the default as `YAML`, or — for none"
        assert default is None or default == [] or default == {}, (
            f"{where}: the default is {default!r}, not none: write it as `YAML`"
        )
        return
    value = TypeAdapter(field.annotation).validate_python(yaml.safe_load(written))
    assert value == default, f"{where}: the default is {default!r}, the page says {written!r}"


def test_every_scorer_type_is_documented_and_no_other(spec_doc: dict[str, Any]) -> None:
    types = {scorer_type(c) for c in config_types()}
    headed = {t.removeprefix("type: ") for t in spec_doc if t.startswith("type: ")}
    assert types <= headed, f"docs/spec.md: add a section 'type: NAME' for {types - headed}"
    assert headed <= types, f"docs/spec.md: no scorer type {headed - types} (remove it)"


# ---------------------------------------------------------------------------------------
# The CLI, providers and settings.


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("gradetrail has no subcommands")


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_cli_reference_documents_every_option(command: str) -> None:
    doc = sections(REPO / "docs/cli.md")
    section = f"gradetrail {command}"
    assert section in doc, f"docs/cli.md has no section '{section}': add it, with a table"
    options = {
        o
        for action in subcommands()[command]._actions
        for o in action.option_strings
        if o.startswith("--") and o != "--help"
    }
    written = {o for cells in doc[section] for o in re.findall(r"--[a-z][a-z-]*", cells[0])}
    assert options <= written, f"docs/cli.md, '{section}': add rows for {sorted(options - written)}"
    assert written <= options, f"docs/cli.md, '{section}': no options {sorted(written - options)}"


def test_every_provider_has_a_section() -> None:
    doc = sections(REPO / "docs/providers.md")
    providers = set(registry.names())
    headed = {first_code(t) for t in doc if t.startswith("`")}
    assert providers <= headed, f"docs/providers.md: add a section for {providers - headed}"
    extra = headed - providers - PENDING_PROVIDERS
    assert not extra, f"docs/providers.md: no provider {extra} (remove it)"


def test_every_setting_variable_is_documented() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    missing = sorted(v for v in ENVIRONMENT.values() if v not in text)
    assert not missing, f"docs/: name {missing} (gradetrail_lib/settings.py) in docs/cli.md"


def test_every_public_name_is_documented() -> None:
    import gradetrail_lib

    text = (REPO / "docs/python-api.md").read_text(encoding="utf-8")
    missing = [name for name in gradetrail_lib.__all__ if f"`{name}`" not in text]
    assert not missing, f"docs/python-api.md: document {missing} (gradetrail_lib.__all__)"


# ---------------------------------------------------------------------------------------
# The README and the site.

TEST_COMMAND = ".venv/bin/python -m pytest -q"
SETUP_COMMAND = "bash scripts/install.sh && .venv/bin/gradetrail run specs/capitals.yaml"


def test_readme_keeps_the_two_commands_and_stays_short() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"```bash\n{SETUP_COMMAND}\n```" in readme
    assert f"```bash\n{TEST_COMMAND}\n```" in readme
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert TEST_COMMAND in ci, ".ci/run must run the README's test command verbatim"
    assert len(readme.splitlines()) <= 200, "README.md: at most 200 lines; move text to docs/"


def test_readme_links_exist() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert local, "README.md links to no page"
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_site_navigation_lists_every_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: Any) -> Iterator[str]:
        if isinstance(nav, str):
            yield nav
        elif isinstance(nav, list):
            for item in nav:
                yield from pages(item)
        elif isinstance(nav, dict):
            for item in nav.values():
                yield from pages(item)

    listed = sorted(pages(config["nav"]))
    on_disk = sorted(p.name for p in DOCS.glob("*.md"))
    assert listed == on_disk, f"mkdocs.yml nav {listed} != docs/ {on_disk}"


def _architecture_layers() -> list[set[str]]:
    """The layers block of docs/architecture.md, a set of package names a line."""
    text = (REPO / "docs/architecture.md").read_text()
    block = text.split("## The layers", 1)[1].split("```", 2)[1]
    layers = []
    for line in block.strip().splitlines():
        names = {part.split()[0].removeprefix("gradetrail_lib.") for part in line.split("|")}
        layers.append(names)
    return layers


def test_architecture_lists_the_layers_of_the_contract_in_its_order() -> None:
    """The page says "highest first", as `.importlinter` lists them."""
    text = (REPO / "docs/architecture.md").read_text()
    assert "Highest first;" in text.split("## The layers", 1)[1]
    config = (REPO / ".importlinter").read_text()
    listed = config.split("layers =", 1)[1].split("\n\n", 1)[0]
    contract = [{name.strip() for name in line.split("|")} for line in listed.strip().splitlines()]
    documented = [names - {"gradetrail_assets"} for names in _architecture_layers()]
    assert documented == contract


def test_architecture_names_every_provider_module() -> None:
    """Each module of providers/ is named in the `providers` row of the packages table."""
    text = (REPO / "docs/architecture.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `providers` |"))
    modules = {p.stem for p in (REPO / "gradetrail_lib" / "providers").glob("*.py")}
    missing = sorted(m for m in modules - {"__init__"} if f"`{m}`" not in row)
    assert missing == [], f"docs/architecture.md, the providers row: name {missing}"
