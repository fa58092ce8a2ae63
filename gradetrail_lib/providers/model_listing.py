"""Provider model listings (`GET /v1/models`), for noticing new model releases."""

import fnmatch
import os

import httpx

from gradetrail_lib.providers.anthropic_messages import ANTHROPIC_VERSION
from gradetrail_lib.providers.caller import redact
from gradetrail_lib.providers.config import Watch
from gradetrail_lib.providers.request import DEFAULT_BASE_URLS, DEFAULT_KEY_ENVS


class ListingError(Exception):
    """The provider's model list could not be read (down, unauthorized, malformed)."""


def list_models(watch: Watch, client: httpx.Client | None = None) -> list[str]:
    base_url = (watch.base_url or DEFAULT_BASE_URLS.get(watch.provider, "")).rstrip("/")
    if not base_url:
        raise ListingError(f"{watch.provider}: no base_url to list models from")
    key_env = watch.api_key_env or DEFAULT_KEY_ENVS.get(watch.provider)
    key = os.environ.get(key_env) if key_env else None
    headers: dict[str, str] = {}
    if watch.provider == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    if watch.provider in ("openai", "anthropic") and not key:
        raise ListingError(f"{watch.provider}: environment variable {key_env} is not set")
    owned = client is None
    http = client or httpx.Client(timeout=30)
    ids: list[str] = []
    try:
        url: str | None = f"{base_url}/models"
        params: dict[str, str] = {"limit": "1000"} if watch.provider == "anthropic" else {}
        while url:
            try:
                response = http.get(url, headers=headers, params=params)
            except httpx.HTTPError as exc:
                raise ListingError(
                    f"{base_url}/models: {type(exc).__name__}: {redact(str(exc), key)}"
                ) from exc
            if not response.is_success:
                raise ListingError(f"{base_url}/models: HTTP {response.status_code}")
            try:
                body = response.json()
                ids.extend(str(m["id"]) for m in body["data"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ListingError(f"{base_url}/models: unexpected body") from exc
            # Anthropic pages with has_more/last_id; OpenAI returns everything at once.
            if watch.provider == "anthropic" and body.get("has_more") and body.get("last_id"):
                params = {"limit": "1000", "after_id": str(body["last_id"])}
            else:
                url = None
    finally:
        if owned:
            http.close()
    return ids


def matching(watch: Watch, model_ids: list[str]) -> list[str]:
    return sorted({m for m in model_ids if fnmatch.fnmatchcase(m, watch.match)})
