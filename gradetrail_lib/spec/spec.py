"""The eval spec: a YAML file validated with pydantic, unknown keys rejected."""

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gradetrail_lib.config import UNKEYED_PARAMS, Params, Strict
from gradetrail_lib.datasets.registry import DatasetRef
from gradetrail_lib.errors import (
    InputError,
    Loc,
    UnknownModel,
    UsageError,
    indexed,
    input_errors,
    one_or_all,
)
from gradetrail_lib.providers import registry as providers
from gradetrail_lib.providers.registry import ModelConfig, ProviderName, Watch
from gradetrail_lib.providers.request import chat_template_refusal
from gradetrail_lib.scorers.registry import ScorerConfig as ScorerBase
from gradetrail_lib.scorers.registry import config_types
from gradetrail_lib.spec import catalog
from gradetrail_lib.spec.choices import check_expression
from gradetrail_lib.spec.tools import ToolConfig
from gradetrail_lib.spec.yaml_lines import Location, YamlDocument, load_yaml
from gradetrail_lib.templating import check_template

__all__ = [
    "AnyScorer",
    "DatasetRef",
    "LoadedSpec",
    "ModelConfig",
    "Params",
    "ProviderName",
    "Spec",
    "Watch",
    "load_spec",
]


# The spec's scorer entry: any registered scorer type, told apart by `type` (built from
# the registry at import; to the type checker, their common base).
if TYPE_CHECKING:
    AnyScorer = ScorerBase
else:
    AnyScorer = Annotated[Union[config_types()], Field(discriminator="type")]  # noqa: UP007


class MessageTemplate(Strict):
    role: Literal["system", "user", "assistant"]
    content: str
    # Sample fields holding images or documents shown after a user message's text
    # (`spec.media`): a path relative to the dataset, a data: URI or an https URL each.
    media: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _media_from_user(self) -> "MessageTemplate":
        if self.media is not None and self.role != "user":
            raise ValueError("media: only in a user message")
        return self

    @field_validator("content")
    @classmethod
    def _check_content(cls, content: str) -> str:
        return check_template(content)


class FewShotConfig(Strict):
    """`fewshot:` k examples before each sample's prompt (`spec.choices` says how they
    are chosen and rendered)."""

    k: int = Field(ge=1, le=64)
    # Where the examples come from (a file, a package's file or a Hugging Face split);
    # the spec's own dataset when unset.
    source: DatasetRef | None = None
    seed: int = 1234
    separator: str = "\n\n"
    # A spec without choices: the template of an example's answer, after its prompt.
    answer: str | None = None
    # With `chat_template`: each example a user turn (its prompt) and an assistant turn
    # (its gold option), as lm-eval's `--fewshot_as_multiturn`; `false` hashes as absent.
    multiturn: bool | None = None

    @field_validator("multiturn")
    @classmethod
    def _multiturn_or_none(cls, on: bool | None) -> bool | None:
        return True if on else None

    @field_validator("answer")
    @classmethod
    def _check_answer(cls, source: str | None) -> str | None:
        return None if source is None else check_template(source)


# Scorers a multiple-choice spec gets when it names none.
_CHOICE_SCORERS = {
    "loglikelihood": ["acc", "acc_norm", "acc_bytes"],
    "generate": ["acc"],
}


