"""Provider `openai`: OpenAI's Chat Completions API (see `openai_chat`), or its Responses
API (`openai_responses`) for a model with `api: responses` and by default for the model
families served only there. A Chat Completions model's request key is what it was: the
API enters the key (`settings`) only for the Responses API."""

from gradetrail_lib.providers import openai_chat
from gradetrail_lib.providers.openai_batch import OpenAIBatchAPI
from gradetrail_lib.providers.openai_responses import OpenAIAdapter, responses_only
from gradetrail_lib.providers.registry import ModelConfig, Provider

_ADAPTER = OpenAIAdapter()


def api(model: ModelConfig) -> str:
    """The API a model is sent to: its `api`, else `responses` for the families served
    only there, else `chat`."""
    if model.api is not None:
        return model.api
    return "responses" if responses_only(model.name) else "chat"


def _settings(model: ModelConfig) -> dict[str, str]:
    return {"api": "responses"} if api(model) == "responses" else {}


PROVIDER = Provider(
    media=openai_chat.OPENAI_MEDIA,
    name="openai",
    adapter=_ADAPTER,
    base_url="https://api.openai.com/v1",
    key_env="OPENAI_API_KEY",
    refused_params=openai_chat.REFUSED_PARAMS,
    key_required=True,
    listing=openai_chat.LISTING,
    batch=OpenAIBatchAPI(_ADAPTER),
    settings=("api",),
    endpoint_settings=_settings,
)
