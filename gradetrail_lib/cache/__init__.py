"""The response cache: answers stored by request key, so nothing is paid for twice."""
