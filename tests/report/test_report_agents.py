"""The report of an agent run: a failed case's trajectory, step by step, each step its own
<details> (no script), built from a real run of tests/agents/test_agent.py's tool spec against the
loopback fake; tool output, arguments and document ids holding markup shown as text."""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.report.html import FAILURE_LABELS, write_report
from gradetrail_lib.results.trace import TraceRecord
from tests.agents.test_agent import agent, project
from tests.report.test_report import CHROMIUM, ESCAPED_SCRIPT, chromium, needs_chromium, parse
from tests.support.agent_scripts import conversation, tool_call
from tests.support.eval_runs import MALICIOUS
from tests.support.fake_llm_server import FakeLLMServer

# Atlantis calls an unknown tool with markup in its arguments; Loop's result (shown
# before it thrashes) and Budget's documents hold markup too.
EVIL_CITY = "<em>Atlantis</em>"
EVIL_DOC = "<i>doc-1</i>"


def evil_agent(body: dict[str, Any]) -> Any:
    c = conversation(body)
    if "Atlantis" in c.messages[0]["content"] and c.turns == 0:
        return tool_call("forecast", city=EVIL_CITY)
    return agent(body)


def write_evil_data(spec: Path) -> None:
    data = spec.parent / "data" / "weather.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for row in rows:
        for entry in row["tool_results"]["weather"]:
            if row["id"] == "loop":
                entry["result"] = {"condition": MALICIOUS}
            if row["id"] == "budget":
                city = entry["arguments"]["city"]
                entry["result"]["documents"] = [{"id": EVIL_DOC, "text": "x"}, {"id": city}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))


@dataclass
class Details:
    attrs: dict[str, str | None]
    text: str = ""
    summary: str = ""
    code: str = ""  # the summary's first monospace span: a sample's id
    children: list["Details"] = field(default_factory=list)

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()


