"""Statistics you can defend: intervals with their n, paired comparison (an interval and a
test, cases as units with repeats), the CI gate, pass@k and pass^k over repeats
(intervals clustered by case).

Pure functions from trace records and manifests (`trace`) to dataclasses, one scorer
at a time; the CLI and the Dagster assets both call these.
"""

from gradetrail_lib.analysis.stats.defaults import (
    DEFAULT_CONFIDENCE,
    DEFAULT_GATE_THRESHOLD,
    PROPORTION_METHODS,
    ProportionMethod,
)
from gradetrail_lib.analysis.stats.gate import GateDecision, gate
from gradetrail_lib.analysis.stats.intervals import (
    BootstrapSettings,
    Estimate,
    Interval,
    effective_interval,
    mean_estimate,
    mean_interval,
    proportion,
    proportion_interval,
    score_method,
)
from gradetrail_lib.analysis.stats.paired import (
    PairedComparison,
    Verdict,
    check_comparable,
    compare,
    mcnemar_exact,
    pair_up,
    paired_verdict,
    sign_flip_test,
)
from gradetrail_lib.analysis.stats.repeats import (
    AtK,
    RepeatStats,
    pass_at_k,
    pass_hat_k,
    repeat_stats,
)
from gradetrail_lib.analysis.stats.run_stats import Latency, RunStats, describe, run_stats
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_GATE_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "PROPORTION_METHODS",
    "AtK",
    "BootstrapSettings",
    "Estimate",
    "GateDecision",
    "Interval",
    "Latency",
    "PairedComparison",
    "ProportionMethod",
    "RepeatStats",
    "RunStats",
    "Verdict",
    "check_comparable",
    "compare",
    "describe",
    "effective_interval",
    "gate",
    "mcnemar_exact",
    "mean_estimate",
    "mean_interval",
    "pair_up",
    "paired_verdict",
    "pass_at_k",
    "pass_hat_k",
    "proportion",
    "proportion_interval",
    "repeat_stats",
    "run_stats",
    "score_method",
    "sign_flip_test",
]
