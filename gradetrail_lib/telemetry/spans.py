"""OpenTelemetry spans of a run (the optional extra `gradetrail[otel]`): a span per run, per
sample (trace record) and per model call, with the GenAI semantic-convention attributes
(`gen_ai.*`) and gradetrail's own (`gradetrail.*`: request key, cache hit, outcome, failure
mode, cost, role, scorer).

Where the spans go, read once per run by `start_run`:
* a TracerProvider the host application registered globally (it configured OTel itself,
  e.g. under `opentelemetry-instrument`): our spans join its traces;
* else `OTEL_TRACES_EXPORTER=otlp`, or `OTEL_EXPORTER_OTLP_ENDPOINT` /
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set: a provider of our own (one per process and
  configuration) exporting OTLP over HTTP (protobuf), configured by the standard
  `OTEL_EXPORTER_OTLP_*` / `OTEL_BSP_*` variables, its resource from `OTEL_SERVICE_NAME` /
  `OTEL_RESOURCE_ATTRIBUTES` (service name `gradetrail` by default);
  `OTEL_TRACES_EXPORTER=console` prints the spans to stderr;
* else nothing: `start_run` returns a no-op object without importing OpenTelemetry
  (`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off as well).

The engine streams records in batches and a record has no wall-clock times, only each
call's `latency_s`, so spans are emitted after the fact with explicit times: a sample's
calls are laid end to end in the record's order (the target's, then the judges'; an
agent's steps in turn) so that the last ends when its batch is handed over, each lasting
its latency; a cache hit lasts nothing (its original latency is `gradetrail.latency_s`).
The sample's span covers its calls; the run's goes from the run's start to `end`.

No attribute carries a secret: no API key, header, base URL or message content; a failed
call's error text is the record's (redacted of the key where it is built).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Protocol

from gradetrail_lib._version import __version__
from gradetrail_lib.providers.pricing import shown_cost, sum_costs
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.results.trace import Manifest, ModelCall, TraceRecord

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

log = logging.getLogger(__name__)

SCOPE = "gradetrail"
DEFAULT_SERVICE_NAME = "gradetrail"
_EXPORTERS = ("otlp", "console")
# At most this long at the end of a run (or a flush for back-pressure) for the spans
# queued to be exported; the exporter's own timeout (OTEL_EXPORTER_OTLP_TIMEOUT) applies per
# request within it.
FLUSH_TIMEOUT_MS = 10_000


class RunSpans(Protocol):
    """The spans of one run: `records` after each scored batch (a list, or any iterable
    the caller does not need again), `end` once with the run's manifest."""

    def records(self, batch: Iterable[TraceRecord]) -> None: ...

    def end(self, manifest: Manifest) -> None: ...

    def abort(self, reason: str) -> None: ...


class _NoSpans:
    """OpenTelemetry absent or unconfigured: every call does nothing."""

    def records(self, batch: Iterable[TraceRecord]) -> None:
        pass

    def end(self, manifest: Manifest) -> None:
        pass

    def abort(self, reason: str) -> None:
        pass


NO_SPANS: RunSpans = _NoSpans()


def start_run(
    spec_name: str,
    model: ModelConfig,
    started_at: datetime,
    *,
    tracer_provider: TracerProvider | None = None,
) -> RunSpans:
    """The run's spans, its own span started at `started_at`; a no-op object when
    OpenTelemetry is absent or nothing is configured. `tracer_provider` overrides the
    configuration (tests)."""
    flush_every: int | None = None
    if tracer_provider is None:
        found = configured_provider()
        if found is None:
            return NO_SPANS
        tracer_provider, flush_every = found
    return _Spans(tracer_provider, spec_name, model, started_at, flush_every)


