"""A Python scorer for the CSV agent: the number the case's last tool call printed (what
the sandbox computed, not what the model says) is the sample's answer."""

import json
import math
import re
from typing import Any


def computed(record: Any, sample: dict[str, Any]) -> tuple[float, str]:
    results = [r for step in record.trajectory for r in step.tool_results]
    if not results:
        return 0.0, "no tool was called"
    last = results[-1]
    if last.error is not None:
        return 0.0, f"the last tool call failed: {last.error}"
    stdout = str(json.loads(last.content).get("stdout", ""))
    numbers = re.findall(r"-?\d+(?:\.\d+)?", stdout)
    if not numbers:
        return 0.0, f"the last tool call printed no number: {stdout[-200:]!r}"
    printed, expected = float(numbers[-1]), float(sample["answer"])
    if math.isclose(printed, expected, rel_tol=1e-3, abs_tol=1e-9):
        return 1.0, f"the tool printed {printed:g}"
    return 0.0, f"the tool printed {printed:g}, expected {expected:g}"
