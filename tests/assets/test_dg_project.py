"""gradetrail in a `dg` project, as a Dagster user adds it: a fresh project made by
`create-dagster`, a shipped spec added through `dg scaffold defs
gradetrail_assets.GradetrailComponent`, then `dg check defs`, `dg list defs` and `dg launch`
of one partition, offline (the scripted provider), every step the CLI in a subprocess.

Offline: `create-dagster project --no-uv-sync` writes the files and installs nothing, the
version check is off (DAGSTER_DG_UPDATE_CHECK_ENABLED=0). The project is not pip-installed
into the shared environment: its `src/` is put on PYTHONPATH instead (what `pip install -e
.` in the project would do). The model partition is added to the instance the way the
`gradetrail_spec_models` sensor's tick adds it under the daemon (`dg launch` runs no
sensor).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMPONENT = "gradetrail_assets.GradetrailComponent"
SPEC = "csv_stats"  # shipped in specs/: the scripted provider plays each case, no network
MODEL = "oracle"
STEPS = ("dataset", "responses", "scores", "stats", "report", "leaderboard")

# Every step is a `dg` subprocess that loads Dagster (5 to 15 s each), so they are all
# `slow`: `-m "not slow"` keeps each bad attribute located by the same loader in process
# (below) and the Component built in process (tests/assets/test_dagster_upstream.py).
SLOW = pytest.mark.slow
BAD_ATTRIBUTES = [
    ("  executor: threads", "attributes.executor"),
    ("  nightly_schedule: sometimes", "attributes.nightly_schedule"),
    ("  cache: postgresql://evals:hunter2@db/gradetrail", "attributes.cache"),
    ("  release_sensr: false", "attributes.release_sensr"),
]


def run(argv: list[str], *, cwd: Path, env: dict[str, str], ok: bool = True) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert (done.returncode == 0) == ok, f"{' '.join(argv)} -> {done.returncode}\n{output}"
    return output


def environment(project: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADETRAIL_")}
    return {
        **env,
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(project / "src"), str(REPO)]),
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "yes",
        "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }


def dg_json(args: list[str], *, cwd: Path, env: dict[str, str]) -> Any:
    out = run([str(BIN / "dg"), *args, "--json"], cwd=cwd, env=env)
    # The JSON document, the log lines around it (stderr) aside.
    return json.JSONDecoder().raw_decode(out[out.index("{") :])[0]


@pytest.fixture(scope="module", autouse=True)
def dg_installed() -> None:
    for tool, package in (("dg", "dagster-dg-cli"), ("create-dagster", "create-dagster")):
        if not (BIN / tool).exists():
            pytest.skip(f"{package} is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("dg")
    home = root / "dagster_home"
    home.mkdir()
    env = environment(root / "evals_project", home)
    run([str(BIN / "create-dagster"), "project", "evals_project", "--no-uv-sync"], cwd=root,
        env=env)  # fmt: skip
    project = root / "evals_project"
    assert (project / "pyproject.toml").is_file()
    # The shipped spec, its data and its Python scorer, as a team would copy them in.
    shutil.copytree(REPO / "specs", project / "specs")
    run(
        [str(BIN / "dg"), "scaffold", "defs", COMPONENT, "evals",
         "--spec", "{{ context.project_root }}/specs/" + SPEC + ".yaml"],
        cwd=project, env=env,
    )  # fmt: skip
    return project, env


def defs_yaml(project: Path) -> Path:
    return project / "src" / "evals_project" / "defs" / "evals" / "defs.yaml"


@SLOW
def test_the_component_is_listed_scaffolded_checked_and_its_defs_listed(
    project: tuple[Path, dict[str, str]],
) -> None:
    folder, env = project
    components = dg_json(["list", "components"], cwd=folder, env=env)
    assert COMPONENT in {item["key"] for item in components["items"]}  # the entry point

    text = defs_yaml(folder).read_text()
    assert f"type: {COMPONENT}" in text and f"specs/{SPEC}.yaml" in text
    assert "Spec files or folders of specs" in text  # the attributes explained where set
    run([str(BIN / "dg"), "check", "defs"], cwd=folder, env=env)

    listed = dg_json(["list", "defs"], cwd=folder, env=env)
    assets = {a["asset_key"] for a in listed["assets"]}
    assert assets == {f"{SPEC}/{step}" for step in STEPS}
    checks = {c["key"] for c in listed["asset_checks"]}
    assert f"{SPEC}/scores:agent_stop_rate" in checks  # an agent's spec: its stop check too
    assert f"{SPEC}/scores:served_model_matches" in checks
    assert {s["name"] for s in listed["schedules"]} == {f"{SPEC}__nightly"}
    assert {s["name"] for s in listed["sensors"]} == {
        "gradetrail_spec_models", "gradetrail_model_releases", "gradetrail_automation",
    }  # fmt: skip
    assert all(a["source"].endswith("defs/evals/defs.yaml:1") for a in listed["assets"])


@SLOW
def test_dg_launch_materializes_one_partition_offline(
    project: tuple[Path, dict[str, str]],
) -> None:
    folder, env = project
    path = defs_yaml(folder)
    original = path.read_text()
    # One process for the whole run (the attribute a user sets to keep a small eval quick).
    path.write_text(original.replace("  # executor: multiprocess", "  executor: in_process"))
    try:
        # What the gradetrail_spec_models sensor's tick does under the daemon.
        add = f"add_dynamic_partitions('{SPEC}__models', ['{MODEL}'])"
        run([sys.executable, "-c", f"import dagster as dg; dg.DagsterInstance.get().{add}"],
            cwd=folder, env=env)  # fmt: skip
        out = run(
            [str(BIN / "dg"), "launch", "--assets", f"group:{SPEC}", "--partition", MODEL],
            cwd=folder, env=env,
        )  # fmt: skip
    finally:
        path.write_text(original)
    assert "RUN_SUCCESS" in out, out[-3000:]
    (run_dir,) = (folder / "results").glob(f"{SPEC}-{MODEL}-*")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["samples"] == 4 and manifest["scores"]["answer"]["passed"] == 4
    assert (run_dir / "report.html").is_file()
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        for step in STEPS[:-1]:
            found = instance.fetch_materializations(
                dg.AssetRecordsFilter(
                    asset_key=dg.AssetKey([SPEC, step]), asset_partitions=[MODEL]
                ),
                limit=1,
            )
            assert found.records, step


@SLOW
@pytest.mark.parametrize(("edit", "message"), BAD_ATTRIBUTES)
def test_a_bad_attribute_is_reported_with_its_file_and_line(
    project: tuple[Path, dict[str, str]], edit: str, message: str
) -> None:
    folder, env = project
    path = defs_yaml(folder)
    original = path.read_text()
    lines = original.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  release_sensor:"))
    lines[at] = edit
    path.write_text("\n".join(lines) + "\n")
    try:
        out = run([str(BIN / "dg"), "check", "defs"], cwd=folder, env=env, ok=False)
    finally:
        path.write_text(original)
    located = re.search(rf"{re.escape(str(path))}:(\d+) - [^\n]*{re.escape(message)}", out)
    assert located is not None, out[-3000:]
    assert int(located.group(1)) == at + 1
    if "cache" in message:  # the message says why (the snippet shows the file's own line)
        assert "holds a password" in out and "PGPASSWORD" in out


@pytest.fixture(scope="module")
def bare_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project made by `create-dagster` (0.5 s; no `dg` process), the shipped specs
    copied in."""
    root = tmp_path_factory.mktemp("dg_attributes")
    env = environment(root / "attributes_project", root / "dagster_home")
    run([str(BIN / "create-dagster"), "project", "attributes_project", "--no-uv-sync"],
        cwd=root, env=env)  # fmt: skip
    project = root / "attributes_project"
    shutil.copytree(REPO / "specs", project / "specs")
    return project


