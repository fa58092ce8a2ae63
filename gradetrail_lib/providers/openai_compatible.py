"""Provider `openai_compatible`: a server speaking Chat Completions at the model's
`base_url` (vLLM, llama.cpp server, Ollama, a proxy...); a key only when one is set."""

from gradetrail_lib.providers import openai_chat
from gradetrail_lib.providers.registry import Provider, RefusedParam

PROVIDER = Provider(
    name="openai_compatible",
    adapter=openai_chat.OpenAIChatAdapter(),
    base_url_required=True,
    listing=openai_chat.LISTING,
    refused_params=(
        RefusedParam("thinking", "the Chat Completions API", "a Chat Completions server"),
    ),
)
