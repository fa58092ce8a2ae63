"""The command line's parser registers only the command a line names (`cli.build_parser`):
each command parses as it does among all of them, and a command's process imports no
other command's module, nor the web stack until `view` serves."""

import argparse
import json
import subprocess
import sys

from gradetrail_lib.cli import COMMANDS, build_parser
from tests.conftest import REPO


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = action.choices[name]
    return found


def described(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """Each argument's settings; a nested command's (`labels import`) in turn."""
    return [
        (a.dest, a.option_strings, a.default, a.nargs, a.required, a.type)
        + (
            tuple((k, described(v)) for k, v in a.choices.items())
            if isinstance(a, argparse._SubParsersAction)
            else (a.choices,)
        )
        for a in parser._actions
    ]


def test_each_command_alone_parses_and_helps_as_among_all() -> None:
    everything = build_parser()
    for name in COMMANDS:
        alone = build_parser([name, "x"])
        one, among_all = subcommand(alone, name), subcommand(everything, name)
        assert one.format_help() == among_all.format_help()
        assert described(one) == described(among_all) and one._defaults == among_all._defaults
    # A line naming no command, or one that does not exist, gets all of them.
    for line in ([], ["--version"], ["-h"], ["runn"]):
        assert subcommand(build_parser(line), "view").prog == "gradetrail view"


def test_a_commands_process_imports_its_own_module_and_no_web_stack_until_it_serves() -> None:
    """A fresh process's imports (the check needs a process of its own): `view`'s line
    imports no other command's module; the whole parser (every command) imports no web
    stack, which `view` imports only as it serves; `--version` then runs in it as
    `python -m gradetrail_lib.cli --version` would (`main()` reads argv)."""
    code = (
        "import json, sys\n"
        "from gradetrail_lib import cli\n"
        "def loaded(*prefixes):\n"
        "    print(json.dumps(sorted(m for m in sys.modules if m.startswith(prefixes))))\n"
        "cli.build_parser(['view', '--help'])\n"
        "loaded('gradetrail_lib.')\n"
        "cli.build_parser()\n"
        "loaded('starlette', 'uvicorn', 'gradetrail_lib.viewer.app',\n"
        "       'gradetrail_lib.viewer.index')\n"
        "sys.stdout.flush()\n"
        "sys.argv[1:] = ['--version']\n"
        "sys.exit(cli.main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    for_view, web, version = done.stdout.splitlines()
    loaded = set(json.loads(for_view))
    commands = {f"gradetrail_lib.commands.{module}" for module in COMMANDS.values()}
    assert loaded & commands == {"gradetrail_lib.commands.view"}
    assert "gradetrail_lib.engine.api" not in loaded
    assert json.loads(web) == []
    assert version.strip()
