"""Provider `azure_openai`: a model deployed on an Azure OpenAI resource. `name` is the
deployment, `base_url` the resource's endpoint (`https://NAME.openai.azure.com`, required)
and `api_version` the API version (default `DEFAULT_API_VERSION`, a GA version).

Requests are Chat Completions (`openai_chat`, tools included) sent to
`POST {base_url}/openai/deployments/{name}/chat/completions?api-version=...` with the key in
the `api-key` header. The API version enters the request key (as the endpoint's setting):
another version may answer otherwise.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import quote

from gradetrail_lib.providers.batch import BatchLimits
from gradetrail_lib.providers.openai_batch import OpenAIBatchAPI
from gradetrail_lib.providers.openai_chat import OPENAI_MEDIA, OpenAIChatAdapter
from gradetrail_lib.providers.registry import Provider, RefusedParam

if TYPE_CHECKING:
    from gradetrail_lib.providers.base import Endpoint
    from gradetrail_lib.providers.registry import ModelConfig

DEFAULT_API_VERSION = "2024-10-21"

_API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")


class AzureOpenAIAdapter(OpenAIChatAdapter):
    def url(self, endpoint: Endpoint) -> str:
        deployment = quote(endpoint.model, safe="")
        version = quote(endpoint.setting("api_version"), safe="")
        return (
            f"{endpoint.base_url}/openai/deployments/{deployment}/chat/completions"
            f"?api-version={version}"
        )

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {"api-key": api_key} if api_key else {}


def _check(model: ModelConfig) -> None:
    if model.api_version is not None and not _API_VERSION.match(model.api_version):
        raise ValueError(
            f"api_version {model.api_version!r} is not an Azure OpenAI API version "
            f"(like {DEFAULT_API_VERSION} or 2025-04-01-preview)"
        )


def _settings(model: ModelConfig) -> dict[str, str]:
    return {"api_version": model.api_version or DEFAULT_API_VERSION}


_ADAPTER = AzureOpenAIAdapter()

# Azure's global batch: the Batch API under `/openai` with the api-version, each line's
# `url` and the batch's endpoint `/chat/completions`, the deployment as the model;
# 100,000 requests and a 200 MB file per batch.
BATCH = OpenAIBatchAPI(
    _ADAPTER,
    limits=BatchLimits(max_requests=100_000, max_bytes=200 * 1024 * 1024),
    endpoint_path="/chat/completions",
    prefix="/openai",
    azure=True,
)

PROVIDER = Provider(
    media=OPENAI_MEDIA,
    name="azure_openai",
    adapter=_ADAPTER,
    key_env="AZURE_OPENAI_API_KEY",
    key_required=True,
    refused_params=(
        RefusedParam(
            "thinking", "Azure OpenAI's Chat Completions API (use reasoning_effort)", "Azure OpenAI"
        ),
    ),
    base_url_required=True,
    base_url_hint="the resource's endpoint, e.g. https://NAME.openai.azure.com",
    settings=("api_version",),
    check=_check,
    endpoint_settings=_settings,
    batch=BATCH,
)
