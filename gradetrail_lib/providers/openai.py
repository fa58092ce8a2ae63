"""Provider `openai`: OpenAI's Chat Completions API (see `openai_chat`)."""

from gradetrail_lib.providers import openai_chat
from gradetrail_lib.providers.registry import Provider, RefusedParam

PROVIDER = Provider(
    name="openai",
    adapter=openai_chat.OpenAIChatAdapter(),
    base_url="https://api.openai.com/v1",
    key_env="OPENAI_API_KEY",
    key_required=True,
    listing=openai_chat.LISTING,
    refused_params=(
        RefusedParam("thinking", "OpenAI's Chat Completions API (use reasoning_effort)", "OpenAI"),
    ),
)
