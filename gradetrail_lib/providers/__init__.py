"""Provider adapters (pure request building and response parsing) and the shared caller."""