@pytest.mark.parametrize(("edit", "message"), BAD_ATTRIBUTES)
def test_a_bad_attribute_is_located_by_the_loader_dg_check_runs(
    bare_project: Path, monkeypatch: pytest.MonkeyPatch, edit: str, message: str
) -> None:
    """The Component loaded in process, as `dg check defs` loads it (the slow test above
    runs `dg` itself): the error names the file, the line and the attribute."""
    monkeypatch.syspath_prepend(str(bare_project / "src"))
    path = bare_project / "src" / "attributes_project" / "defs" / "evals" / "defs.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"type: {COMPONENT}\n"
        "attributes:\n"
        f'  specs: ["{{{{ context.project_root }}}}/specs/{SPEC}.yaml"]\n'
        f"{edit}\n"
    )
    with pytest.raises(Exception) as raised:
        dg.load_from_defs_folder(path_within_project=bare_project)
    chain, error = [], raised.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    out = "\n".join(chain)
    # One line names both: "FILE:4 - attributes.cache" (a resolver's error) or
    # "attributes.release_sensr at FILE:4" (pydantic's, for an unknown key).
    lines = out.splitlines()
    assert any(f"{path}:4" in line and message in line for line in lines), out[-3000:]
    if "cache" in message:  # says why (the snippet shows the file's own line)
        assert "holds a password" in out and "PGPASSWORD" in out


