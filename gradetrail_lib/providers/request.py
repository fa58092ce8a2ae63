"""Model requests and their cache key.

The request key is the sha256 (hex) of the canonical JSON (see `hashing`) of::

    {"v": 1,
     "provider": "<a provider's name (see `registry`)>",
     "model": "<model name as requested>",
     "base_url": "<base URL without trailing slash>" | null,
     "messages": [{"role": "system|user|assistant", "content": "<rendered text>"}, ...],
     "params": {"max_tokens": 64, "temperature": 0.0, ...}}

`params` holds only the sampling parameters that are set (None left out) with the
provider-specific `extra` fields merged in. The prompt-cache marker (`params.cache`) is
not one of them: it changes what a call is billed, never its answer, so two specs that
differ only in `cache` share their cache entries (it travels apart:
`ModelRequest.prompt_cache`). `base_url` is the model's, or its provider's default, unless
the provider says otherwise (`Provider.key_base_url`): for provider `local` the base URL
would be a random loopback port, so it is replaced by the identity of the weights (package
version and file name). For an in-process provider (`scripted`, answering from a sample
field or a fixed text) `base_url` is null and the answer enters `params` as
`scripted_answer`, since it is what the "model" says. The scorer is never part of the key:
re-scoring is free. A judge's requests are keyed the same way, with the judge's model and
rendered prompt.

Three fields join the key only when they are set, so that every other key stays as it
was: `"tools"` (the tool definitions, with `"tool_choice"`) for a tool-using request,
`"repeat"` (its index) for repeats 1..N-1 of a sample (repeat 0 has none), and
`"settings"` (`{"api_version": "2024-10-21"}`) for a provider whose requests depend on
settings beyond the base URL (`Provider.endpoint_settings`: `azure_openai`'s API version).

A log-likelihood request (`ModelRequest.kind`, see `providers.loglikelihood`) is keyed by
the canonical JSON of ``{"v": 1, "kind": "loglikelihood", "provider", "model", "base_url",
"context", "continuation"}`` (with `"settings"` as above): no messages and no sampling
parameters, since neither changes a log-likelihood; nothing of the scorer either. A context
rendered by the model's chat template (spec `chat_template`) is keyed as that text, with
`"chat_template": "<sha256 of the template>"` beside it (absent otherwise, so every other
key stays as it was): an answer computed with the template never serves a request
without it, even one whose raw context spells the same text.

Messages are provider-neutral: `{"role": "system"|"user", "content": text}`,
`{"role": "assistant", "content": text, "tool_calls": [{"id", "name", "arguments"}]}` (the
`tool_calls` key only when there are some) and `{"role": "tool", "tool_call_id", "name",
"content": text}` (with `"is_error": true` for a failed tool); each adapter translates them to
its API's shape. A user message showing images or documents has a list of parts as its
content (`providers.media`): its text, then each medium by the sha256 of its bytes, type
and size, so a medium enters the key by its bytes and never by its path.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradetrail_lib.config import UNKEYED_PARAMS, Params
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import canonical_json, hash_json, sha256_hex
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import (
    ChatTemplate,
    Endpoint,
    Message,
    ModelRequest,
    PromptCacheMark,
)
from gradetrail_lib.providers.media import MediaSource, limit_problem, media_parts
from gradetrail_lib.providers.registry import ModelConfig

if TYPE_CHECKING:
    from gradetrail_lib.datasets.dataset import Sample

KEY_VERSION = 1


def request_params(params: Params) -> dict[str, Any]:
    """The params of the request key and of the request sent (`cache` is neither)."""
    unsent = {"extra", *UNKEYED_PARAMS}
    fields = params.model_dump(mode="json", exclude_none=True, exclude=unsent)
    return {**fields, **params.extra}


def key_base_url(model: ModelConfig) -> str | None:
    provider = registry.get(model.provider)
    if provider.key_base_url is not None:
        return provider.key_base_url(model)
    url = model.base_url or provider.base_url
    return str(url).rstrip("/") if url else None


def endpoint_settings(model: ModelConfig) -> dict[str, str]:
    provider = registry.get(model.provider)
    if provider.endpoint_settings is None:
        return {}
    return provider.endpoint_settings(model)


def request_key(
    provider: str,
    model: str,
    base_url: str | None,
    messages: list[Message],
    params: dict[str, Any],
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    repeat: int = 0,
    settings: dict[str, str] | None = None,
) -> str:
    return request_keyer(
        provider, model, base_url, params,
        tools=tools, tool_choice=tool_choice, repeat=repeat, settings=settings,
    )(messages)  # fmt: skip


# Stands for the messages while the rest of the key is encoded; a string JSON escapes
# (NUL), so no value of the caller's is likely to encode as it does.
_SLOT = "\x00gradetrail:messages\x00"


def request_keyer(
    provider: str,
    model: str,
    base_url: str | None,
    params: dict[str, Any],
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    repeat: int = 0,
    settings: dict[str, str] | None = None,
) -> Callable[[list[Message]], str]:
    """`request_key` for one model and params: the part of the canonical JSON that does not
    change between samples is encoded once, so each sample encodes only its messages."""
    fixed: dict[str, Any] = {
        "v": KEY_VERSION,
        "provider": provider,
        "model": model,
        "base_url": base_url,
        "params": params,
    }
    if tools is not None:
        fixed["tools"] = tools
        fixed["tool_choice"] = tool_choice
    if repeat:
        fixed["repeat"] = repeat
    if settings:
        fixed["settings"] = settings
    encoded_slot = canonical_json(_SLOT)
    pieces = canonical_json({**fixed, "messages": _SLOT}).split(encoded_slot)
    if len(pieces) != 2:  # the slot's text is in a param too: encode it all each time
        return lambda messages: hash_json({**fixed, "messages": messages})
    head, tail = pieces
    return lambda messages: sha256_hex(head + canonical_json(messages) + tail)


def chat_template_refusal(provider: str) -> str:
    return (
        f"provider {provider} cannot apply a chat template to log-likelihood requests "
        "(it has no template of the model's to render them with); only provider local "
        "does (the GGUF's own). Remove chat_template, or set it to false"
    )


def endpoint_for(model: ModelConfig) -> Endpoint:
    """The endpoint to send to (a provider that starts a server has its URL bound when the
    server runs: see `backends.live_endpoints`)."""
    provider = registry.get(model.provider)
    url = provider.planned_base_url or model.base_url or provider.base_url
    if url is None:
        raise ValueError(f"model {model.name!r} has no base_url")
    key_env = model.api_key_env or provider.key_env
    settings = tuple(sorted(endpoint_settings(model).items()))
    return Endpoint(model.provider, model.name, url.rstrip("/"), key_env, settings)


def loglikelihood_key(
    provider: str,
    model: str,
    base_url: str | None,
    context: str,
    continuation: str,
    *,
    settings: dict[str, str] | None = None,
    chat_template: str | None = None,
) -> str:
    """The key of a log-likelihood request (see the module's docstring); `chat_template`:
    the sha256 of the template that rendered `context`."""
    fields: dict[str, Any] = {
        "v": KEY_VERSION,
        "kind": "loglikelihood",
        "provider": provider,
        "model": model,
        "base_url": base_url,
        "context": context,
        "continuation": continuation,
    }
    if settings:
        fields["settings"] = settings
    if chat_template is not None:
        fields["chat_template"] = chat_template
    return hash_json(fields)


class RequestBuilder:
    """Builds one model's requests from rendered messages: the key, the endpoint, the
    params (and tools). The target's requests and a judge's are built alike."""

    def __init__(
        self,
        model: ModelConfig,
        params: Params,
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        shared_messages: int = 0,
        chat_template: bool = False,
    ) -> None:
        """`shared_messages`: how many of the first messages every sample shares (the
        prompt's constant part), which `params.cache` marks for the prompt cache.
        `chat_template`: log-likelihood contexts are rendered by the model's own chat
        template (the provider's; a ValueError when it has none)."""
        self.model = model
        self.provider = registry.get(model.provider)
        self.params = request_params(params)
        cache = params.cache
        self.prompt_cache = (
            PromptCacheMark(messages=shared_messages, ttl=cache.ttl)
            if cache is not None and cache.prefix and shared_messages
            else None
        )
        self.tools = tools
        self.tool_choice = tool_choice if tools is not None else None
        self.endpoint = endpoint_for(model)
        self.settings = endpoint_settings(model) or None
        # The base URL the requests are keyed by (the manifest records it too).
        self.key_base_url = key_base_url(model)
        self._keyers: dict[int, Callable[[list[Message]], str]] = {}
        self.chat_template: ChatTemplate | None = None
        if chat_template:
            if self.provider.chat_template is None:
                raise ValueError(chat_template_refusal(model.provider))
            self.chat_template = self.provider.chat_template(model)

    def _key_of(self, repeat: int) -> Callable[[list[Message]], str]:
        keyer = self._keyers.get(repeat)
        if keyer is None:
            model = self.model
            keyer = self._keyers[repeat] = request_keyer(
                model.provider, model.name, self.key_base_url, self.params,
                tools=self.tools, tool_choice=self.tool_choice, repeat=repeat,
                settings=self.settings,
            )  # fmt: skip
        return keyer

    def loglikelihood(
        self,
        context: str,
        continuation: str,
        *,
        templated: bool = True,
        turns: tuple[tuple[str, str], ...] = (),
    ) -> ModelRequest:
        """The request for the log-likelihood of `continuation` after `context`, the
        context rendered by the chat template when the builder has one (and `templated`:
        an unconditional context is scored as it is, as lm-eval does), after the few-shot
        `turns` (user, assistant) when there are some."""
        model = self.model
        template = self.chat_template if templated else None
        assert template is not None or not turns, "turns are a chat template's (checked at load)"
        if template is not None:
            context = template.render(context, turns)
        key = loglikelihood_key(
            model.provider, model.name, self.key_base_url, context, continuation,
            settings=self.settings, chat_template=template.sha256 if template else None,
        )  # fmt: skip
        return ModelRequest(
            key, self.endpoint, [], {}, kind="loglikelihood", context=context,
            continuation=continuation, chat_template=template is not None,
        )  # fmt: skip

    @property
    def answers_from_samples(self) -> bool:
        """Whether the answer comes from the sample (an in-process provider's)."""
        return self.provider.sample_answer is not None

    def check(self, sample: "Sample", dataset_path: str) -> None:
        """Raises the InputError `build` would for this sample (a scripted model's
        answer_field missing from it)."""
        if self.provider.sample_answer is not None:
            self.provider.sample_answer(self.model, sample, dataset_path, [])

    def check_media(self, messages: list[Message], sample: "Sample", dataset_path: str) -> None:
        """Raises an InputError naming the sample's line when its request holds more or
        larger images or documents than the provider takes (`MediaLimits`)."""
        parts = list(media_parts(messages))
        problem = limit_problem(self.provider.media, self.model.provider, parts)
        if problem is not None:
            raise InputError(dataset_path, sample.line, "media", f"sample {sample.id!r}: {problem}")

    def build(
        self,
        messages: list[Message],
        sample: "Sample",
        dataset_path: str,
        repeat: int = 0,
        media: dict[str, MediaSource] | None = None,
    ) -> ModelRequest:
        """`media`: where the bytes of the messages' media parts are (keyed by hash only)."""
        model = self.model
        sample_answer = self.provider.sample_answer
        if sample_answer is None:
            return ModelRequest(
                self._key_of(repeat)(messages), self.endpoint, messages, self.params,
                tools=self.tools, tool_choice=self.tool_choice, prompt_cache=self.prompt_cache,
                media=media,
            )  # fmt: skip
        answer = sample_answer(model, sample, dataset_path, messages)
        params = {**self.params, "scripted_answer": answer}
        key = request_key(
            model.provider, model.name, key_base_url(model), messages, params,
            tools=self.tools, tool_choice=self.tool_choice, repeat=repeat,
            settings=self.settings,
        )  # fmt: skip
        return ModelRequest(
            key, self.endpoint, messages, self.params, answer, self.tools, self.tool_choice,
            media=media,
        )  # fmt: skip