class DetailsTree(HTMLParser):
    """The page's <details> elements, nested as they are, each with its own text (nested
    ones included) and its <summary>'s text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.roots: list[Details] = []
        self._open: list[Details] = []
        self._in_summary = 0
        self._in_code = False
        self.pre_classes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "details":
            node = Details(dict(attrs))
            (self._open[-1].children if self._open else self.roots).append(node)
            self._open.append(node)
        elif tag == "summary":
            self._in_summary += 1
        elif tag == "pre":
            self.pre_classes.append(dict(attrs).get("class") or "")
        elif tag == "span" and self._in_summary and dict(attrs).get("class") == "mono":
            self._in_code = not self._open[-1].code

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self._open.pop()
        elif tag == "summary":
            self._in_summary -= 1
        elif tag == "span":
            self._in_code = False

    def handle_data(self, data: str) -> None:
        for node in self._open:
            node.text += data
        if self._in_summary and self._open:
            self._open[-1].summary += data
            if self._in_code:
                self._open[-1].code += data


def failures(html: str) -> dict[str, Details]:
    tree = DetailsTree()
    tree.feed(html)
    return {node.code: node for node in tree.roots if "failure" in node.classes}


@dataclass(frozen=True)
class AgentRun:
    records: dict[str, TraceRecord]
    report: Path
    replayed: Path  # the report of the same run again, every step a cache hit
    calls: int


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentRun]:
    root = tmp_path_factory.mktemp("report-agents")
    with pytest.MonkeyPatch.context() as env, FakeLLMServer(responder=evil_agent) as srv:
        env.setenv("GT_KEY", "sk-fake-not-a-secret")
        spec = project(root, f"{srv.base_url}/v1")
        write_evil_data(spec)
        options: dict[str, Any] = {"results_root": root / "r", "cache": root / "c.db"}
        (done,) = run_spec(spec, **options)
        calls = srv.calls
        report = write_report(done.run_dir, root / "first.html")
        # The same identity: the replay rewrites the same run directory.
        (again,) = run_spec(spec, **options)
        assert srv.calls == calls, "the replay makes no call"
        replayed = write_report(again.run_dir, root / "again.html")
        yield AgentRun({r.id: r for r in done.records}, report, replayed, calls)


def steps_of(node: Details) -> list[Details]:
    return [c for c in node.children if "step" in c.classes]


def test_failed_cases_list_their_steps_each_expandable(agent_run: AgentRun) -> None:
    html = agent_run.report.read_text()
    found = failures(html)
    # The primary scorer (tool calls) fails these three; Rome and Nowhere pass it.
    kinds = {sample: node.classes[-1] for sample, node in found.items()}
    assert kinds == {"atlantis": "tool_error", "loop": "thrash", "budget": "budget_exhausted"}
    for sample, node in found.items():
        record = agent_run.records[sample]
        steps = steps_of(node)
        assert len(steps) == len(record.trajectory) > 0
        assert FAILURE_LABELS[record.failure_mode or ""] in node.summary
        assert f"{len(steps)} steps" in node.summary
        for step, recorded in zip(steps, record.trajectory, strict=True):
            assert "open" not in step.attrs, "steps start closed"
            assert step.summary.startswith(f"step {recorded.index + 1}")
            tokens = f"{recorded.input_tokens} in / {recorded.output_tokens} out"
            assert tokens in step.summary and tokens in step.text
            assert f"request key {recorded.request_key}" in step.text
            assert "cache hit no" in step.text and "cache hit" not in step.summary
            assert f"stop reason {recorded.stop_reason}" in step.text
            for call in recorded.tool_calls:
                assert f"Tool call {call['name']} {call['id']}" in step.text
                assert json.dumps(call["arguments"], indent=2) in step.text
    ids = [s.attrs["id"] for n in found.values() for s in steps_of(n)]
    assert len(set(ids)) == len(ids) == 2 + 2 + 3, "one element id per step"


def test_thrash_shows_the_repeated_call_not_run(agent_run: AgentRun) -> None:
    loop = failures(agent_run.report.read_text())["loop"]
    first, second = steps_of(loop)
    assert "called weather" in first.summary and "stopped" not in first.summary
    assert json.dumps({"condition": MALICIOUS}, sort_keys=True) in first.text  # the result
    assert "stopped: thrash (same call, nothing new)" in second.summary
    assert "not run: the agent was stopped first" in second.text
    assert "result" not in second.text and "thrash (same call" in second.text


def test_budget_shows_every_step_its_results_and_documents(agent_run: AgentRun) -> None:
    budget = failures(agent_run.report.read_text())["budget"]
    steps = steps_of(budget)
    assert [s.summary.split(" · ")[1].strip() for s in steps] == ["called weather"] * 3
    assert "stopped: over the step budget" in steps[-1].summary
    assert not any("stopped" in s.summary for s in steps[:-1])
    for number, step in enumerate(steps, start=1):
        assert f'"city": "Budget{number}"' in step.text
        assert "result" in step.text and '{"condition": "windy"' in step.text
        assert f"documents{EVIL_DOC}, Budget{number}" in step.text
    assert "Usage" in budget.text and "over 3 calls" in budget.text


def test_a_tool_error_is_marked_and_the_step_after_it_shown(agent_run: AgentRun) -> None:
    html = agent_run.report.read_text()
    atlantis = failures(html)["atlantis"]
    first, second = steps_of(atlantis)
    assert "called forecast (1 tool error)" in first.summary
    assert "tool errorno tool named 'forecast' (tools: weather)" in first.text
    assert "shown to the model" in first.text
    assert f'"city": "{EVIL_CITY}"' in first.text
    assert "answered" in second.summary and "I cannot tell." in second.text
    tree = DetailsTree()
    tree.feed(html)
    assert tree.pre_classes.count("tool-error") == 1


def test_tool_output_arguments_and_documents_are_escaped(agent_run: AgentRun) -> None:
    html = agent_run.report.read_text()
    tags = parse(html).tags
    assert not {"script", "img", "em", "i"} & {t for t, _ in tags}
    assert not [a for _, attrs in tags for a in attrs if a.startswith("on")]
    assert MALICIOUS not in html and EVIL_CITY not in html and EVIL_DOC not in html
    assert ESCAPED_SCRIPT in html
    assert "&lt;em&gt;Atlantis&lt;/em&gt;" in html and "&lt;i&gt;doc-1&lt;/i&gt;" in html
    assert unescape(ESCAPED_SCRIPT) in unescape(html)


def test_a_replayed_run_marks_every_step_a_cache_hit(agent_run: AgentRun) -> None:
    found = failures(agent_run.replayed.read_text())
    steps = [s for node in found.values() for s in steps_of(node)]
    assert len(steps) == 7
    assert all("cache hit" in s.summary and "cache hit yes" in s.text for s in steps)


def test_a_plain_runs_failures_have_no_trajectory(tmp_path: Path) -> None:
    from gradetrail_lib.report.html import render_report
    from gradetrail_lib.results.runs import Run
    from tests.support.traces import manifest, record

    html = render_report([Run.of(manifest({"s": "s" * 64}), [record("a", 0.0)])])
    assert "Trajectory" not in html and 'class="step"' not in html


@needs_chromium
@pytest.mark.slow  # a browser
def test_a_step_opens_in_chromium_from_a_link(agent_run: AgentRun, tmp_path: Path) -> None:
    """No script: following a link to a step's body opens that step and its sample (the
    browser expands the <details> around a fragment's target); nothing else opens."""
    assert CHROMIUM.exists()
    found = failures(agent_run.report.read_text())
    target = steps_of(found["loop"])[1].attrs["id"]
    plain = chromium("--dump-dom", agent_run.report.as_uri(), tmp_path=tmp_path)
    linked = chromium("--dump-dom", f"{agent_run.report.as_uri()}#{target}-body", tmp_path=tmp_path)
    assert plain.returncode == linked.returncode == 0, linked.stderr[-2000:]

    def opened(dom: str) -> list[str]:
        tree = DetailsTree()
        tree.feed(dom)
        return [
            node.attrs.get("id") or " ".join(node.classes)
            for root in tree.roots
            for node in [root, *root.children]
            if "open" in node.attrs
        ]

    assert opened(plain.stdout) == []
    assert opened(linked.stdout) == ["failure thrash", target]
    assert parse(linked.stdout).title == "gradetrail report: weather"
    assert "script" not in {t for t, _ in parse(linked.stdout).tags}
