"""Dagster's own stale status of an asset partition, for the tests.

Dagster has no public API for it (the webserver's GraphQL aside); its internal resolver is
what the UI uses, so the tests read staleness through it, in this one place."""

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

__all__ = ["StaleStatus", "resolver_for"]


def resolver_for(defs: dg.Definitions, instance: dg.DagsterInstance) -> CachingStaleStatusResolver:
    return CachingStaleStatusResolver(
        instance,
        asset_graph=defs.resolve_asset_graph(),
        loading_context=LoadingContextForTest(instance),
    )
