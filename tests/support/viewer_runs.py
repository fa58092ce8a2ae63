"""A results root of real runs for the viewer's tests, made with `run_spec` on the
in-process `scripted` provider (no server, about a second for all of them).

* spec `qa`, models `a` and `b`: the same 24 samples, so they pair; b answers
  differently from a on some (`DIFFERS`), right where a was wrong and wrong where a
  was right. Four scorers: exact (primary), a regex, a Python scorer and a judge
  (a scripted model reading the sample's `grade`, which quotes markup).
  Sample q003's answer (a's and b's) is `MALICIOUS`.
* spec `qa`, model `a` again with another prompt (another identity, a second run in
  a's history) on a subset of the samples: its diff with `qa/a` is refused.
* `broken/`: a manifest that is not JSON (an error row); `outside`: a symlink to a
  run directory outside the root (refused).
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from gradetrail_lib import load_run, run_spec
from gradetrail_lib.results.trace import AGENT_STOPS, TraceRecord

MALICIOUS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">"
N = 24
SMALL = 10
SHORT = """def fn(response):
    return (len(response) <= 4, f"{len(response)} characters")
"""
JUDGE = "Is {{ response }} the answer {{ expected }}? Reply GRADE: C or GRADE: I\n"


def answer_a(i: int) -> str:
    if i == 3:
        return MALICIOUS
    return "wrong" if i % 4 == 0 else str(i)


def answer_b(i: int) -> str:
    if i == 3:
        return MALICIOUS
    if i % 8 == 0:  # a was wrong here
        return str(i)
    if i % 5 == 1:  # a was right here
        return f"{i} or so"
    return answer_a(i)


DIFFERS = {f"q{i:03d}" for i in range(N) if answer_a(i) != answer_b(i)}


def _sample(i: int) -> dict[str, str]:
    a = answer_a(i)
    verdict = "C" if a == str(i) else "I"
    quoted = f"the answer {MALICIOUS} is wrong. " if i == 3 else ""
    return {
        "id": f"q{i:03d}",
        "question": f"What is {i}? <b>bold</b>",
        "expected": str(i),
        "answer": a,
        "answer_b": answer_b(i),
        "grade": f"{quoted}GRADE: {verdict}",
    }


SPEC = """name: qa
dataset: {{path: {dataset}}}
prompt: |
  {prompt}
models:
  - {{provider: scripted, name: a, answer_field: answer}}
  - {{provider: scripted, name: b, answer_field: answer_b}}
params: {{temperature: 0, max_tokens: 16}}
scorers:
  - {{name: exact, type: exact, field: expected}}
  - {{name: digits, type: regex, pattern: '^\\d+$'}}
  - {{name: short, type: python, ref: "short.py:fn"}}
  - name: judged
    type: judge
    prompt_file: judge.j2
    model: {{provider: scripted, name: judge, answer_field: grade}}
"""


@dataclass(frozen=True)
class ViewerRuns:
    root: Path  # the results root
    a: str  # run directory names
    b: str
    small: str
    outside: Path  # a run directory outside the root

    def records(self, name: str) -> list[TraceRecord]:
        return load_run(self.root / name).records


def failing(record: TraceRecord, primary: str = "exact") -> bool:
    """The report's (and the viewer's) failures."""
    return (
        not record.passes(primary)
        or any(e.error is not None for e in record.scores.values())
        or record.failure_mode in AGENT_STOPS
    )


def make_runs(where: Path) -> ViewerRuns:
    specs = where / "specs"
    (specs / "data").mkdir(parents=True)
    (specs / "short.py").write_text(SHORT)
    (specs / "judge.j2").write_text(JUDGE)
    with open(specs / "data" / "qa.jsonl", "w") as out:
        for i in range(N):
            out.write(json.dumps(_sample(i)) + "\n")
    with open(specs / "data" / "small.jsonl", "w") as out:
        for i in range(SMALL):
            out.write(json.dumps(_sample(i)) + "\n")
    (specs / "qa.yaml").write_text(SPEC.format(dataset="data/qa.jsonl", prompt="{{ question }}"))
    (specs / "small.yaml").write_text(
        SPEC.format(dataset="data/small.jsonl", prompt="Q: {{ question }}")
    )
    root = where / "results"
    cache = where / "cache.duckdb"
    a, b = run_spec(specs / "qa.yaml", results_root=root, cache=cache)
    (small,) = run_spec(specs / "small.yaml", models=["a"], results_root=root, cache=cache)
    (root / "broken").mkdir()
    (root / "broken" / "manifest.json").write_text("{ not json")
    (root / "broken" / "results.jsonl").write_text("")
    elsewhere = where / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / "qa-copy"
    shutil.copytree(a.run_dir, outside)
    (root / "outside").symlink_to(outside, target_is_directory=True)
    return ViewerRuns(root, a.run_dir.name, b.run_dir.name, small.run_dir.name, outside)
