"""Every provider, by its `provider:` name. A new provider is one module here plus its
name in `PROVIDER_MODULES`: the module defines `PROVIDER`, a `Provider` saying how its
requests are sent (the adapter, tools included), its defaults (base URL, the key's
environment variable, whether the key or a base URL is required), the sampling
parameters its API refuses, how many requests it takes at once, its own checks of a
model's settings and its model listing.

Everything provider-specific reads this: the spec's `provider:` choices and their
checks (`config.ModelConfig`, `config.Watch`), the request key and the endpoint
(`request`), the caller (`caller`), the model listings (`model_listing`), prices
(`pricing`) and the concurrency limit (the engine's).

Modules are cheap to import, with no HTTP stack (an adapter loads httpx when it builds
its first request): loading a spec loads every provider, and a fully cached run must not
pay for httpx.
"""

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gradetrail_lib.config import Strict

if TYPE_CHECKING:
    from gradetrail_lib.config import Params
    from gradetrail_lib.datasets.dataset import Sample
    from gradetrail_lib.providers.adapter import Adapter
    from gradetrail_lib.providers.base import (
        ChatTemplate,
        Message,
        ModelRequest,
        ModelResponse,
        ScriptedAnswer,
    )
    from gradetrail_lib.providers.batch import BatchAPI
    from gradetrail_lib.providers.media import MediaLimits

PROVIDER_MODULES = (
    "anthropic",
    "openai",
    "openai_compatible",
    "local",
    "scripted",
    "gemini",
    "azure_openai",
)


# An in-process provider's answer for a sample, given the messages so far.
SampleAnswer = Callable[["ModelConfig", "Sample", str, "Sequence[Message]"], "ScriptedAnswer"]


@dataclass(frozen=True)
class RefusedParam:
    """A sampling parameter (a `Params` field) that a provider's API does not take: a
    spec setting it would be rejected on every request, so it is refused up front."""

    param: str
    # Who lacks it, in the two errors: the spec's ("seed is not a parameter of the
    # Anthropic Messages API") and a `--model`'s ("... sets seed, which Anthropic lacks").
    api: str
    short: str

    def spec_message(self) -> str:
        return f"{self.param} is not a parameter of {self.api}"

    def model_message(self, model: str, spec_name: str) -> str:
        return f"model {model}: spec {spec_name!r} sets {self.param}, which {self.short} lacks"


def _last_page(body: Any) -> dict[str, str] | None:
    return None


@dataclass(frozen=True)
class Listing:
    """How a provider lists its models (for a spec's `watch`): `GET {base_url}{path}` with
    `headers(key)` and `query`, then again with `next_query(body)` until that is None;
    `ids(body)` are the model ids of a page."""

    headers: Callable[[str | None], dict[str, str]]
    ids: Callable[[Any], list[str]]
    path: str = "/models"
    query: Mapping[str, str] = field(default_factory=dict)
    next_query: Callable[[Any], dict[str, str] | None] = _last_page