def configured_provider() -> tuple[TracerProvider, int | None] | None:
    """The TracerProvider the environment names and, for one of our own, how many spans
    may be queued before `records` waits for their export (a BatchSpanProcessor drops
    what overflows its queue, and a cached run emits spans far faster than they export)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if "none" in names:
        return None
    host = _global_provider()
    if host is not None:
        return host, None
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not names and endpoint:
        names = ["otlp"]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        _warn_once(
            f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}: gradetrail exports "
            f"{' or '.join(_EXPORTERS)} (set up another exporter in the application)"
        )
    wanted = tuple(n for n in _EXPORTERS if n in names)
    if not wanted:
        return None
    snapshot = tuple(sorted((k, v) for k, v in env.items() if k.startswith("OTEL_")))
    provider = _own_provider(wanted, snapshot)
    if provider is None:
        return None
    return provider, _queue_size(env) // 2


def _global_provider() -> TracerProvider | None:
    """The host application's provider, if it registered one. Nothing registered one
    when nothing imported the API (and no OTEL_PYTHON_TRACER_PROVIDER names one): then
    OpenTelemetry is not imported at all."""
    if "opentelemetry.trace" not in sys.modules and not os.environ.get(
        "OTEL_PYTHON_TRACER_PROVIDER"
    ):
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def _queue_size(env: Mapping[str, str]) -> int:
    try:
        return max(2, int(env.get("OTEL_BSP_MAX_QUEUE_SIZE", "2048")))
    except ValueError:
        return 2048


@cache
def _own_provider(
    exporters: tuple[str, ...], env: tuple[tuple[str, str], ...]
) -> TracerProvider | None:
    """One provider per process and OTEL_* configuration (`env` is the cache key; the
    SDK and the exporter read the variables themselves). The SDK shuts it down at exit."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        if "otlp" in exporters:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        _warn_once(_MISSING)
        return None
    variables = dict(env)
    protocol = variables.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", variables.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    )
    if "otlp" in exporters and protocol not in (None, "", "http/protobuf"):
        _warn_once(f"OTLP protocol {protocol!r} is not supported; exporting http/protobuf")
    try:
        provider = TracerProvider(resource=_resource())
        if "otlp" in exporters:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if "console" in exporters:
            out = ConsoleSpanExporter(out=sys.stderr)
            provider.add_span_processor(BatchSpanProcessor(out))
    except Exception as exc:  # a bad OTEL_* value (the SDK raises ValueError and others)
        _warn_once(f"OpenTelemetry export not set up ({exc}); no spans are exported")
        return None
    return provider


def _resource() -> Resource:
    """`Resource.create()` (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), named
    `gradetrail` and versioned unless they say otherwise."""
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource

    resource = Resource.create()
    attributes = resource.attributes or {}
    service = attributes.get(SERVICE_NAME)
    if not isinstance(service, str) or service.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    if SERVICE_VERSION not in attributes:
        resource = resource.merge(Resource({SERVICE_VERSION: __version__}))
    return resource


_MISSING = (
    "OpenTelemetry export is configured (OTEL_*) but its packages are missing: "
    "pip install 'gradetrail[otel]'; no spans are exported"
)
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


class _Spans:
    def __init__(
        self,
        provider: TracerProvider,
        spec_name: str,
        model: ModelConfig,
        started_at: datetime,
        flush_every: int | None,
    ) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._trace = trace
        self._kind = SpanKind
        self._status = Status
        self._code = StatusCode
        self._provider = provider
        self._tracer: Tracer = provider.get_tracer(SCOPE, __version__)
        self._start = _ns(started_at)
        self._run: Span = self._tracer.start_span(
            "gradetrail.run",
            start_time=self._start,
            attributes={
                "gradetrail.spec": spec_name,
                "gradetrail.provider": model.provider,
                "gradetrail.model": model.name,
            },
        )
        self._context: Context = trace.set_span_in_context(self._run)
        self._flush_every = flush_every
        self._queued = 0
        self._ended = False

    def records(self, batch: Iterable[TraceRecord]) -> None:
        if self._ended:
            return
        now = max(time.time_ns(), self._start)
        for record in batch:
            self._sample(record, now)
            if self._flush_every is not None:
                self._queued += 1 + len(record.calls)
                if self._queued >= self._flush_every:
                    self._queued = 0
                    if not self._flush():
                        # The export does not keep up (or the collector is down): stop
                        # waiting for it; the processor drops what its queue cannot hold.
                        self._flush_every = None

    def _sample(self, record: TraceRecord, end: int) -> None:
        times = _call_times(record.calls, end, self._start)
        sample = self._tracer.start_span(
            "gradetrail.sample",
            context=self._context,
            start_time=times[0][0] if times else end,
            attributes=_sample_attributes(record),
        )
        inside = self._trace.set_span_in_context(sample)
        for call, (start, stop) in zip(record.calls, times, strict=True):
            span = self._tracer.start_span(
                f"chat {call.model}",
                context=inside,
                kind=self._kind.INTERNAL if call.cache_hit else self._kind.CLIENT,
                start_time=start,
                attributes=_call_attributes(call),
            )
            if call.error is not None:
                span.set_status(self._status(self._code.ERROR, call.error))
            span.end(end_time=stop)
        if record.outcome != "scored":
            sample.set_status(self._status(self._code.ERROR, record.outcome))
        sample.end(end_time=end)

    def end(self, manifest: Manifest) -> None:
        if self._ended:
            return
        self._run.set_attributes(_run_attributes(manifest))
        self._finish()

    def abort(self, reason: str) -> None:
        """The run failed before its manifest: its span ends as an error."""
        if self._ended:
            return
        self._run.set_status(self._status(self._code.ERROR, reason))
        self._finish()

    def _finish(self) -> None:
        self._ended = True
        self._run.end(end_time=max(time.time_ns(), self._start))
        self._flush()

    def _flush(self) -> bool:
        flush = getattr(self._provider, "force_flush", None)
        return flush is None or flush(timeout_millis=FLUSH_TIMEOUT_MS) is not False


