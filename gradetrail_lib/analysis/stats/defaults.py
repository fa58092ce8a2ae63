"""Defaults of the statistics: the confidence level, the interval methods of a
proportion, and the gate's threshold. A sample's pass threshold is the record's
(`results.trace.DEFAULT_THRESHOLD`)."""

from typing import Literal

ProportionMethod = Literal["wilson", "exact"]
PROPORTION_METHODS: tuple[ProportionMethod, ...] = ("wilson", "exact")
DEFAULT_CONFIDENCE = 0.95
DEFAULT_GATE_THRESHOLD = 0.02