@dataclass(frozen=True, kw_only=True)
class Provider:
    """One provider. Only `name` and `adapter` are needed; every other field has the
    default of a plain HTTP API (no default base URL, no key required, no limits)."""

    name: str
    # Builds its HTTP requests and reads the answers (see `adapter.Adapter`). None for a
    # provider that answers in-process (`sample_answer` and `respond`).
    adapter: "Adapter | None"
    # Where requests go when the model sets no `base_url`.
    base_url: str | None = None
    # The environment variable holding the key when the model names none.
    key_env: str | None = None
    # Whether a call without a key is refused (a fatal error naming the variable).
    key_required: bool = False
    # Whether a model must set `base_url` ("NAME needs base_url", plus the hint).
    base_url_required: bool = False
    base_url_hint: str = ""
    # `ModelConfig` fields only this provider takes; another provider's model setting
    # one is refused ("X and Y are settings of provider NAME only").
    settings: tuple[str, ...] = ()
    # Sampling parameters its API lacks.
    refused_params: tuple[RefusedParam, ...] = ()
    # Those that only some of its models' API lacks, by the model (OpenAI's Responses
    # API has no `stop` or `seed`; its Chat Completions has both).
    refused_params_of: "Callable[[ModelConfig], tuple[RefusedParam, ...]] | None" = None
    # At most this many requests in flight to one of its models (None: the backend's).
    concurrency: int | None = None
    # More checks of a model's settings; raises ValueError with the message to show.
    check: "Callable[[ModelConfig], None] | None" = None
    # Lists its models (None: a spec cannot `watch` it).
    listing: Listing | None = None
    # What stands for the base URL in the request key (default: the base URL), for a
    # provider whose URL says nothing about the answers (a local server's random port).
    key_base_url: "Callable[[ModelConfig], str | None] | None" = None
    # Settings that shape its requests beyond the base URL (Azure's api-version): they
    # are on the endpoint for the adapter, and in the request key when there are some.
    endpoint_settings: "Callable[[ModelConfig], dict[str, str]] | None" = None
    # The endpoint's URL when it is not known before the run: a server it starts
    # (`serve`) is bound later; an in-process provider's is only a name.
    planned_base_url: str | None = None
    # Starts (or shares) the server of a model: a context manager yielding its base URL.
    serve: "Callable[[str], AbstractContextManager[str]] | None" = None
    # In-process providers: the answer for a sample (an InputError when the sample cannot
    # give one; it enters the request key), and the response to a request.
    # `messages` so far (an agent's script answers by turn; see `scripted`).
    sample_answer: "SampleAnswer | None" = None
    respond: "Callable[[ModelRequest], ModelResponse] | None" = None
    # Its batch API (`providers.batch`), when it has one: `run --batch` sends its cache
    # misses that way.
    batch: "BatchAPI | None" = None
    # A model run on this machine: its calls have no price (a price list's $0 for it only
    # keeps `--max-cost` from refusing it). Every surface shows its cost as
    # `pricing.LOCAL_COST` (null in JSON), never as $0 (`pricing.shown_cost`).
    local_model: bool = False
    # Log-likelihood requests (`ModelRequest.kind`), when it serves them: answered
    # in-process (`score_loglikelihood`, the local model) or over HTTP by an adapter of
    # their own (a completions API that echoes the prompt's log-probabilities). A spec
    # asking a provider with neither for log-likelihoods is refused at load.
    score_loglikelihood: "Callable[[ModelRequest], ModelResponse] | None" = None
    loglikelihood_adapter: "Adapter | None" = None
    # A model's own chat template for its log-likelihood contexts (spec `chat_template`),
    # when the provider can apply one; raises ValueError when the model has none. A spec
    # asking another provider for one is refused at load.
    chat_template: "Callable[[ModelConfig], ChatTemplate] | None" = None
    # The images and documents one request may hold (`providers.media`); None: it takes
    # none, and a spec showing it media is refused at load.
    media: "MediaLimits | None" = None

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds of request it serves (`providers.base.RequestKind`)."""
        if self.score_loglikelihood is not None or self.loglikelihood_adapter is not None:
            return frozenset({"chat", "loglikelihood"})
        return frozenset({"chat"})

    @property
    def in_process(self) -> bool:
        """Answered without a call, so without a cost."""
        return self.respond is not None

    def refused(self, params: "Params", model: "ModelConfig") -> RefusedParam | None:
        """The first parameter set in `params` that the API `model` is sent to lacks."""
        of_model = self.refused_params_of(model) if self.refused_params_of is not None else ()
        for rule in (*self.refused_params, *of_model):
            if getattr(params, rule.param) is not None:
                return rule
        return None

    def validate(self, model: "ModelConfig") -> None:
        """Raises ValueError (its message for the spec's error) for a model this provider
        cannot call as configured."""
        for other in providers().values():
            if other is self or not other.settings:
                continue
            if any(getattr(model, name) is not None for name in other.settings):
                names = " and ".join(other.settings)
                verb = "are settings" if len(other.settings) > 1 else "is a setting"
                raise ValueError(f"{names} {verb} of provider {other.name} only")
        # An asset's model gets its endpoint from the asset's value, checked when resolved.
        if self.base_url_required and not model.base_url and model.asset is None:
            hint = f" ({self.base_url_hint})" if self.base_url_hint else ""
            raise ValueError(f"{self.name} needs base_url{hint}")
        if self.check is not None:
            self.check(model)


@cache
def providers() -> dict[str, Provider]:
    """Every provider by name, in `PROVIDER_MODULES` order."""
    loaded: dict[str, Provider] = {}
    for module_name in PROVIDER_MODULES:
        provider = import_module(f"gradetrail_lib.providers.{module_name}").PROVIDER
        if not isinstance(provider, Provider) or provider.name in loaded:
            raise TypeError(f"providers.{module_name}: PROVIDER is not a new Provider")
        loaded[provider.name] = provider
    return loaded


def names() -> tuple[str, ...]:
    return tuple(providers())


def get(name: str) -> Provider:
    """The provider of that name (a KeyError for one that does not exist: names reaching
    here were checked when their model was)."""
    return providers()[name]


def listing_names() -> tuple[str, ...]:
    """Providers a spec can `watch`: those with a model listing."""
    return tuple(name for name, p in providers().items() if p.listing is not None)


def choice_error(choices: tuple[str, ...]) -> PydanticCustomError:
    """The error for a name not among `choices`, worded as pydantic words a Literal's."""
    quoted = [repr(c) for c in choices]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return PydanticCustomError(
        "literal_error", "Input should be {expected}", {"expected": expected}
    )


def checked_name(name: str) -> str:
    """`name` if a provider has it; the spec's error listing every provider otherwise."""
    if name not in providers():
        raise choice_error(names())
    return name


@cache
def _in_process() -> frozenset[str]:
    return frozenset(name for name, p in providers().items() if p.in_process)


def answers_in_process(name: str) -> bool:
    """Whether the provider answers without a call (and so without a cost)."""
    return name in _in_process()


@cache
def _local_models() -> frozenset[str]:
    return frozenset(name for name, p in providers().items() if p.local_model)


def runs_locally(name: str) -> bool:
    """Whether the provider's models run on this machine (no price applies to them)."""
    return name in _local_models()


def batch_api(name: str) -> "BatchAPI | None":
    """The provider's batch API, or None when it has none."""
    provider = providers().get(name)
    return provider.batch if provider is not None else None


def concurrency_limit(name: str) -> int | None:
    provider = providers().get(name)
    return provider.concurrency if provider is not None else None


# A provider's name: one of `registry.names()`, checked when a model is loaded.
ProviderName = str


class ModelConfig(Strict):
    provider: ProviderName
    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="Environment variable holding the key (never the key)."
    )
    # Provider `scripted` only: the answer is this sample field, or this fixed text.
    answer_field: str | None = None
    text: str | None = None
    # Provider `azure_openai` only: the API version (default: its current GA version).
    api_version: str | None = None
    # Provider `openai` only: Chat Completions (`chat`) or the Responses API (`responses`);
    # by default `responses` for the families served only there, else `chat`.
    api: Literal["chat", "responses"] | None = None
    # Under Dagster: another asset of the project whose value is the served model's name
    # (and endpoint), e.g. a fine-tuning job's latest checkpoint; `name` is then the
    # partition's, and the Dagster layer resolves the value into a model of this provider
    # (`providers.models.model_from_value`). The CLI cannot run such an entry.
    asset: str | None = Field(default=None, min_length=1)

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, provider: str) -> str:
        return checked_name(provider)

    @model_validator(mode="after")
    def _check_endpoint(self) -> "ModelConfig":
        get(self.provider).validate(self)
        return self


class Watch(Strict):
    provider: ProviderName
    match: str = Field(min_length=1, description="fnmatch pattern over model ids")
    base_url: str | None = None
    api_key_env: str | None = None
    # The spec's model a release is checked against (until decided) instead of being
    # evaluated on the whole dataset; one of the spec's `models` (the spec checks).
    incumbent: str | None = Field(default=None, min_length=1)

    @field_validator("provider")
    @classmethod
    def _listed_provider(cls, provider: str) -> str:
        choices = listing_names()
        if provider not in choices:
            raise choice_error(choices)
        return provider
