"""gradetrail engine: specs, request keys, providers, cache, scorers and run directories.

This package never imports Dagster; `gradetrail_assets` builds the asset graph on top of it.
"""

__version__ = "0.1.0"
