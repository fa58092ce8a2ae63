"""A plan's dataset cut in two, for a fork of this process to do the second half beside
it: a cached run or a cost plan is a core's worth of Python a sample (read, render, key,
look up, and for a run score and write), so on two cores two processes take about half
the time (docs/performance.md)."""

import os
import threading

from gradetrail_lib.dataset import DatasetPart, IdHashes
from gradetrail_lib.duckdb_file import ready_to_fork
from gradetrail_lib.pipeline import RunPlan


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ids_to_check(plan: RunPlan) -> IdHashes | None:
    """Where a half's ids' hashes go while its samples are checked: a plan that checks
    as it goes has each half's checked by whoever holds both (`check_ids`)."""
    return IdHashes() if plan.samples is None else None


def check_ids(plan: RunPlan, ids: IdHashes | None) -> None:
    """Both halves' ids: an id in both raises, with every input error, as the plan's
    check does (two distinct ids may share a hash: the check tells them apart)."""
    if ids is not None and ids.repeated():
        plan.checked()


def halves_for_fork(
    plan: RunPlan, size: int, *, calls: bool
) -> tuple[DatasetPart, DatasetPart] | None:
    """The dataset's halves when a fork may do the second: a plan without tools, scored
    by this package's own scorers (a Python scorer's module may hold what a fork does
    not survive) and, when the work may call out (`calls`: a run), without a scorer that
    calls (a judge); a process of one thread (a fork copies only the thread that forks)
    with no DuckDB file attached, on two cores or more; each half a batch (`size`
    samples) or more. None otherwise."""
    if (
        plan.toolbox is not None
        or any(s.type == "python" or (calls and s.makes_calls) for s in plan.scorers)
        or not hasattr(os, "fork")
        or cores() < 2
        or threading.active_count() != 1
    ):
        return None
    halves = plan.dataset.halves()
    if halves is None or min(h.lines for h in halves) < size:
        return None
    return halves if ready_to_fork() else None
