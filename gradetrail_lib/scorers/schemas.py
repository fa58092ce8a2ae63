"""Draft 2020-12 schema checks, shared by the spec loader and the json_schema scorer.

jsonschema is imported on first use: it is a large part of the CLI's start-up,
and only specs with a json_schema scorer need it.
"""

from typing import Any


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a valid Draft 2020-12 schema, or None when it is."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return str(exc.message)
    return None
