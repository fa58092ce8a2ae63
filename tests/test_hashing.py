"""Canonical JSON is json.dumps with the canonical options, whichever encoder makes it."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradetrail_lib.hashing import canonical_json

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


def reference(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@given(JSON)
def test_canonical_json_is_the_sorted_compact_unescaped_dump(value: object) -> None:
    assert canonical_json(value) == reference(value)


def test_tuples_encode_as_lists_and_0_differs_from_0_0() -> None:
    assert canonical_json(("a", 1, 1.0, [0.0])) == '["a",1,1.0,[0.0]]'
    assert canonical_json({"é": "\u2028\n"}) == '{"é":"\u2028\\n"}'


@pytest.mark.parametrize("value", [math.nan, [math.inf], {"x": -math.inf}])
def test_nan_and_infinity_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json(value)


def test_a_value_json_cannot_encode_is_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical_json({"x": object()})
