"""The trace record and manifest of a run, and reading run directories back."""
