"""A run's plan in one batch, for tests that look at every request of a small run."""

from gradetrail_lib.engine.plan import EvalPlan, RunPlan


def whole(plan: RunPlan) -> EvalPlan:
    return plan.batch(list(plan.dataset))
