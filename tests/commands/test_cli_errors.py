"""The CLI's exit statuses for errors: a name the user got wrong exits 2 with the
message; a bug (a KeyError anywhere else) is not dressed up as a usage error."""

from pathlib import Path

import pytest

import gradetrail_lib.commands.plan as plan_module
from gradetrail_lib.cli import main
from tests.conftest import write_addition_dataset, write_spec


def _spec(tmp_path: Path) -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    return write_spec(tmp_path / "add.yaml", base_url="http://127.0.0.1:9/v1")


@pytest.mark.parametrize("command", ["plan", "run"])
def test_an_unknown_model_exits_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    spec = _spec(tmp_path)
    flags = ["--results", str(tmp_path / "results")] if command == "run" else []
    cache = ["--cache", str(tmp_path / "cache.duckdb")]
    assert main([command, str(spec), "--model", "nope", *cache, *flags]) == 2
    err = capsys.readouterr().err
    assert "error: spec " in err and "has no model 'nope' (models: fake-1)" in err
    assert "Traceback" not in err


def test_a_key_error_elsewhere_is_a_bug_not_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path)

    def broken(*args: object, **kwargs: object) -> object:
        raise KeyError("a bug")

    monkeypatch.setattr(plan_module, "load_prices", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["plan", str(spec), "--cache", str(tmp_path / "cache.duckdb")])