class Spec(Strict):
    """`models:` (or one `model:`) and `scorers:` (or one `scorer:`, named `score`); after
    validation `models` and `scorers` hold them either way, the first scorer primary."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str | None = None
    dataset: DatasetRef
    system: str | None = None
    # One user prompt, or a chat of templates (`messages:`), exactly one of them.
    prompt: str | None = None
    messages: list[MessageTemplate] | None = Field(default=None, min_length=1)
    # Sample fields holding the images and documents shown after the prompt's text (with
    # `messages:`, each user message names its own).
    media: list[str] | None = Field(default=None, min_length=1)
    # An agent: the tools offered, and how many model calls a case may make.
    tools: list[ToolConfig] | None = Field(default=None, min_length=1)
    tool_choice: Literal["auto", "required", "none"] = "auto"
    step_budget: int = Field(default=8, ge=1, le=100)
    models: list[ModelConfig] = Field(default_factory=list)
    model: ModelConfig | None = None
    params: Params = Field(default_factory=Params)
    scorers: list[AnyScorer] = Field(default_factory=list)
    scorer: AnyScorer | None = None
    # Each (sample, repeat) is a sample of its own; repeat 0 keeps the plain request key.
    repeats: int = Field(default=1, ge=1)
    watch: Watch | None = None
    # Multiple choice (`spec.choices`): the options and the gold one, from each sample,
    # and how the model chooses (default loglikelihood). Unset, none is in the spec hash.
    choices: str | list[str] | None = None
    gold: str | None = None
    method: Literal["loglikelihood", "generate"] | None = None
    # Before each option's text in its continuation (default one space, lm-eval's
    # target delimiter); not counted in the option's length (`acc_norm`).
    choice_prefix: str | None = None
    # The context of each option's unconditional log-likelihood (`acc_mutual_info`).
    unconditional_context: str | None = None
    # Log-likelihood contexts rendered by each model's own chat template (a local model's
    # GGUF template): one user turn, then the assistant's turn opening, as lm-eval's
    # `--apply_chat_template`. `false` is the default and hashes as absent, so a spec
    # writing it keeps its identity. Before `fewshot`, whose validator reads it.
    chat_template: bool | None = None
    fewshot: FewShotConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _choice_scorers(cls, data: Any) -> Any:
        # A multiple-choice spec naming no scorer is scored by its method's rules.
        named = isinstance(data, dict) and ("scorers" in data or "scorer" in data)
        if not isinstance(data, dict) or data.get("choices") is None or named:
            return data
        method = data.get("method") or "loglikelihood"
        metrics = list(_CHOICE_SCORERS.get(method, ["acc"]))
        if method == "loglikelihood" and data.get("unconditional_context") is not None:
            metrics.append("acc_mutual_info")
        scorers = [{"name": m, "type": "choice", "metric": m} for m in metrics]
        return {**data, "scorers": scorers}

    @field_validator("choices")
    @classmethod
    def _check_choices(cls, choices: str | list[str] | None) -> str | list[str] | None:
        if isinstance(choices, str):
            check_expression(choices)
        elif choices is not None:
            if len(choices) < 2:
                raise ValueError("give two or more options (or one expression giving them)")
            for template in choices:
                check_template(template)
        return choices

    @field_validator("gold")
    @classmethod
    def _check_gold(cls, gold: str | None) -> str | None:
        return None if gold is None else check_expression(gold)

    @field_validator("chat_template")
    @classmethod
    def _check_chat_template(cls, on: bool | None, info: ValidationInfo) -> bool | None:
        # A field validator (after the fields it reads), so the error names this field
        # and its line.
        if not on:
            return None
        data = info.data
        if data.get("choices") is None or (data.get("method") or "loglikelihood") != (
            "loglikelihood"
        ):
            raise ValueError(
                "only with choices by log-likelihood (a generating model's chat completions "
                "apply its template already)"
            )
        models = list(data.get("models") or [])
        if data.get("model") is not None:
            models.append(data["model"])
        for model in models:
            if providers.get(model.provider).chat_template is None:
                raise ValueError(chat_template_refusal(model.provider))
        return True

    @field_validator("fewshot")
    @classmethod
    def _multiturn_needs_a_chat(
        cls, fewshot: FewShotConfig | None, info: ValidationInfo
    ) -> FewShotConfig | None:
        if fewshot is not None and fewshot.multiturn and not info.data.get("chat_template"):
            raise ValueError(
                "multiturn: the examples are turns of a chat, so it needs chat_template: true"
            )
        return fewshot

    @property
    def by_loglikelihood(self) -> bool:
        """Whether its samples are multiple choice scored by log-likelihood."""
        return self.choices is not None and (self.method or "loglikelihood") == "loglikelihood"

    # Field validators so each error names its field and line and is reported with the others.
    @field_validator("prompt", "system")
    @classmethod
    def _check_templates(cls, source: str | None) -> str | None:
        return None if source is None else check_template(source)

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, tools: list[ToolConfig] | None) -> list[ToolConfig] | None:
        names = [t.name for t in tools or []]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tool names must be unique: {', '.join(dupes)}")
        return tools

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelConfig]) -> list[ModelConfig]:
        if not models:  # given and empty (absent, `model:` may stand for it)
            raise ValueError("List should have at least 1 item")
        names = [m.name for m in models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique (each is a partition): {dupes}")
        return models

    @field_validator("scorers")
    @classmethod
    def _named_scorers(cls, scorers: list[ScorerBase]) -> list[ScorerBase]:
        if not scorers:
            raise ValueError("List should have at least 1 item")
        unnamed = [i for i, s in enumerate(scorers) if "name" not in s.model_fields_set]
        if unnamed:
            raise ValueError(f"every entry of scorers needs a name (entry {unnamed[0]} has none)")
        names = [s.name for s in scorers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"scorer names must be unique: {', '.join(dupes)}")
        for i, config in enumerate(scorers):
            config._where = f"scorers[{i}]"
        return scorers

    @model_validator(mode="after")
    def _one_of_each(self) -> "Spec":
        # Normalised in place (the model is frozen to its users, not to its validator);
        # idempotent, since a LoadedSpec validates the instance again.
        if self.model is not None and self.models != [self.model]:
            if self.models:
                raise ValueError("give models (a list) or model (one mapping), not both")
            object.__setattr__(self, "models", [self.model])
        if not self.models:
            raise ValueError("give models (a list) or model (one mapping)")
        if self.scorer is not None and self.scorers != [self.scorer]:
            if self.scorers:
                raise ValueError("give scorers (a list) or scorer (one mapping), not both")
            object.__setattr__(self, "scorers", [self.scorer])  # named `score` by default
        if not self.scorers:
            raise ValueError("give scorers (a list) or scorer (one mapping)")
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give prompt (one user message) or messages (a chat), one of them")
        if self.messages is not None and self.system is not None:
            raise ValueError("with messages, write the system message among them")
        if self.media is not None and self.prompt is None:
            raise ValueError("with messages, each user message names its own media")
        if self.shows_media:
            refused = [m.provider for m in self.models if providers.get(m.provider).media is None]
            if refused:
                raise ValueError(f"provider {refused[0]} takes no images or documents (media)")
            if self.choices is not None:
                raise ValueError("media: not with choices (a multiple-choice prompt is text)")
        incumbent = self.watch.incumbent if self.watch is not None else None
        names = [m.name for m in self.models]
        if incumbent is not None and incumbent not in names:
            raise ValueError(
                f"watch.incumbent {incumbent!r} is not one of the spec's models "
                f"({', '.join(names)})"
            )
        self._check_multiple_choice()
        return self

    def _check_multiple_choice(self) -> None:
        if (self.choices is None) != (self.gold is None):
            raise ValueError("give choices and gold together (the options and the gold one)")
        if self.choices is None:
            unused = [
                k for k in ("method", "choice_prefix", "unconditional_context")
                if getattr(self, k) is not None
            ]  # fmt: skip
            if unused:
                raise ValueError(f"{', '.join(unused)}: only with choices")
            if self.fewshot is not None and (self.fewshot.answer is None or self.prompt is None):
                raise ValueError("fewshot without choices needs prompt and fewshot.answer")
            return
        if self.prompt is None or self.tools is not None:
            raise ValueError("a multiple-choice spec renders its context from prompt (no tools)")
        if not self.by_loglikelihood:
            if self.unconditional_context is not None:
                raise ValueError("unconditional_context needs method loglikelihood")
            return
        if self.system is not None:
            raise ValueError("by log-likelihood the context is the prompt's text: no system")
        if self.repeats != 1:
            raise ValueError("log-likelihoods do not vary: repeats must be 1")
        for config in self.scorers:
            if getattr(config, "type", None) != "choice":
                raise ValueError(
                    f"scorer {config.name!r}: by log-likelihood there is no answer text; "
                    "score with type: choice (acc, acc_norm, acc_bytes, acc_mutual_info)"
                )
        refused = [m for m in self.models if "loglikelihood" not in providers.get(m.provider).kinds]
        if refused:
            raise ValueError(loglikelihood_refusal(refused[0].provider))

    @property
    def shows_media(self) -> bool:
        """Whether its prompts hold images or documents (`media:`)."""
        return self.media is not None or any(m.media for m in self.messages or [])

    @property
    def primary_scorer(self) -> str:
        return self.scorers[0].name

    @field_validator("params")
    @classmethod
    def _params_fit_providers(cls, params: Params, info: ValidationInfo) -> Params:
        # A parameter a provider does not take would be rejected on every request.
        for model in info.data.get("models", []):
            refused = providers.get(model.provider).refused(params, model)
            if refused is not None:
                raise ValueError(refused.spec_message())
        if params.thinking is not None and info.data.get("tools"):
            # Anthropic wants each tool-using step's thinking blocks sent back with the
            # next request, and an agent's messages do not keep them.
            raise ValueError(
                "thinking with tools is not supported (an agent's steps would lose it)"
            )
        return params

    def model_named(self, name: str) -> ModelConfig:
        """A model of the spec, or one its `watch` found (same provider settings);
        `UnknownModel` otherwise."""
        for m in self.models:
            if m.name == name:
                return m
        if self.watch is not None and fnmatch.fnmatchcase(name, self.watch.match):
            return ModelConfig(
                provider=self.watch.provider,
                name=name,
                base_url=self.watch.base_url,
                api_key_env=self.watch.api_key_env,
            )
        known = ", ".join(m.name for m in self.models)
        raise UnknownModel(f"spec {self.name!r} has no model {name!r} (models: {known})")


def loglikelihood_refusal(provider: str) -> str:
    return (
        f"provider {provider} gives no log-likelihoods (method loglikelihood); use "
        "method: generate (lettered options, the letter read from the answer) or a provider "
        "that does (local, openai_compatible)"
    )


class LoadedSpec(BaseModel):
    """A validated spec plus where it came from (paths in it are relative to `base_dir`)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    spec: Spec
    path: Path
    # A `dataset: {asset: ...}` spec's rows, as the Dagster layer wrote them from the
    # asset's value (`gradetrail_lib.datasets.materialized`); None elsewhere.
    dataset_file: Path | None = None

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str) -> Path:
        return (self.base_dir / relative).resolve()

    def with_repeats(self, repeats: int | None) -> "LoadedSpec":
        """The spec with `repeats` set (a command-line override): it is part of the spec's
        hash, so a run with other repeats has another identity."""
        if repeats is None or repeats == self.spec.repeats:
            return self
        if repeats < 1:
            raise InputError("--repeats", None, None, "must be at least 1")
        spec = self.spec.model_copy(update={"repeats": repeats})
        return self.model_copy(update={"spec": spec})


