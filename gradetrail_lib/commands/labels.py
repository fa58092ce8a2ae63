"""`gradetrail labels import FILE --run RUN_DIR` and `gradetrail labels export --run
RUN_DIR`: human labels on a run's responses, kept in `<results>/.labels.jsonl` (the run
directory's parent), never in the run directory (gradetrail_lib.labels)."""

import argparse
import sys
from pathlib import Path

from gradetrail_lib.labels.files import (
    export_rows,
    is_jsonl,
    labels_from_rows,
    read_rows,
    write_rows,
)
from gradetrail_lib.labels.store import (
    SAMPLINGS,
    append_labels,
    default_labeller,
    labels_path,
    read_labels,
    record_key,
)
from gradetrail_lib.results.runs import load_run

EXIT_OK = 0


def register(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("labels", help="import or export human pass/fail labels of a run")
    actions = parser.add_subparsers(dest="labels_action", required=True)
    importing = actions.add_parser(
        "import", help="attach a CSV or JSONL file of labels to a run's responses"
    )
    importing.add_argument("file", type=Path, metavar="FILE")
    importing.add_argument("--run", type=Path, required=True, metavar="RUN_DIR")
    importing.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default="random",
        help="how the samples were chosen: random (a random sample of the run: the labels "
        "may correct its pass rate; default) or selected (picked by a person)",
    )
    importing.add_argument("--labeller", default=None, help="who labelled (default: $USER)")
    importing.set_defaults(handler=import_command)
    exporting = actions.add_parser(
        "export", help="write a run's samples with their labels (empty where none)"
    )
    exporting.add_argument("--run", type=Path, required=True, metavar="RUN_DIR")
    exporting.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="a .csv or .jsonl file (default: CSV to stdout)",
    )
    exporting.set_defaults(handler=export_command)


def import_command(args: argparse.Namespace) -> int:
    run = load_run(args.run)
    rows = read_rows(args.file)  # every bad row named before anything is written
    labels = labels_from_rows(
        rows,
        iter(run),
        path=args.file,
        spec=run.manifest.spec.name,
        scorers=run.manifest.scorer_names,
        sampling=args.sampling,
        labeller=args.labeller or default_labeller(),
    )
    root = args.run.resolve().parent
    read_labels(root)  # a damaged labels file is named (file:line) before a line is added
    append_labels(root, labels)
    keys = {record_key(run.manifest.spec.name, r) for r in run}
    matched = sum(1 for label in labels if label.key in keys)
    print(
        f"{len(labels)} {args.sampling} label(s) of {run.label} -> {labels_path(root)}; "
        f"{matched} match a response of this run, {len(labels) - matched} do not (labelled "
        "answers that differ from this run's)"
    )
    return EXIT_OK


def export_command(args: argparse.Namespace) -> int:
    run = load_run(args.run)
    lookup = read_labels(args.run.resolve().parent)
    rows = export_rows(iter(run), run.manifest.spec.name, lookup)
    if args.output is None:
        write_rows(rows, sys.stdout, jsonl=False)
        return EXIT_OK
    with open(args.output, "w", encoding="utf-8", newline="") as out:
        write_rows(rows, out, jsonl=is_jsonl(args.output))
    print(f"{run.label} -> {args.output}")
    return EXIT_OK
