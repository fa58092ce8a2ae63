"""Provider model listings, for noticing new model releases (a spec's `watch`). How each
provider lists its models is its `Provider.listing`."""

import fnmatch
import os

import httpx

from gradetrail_lib.providers import registry
from gradetrail_lib.providers.caller import redact
from gradetrail_lib.providers.registry import Watch


class ListingError(Exception):
    """The provider's model list could not be read (down, unauthorized, malformed)."""


def list_models(watch: Watch, client: httpx.Client | None = None) -> list[str]:
    provider = registry.get(watch.provider)
    listing = provider.listing
    if listing is None:  # Watch refuses such a provider
        raise ListingError(f"{watch.provider}: lists no models")
    base_url = (watch.base_url or provider.base_url or "").rstrip("/")
    if not base_url:
        raise ListingError(f"{watch.provider}: no base_url to list models from")
    key_env = watch.api_key_env or provider.key_env
    key = os.environ.get(key_env) if key_env else None
    if provider.key_required and not key:
        raise ListingError(f"{watch.provider}: environment variable {key_env} is not set")
    headers = listing.headers(key or None)
    url = f"{base_url}{listing.path}"
    owned = client is None
    http = client or httpx.Client(timeout=30)
    ids: list[str] = []
    try:
        query: dict[str, str] | None = dict(listing.query)
        while query is not None:
            try:
                response = http.get(url, headers=headers, params=query)
            except httpx.HTTPError as exc:
                raise ListingError(f"{url}: {type(exc).__name__}: {redact(str(exc), key)}") from exc
            if not response.is_success:
                raise ListingError(f"{url}: HTTP {response.status_code}")
            try:
                body = response.json()
                ids.extend(listing.ids(body))
                query = listing.next_query(body)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ListingError(f"{url}: unexpected body") from exc
    finally:
        if owned:
            http.close()
    return ids


def matching(watch: Watch, model_ids: list[str]) -> list[str]:
    return sorted({m for m in model_ids if fnmatch.fnmatchcase(m, watch.match)})
