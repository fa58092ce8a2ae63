"""What every provider returns, and how failures are classified (no HTTP here: a
fully cached run imports this and must not pay for httpx)."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gradetrail_lib.providers.media import MediaSource

StopReason = Literal["stop", "max_tokens", "tool_use", "content_filter", "other"]
FailureKind = Literal["fatal", "transient"]
# What a request asks: a chat's next message, or the log-likelihood of a continuation
# after a context (`providers.loglikelihood`). A provider declares the kinds it serves.
RequestKind = Literal["chat", "loglikelihood"]

# Statuses that no retry can fix: the request or its credentials are wrong.
FATAL_STATUSES = frozenset({400, 401, 403, 404, 405, 413, 422})


@dataclass(frozen=True)
class ChatTemplate:
    """A model's own chat template, as a log-likelihood context is wrapped in it: the
    context is one user turn, followed by the assistant's turn opening, after which the
    continuation is scored (lm-evaluation-harness's `--apply_chat_template`). `render(context,
    turns)`: `turns` are few-shot examples as (user, assistant) turns before it, as lm-eval's
    `--fewshot_as_multiturn`."""

    # Where the template was read (e.g. the GGUF metadata key `tokenizer.chat_template`).
    source: str
    # The sha256 of the template's text: in the request key and the manifest.
    sha256: str
    render: "Callable[[str, Sequence[tuple[str, str]]], str]"


# Not frozen, for speed: a cached run makes one per sample.
@dataclass
class ModelResponse:
    text: str
    served_model: str | None
    stop_reason: StopReason
    input_tokens: int | None
    output_tokens: int | None
    latency_s: float
    attempts: int = 1
    raw: dict[str, Any] = field(default_factory=dict)
    # Tools the model asked to call: [{"id", "name", "arguments": {...}}], in its order.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # How the call was sent and what the invoice counts beyond plain input and output
    # (`pricing.call_cost` prices them). `batch`: answered by a provider's batch API.
    batch: bool = False
    # Of `input_tokens`: read from the provider's prompt cache (billed at its cache rate).
    cached_input_tokens: int = 0
    # Of `input_tokens`: written to the prompt cache (Anthropic: 5-minute and 1-hour writes).
    cache_write_input_tokens: int = 0
    cache_write_1h_input_tokens: int = 0
    # Of `output_tokens`: spent reasoning (OpenAI) or thinking (Anthropic), billed as output.
    reasoning_tokens: int = 0
    # Anthropic's extended thinking text: kept in the record, never in `text`.
    thinking: str | None = None
    # A log-likelihood request's answer: the continuation's summed token log-probability,
    # its token count, and whether every token of it is the model's greedy choice.
    loglikelihood: float | None = None
    continuation_tokens: int | None = None
    is_greedy: bool | None = None


@dataclass(frozen=True)
class ParsedBody:
    text: str
    served_model: str | None
    stop_reason: StopReason
    input_tokens: int | None
    output_tokens: int | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # As ModelResponse's: parts of input_tokens and output_tokens (see there).
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    cache_write_1h_input_tokens: int = 0
    reasoning_tokens: int = 0
    thinking: str | None = None
    loglikelihood: float | None = None
    continuation_tokens: int | None = None
    is_greedy: bool | None = None


class ProviderError(Exception):
    """A failed call. `message` has been redacted of secrets before it is built."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s
        super().__init__(message)

    def __str__(self) -> str:
        # `message` may be extended after construction ("... (after N attempts)").
        return self.message

    def __reduce__(self) -> tuple[type["ProviderError"], tuple[object, ...]]:
        # Ray workers send errors back pickled. Exception's default reduce rebuilds from
        # `args` (the first message only), which does not fit __init__ and would drop a
        # message extended later; rebuild from the current fields instead.
        return (type(self), (self.kind, self.message, self.status, self.retry_after_s))

    @property
    def signature(self) -> tuple[int | None, str]:
        """Two errors with equal signatures are "identical" for the abort rule."""
        return (self.status, self.message)


Message = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """Where a request goes. Holds the name of the key's environment variable, never a key."""

    provider: str
    model: str
    base_url: str
    api_key_env: str | None
    # The provider's settings beyond the base URL (`Provider.endpoint_settings`), sorted.
    settings: tuple[tuple[str, str], ...] = ()

    def setting(self, name: str) -> str:
        return dict(self.settings)[name]


# What provider `scripted` answers a request: a text, or an agent's step
# `{"text": ..., "tool_calls": [{"name", "arguments"}]}`.
ScriptedAnswer = str | dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PromptCacheMark:
    """Where a request's prompt-cache breakpoint goes: after its first `messages` messages
    (those every sample shares), kept `ttl` ("5m" or "1h"). Not part of the request key."""

    messages: int
    ttl: str = "5m"


@dataclass
class ModelRequest:
    """A request to a model, provider-neutral: its key, where it goes, the messages (see
    `request` for their shape), the sampling parameters and any tools."""

    key: str
    endpoint: Endpoint
    messages: list[Message]
    params: dict[str, Any]
    # Provider `scripted` only: the answer it gives (a text, or an agent's step).
    answer: "ScriptedAnswer | None" = None
    # Tool definitions offered ({"name", "description", "parameters"}) and the choice.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None
    # `params.cache`: the prompt's shared prefix, marked for the provider's prompt cache.
    prompt_cache: PromptCacheMark | None = None
    # A log-likelihood request (`kind`): the continuation scored after the context; its
    # `messages` are empty.
    kind: RequestKind = "chat"
    context: str = ""
    continuation: str = ""
    # The context was rendered by the model's chat template (`ChatTemplate`): the texts of
    # its special tokens (`<|im_start|>`) are read as those tokens, not spelled out.
    chat_template: bool = False
    # Where the bytes of the messages' images and documents are, by their sha256
    # (`providers.media`); not part of the key, which holds only the hashes.
    media: "dict[str, MediaSource] | None" = None
