"""Model requests and their cache key.

The request key is the sha256 (hex) of the canonical JSON (see `hashing`) of::

    {"v": 1,
     "provider": "<anthropic|openai|openai_compatible|local>",
     "model": "<model name as requested>",
     "base_url": "<base URL without trailing slash>" | null,
     "messages": [{"role": "system|user|assistant", "content": "<rendered text>"}, ...],
     "params": {"max_tokens": 64, "temperature": 0.0, ...}}

`params` holds only the sampling parameters that are set (None left out) with the
provider-specific `extra` fields merged in. For provider `local` the base URL would be a
random loopback port, so `base_url` is replaced by the identity of the weights (package
version and file name). For provider `scripted` (answers in-process, from a sample field
or a fixed text) the answer enters `params` as `scripted_answer`, since it is what the
"model" says. The scorer is never part of the key: re-scoring is free. A judge's
requests are keyed the same way, with the judge's model and rendered prompt.

Two fields join the key only when they are set, so that every other key stays as it was:
`"tools"` (the tool definitions, with `"tool_choice"`) for a tool-using request, and
`"repeat"` (its index) for repeats 1..N-1 of a sample (repeat 0 has none).

Messages are provider-neutral: `{"role": "system"|"user", "content": text}`,
`{"role": "assistant", "content": text, "tool_calls": [{"id", "name", "arguments"}]}` (the
`tool_calls` key only when there are some) and `{"role": "tool", "tool_call_id", "name",
"content": text}` (with `"is_error": true` for a failed tool); each adapter translates them to
its API's shape.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradetrail_lib.config import Params
from gradetrail_lib.hashing import canonical_json, hash_json, sha256_hex
from gradetrail_lib.providers.config import ModelConfig

if TYPE_CHECKING:
    from gradetrail_lib.datasets.dataset import Sample

KEY_VERSION = 1

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
}

DEFAULT_KEY_ENVS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

Message = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """Where a request goes. Holds the name of the key's environment variable, never a key."""

    provider: str
    model: str
    base_url: str
    api_key_env: str | None


SCRIPTED_BASE_URL = "scripted://in-process"


# Not frozen, for speed: one per sample, and a frozen dataclass's __init__ costs more.
@dataclass
class ModelRequest:
    key: str
    endpoint: Endpoint
    messages: list[Message]
    params: dict[str, Any]
    # Provider `scripted` only: the answer it gives.
    answer: str | None = None
    # Tool definitions offered ({"name", "description", "parameters"}) and the choice.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None


def request_params(params: Params) -> dict[str, Any]:
    fields = params.model_dump(mode="json", exclude_none=True, exclude={"extra"})
    return {**fields, **params.extra}


def key_base_url(model: ModelConfig) -> str | None:
    if model.provider == "scripted":
        return None
    if model.provider == "local":
        from gradetrail_lib.providers.local_server import model_identity

        return model_identity(model.name)
    url = model.base_url or DEFAULT_BASE_URLS.get(model.provider)
    return str(url).rstrip("/") if url else None


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
) -> str:
    return request_keyer(
        provider, model, base_url, params, tools=tools, tool_choice=tool_choice, repeat=repeat
    )(messages)


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
    encoded_slot = canonical_json(_SLOT)
    pieces = canonical_json({**fixed, "messages": _SLOT}).split(encoded_slot)
    if len(pieces) != 2:  # the slot's text is in a param too: encode it all each time
        return lambda messages: hash_json({**fixed, "messages": messages})
    head, tail = pieces
    return lambda messages: sha256_hex(head + canonical_json(messages) + tail)


def endpoint_for(model: ModelConfig, live_base_url: str | None = None) -> Endpoint:
    """The endpoint to send to; `live_base_url` is the started server of a local model."""
    url = live_base_url or model.base_url or DEFAULT_BASE_URLS.get(model.provider)
    if model.provider == "scripted":
        url = SCRIPTED_BASE_URL
    if url is None:
        raise ValueError(f"model {model.name!r} has no base_url")
    key_env = model.api_key_env or DEFAULT_KEY_ENVS.get(model.provider)
    return Endpoint(model.provider, model.name, url.rstrip("/"), key_env)


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
    ) -> None:
        self.model = model
        self.params = request_params(params)
        self.tools = tools
        self.tool_choice = tool_choice if tools is not None else None
        self.endpoint = endpoint_for(
            model, live_base_url="local://" if model.provider == "local" else None
        )
        self._keyers: dict[int, Callable[[list[Message]], str]] = {}

    def _key_of(self, repeat: int) -> Callable[[list[Message]], str]:
        keyer = self._keyers.get(repeat)
        if keyer is None:
            model = self.model
            keyer = self._keyers[repeat] = request_keyer(
                model.provider, model.name, key_base_url(model), self.params,
                tools=self.tools, tool_choice=self.tool_choice, repeat=repeat,
            )  # fmt: skip
        return keyer

    def check(self, sample: "Sample", dataset_path: str) -> None:
        """Raises the InputError `build` would for this sample (a scripted model's
        answer_field missing from it)."""
        field = self.model.answer_field
        if self.model.provider == "scripted" and field is not None and field not in sample.fields:
            from gradetrail_lib.errors import InputError

            raise InputError(
                dataset_path,
                sample.line,
                field,
                f"sample {sample.id!r} has no field {field!r} "
                f"(the answer_field of scripted model {self.model.name!r})",
            )

    def build(
        self, messages: list[Message], sample: "Sample", dataset_path: str, repeat: int = 0
    ) -> ModelRequest:
        model = self.model
        if model.provider != "scripted":
            return ModelRequest(
                self._key_of(repeat)(messages), self.endpoint, messages, self.params,
                tools=self.tools, tool_choice=self.tool_choice,
            )  # fmt: skip
        self.check(sample, dataset_path)
        if model.text is not None:
            answer = model.text
        else:
            assert model.answer_field is not None
            answer = str(sample.fields[model.answer_field])
        params = {**self.params, "scripted_answer": answer}
        key = request_key(
            model.provider, model.name, None, messages, params,
            tools=self.tools, tool_choice=self.tool_choice, repeat=repeat,
        )  # fmt: skip
        return ModelRequest(
            key, self.endpoint, messages, self.params, answer, self.tools, self.tool_choice
        )
