"""Provider `openai`: OpenAI's Chat Completions API (see `openai_chat`)."""

from gradetrail_lib.providers import openai_chat
from gradetrail_lib.providers.openai_batch import OpenAIBatchAPI
from gradetrail_lib.providers.registry import Provider

_ADAPTER = openai_chat.OpenAIChatAdapter()

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
)
