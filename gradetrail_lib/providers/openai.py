"""Provider `openai`: OpenAI's Chat Completions API (see `openai_chat`), or its Responses
API (`openai_responses`) for a model with `api: responses` and by default for the model
families served only there. A Chat Completions model's request key is what it was: the
API enters the key (`settings`) only for the Responses API."""

from gradetrail_lib.providers import openai_chat
from gradetrail_lib.providers.openai_batch import OpenAIBatchAPI
from gradetrail_lib.providers.openai_responses import OpenAIAdapter, responses_only
from gradetrail_lib.providers.registry import ModelConfig, Provider, RefusedParam

_ADAPTER = OpenAIAdapter()


def api(model: ModelConfig) -> str:
    """The API a model is sent to: its `api`, else `responses` for the families served
    only there, else `chat`."""
    if model.api is not None:
        return model.api
    return "responses" if responses_only(model.name) else "chat"


# The Responses API takes neither (its create parameters have no `stop` or `seed`): a
# spec setting one would be refused on every request, so it is refused at load.
RESPONSES_REFUSED = (
    RefusedParam("stop", "OpenAI's Responses API", "OpenAI's Responses API"),
    RefusedParam("seed", "OpenAI's Responses API", "OpenAI's Responses API"),
)


def _refused(model: ModelConfig) -> tuple[RefusedParam, ...]:
    return RESPONSES_REFUSED if api(model) == "responses" else ()


def _settings(model: ModelConfig) -> dict[str, str]:
    return {"api": "responses"} if api(model) == "responses" else {}


PROVIDER = Provider(
    media=openai_chat.OPENAI_MEDIA,
    name="openai",
    adapter=_ADAPTER,
    base_url="https://api.openai.com/v1",
    key_env="OPENAI_API_KEY",
    refused_params=openai_chat.REFUSED_PARAMS,
    refused_params_of=_refused,
    key_required=True,
    listing=openai_chat.LISTING,
    batch=OpenAIBatchAPI(_ADAPTER),
    settings=("api",),
    endpoint_settings=_settings,
)