def _describe(doc: YamlDocument, loc: Loc) -> tuple[str, int | None]:
    """The field path as the user wrote it and its line.

    pydantic puts a discriminated union's tag into `loc` (`scorer.regex.pattern`); a tag is
    dropped, and a key the user left out is named under its parent, on the parent's line.
    """
    kept: Location = ()
    named: list[str | int] = []
    for part in loc:
        candidate = (*kept, part)
        if doc.has(candidate):
            kept = candidate
            named.append(part)
            continue
        parent = doc.value_at(kept)
        if isinstance(parent, dict) and parent.get("type") == part:
            continue
        named.append(part)
    return indexed(tuple(named)), doc.line_of(kept)


def load_spec(path: Path | str) -> LoadedSpec:
    """A spec file, or a catalogue entry (`catalog:NAME`: `spec.catalog`)."""
    if catalog.is_catalog(path):
        return _load_catalog_entry(str(path))
    path = Path(path)
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise InputError(str(path), 1, None, "a spec must be a YAML mapping")
    if "catalog" in doc.data:
        return _catalog_pointer(doc, path)
    try:
        # The context lets scorers check the files they name (a Python scorer's function,
        # a judge's prompt) against the spec's folder, so a missing one is a load error.
        spec = Spec.model_validate(doc.data, context={"base_dir": path.parent})
    except ValidationError as exc:
        errors = input_errors(exc, str(path), lambda loc: _describe(doc, loc))
        errors.sort(key=lambda e: e.line or 0)
        raise one_or_all(errors) from None
    _refuse_self_judging(spec, doc, path)
    return LoadedSpec(spec=spec, path=path)


