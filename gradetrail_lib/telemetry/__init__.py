"""OpenTelemetry spans of a run (the optional extra `otel`)."""
