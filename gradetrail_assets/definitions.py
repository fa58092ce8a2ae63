"""What `dagster dev -w workspace.yaml` (and `dagster dev`, `[tool.dagster]`) loads: the
same definitions as `dg dev`.

In the repository, a `dg` project (`[tool.dg]` in pyproject.toml), they are its defs
folder's (`gradetrail_assets/defs/`: one `GradetrailComponent` with no attribute set,
so its settings come from the environment, GRADETRAIL_SPECS and the other GRADETRAIL_*
variables, as ever). Installed without the repository (no defs folder), what that
Component builds with no attribute set. Either way they are built by
`gradetrail_assets.build.build_definitions`, re-exported here for Python code that
builds its own (the tests import it from `build`: importing this module loads the
repository's definitions, about a second).
"""

from pathlib import Path

import dagster as dg

from gradetrail_assets.build import build_definitions

__all__ = ["build_definitions", "defs"]

PACKAGE = Path(__file__).resolve().parent
# The repository's root when this is a checkout: its pyproject.toml makes it a dg project.
REPOSITORY = PACKAGE.parent


def load_definitions() -> dg.Definitions:
    """The repository's dg project's definitions, or (installed, no defs folder) its
    Component's with the defaults its defs.yaml has."""
    if (PACKAGE / "defs").is_dir() and (REPOSITORY / "pyproject.toml").is_file():
        return dg.load_from_defs_folder(path_within_project=REPOSITORY)
    # What GradetrailComponent.build_defs builds with no attribute set.
    return build_definitions()


defs = load_definitions()
