"""Trace records and manifests built in memory, for the tests of what reads them (stats,
compare, gate, report) on constructed cases a real run would take long to produce."""

from typing import Any

from gradetrail_lib.results.trace import (
    SCHEMA_VERSION,
    CallTotals,
    DatasetInfo,
    FailureMode,
    GitInfo,
    Manifest,
    ModelCall,
    ModelInfo,
    Outcome,
    PricingInfo,
    ScoreEntry,
    ScorerInfo,
    SpecInfo,
    TraceRecord,
)

SCORER = "s"


def call(
    *,
    role: str = "target",
    model: str = "m",
    input_tokens: int | None = 10,
    output_tokens: int | None = 2,
    latency_s: float | None = 0.1,
    cache_hit: bool = False,
    scorer: str | None = None,
    text: str | None = None,
    error: str | None = None,
) -> ModelCall:
    return ModelCall(
        role=role,  # type: ignore[arg-type]
        request_key=f"k-{role}-{model}",
        provider="openai_compatible",
        model=model,
        served_model=model if error is None else None,
        input_tokens=input_tokens if error is None else None,
        output_tokens=output_tokens if error is None else None,
        latency_s=latency_s if error is None else None,
        cost_usd=None,
        cache_hit=cache_hit,
        stop_reason="stop" if error is None else None,
        scorer=scorer,
        text=text,
        error=error,
    )


def record(
    sample_id: str,
    scores: dict[str, float | None] | float | None,
    *,
    repeat: int = 0,
    answered: bool = True,
    outcome: Outcome | None = None,
    failure_mode: FailureMode | None = None,
    stop_reason: str | None = "stop",
    response: str = "Answer: 1",
    latency_s: float = 0.1,
    reasons: dict[str, str] | None = None,
    messages: list[dict[str, Any]] | None = None,
    extra_calls: list[ModelCall] | None = None,
) -> TraceRecord:
    """A record scored per scorer (a bare number scores scorer `s`); a None score is a
    scorer error unless the sample has no response (a provider error)."""
    by_name = scores if isinstance(scores, dict) else {SCORER: scores}
    entries = {
        name: ScoreEntry(
            value,
            (reasons or {}).get(name, "ok" if value is not None else "failed"),
            None if value is not None or not answered else "scorer_error",
        )
        for name, value in by_name.items()
    }
    if outcome is None:
        if not answered:
            outcome = "provider_error"
        elif any(e.error for e in entries.values()):
            outcome = "scorer_error"
        else:
            outcome = "scored"
    target = call(latency_s=latency_s) if answered else call(error="HTTP 500 from the provider")
    return TraceRecord(
        schema_version=SCHEMA_VERSION,
        id=sample_id,
        repeat=repeat,
        messages=messages if messages is not None else [{"role": "user", "content": "q"}],
        calls=[target, *(extra_calls or [])],
        response=response if answered else None,
        stop_reason=stop_reason if answered else None,
        scores=entries,
        outcome=outcome,
        failure_mode=failure_mode,
    )


def manifest(
    scorers: dict[str, str] | None = None,
    *,
    dataset: str = "d" * 64,
    identity: str = "i" * 64,
    spec_name: str = "spec",
    model: str = "m",
    warnings: list[str] | None = None,
) -> Manifest:
    """A manifest whose scorers are `{name: hash}` in order (the first is primary)."""
    named = scorers if scorers is not None else {SCORER: "s" * 64}
    return Manifest(
        schema_version=SCHEMA_VERSION,
        identity=identity,
        spec=SpecInfo(name=spec_name, path=f"{spec_name}.yaml", hash="p" * 64),
        dataset=DatasetInfo(path="data.jsonl", hash=dataset),
        scorers=[ScorerInfo(name=n, type="exact", hash=h) for n, h in named.items()],
        scorer_hash="h" * 64,
        scorer_files={},
        judge_hashes={},
        requests_hash="r" * 64,
        model=ModelInfo(requested=model, provider="openai_compatible", base_url=None, served=[]),
        git=GitInfo(sha=None, dirty=None),
        gradetrail_version="0",
        execution={},
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:00:01+00:00",
        timings_s={},
        samples=0,
        outcomes={},
        failure_modes={},
        scores={},
        target=CallTotals(),
        judge=CallTotals(),
        pricing=PricingInfo(version="v1", effective_date="2026-11-01"),
        warnings=warnings or [],
    )