@SLOW
def test_the_repository_is_a_dg_project_showing_the_workspace_graph(tmp_path: Path) -> None:
    """`dg` in the repository loads its defs folder's Component; `workspace.yaml` (what
    `dagster dev -w workspace.yaml` loads) names the module that loads the same: both list
    the same assets, checks, schedules and sensors for the specs GRADETRAIL_SPECS names."""
    specs = tmp_path / "specs"
    shutil.copytree(REPO / "specs", specs, ignore=shutil.ignore_patterns("capitals*", "tools*",
                                                                        "humaneval*"))  # fmt: skip
    env = {**environment(tmp_path, tmp_path / "home"), "PYTHONPATH": str(REPO),
           "GRADETRAIL_SPECS": str(specs)}  # fmt: skip
    (tmp_path / "home").mkdir()
    run([str(BIN / "dg"), "check", "defs"], cwd=REPO, env=env)
    listed = dg_json(["list", "defs"], cwd=REPO, env=env)
    by_dg = {
        "assets": sorted(a["asset_key"] for a in listed["assets"]),
        "checks": sorted(c["key"] for c in listed["asset_checks"]),
        "schedules": sorted(s["name"] for s in listed["schedules"]),
        "sensors": sorted(s["name"] for s in listed["sensors"]),
    }
    assert {a["source"] for a in listed["assets"]} == {
        "gradetrail_assets/defs/gradetrail/defs.yaml:5"  # its `type:` line
    }
    assert f"{SPEC}/responses" in by_dg["assets"]

    workspace = (REPO / "workspace.yaml").read_text()
    module = re.search(r"module_name: (\S+)", workspace)
    assert module is not None and module.group(1) == "gradetrail_assets.definitions"
    script = f"""
import json
from {module.group(1)} import defs
graph = defs.resolve_asset_graph()
print(json.dumps({{
    "assets": sorted(k.to_user_string() for k in graph.get_all_asset_keys()),
    "checks": sorted(f"{{c.asset_key.to_user_string()}}:{{c.name}}"
                     for c in graph.asset_check_keys),
    "schedules": sorted(s.name for s in defs.schedules),
    "sensors": sorted(s.name for s in defs.sensors),
}}))
"""
    out = run([sys.executable, "-c", script], cwd=tmp_path, env=env)
    assert json.loads(out.strip().splitlines()[-1]) == by_dg
