"""Defaults of the statistics, in a module of their own so that the command parsers can
name them without importing the stats package."""

from typing import Literal

ProportionMethod = Literal["wilson", "exact"]
PROPORTION_METHODS: tuple[ProportionMethod, ...] = ("wilson", "exact")
DEFAULT_CONFIDENCE = 0.95
# A sample passes at score >= 1.0: binary scorers give 0 or 1.
DEFAULT_THRESHOLD = 1.0
DEFAULT_GATE_THRESHOLD = 0.02
