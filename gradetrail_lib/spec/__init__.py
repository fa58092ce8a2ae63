"""The eval spec: its models, loading with line numbers, prompts and identity."""