# What a catalogue entry's file may set besides `catalog`: its models, and whether the
# entry's contexts are rendered by their chat template.
_POINTER_FIELDS = ("models", "model", "chat_template")


def _catalog_pointer(doc: YamlDocument, path: Path) -> LoadedSpec:
    """A spec file that names a catalogue entry (`catalog: NAME`), with its own `models`
    (or `model`) instead of the entry's: how an entry joins a specs folder (Dagster)."""
    data = doc.data
    assert isinstance(data, dict)
    extra = sorted(set(data) - {"catalog", *_POINTER_FIELDS})
    if extra:
        raise InputError(
            str(path), doc.line_of((extra[0],)), extra[0],
            "a catalogue entry's file takes only catalog, models or model, and chat_template",
        )  # fmt: skip
    try:
        loaded = _load_catalog_entry(f"{catalog.PREFIX}{data['catalog']}")
    except UsageError as exc:
        raise InputError(str(path), doc.line_of(("catalog",)), "catalog", str(exc)) from None
    if not set(data) & set(_POINTER_FIELDS):
        return loaded
    replaced = {"model", "models"} if {"model", "models"} & set(data) else set()
    fields = loaded.spec.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude={"model", "scorer", *replaced}
    )
    fields.update({k: data[k] for k in _POINTER_FIELDS if k in data})
    try:
        spec = Spec.model_validate(fields, context={"base_dir": loaded.base_dir})
    except ValidationError as exc:
        errors = input_errors(exc, str(path), lambda loc: _describe(doc, loc))
        raise one_or_all(errors) from None
    return LoadedSpec(spec=spec, path=loaded.path)


