"""Provider `openai`: OpenAI's Chat Completions API (see `openai_chat`)."""

from gradetrail_lib.providers import openai_chat
from gradetrail_lib.providers.registry import Provider

PROVIDER = Provider(
    name="openai",
    adapter=openai_chat.OpenAIChatAdapter(),
    base_url="https://api.openai.com/v1",
    key_env="OPENAI_API_KEY",
    refused_params=openai_chat.REFUSED_PARAMS,
    key_required=True,
    listing=openai_chat.LISTING,
)
