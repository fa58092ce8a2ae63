"""Provider `anthropic`: the Anthropic Messages API (see `anthropic_messages`)."""

from gradetrail_lib.providers import anthropic_messages
from gradetrail_lib.providers.anthropic_batch import AnthropicBatchAPI
from gradetrail_lib.providers.registry import Provider, RefusedParam

_ADAPTER = anthropic_messages.AnthropicMessagesAdapter()

PROVIDER = Provider(
    name="anthropic",
    adapter=_ADAPTER,
    media=anthropic_messages.ANTHROPIC_MEDIA,
    base_url="https://api.anthropic.com/v1",
    key_env="ANTHROPIC_API_KEY",
    key_required=True,
    refused_params=(
        RefusedParam("seed", "the Anthropic Messages API", "Anthropic"),
        RefusedParam("reasoning_effort", "the Anthropic Messages API (use thinking)", "Anthropic"),
    ),
    listing=anthropic_messages.LISTING,
    batch=AnthropicBatchAPI(_ADAPTER),
)
