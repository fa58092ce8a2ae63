"""Agents: the tools a model may call and the step loop that runs them."""
