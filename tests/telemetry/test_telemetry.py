"""OpenTelemetry spans of a run (gradetrail_lib.telemetry.spans): their tree and attributes on
the SDK's in-memory exporter, the no-op when nothing is configured, a host application's
global provider, and the OTLP/HTTP export configured by OTEL_* variables to a loopback
collector (in subprocesses: the global provider and the exporter's state are per process)."""

import dataclasses
import http.server
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.optional import need

need("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from gradetrail_lib.providers.registry import ModelConfig  # noqa: E402
from gradetrail_lib.results.trace import CallTotals, ModelCall, ScorerFigures  # noqa: E402
from gradetrail_lib.telemetry import spans as telemetry  # noqa: E402
from tests.support.traces import manifest, record  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-test-0123456789abcdef-secret"
KEY_ENV = "GRADETRAIL_TEST_OTEL_KEY"
MODEL = ModelConfig(provider="openai", name="gpt-4o-mini", api_key_env=KEY_ENV)


def _call(request_key: str, **fields: Any) -> ModelCall:
    """A target call to gpt-4o-mini that failed, unless `fields` give its answer."""
    failed = ModelCall(
        role="target",
        request_key=request_key,
        provider="openai",
        model="gpt-4o-mini",
        served_model=None,
        input_tokens=None,
        output_tokens=None,
        latency_s=None,
        cost_usd=None,
        cache_hit=False,
        stop_reason=None,
    )
    return dataclasses.replace(failed, **fields)


def _records():
    """A sample judged after its answer, a cached one, and one the provider failed."""
    answered = record("q1", {"exact": 1.0, "judge": 0.5})
    answered.calls = [
        _call(
            "key-target-1",
            served_model="gpt-4o-mini-2024-07-18",
            input_tokens=12,
            output_tokens=3,
            latency_s=0.5,
            cost_usd=0.001,
            stop_reason="stop",
        ),
        _call(
            "key-judge-1",
            role="judge",
            model="claude-judge",
            served_model="claude-judge-1",
            input_tokens=40,
            output_tokens=5,
            latency_s=0.25,
            cost_usd=0.0002,
            scorer="judge",
            text="score: 0.5",
            stop_reason="stop",
        ),
    ]
    cached = record("q2", {"exact": 0.0, "judge": None}, failure_mode="wrong_answer")
    cached.calls = [
        _call(
            "key-target-2",
            served_model="gpt-4o-mini-2024-07-18",
            input_tokens=11,
            output_tokens=2,
            latency_s=0.3,
            cost_usd=0.0009,
            cache_hit=True,
            stop_reason="stop",
        )
    ]
    failed = record("q3", {"exact": None, "judge": None}, answered=False)
    failed.failure_mode = "provider_error"
    failed.calls = [_call("key-target-3", error="HTTP 500 from the provider")]
    return [answered, cached, failed]


def _manifest():
    return manifest({"exact": "e" * 64, "judge": "j" * 64}, spec_name="capitals").model_copy(
        update={
            "samples": 3,
            "outcomes": {"scored": 2, "provider_error": 1},
            "scores": {
                "exact": ScorerFigures(type="exact", n=3, scored=2, errors=0, mean=0.5, passed=1),
            },
            "target": CallTotals(
                calls=2, cache_hits=1, errors=1, cost_usd=0.0019, cost_paid_usd=0.001
            ),
            "judge": CallTotals(calls=1, cost_usd=0.0002, cost_paid_usd=0.0002),
        }
    )


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def exported(
    monkeypatch: pytest.MonkeyPatch, no_otel_env: None
) -> Iterator[tuple[list[ReadableSpan], datetime]]:
    """The spans of a run of _records() in two batches, and the run's start."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    started = datetime.now(UTC) - timedelta(seconds=5)
    spans = telemetry.start_run("capitals", MODEL, started, tracer_provider=provider)
    first, second, third = _records()
    spans.records([first, second])
    spans.records(iter([third]))
    spans.end(_manifest())
    spans.records([first])  # after the end: ignored
    yield list(exporter.get_finished_spans()), started
    provider.shutdown()


def _by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_a_span_per_run_sample_and_call(exported) -> None:
    spans, started = exported
    (run,) = _by_name(spans, "gradetrail.run")
    samples = _by_name(spans, "gradetrail.sample")
    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(spans) == 1 + 3 + 4 and len(samples) == 3 and len(calls) == 4
    assert run.parent is None and run.start_time == int(started.timestamp() * 1e9)
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    for sample in samples:
        assert sample.parent is not None and sample.parent.span_id == run.context.span_id
        assert run.start_time <= sample.start_time <= sample.end_time <= run.end_time
    ids = {s.context.span_id: s.attributes["gradetrail.sample_id"] for s in samples}
    assert sorted(ids[c.parent.span_id] for c in calls) == ["q1", "q1", "q2", "q3"]

    attrs = {s.attributes["gradetrail.sample_id"]: dict(s.attributes) for s in samples}
    assert attrs["q1"]["gradetrail.outcome"] == "scored"
    assert attrs["q1"]["gradetrail.score.exact"] == 1.0
    assert attrs["q1"]["gradetrail.cost_usd"] == pytest.approx(0.0012)
    assert attrs["q2"]["gradetrail.failure_mode"] == "wrong_answer"
    assert attrs["q3"]["gradetrail.outcome"] == "provider_error"
    assert attrs["q3"]["gradetrail.failure_mode"] == "provider_error"
    failed = next(s for s in samples if s.attributes["gradetrail.sample_id"] == "q3")
    assert failed.status.status_code is StatusCode.ERROR


def test_call_spans_carry_the_genai_attributes(exported) -> None:
    spans, _ = exported
    target, judge = (
        next(s for s in spans if s.attributes.get("gradetrail.request_key") == key)
        for key in ("key-target-1", "key-judge-1")
    )
    assert target.name == "chat gpt-4o-mini" and target.kind is SpanKind.CLIENT
    assert dict(target.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "openai",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ("stop",),
        "gradetrail.role": "target",
        "gradetrail.request_key": "key-target-1",
        "gradetrail.cache_hit": False,
        "gradetrail.latency_s": 0.5,
        "gradetrail.cost_usd": 0.001,
    }
    assert judge.attributes["gradetrail.role"] == "judge"
    assert judge.attributes["gradetrail.scorer"] == "judge"
    assert judge.attributes["gen_ai.request.model"] == "claude-judge"
    # Each call lasts its latency, the judge's after the target's, ending at the hand-over.
    assert target.end_time - target.start_time == 500_000_000
    assert judge.end_time - judge.start_time == 250_000_000
    assert target.end_time == judge.start_time
    sample = next(s for s in spans if s.context.span_id == judge.parent.span_id)
    assert (sample.start_time, sample.end_time) == (target.start_time, judge.end_time)


def test_a_cache_hit_lasts_nothing_and_keeps_its_latency(exported) -> None:
    spans, _ = exported
    hit = next(s for s in spans if s.attributes.get("gradetrail.request_key") == "key-target-2")
    assert hit.attributes["gradetrail.cache_hit"] is True
    assert hit.attributes["gradetrail.latency_s"] == 0.3
    assert hit.attributes["gradetrail.cost_usd"] == 0.0009
    assert hit.end_time == hit.start_time and hit.kind is SpanKind.INTERNAL


def test_a_failed_call_is_an_error_without_usage(exported) -> None:
    spans, _ = exported
    failed = next(s for s in spans if s.attributes.get("gradetrail.request_key") == "key-target-3")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "HTTP 500 from the provider"
    assert failed.attributes["error.type"] == "provider_error"
    assert not {"gen_ai.usage.input_tokens", "gen_ai.response.model"} & set(failed.attributes)


def test_the_run_span_has_the_manifest_figures(exported) -> None:
    spans, _ = exported
    (run,) = _by_name(spans, "gradetrail.run")
    attrs = dict(run.attributes)
    assert attrs["gradetrail.identity"] == "i" * 64
    assert attrs["gradetrail.spec"] == "capitals"
    assert attrs["gradetrail.model"] == "m"
    assert attrs["gradetrail.samples"] == 3
    assert attrs["gradetrail.primary_scorer"] == "exact"
    assert attrs["gradetrail.pass_rate"] == pytest.approx(1 / 3)
    assert attrs["gradetrail.cost_paid_usd"] == pytest.approx(0.0012)
    assert attrs["gradetrail.cost_reused_usd"] == pytest.approx(0.0009)
    assert attrs["gradetrail.cache_hits"] == 1
    assert attrs["gradetrail.calls"] == 3
    assert attrs["gradetrail.outcomes.provider_error"] == 1
    # Usage is the calls' (gen_ai.usage.*), not summed again on the run's span.
    assert not any(k.startswith("gen_ai.") for k in attrs)


def test_no_secret_in_any_span(exported) -> None:
    spans, _ = exported
    text = json.dumps(
        [
            [s.name, s.status.description, {k: str(v) for k, v in s.attributes.items()}]
            for s in spans
        ]
    )
    assert SECRET not in text and KEY_ENV not in text
    assert "authorization" not in text.lower() and "api_key" not in text.lower()


def test_abort_ends_the_run_as_an_error(no_otel_env: None) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = telemetry.start_run("capitals", MODEL, datetime.now(UTC), tracer_provider=provider)
    spans.abort("KeyboardInterrupt")
    spans.end(_manifest())  # already ended: ignored
    (run,) = exporter.get_finished_spans()
    assert run.status.status_code is StatusCode.ERROR
    assert "gradetrail.identity" not in run.attributes


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    ],
    ids=["unconfigured", "sdk-disabled", "exporter-none"],
)
def test_no_spans_without_configuration(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, no_otel_env: None
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spans = telemetry.start_run("capitals", MODEL, datetime.now(UTC))
    assert spans is telemetry.NO_SPANS
    spans.records(_records())
    spans.end(_manifest())


def test_missing_exporter_warns_and_exports_nothing(
    monkeypatch: pytest.MonkeyPatch, no_otel_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.setattr(telemetry, "_warned", set())
    # A configuration of its own: _own_provider's cache has not seen it.
    monkeypatch.setenv("OTEL_SERVICE_NAME", "missing-exporter-test")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    with caplog.at_level(logging.WARNING, logger="gradetrail_lib.telemetry.spans"):
        spans = telemetry.start_run("capitals", MODEL, datetime.now(UTC))
    assert spans is telemetry.NO_SPANS
    assert "pip install 'gradetrail[otel]'" in caplog.text


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OTEL_") and k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    }
    env.update(NO_PROXY="127.0.0.1,localhost", PYTHONPATH=str(ROOT), **extra)
    return env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`code` run by a fresh interpreter (whose imports and environment are its own),
    which must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


_RUN_BODY = """
from datetime import UTC, datetime
from gradetrail_lib.telemetry import spans as telemetry
from gradetrail_lib.providers.registry import ModelConfig
from tests.support.traces import manifest, record

def run():
    spans = telemetry.start_run(
        "capitals", ModelConfig(provider="openai", name="gpt-4o-mini"), datetime.now(UTC)
    )
    for batch in range(4):
        spans.records([record(f"q{batch}-{i}", 1.0) for i in range(5)])
    spans.end(manifest(spec_name="capitals"))
    print(type(spans).__name__, "opentelemetry" in sys.modules, flush=True)
"""
# A run of 4 batches of 5 records, in a fresh process. os._exit: no atexit hooks, so what
# was exported, end() exported.
_RUN = "import os, sys\n" + _RUN_BODY + "run()\nos._exit(0)\n"
# The same run unconfigured, then configured for the console exporter (the variable set
# in the process: start_run reads the environment each time).
_UNCONFIGURED_THEN_CONSOLE = (
    "import os, sys\n"
    + _RUN_BODY
    + "run()\nos.environ['OTEL_TRACES_EXPORTER'] = 'console'\nrun()\nos._exit(0)\n"
)


@pytest.fixture(scope="module")
def unconfigured_then_console() -> subprocess.CompletedProcess[str]:
    """One fresh process for two tests: its first run's imports (unconfigured), then the
    console exporter's output (its second run)."""
    return _python(_UNCONFIGURED_THEN_CONSOLE, _clean_env())


def test_unconfigured_imports_no_opentelemetry(
    unconfigured_then_console: subprocess.CompletedProcess[str],
) -> None:
    first = unconfigured_then_console.stdout.splitlines()[0]
    assert first.split() == ["_NoSpans", "False"]


def test_a_host_applications_provider_gets_the_spans() -> None:
    code = textwrap.dedent(
        """
        from datetime import UTC, datetime
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from gradetrail_lib.telemetry import spans as telemetry
        from gradetrail_lib.providers.registry import ModelConfig
        from tests.support.traces import manifest, record

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        with trace.get_tracer("host").start_as_current_span("host job") as job:
            spans = telemetry.start_run(
                "capitals", ModelConfig(provider="openai", name="m"), datetime.now(UTC)
            )
            spans.records([record("q1", 1.0)])
            spans.end(manifest())
        found = {s.name: s for s in exporter.get_finished_spans()}
        run = found["gradetrail.run"]
        print(sorted(found), run.parent.span_id == job.get_span_context().span_id)
        """
    )
    # OTLP asked for too: the host's provider (it read the same variables) wins.
    done = _python(code, _clean_env(OTEL_TRACES_EXPORTER="otlp"))
    assert (
        done.stdout.strip() == "['chat m', 'gradetrail.run', 'gradetrail.sample', 'host job'] True"
    )


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]]

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A loopback OTLP/HTTP collector: its base URL and the POSTs it received."""
    received: list[tuple[str, str, bytes]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("variable", ["traces_endpoint", "endpoint"])
def test_otlp_export_configured_by_the_environment(collector, variable: str) -> None:
    need("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    base, received = collector
    if variable == "traces_endpoint":
        env = _clean_env(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{base}/v1/traces")
        service = "gradetrail"
    else:
        env = _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=base, OTEL_SERVICE_NAME="nightly-evals")
        service = "nightly-evals"
    # A queue smaller than the run's 41 spans: records() waits for the export, none dropped.
    env.update(OTEL_BSP_MAX_QUEUE_SIZE="8", OTEL_BSP_MAX_EXPORT_BATCH_SIZE="4")
    done = _python(_RUN, env)
    assert done.stdout.split() == ["_Spans", "True"]
    assert received, "the collector received nothing"
    names: list[str] = []
    for path, content_type, body in received:
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert resource["service.name"] == service
            names += [s.name for scope in resource_spans.scope_spans for s in scope.spans]
    assert sorted(set(names)) == ["chat m", "gradetrail.run", "gradetrail.sample"]
    assert len(names) == 1 + 20 + 20
    assert "dropping" not in done.stderr.lower()


def test_console_exporter_writes_to_stderr(
    unconfigured_then_console: subprocess.CompletedProcess[str],
) -> None:
    done = unconfigured_then_console
    assert done.stdout.split() == ["_NoSpans", "False", "_Spans", "True"]
    assert '"name": "gradetrail.run"' in done.stderr


def test_a_run_emits_its_spans_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_otel_env: None
) -> None:
    """Wired into the run: `run_spec` on a scripted spec gives one run span, a span per
    sample and one per call, with what the records say. In this process: the provider is
    made the global one for the test only (OpenTelemetry's global, put back after; its
    setter would keep it for the rest of the session), and the run finds it as it finds a
    host application's."""
    from opentelemetry import trace

    from gradetrail_lib import run_spec

    (tmp_path / "data").mkdir()
    rows = [{"id": f"q{i}", "gold": "Paris" if i % 2 else "Rome"} for i in range(5)]
    (tmp_path / "data" / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.yaml").write_text(
        "name: s\ndataset: {path: data/x.jsonl}\nprompt: 'Capital {{ id }}?'\n"
        "model: {provider: scripted, name: parrot, text: Paris}\n"
        "scorer: {type: exact, field: gold}\n"
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    assert telemetry.configured_provider() == (provider, None)  # as a host's provider
    for _ in range(2):  # cold, then every call a cache hit
        run_spec(tmp_path / "s.yaml", results_root=tmp_path / "r", cache=tmp_path / "c.db")
    provider.shutdown()
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name == "gradetrail.run"]
    samples = [s for s in spans if s.name == "gradetrail.sample"]
    calls = [s for s in spans if s.name == "chat parrot"]
    assert (len(runs), len(samples), len(calls)) == (2, 10, 10)
    outcomes = sorted(str((s.attributes or {}).get("gradetrail.outcome")) for s in samples[:5])
    assert outcomes == ["scored"] * 5
    hits = [(s.attributes or {}).get("gradetrail.cache_hit") for s in calls]
    assert hits == [False] * 5 + [True] * 5
    assert {(c.attributes or {}).get("gen_ai.request.model") for c in calls} == {"parrot"}
