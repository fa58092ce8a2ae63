"""A run's plan in one batch, for tests that look at every request of a small run."""

from gradetrail_lib.engine.plan import Batch, RunPlan
from gradetrail_lib.engine.records import RecordBuilder
from gradetrail_lib.engine.responses import Responses


def whole(plan: RunPlan) -> Batch:
    return plan.batch(list(plan.dataset))


def pushed(builder: RecordBuilder, responses: Responses) -> RecordBuilder:
    """The builder, told each response as the responses step tells it: the cached ones at
    once, each new one as it arrives."""
    cached = {k: v for k, v in responses.responses.items() if k in responses.cache_hits}
    builder.on_cached(cached)
    for key, response in responses.responses.items():
        if key not in cached:
            builder.on_response(key, response, False)
    return builder