def _load_catalog_entry(source: str) -> LoadedSpec:
    """The entry's spec, its dataset the offline copy when that is installed."""
    loaded = load_spec(catalog.resolve(source).path)
    offline = catalog.resolve(source, loaded.spec.dataset).offline
    if offline is None:
        return loaded
    spec = loaded.spec.model_copy(update={"dataset": offline})
    return LoadedSpec(spec=spec, path=loaded.path)


def self_judging(spec: Spec, judge: ModelConfig) -> list[ModelConfig]:
    """The spec's models a judge model would grade itself on (same provider and name)."""
    return [m for m in spec.models if (m.provider, m.name) == (judge.provider, judge.name)]


def _refuse_self_judging(spec: Spec, doc: YamlDocument, path: Path) -> None:
    errors = []
    listed = "scorer" if doc.has(("scorer",)) else "scorers"
    for i, config in enumerate(spec.scorers):
        judge = getattr(config, "model", None)
        if not isinstance(judge, ModelConfig) or getattr(config, "force_same_model", False):
            continue
        where: Location = ("scorer",) if listed == "scorer" else ("scorers", i)
        if self_judging(spec, judge):
            field = f"{'scorer' if listed == 'scorer' else f'scorers[{i}]'}.model"
            errors.append(
                InputError(
                    str(path),
                    doc.line_of((*where, "model")) or doc.line_of(where),
                    field,
                    f"the judge {judge.provider}/{judge.name} is a model under test and would "
                    "grade itself; use another judge, or set force_same_model: true",
                )
            )
    if errors:
        raise one_or_all(errors)


def spec_document_fields(spec: Spec) -> dict[str, Any]:
    """The spec as canonical data (aliases used), the input of the spec hash. `model:` and
    `scorer:` are folded into `models` and `scorers`, so a shorthand hashes as its list."""
    fields = spec.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude={"model", "scorer"}
    )
    # The prompt-cache marker changes no answer (`config.UNKEYED_PARAMS`): runs that differ
    # only in it are the same run.
    for name in UNKEYED_PARAMS:
        fields.get("params", {}).pop(name, None)
    return fields
