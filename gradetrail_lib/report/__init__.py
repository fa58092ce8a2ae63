"""The HTML report of a run: one self-contained file."""