def _call_times(calls: Sequence[ModelCall], end: int, floor: int) -> list[tuple[int, int]]:
    """Each call's (start, end) in ns, laid end to end so that the last ends at `end`; a
    cache hit or a failed call (no latency) lasts nothing. None starts before `floor`."""
    times: list[tuple[int, int]] = []
    stop = end
    for call in reversed(calls):
        lasted = 0 if call.cache_hit or call.latency_s is None else int(call.latency_s * 1e9)
        start = max(stop - lasted, floor)
        times.append((start, stop))
        stop = start
    times.reverse()
    return times


def _call_attributes(call: ModelCall) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": call.provider,
        "gen_ai.provider.name": call.provider,
        "gen_ai.request.model": call.model,
        "gradetrail.role": call.role,
        "gradetrail.request_key": call.request_key,
        "gradetrail.cache_hit": call.cache_hit,
    }
    if call.served_model is not None:
        attributes["gen_ai.response.model"] = call.served_model
    if call.input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = call.input_tokens
    if call.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = call.output_tokens
    if call.stop_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = [call.stop_reason]
    if call.latency_s is not None:
        attributes["gradetrail.latency_s"] = call.latency_s
    cost = shown_cost(call.provider, call.cost_usd)  # a local model's: none (no price)
    if cost is not None:
        attributes["gradetrail.cost_usd"] = cost
    if call.scorer is not None:
        attributes["gradetrail.scorer"] = call.scorer
    if call.error is not None:
        attributes["error.type"] = "provider_error"
    return attributes


def _sample_attributes(record: TraceRecord) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "gradetrail.sample_id": record.id,
        "gradetrail.repeat": record.repeat,
        "gradetrail.outcome": record.outcome,
        "gradetrail.calls": len(record.calls),
    }
    if record.failure_mode is not None:
        attributes["gradetrail.failure_mode"] = record.failure_mode
    if record.stop_reason is not None:
        attributes["gradetrail.stop_reason"] = record.stop_reason
    costs = [shown_cost(c.provider, c.cost_usd) for c in record.calls if c.error is None]
    cost = sum_costs(costs) if costs else None
    if cost is not None:
        attributes["gradetrail.cost_usd"] = cost
    for name, entry in record.scores.items():
        score = record.score_of(name)
        if score is not None:
            attributes[f"gradetrail.score.{name}"] = score
        if entry.error is not None:
            attributes[f"gradetrail.score_error.{name}"] = entry.error
    return attributes


def _run_attributes(manifest: Manifest) -> dict[str, AttributeValue]:
    totals = (manifest.target, manifest.judge)
    attributes: dict[str, AttributeValue] = {
        "gradetrail.identity": manifest.identity,
        "gradetrail.spec": manifest.spec.name,
        "gradetrail.model": manifest.model.requested,
        "gradetrail.provider": manifest.model.provider,
        "gradetrail.served_models": list(manifest.model.served),
        "gradetrail.samples": manifest.samples,
        "gradetrail.repeats": manifest.repeats,
        "gradetrail.primary_scorer": manifest.primary_scorer,
        "gradetrail.calls": sum(t.calls for t in totals),
        "gradetrail.cache_hits": sum(t.cache_hits for t in totals),
        "gradetrail.errors": sum(t.errors for t in totals),
        # Samples a judge gave no usable grade, as the run's summary counts them.
        "gradetrail.judge_errors": sum(f.judge_errors for f in manifest.scores.values()),
        "gradetrail.input_tokens": sum(t.input_tokens for t in totals),
        "gradetrail.output_tokens": sum(t.output_tokens for t in totals),
    }
    figures = manifest.scores.get(manifest.primary_scorer)
    if figures is not None and figures.n:
        attributes["gradetrail.pass_rate"] = figures.passed / figures.n
        attributes["gradetrail.passed"] = figures.passed
    paid = sum_costs([t.cost_paid_usd for t in totals])
    reused = sum_costs([t.reused_usd for t in totals])
    if paid is not None:
        attributes["gradetrail.cost_paid_usd"] = paid
    if reused is not None:
        attributes["gradetrail.cost_reused_usd"] = reused
    for outcome, count in manifest.outcomes.items():
        attributes[f"gradetrail.outcomes.{outcome}"] = count
    return attributes
